import t from 'tap'
import { LivenessKeys } from '../../services/common/liveness'
import type { DeliveryRecord } from '../../services/webhooks/delivery-log'
import { leaseOp } from '../../services/webhooks/delivery/leases'
import { saveOp } from '../../services/webhooks/delivery/rescheduling'
import { dueAt, scheduledAt } from '../../services/webhooks/delivery/schedule'
import { WebhookKeys } from '../../services/webhooks/keys'
import { registerWebhook, startWebhooks } from '../support/fixtures/webhooks'
import { eventually } from '../support/util'

/**
 * A webhooks process killed while it held deliveries leased ahead on the
 * schedule (queued in its lanes, in flight, or claimed by a scheduler pass):
 * once its beat is gone, a survivor makes them due at once and delivers
 * them, instead of waiting out the lease (WEBHOOK_TIMEOUT + 30 s). What no
 * longer looks held by it is left alone: an entry an outcome moved, a claim
 * another process holds.
 */

t.test("a dead process's leased deliveries are delivered as soon as its death is known", async (t) => {
  const rt = await startWebhooks(t)
  const { id, receiver, webhookId } = await registerWebhook(t, rt)
  const store = rt.ctx.store
  const dead = 'dead-process-1'
  const now = Date.now()
  const leaseUntil = now + 40_000
  const record = (deliveryId: string): DeliveryRecord => ({ delivery_id: deliveryId, webhook_id: webhookId, app_id: id.app.id, source: 'activity', body: JSON.stringify({ data: { event_type: 'post.create', id: deliveryId } }), event_time: now, created_at: new Date(now).toISOString(), status: 'pending', attempts: 0, next_attempt_at: now })
  const entry = (deliveryId: string) => ({ webhookId, deliveryId })
  // As the dead process left them: queued at intake (no claim), claimed by its scheduler pass, ...
  await store.batch([
    ...['queued-1', 'queued-2', 'claimed-1', 'moved-1', 'other-1'].flatMap((d) => [saveOp(record(d), 3_600_000), dueAt(entry(d), leaseUntil), leaseOp(dead, entry(d), leaseUntil)]),
    // ... one whose outcome rescheduled it (a failed attempt: next try in a minute) ...
    dueAt(entry('moved-1'), now + 60_000),
    // ... and one another (live) process claimed since.
    { op: 'set', key: WebhookKeys.claim('other-1'), value: 'live-process', ttlMs: 40_000 }
  ])
  await store.set(WebhookKeys.claim('claimed-1'), dead, 40_000)
  // Announced once, and its beat gone: dead.
  await store.sadd(LivenessKeys.processes, dead)
  const ttl = rt.ctx.config.livenessTtlMs

  const deliveredIds = (): string[] => receiver.posts.map((p) => (p.json.data as { id?: string } | undefined)?.id ?? '').filter((x) => x !== '')
  await eventually(() => ['queued-1', 'queued-2', 'claimed-1'].every((d) => deliveredIds().includes(d)), 3 * ttl + 5000, 50)
  const tookMs = Date.now() - now
  t.ok(tookMs < 20_000, `delivered ${tookMs} ms after, with LIVENESS_TTL ${ttl} ms (their lease ran ${leaseUntil - now} ms)`)
  t.notOk(deliveredIds().includes('moved-1'), 'an entry its outcome moved keeps its time')
  t.equal(await scheduledAt(store, entry('moved-1')), now + 60_000, '(still due in a minute)')
  t.notOk(deliveredIds().includes('other-1'), "a delivery another process claimed is left to it")
  t.equal(await store.get(WebhookKeys.claim('other-1')), 'live-process', "(its claim stands)")
  t.equal(await store.zcard(WebhookKeys.leases(dead)), 0, 'the dead process lease set is gone')
  t.equal(await store.hget(LivenessKeys.reaped(dead), 'webhook leases'), '1', 'the leases reaper ran for it, once')
})
