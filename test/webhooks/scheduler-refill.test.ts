import t from 'tap'
import { MemoryStore } from '../../services/common/store/memory'
import type { Store } from '../../services/common/store/types'
import { bearerRequest, createIdentity, tempDir } from '../helper'
import { sleep } from '../support/util'
import { deliveryMessage, eventually, publishDeliveries, startReceiver, startWebhooks } from './support'

/**
 * A scheduler pass plans how many due deliveries each lane takes, then
 * claims them (store round trips), then queues them. A fast receiver drains
 * the lane meanwhile, so a lane planned full has room again when the claims
 * are in: the pass must ask the lanes again, and run the next pass at once
 * while deliveries it passed over are due. Otherwise the lane drains with
 * nobody calling for more, and the schedule waits a whole period (1 s with
 * the default retry schedule): bench/webhooks' burst into one webhook stalled
 * a second at a time this way.
 *
 * One slot (a lane of 32), every claim 200 ms late, 200 deliveries: the
 * longest pause between two POSTs stays well under the 1 s period.
 */

const CLAIM_MS = 200
const COUNT = 200

/** The store with every claim (SET NX) 200 ms late. */
function slowClaims(store: Store): Store {
  return new Proxy(store, {
    get(target, prop, receiver) {
      if (prop === 'setIfAbsent') return async (...args: Parameters<Store['setIfAbsent']>) => (await sleep(CLAIM_MS), target.setIfAbsent(...args))
      const value = Reflect.get(target, prop, receiver) as unknown
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value
    }
  })
}

t.test('a lane drained while the scheduler claimed is refilled by the next pass at once, not a period later', async (t) => {
  const memory = await MemoryStore.open(tempDir(t, 'gw-refill-'))
  t.teardown(() => memory.close())
  // The default schedule's shortest step (5 s) makes the scheduler's period 1 s.
  const rt = await startWebhooks(t, { store: slowClaims(memory), env: { WEBHOOK_CONCURRENCY: '1', WEBHOOK_RETRY_SCHEDULE: '0,5s,5m' } })
  const id = await createIdentity(rt.ctx.store)
  const receiver = await startReceiver(t, id.app.consumer_secret)
  const res = await bearerRequest('POST', `${rt.baseUrl}/2/webhooks`, id.bearer, { json: { url: receiver.url } })
  t.equal(res.status, 200, 'webhook registered')
  const webhookId = res.json<{ data: { id: string } }>().data.id
  const arrivals: number[] = []
  receiver.onPost = () => {
    arrivals.push(Date.now())
    return { status: 200 }
  }
  await publishDeliveries(rt, Array.from({ length: COUNT }, (_, i) => deliveryMessage({ appId: id.app.id, webhookId, text: `refill ${i}` })))
  await eventually(() => arrivals.length >= COUNT, 60_000)
  const gaps = arrivals.slice(1).map((at, i) => at - (arrivals[i] as number))
  const longest = Math.max(...gaps)
  t.ok(longest < 700, `the longest pause between two POSTs was ${longest} ms (a claim takes ${CLAIM_MS} ms, the scheduler's period is 1000 ms)`)
  t.equal(receiver.maxInFlight, 1, 'never more than the one slot in flight')
})
