// Tracing starts before anything loads node:http or fastify, which its instrumentations patch as they load.
import { startTracing } from '../common/tracing'
startTracing('embedded')

import { runMain } from '../common/main'
import { ALL_SERVICES } from './services'

// Embedded default of `make run`: every service in one process, in-memory bus, journaled memory store.
runMain('embedded', ALL_SERVICES).catch((err: unknown) => {
  process.stderr.write(`embedded: failed to start: ${(err as Error).stack ?? String(err)}\n`)
  process.exit(1)
})
