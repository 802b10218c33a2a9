import { dueAt } from '../../services/webhooks/delivery/schedule'
import t from 'tap'
import type { App } from '../../services/common/auth/records'
import { AuthKeys } from '../../services/common/auth/records'
import { partsFor } from '../../services/webhooks/parts'
import type { DeliveryRecord } from '../../services/webhooks/delivery-log'
import type { Prepared } from '../../services/webhooks/delivery/intake'
import { WebhookKeys } from '../../services/webhooks/keys'
import { saveOp } from '../../services/webhooks/delivery/rescheduling'
import type { StoreOp } from '../../services/common/store/types'
import { registerWebhook, startWebhooks } from '../support/fixtures/webhooks'
import { eventually } from '../support/util'

/**
 * A claimed delivery that waited in its lane until too little of its lease
 * was left for an attempt is handed back due now with its claim, so the next
 * scheduler pass claims and delivers it; left alone it waited for its claim
 * to expire (the lease: WEBHOOK_TIMEOUT + 30 s). Once the lease is nearly
 * over the claim may be another process's by the time the write lands:
 * then it is left alone.
 */

t.test('a claimed attempt queued past its lease goes back on the schedule at once and is delivered', async (t) => {
  const rt = await startWebhooks(t)
  const { id, receiver, webhookId } = await registerWebhook(t, rt)
  const core = partsFor(rt.ctx)
  const engine = core.engine as unknown as { nodeId: string; leaseMs: number; preparedAttempt(webhookId: string, p: Prepared): Promise<void> }
  const webhook = await core.registry.get(webhookId)
  const app = await rt.ctx.store.getJson<App>(AuthKeys.app(id.app.id))
  const timeoutMs = rt.ctx.config.webhookTimeoutMs

  const make = async (deliveryId: string, leaseUntil: number): Promise<Prepared> => {
    const now = Date.now()
    const record: DeliveryRecord = { delivery_id: deliveryId, webhook_id: webhookId, app_id: id.app.id, source: 'activity', body: JSON.stringify({ data: { event_type: 'post.create', id: deliveryId } }), event_time: now, created_at: new Date(now).toISOString(), status: 'pending', attempts: 1, next_attempt_at: now - 10 }
    // As a scheduler pass leaves it: due (the record's time), claimed by this process, its entry leased.
    await rt.ctx.store.batch([saveOp(record, 3_600_000), dueAt({ webhookId, deliveryId }, leaseUntil)])
    t.ok(await rt.ctx.store.setIfAbsent(WebhookKeys.claim(deliveryId), engine.nodeId, engine.leaseMs), `${deliveryId} claimed`)
    return { record, leaseUntil, webhook, app, claimed: true }
  }

  // Late: less than the timeout + 5 s of its lease left, but the claim surely still ours.
  const late = await make('late-1', Date.now() + timeoutMs + 3000)
  const handedBackAt = Date.now()
  // Seen in the writes, not read back afterwards: the scheduler pass it pokes may claim it afresh at once.
  const store = rt.ctx.store
  const written: StoreOp[] = []
  const batch = store.batch.bind(store)
  store.batch = async (ops) => {
    written.push(...ops)
    return batch(ops)
  }
  await engine.preparedAttempt(webhookId, late)
  store.batch = batch
  t.ok(
    written.some((op) => op.op === 'del' && op.key === WebhookKeys.claim('late-1')),
    'its claim is given back'
  )
  const post = await eventually(() => receiver.posts.find((p) => p.json.data !== undefined && (p.json.data as { id?: string }).id === 'late-1'), 10_000)
  t.ok(post.signatureValid, 'delivered, signed')
  t.ok(post.at - handedBackAt < timeoutMs + 3000, `by the next pass, ${post.at - handedBackAt} ms later, before its lease would have run out`)

  // At the lease's very end: the claim is left as it is (another process may hold it by now).
  const ending = await make('late-2', Date.now() + 500)
  await engine.preparedAttempt(webhookId, ending)
  t.equal(await rt.ctx.store.get(WebhookKeys.claim('late-2')), engine.nodeId, 'a claim at the end of its lease is left alone')
})
