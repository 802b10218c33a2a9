import { dueAt, scheduledAt } from '../../services/webhooks/delivery/schedule'
import t from 'tap'
import type { StoreOp } from '../../services/common/store/types'
import { claimDue } from '../../services/webhooks/delivery/claims'
import type { DeliveryRecord } from '../../services/webhooks/delivery-log'
import { WebhookKeys } from '../../services/webhooks/keys'
import { WebhookRegistry } from '../../services/webhooks/registry'
import { createIdentity } from '../support/runtime'
import { redisStore, startRedis } from '../support/infra'
import { callsSince, commandCalls, redisWrites } from '../support/store-rounds'

/**
 * A scheduler pass claims its due deliveries together (services/webhooks/delivery/claims.ts):
 * on Redis, whatever the pass's size, the claims go in one pipeline, the
 * records, webhook and app in one (the app in a second), and the leases and
 * releases in one script call. Each claim still holds across processes: a
 * delivery claimed by another process, one finished meanwhile and one
 * rescheduled by another process are left as they are.
 */

const COUNT = 60
const LEASE_MS = 40_000

function record(id: string, webhookId: string, appId: string, fields: Partial<DeliveryRecord> = {}): DeliveryRecord {
  return {
    delivery_id: id,
    webhook_id: webhookId,
    app_id: appId,
    source: 'activity',
    body: JSON.stringify({ id }),
    event_time: Date.now(),
    created_at: new Date().toISOString(),
    status: 'pending',
    attempts: 1,
    next_attempt_at: Date.now() - 10,
    ...fields
  }
}

t.test('a pass of 60 due deliveries: four socket writes (claims, reads, app, leases), each claim still exclusive', async (t) => {
  const redis = await startRedis(t)
  const store = await redisStore(t, redis)
  const registry = new WebhookRegistry(store)
  const id = await createIdentity(store)
  const webhookId = 'wh-claims-1'
  await registry.insert({ id: webhookId, app_id: id.app.id, url: 'https://example.com/hook', url_key: 'https://example.com/hook', valid: true, created_at: new Date().toISOString() }, Date.now() + 3_600_000)

  const ids = Array.from({ length: COUNT }, (_, i) => `d-${String(i).padStart(3, '0')}`)
  const [takenElsewhere, finished, rescheduled] = ids as [string, string, string]
  const later = Date.now() + 60_000
  const ops: StoreOp[] = []
  for (const d of ids) {
    const fields: Partial<DeliveryRecord> = d === finished ? { status: 'delivered' } : d === rescheduled ? { next_attempt_at: later } : {}
    ops.push(
      { op: 'set', key: WebhookKeys.delivery(d), value: JSON.stringify(record(d, webhookId, id.app.id, fields)) },
      dueAt({ webhookId, deliveryId: d }, Date.now() - 10)
    )
  }
  ops.push({ op: 'set', key: WebhookKeys.claim(takenElsewhere), value: 'another-process', ttlMs: LEASE_MS })
  await store.batch(ops)

  const before = await commandCalls(redis.url)
  const writes = redisWrites(store)
  t.teardown(() => writes.restore())
  const startedAt = Date.now()
  const held = await claimDue({ store, registry, nodeId: 'this-process', leaseMs: LEASE_MS }, ids.map((deliveryId) => ({ webhookId, deliveryId })))
  writes.restore()

  const expected = ids.filter((d) => ![takenElsewhere, finished, rescheduled].includes(d))
  t.same(held.map((h) => h.deliveryId).sort(), expected, `${held.length} held: all but the one claimed elsewhere, the finished one and the rescheduled one`)
  t.ok(held.every((h) => h.record.delivery_id === h.deliveryId && h.webhook?.id === webhookId && h.app?.id === id.app.id), 'each with its record, webhook and app')

  const claimKeyed = writes.writes.filter((w) => w.includes(WebhookKeys.claim(ids[5] as string)))
  t.equal(writes.writes.length, 4, `the pass went over the socket in ${writes.writes.length} writes (claims; records and webhook; app; leases)`)
  t.ok(claimKeyed.length >= 1 && ids.every((d) => (claimKeyed[0] ?? '').includes(WebhookKeys.claim(d))), 'every claim in the first write')
  const calls = callsSince(before, await commandCalls(redis.url))
  t.equal(calls.get('set'), COUNT, `Redis ran ${calls.get('set')} claims (SET NX), one per delivery`)
  t.equal(calls.get('hgetall'), 1, 'the webhook was read once')
  t.ok(calls.get('multi') === 1 && calls.get('exec') === 1 && calls.get('evalsha') === undefined, 'leases and releases in one transaction')

  // What the schedule and the claims look like afterwards.
  const score = async (d: string): Promise<number | undefined> => scheduledAt(store, { webhookId, deliveryId: d })
  t.ok(((await score(ids[10] as string)) ?? 0) >= startedAt + LEASE_MS, 'a held delivery is leased: its entry a lease ahead')
  t.equal(await store.get(WebhookKeys.claim(ids[10] as string)), 'this-process', 'and claimed by this process')
  t.equal(await score(finished), undefined, "the finished one's entry is gone")
  t.equal(await store.get(WebhookKeys.claim(finished)), undefined, 'and its claim released')
  t.equal(await score(rescheduled), later, 'the rescheduled one keeps its new due time')
  t.equal(await store.get(WebhookKeys.claim(rescheduled)), undefined, 'and its claim released')
  t.equal(await store.get(WebhookKeys.claim(takenElsewhere)), 'another-process', "the other process's claim stands")
  t.ok(((await score(takenElsewhere)) ?? Infinity) < startedAt, 'and its entry is untouched')

  // A second process's pass over the same deliveries gets none of them.
  const second = await claimDue({ store, registry, nodeId: 'second-process', leaseMs: LEASE_MS }, ids.map((deliveryId) => ({ webhookId, deliveryId })))
  t.same(second, [], 'a second process claims none of what the first holds (nor the others)')
})
