// Tracing starts before anything loads node:http or fastify, which its instrumentations patch as they load.
import { startTracing } from '../common/tracing'
startTracing('activity')

import { runMain } from '../common/main'
import { activityService } from './service'

runMain('activity', [activityService]).catch((err: unknown) => {
  process.stderr.write(`activity: failed to start: ${(err as Error).stack ?? String(err)}\n`)
  process.exit(1)
})
