import { AuthKeys, type App } from '../../common/auth/records'
import type { Store } from '../../common/store/types'
import type { DeliveryRecord } from '../delivery-log'
import { WebhookKeys } from '../keys'
import type { Webhook, WebhookRegistry } from '../registry'

/**
 * Intake of deliveries (DeliveryEngine.acceptMany): what a batch needs to
 * read before its records are written, in one round trip, and the record a
 * new delivery starts as.
 */

/** A delivery as it arrives: what its record starts from (`event_type` given so no attempt parses the body for it). */
export type NewDelivery = Pick<DeliveryRecord, 'delivery_id' | 'webhook_id' | 'app_id' | 'source' | 'event_uuid' | 'for_user_id' | 'body' | 'event_type' | 'traceparent'> & {
  /** Event time (ms); clamped to now. */
  event_time: number
}

export interface IntakeReads {
  webhookOf: Map<string, Webhook | undefined>
  appOf: Map<string, App | undefined>
  /** The stored record of each delivery of the batch (same order), if it has one. */
  existing: Array<DeliveryRecord | undefined>
}

/** The batch's webhooks, apps and existing records, all requested in one turn (the Redis client pipelines them). */
export async function readIntake(store: Store, registry: WebhookRegistry, list: NewDelivery[]): Promise<IntakeReads> {
  const webhookIds = [...new Set(list.map((d) => d.webhook_id))]
  const appIds = [...new Set(list.map((d) => d.app_id))]
  const [webhooks, apps, existing] = await Promise.all([
    Promise.all(webhookIds.map((id) => registry.get(id))),
    store.mgetJson<App>(appIds.map((id) => AuthKeys.app(id))),
    store.mgetJson<DeliveryRecord>(list.map((d) => WebhookKeys.delivery(d.delivery_id)))
  ])
  return {
    webhookOf: new Map(webhookIds.map((id, i) => [id, webhooks[i]])),
    appOf: new Map(appIds.map((id, i) => [id, apps[i]])),
    existing
  }
}

/** A delivery's first record: pending, due now, its event time clamped to now. */
export function newRecord(d: NewDelivery, now: number): DeliveryRecord {
  const record: DeliveryRecord = {
    delivery_id: d.delivery_id,
    webhook_id: d.webhook_id,
    app_id: d.app_id,
    source: d.source,
    body: d.body,
    event_time: Math.min(Number.isFinite(d.event_time) ? d.event_time : now, now),
    created_at: new Date(now).toISOString(),
    status: 'pending',
    attempts: 0,
    next_attempt_at: now
  }
  if (d.event_uuid !== undefined) record.event_uuid = d.event_uuid
  if (d.event_type !== undefined) record.event_type = d.event_type
  if (d.for_user_id !== undefined) record.for_user_id = d.for_user_id
  if (d.traceparent !== undefined) record.traceparent = d.traceparent
  return record
}
