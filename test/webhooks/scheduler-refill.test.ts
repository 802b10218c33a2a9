import t from 'tap'
import { deliveryMessage, oneSlotWebhook, publishDeliveries, withLateMethod } from '../support/fixtures/webhooks'
import { eventually } from '../support/util'

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

t.test('a lane drained while the scheduler claimed is refilled by the next pass at once, not a period later', async (t) => {
  // The default schedule's shortest step (5 s) makes the scheduler's period 1 s.
  const { rt, id, receiver, webhookId, arrivals } = await oneSlotWebhook(t, (store) => withLateMethod(store, 'setIfAbsent', CLAIM_MS), { WEBHOOK_RETRY_SCHEDULE: '0,5s,5m' })
  await publishDeliveries(rt, Array.from({ length: COUNT }, (_, i) => deliveryMessage({ appId: id.app.id, webhookId, text: `refill ${i}` })))
  await eventually(() => arrivals.length >= COUNT, 60_000)
  const gaps = arrivals.slice(1).map((at, i) => at - (arrivals[i] as number))
  const longest = Math.max(...gaps)
  t.ok(longest < 700, `the longest pause between two POSTs was ${longest} ms (a claim takes ${CLAIM_MS} ms, the scheduler's period is 1000 ms)`)
  t.equal(receiver.maxInFlight, 1, 'never more than the one slot in flight')
})
