import t from 'tap'
import { createLogger } from '../../services/common/logger'
import { PollingWorker } from '../../services/webhooks/polling'
import { sleep } from '../support/util'

/** The polling loop behind the retry scheduler, the CRC schedule and housekeeping (services/webhooks/polling.ts). */

t.test('a poke while a pass runs is kept: the next pass starts as soon as that one ends, not a period later', async (t) => {
  const starts: number[] = []
  let release: () => void = () => undefined
  let first = true
  const worker = new PollingWorker(
    'test-poll',
    60_000,
    async () => {
      starts.push(Date.now())
      if (first) {
        first = false
        await new Promise<void>((resolve) => (release = resolve))
      }
    },
    createLogger('silent', 'test')
  )
  t.teardown(() => worker.close())
  await sleep(50)
  t.equal(starts.length, 1, 'the first pass runs at once')
  worker.poke()
  worker.poke()
  await sleep(50)
  t.equal(starts.length, 1, 'passes never overlap')
  const releasedAt = Date.now()
  release()
  await sleep(100)
  t.equal(starts.length, 2, 'the pokes made while it ran gave one more pass')
  t.ok((starts[1] as number) - releasedAt < 100, `right after the first ended (${(starts[1] as number) - releasedAt} ms), not after the 60 s period`)
  await sleep(100)
  t.equal(starts.length, 2, 'and then the period again')
})
