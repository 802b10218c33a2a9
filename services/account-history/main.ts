// Tracing starts before anything loads node:http or fastify, which its instrumentations patch as they load.
import { startTracing } from '../common/tracing'
startTracing('account-history')

import { runMain } from '../common/main'
import { accountHistoryService } from './service'

runMain('account-history', [accountHistoryService]).catch((err: unknown) => {
  process.stderr.write(`account-history: failed to start: ${(err as Error).stack ?? String(err)}\n`)
  process.exit(1)
})
