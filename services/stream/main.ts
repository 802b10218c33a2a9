// Tracing starts before anything loads node:http or fastify, which its instrumentations patch as they load.
import { startTracing } from '../common/tracing'
startTracing('stream')

import { runMain } from '../common/main'
import { streamService } from './service'

runMain('stream', [streamService]).catch((err: unknown) => {
  process.stderr.write(`stream: failed to start: ${(err as Error).stack ?? String(err)}\n`)
  process.exit(1)
})
