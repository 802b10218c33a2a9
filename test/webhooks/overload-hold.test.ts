import { randomUUID } from 'node:crypto'
import t from 'tap'
import type { NewDelivery } from '../../services/webhooks/delivery/intake'
import { readDue, scheduleSize } from '../../services/webhooks/delivery/schedule'
import { partsFor } from '../../services/webhooks/parts'
import { registerWebhook, startWebhooks } from '../support/fixtures/webhooks'
import { gate } from '../support/receivers'

/**
 * Overload: a consumed batch for a webhook whose lane here is full but still
 * answering waits for room, so what cannot be attempted yet stays on the bus
 * (in order, at no cost, counted as the consumer's lag that the ingest
 * route's backpressure bounds) instead of going to the retry schedule, from
 * where it would be claimed and read again. A lane whose receiver answers
 * nothing is stuck: its batch is not held, its deliveries wait in the
 * schedule and the consumer moves on.
 */

const CONCURRENCY = 2
/** A lane holds CONCURRENCY x 32 attempts (lanes.ts). */
const LANE = CONCURRENCY * 32

function deliveries(appId: string, webhookId: string, n: number): NewDelivery[] {
  return Array.from({ length: n }, (_, i) => ({
    delivery_id: randomUUID(),
    webhook_id: webhookId,
    app_id: appId,
    source: 'activity' as const,
    event_type: 'post.create',
    body: JSON.stringify({ data: { event_type: 'post.create', id: `hold ${i}` } }),
    event_time: Date.now()
  }))
}

t.test('a batch for a full lane that keeps answering waits for room: nothing goes to the retry schedule', async (t) => {
  const rt = await startWebhooks(t, { env: { WEBHOOK_CONCURRENCY: String(CONCURRENCY) } })
  const { id, receiver, webhookId } = await registerWebhook(t, rt)
  // Busy, not stuck: each POST is answered as it comes (CONCURRENCY at a time).
  receiver.onPost = () => ({ status: 200 })
  const { engine } = partsFor(rt.ctx)
  await engine.acceptMany(deliveries(id.app.id, webhookId, LANE))
  const startedAt = Date.now()
  const second = await engine.acceptMany(deliveries(id.app.id, webhookId, LANE / 2))
  const heldMs = Date.now() - startedAt
  t.ok(second.every((r) => r === 'accepted'), 'the second batch is accepted')
  t.ok(heldMs >= 10, `it waited ${heldMs} ms for room in the lane`)
  // Queued ones have their entry a lease ahead (a crash's safety net); none is due for a scheduler pass.
  t.equal((await readDue(rt.ctx.store, Date.now(), 0, 1000)).entries.length, 0, 'nothing was left to the retry schedule as due')
  t.ok((await scheduleSize(rt.ctx.store)) > 0, '(the queued ones are on it, leased)')
})

t.test('a batch for a stuck lane is not held: its deliveries wait in the retry schedule', async (t) => {
  const rt = await startWebhooks(t, { env: { WEBHOOK_CONCURRENCY: String(CONCURRENCY), WEBHOOK_TIMEOUT: '10s' } })
  const { id, receiver, webhookId } = await registerWebhook(t, rt)
  const hang = gate()
  t.teardown(() => hang.open())
  receiver.onPost = () => ({ status: 200, release: hang.promise })
  const { engine } = partsFor(rt.ctx)
  await engine.acceptMany(deliveries(id.app.id, webhookId, LANE))
  const startedAt = Date.now()
  await engine.acceptMany(deliveries(id.app.id, webhookId, LANE / 2))
  const heldMs = Date.now() - startedAt
  t.ok(heldMs < 1500, `not held past the stuck check (${heldMs} ms, the hold's bound is 2,000 ms)`)
  t.ok((await readDue(rt.ctx.store, Date.now(), 0, 1000)).entries.length >= LANE / 2, 'the deliveries that did not fit wait in the retry schedule, due')
})
