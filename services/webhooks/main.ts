// Tracing starts before anything loads node:http or fastify, which its instrumentations patch as they load.
import { startTracing } from '../common/tracing'
startTracing('webhooks')

import { runMain } from '../common/main'
import { webhooksService } from './service'

runMain('webhooks', [webhooksService]).catch((err: unknown) => {
  process.stderr.write(`webhooks: failed to start: ${(err as Error).stack ?? String(err)}\n`)
  process.exit(1)
})
