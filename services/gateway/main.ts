// Tracing starts before anything loads node:http or fastify, which its instrumentations patch as they load.
import { startTracing } from '../common/tracing'
startTracing('gateway')

import { runMain } from '../common/main'
import { gatewayService } from './service'

runMain('gateway', [gatewayService]).catch((err: unknown) => {
  process.stderr.write(`gateway: failed to start: ${(err as Error).stack ?? String(err)}\n`)
  process.exit(1)
})
