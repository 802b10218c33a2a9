import { allScheduled } from '../../services/webhooks/delivery/schedule'
import t from 'tap'
import type { DeliveryRecord } from '../../services/webhooks/delivery-log'
import { WebhookKeys } from '../../services/webhooks/keys'
import { deliveryMessage, oneSlotWebhook, publishDeliveries, withLateMethod } from '../support/fixtures/webhooks'
import { eventually } from '../support/util'

/**
 * A webhook's lane slot (WEBHOOK_CONCURRENCY) is the receiver's: it frees
 * when the POST has its answer, and the outcome's store writes go on outside
 * it. With one slot and a store whose writes take 300 ms, six deliveries
 * reach the receiver back to back, not one per POST and write; every
 * outcome is still stored.
 */

const WRITE_MS = 300
const COUNT = 6

t.test('one slot, writes 300 ms each: six deliveries reach the receiver back to back, and every outcome is stored', async (t) => {
  const { rt, memory, id, receiver, webhookId, arrivals } = await oneSlotWebhook(t, (store) => withLateMethod(store, 'batch', WRITE_MS), { WEBHOOK_TIMEOUT: '5s' })
  const messages = Array.from({ length: COUNT }, (_, i) => deliveryMessage({ appId: id.app.id, webhookId, text: `slot ${i}` }))
  await publishDeliveries(rt, messages)
  await eventually(() => arrivals.length >= COUNT, 15_000)
  const spread = (arrivals[COUNT - 1] as number) - (arrivals[0] as number)
  // Held for each write as well, the six would be at least five writes apart.
  t.ok(spread < (COUNT - 1) * WRITE_MS, `six POSTs through one slot within ${spread} ms (five writes take ${(COUNT - 1) * WRITE_MS} ms)`)
  t.equal(receiver.maxInFlight, 1, 'never more than the one slot in flight at the receiver')
  const keys = messages.map((m) => WebhookKeys.delivery(String(m.delivery_id)))
  const stored = await eventually(async () => {
    const records = await memory.mgetJson<DeliveryRecord>(keys)
    return records.every((r) => r?.status === 'delivered') ? records : undefined
  }, 15_000)
  t.equal(stored.length, COUNT, 'every outcome stored as delivered')
  t.same(await allScheduled(memory), [], 'and none is left on the retry schedule')
})
