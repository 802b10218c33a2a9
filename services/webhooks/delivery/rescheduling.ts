import type { Store, StoreOp } from '../../common/store/types'
import type { DeliveryLog, DeliveryRecord, DeliveryStatus } from '../delivery-log'
import { WebhookKeys } from '../keys'
import { dueAt, KNOWN_KEYS } from './schedule'

/**
 * Moving logged deliveries on the retry schedule from outside the attempt
 * path: making an invalid webhook's pending deliveries due once its CRC
 * passes again, and an operator's re-send of finished ones.
 */

export interface ReschedulingDeps {
  store: Store
  deliveryLog: DeliveryLog
  /** This process's claim value, and how long a claim holds. */
  nodeId: string
  leaseMs: number
  retentionMs: number
}

/** The write that stores a delivery's record (kept for the log's retention). */
export function saveOp(record: DeliveryRecord, retentionMs: number): StoreOp {
  return { op: 'set', key: WebhookKeys.delivery(record.delivery_id), value: JSON.stringify(record), ttlMs: retentionMs }
}

/**
 * Makes the webhook's pending deliveries (`deliveryId`: just that one, the console's "retry now") due
 * now; one another process is attempting right now is left to it.
 */
export async function pullForward(deps: ReschedulingDeps, webhookId: string, deliveryId?: string): Promise<number> {
  const { store } = deps
  const now = Date.now()
  let moved = 0
  const listing = deliveryId !== undefined ? [await deps.deliveryLog.get(deliveryId)].filter((r): r is DeliveryRecord => r?.webhook_id === webhookId && r.status === 'pending') : await deps.deliveryLog.list(webhookId, { status: 'pending' })
  for (const listed of listing) {
    if (listed.next_attempt_at <= now) continue
    const claim = WebhookKeys.claim(listed.delivery_id)
    if (!(await store.setIfAbsent(claim, deps.nodeId, deps.leaseMs))) continue
    try {
      const record = await deps.deliveryLog.get(listed.delivery_id)
      if (!record || record.status !== 'pending' || record.next_attempt_at <= now) continue
      record.next_attempt_at = now
      await store.batch([saveOp(record, deps.retentionMs), dueAt({ webhookId, deliveryId: record.delivery_id }, now)], KNOWN_KEYS)
      moved++
    } finally {
      await store.del(claim)
    }
  }
  return moved
}

/**
 * Puts the webhook's logged deliveries matching `filter` (`deliveryId`: just
 * that one) back on the schedule as new, in one store batch; returns how many.
 */
export async function resend(deps: ReschedulingDeps, webhookId: string, filter: { since: number; status?: DeliveryStatus; deliveryId?: string }): Promise<number> {
  const records =
    filter.deliveryId !== undefined
      ? [await deps.deliveryLog.get(filter.deliveryId)].filter((r): r is DeliveryRecord => r !== undefined && r.webhook_id === webhookId)
      : await deps.deliveryLog.list(webhookId, { since: filter.since, status: filter.status ?? 'failed' })
  const now = Date.now()
  const ops: StoreOp[] = []
  for (const r of records) {
    if (r.status === 'pending') continue
    const again: DeliveryRecord = {
      ...r,
      status: 'pending',
      // A fresh retry schedule; the attempts made so far stay numbered as they were.
      attempts: 0,
      attempts_before_resend: (r.attempts_before_resend ?? 0) + r.attempts,
      next_attempt_at: now,
      resent_at: new Date(now).toISOString()
    }
    delete again.failed_at
    delete again.failure_reason
    delete again.delivered_at
    ops.push(saveOp(again, deps.retentionMs), dueAt({ webhookId, deliveryId: r.delivery_id }, now))
  }
  if (ops.length > 0) await deps.store.batch(ops, KNOWN_KEYS)
  return ops.length / 2
}
