import { runMain } from '../common/main'
import { streamService } from './service'

runMain('stream', [streamService]).catch((err: unknown) => {
  process.stderr.write(`stream: failed to start: ${(err as Error).stack ?? String(err)}\n`)
  process.exit(1)
})
