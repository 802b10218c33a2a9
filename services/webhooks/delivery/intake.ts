import { AuthKeys, type App } from '../../common/auth/records'
import type { Store, StoreOp } from '../../common/store/types'
import type { DeliveryRecord } from '../delivery-log'
import { WebhookKeys } from '../keys'
import type { Webhook, WebhookRegistry } from '../registry'
import { FirstAttempt, pendingOps } from './first-attempt'
import { leaseOp } from './leases'
import { dueAt, type Scheduled } from './schedule'

/**
 * Intake of deliveries (DeliveryEngine.acceptMany): what a batch needs to
 * read before its records are written, in one round trip, the record a new
 * delivery starts as, and the plan of the batch: which deliveries are
 * attempted before anything is stored (first-attempt.ts), which are stored
 * as pending and queued here with their entry a lease ahead, which are left
 * due to the scheduler, and which are dropped or duplicates.
 */

export type AcceptResult = 'accepted' | 'duplicate' | 'dropped'


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

/**
 * What an attempt starts from when the record is already in hand: the accepting process's first
 * attempt (`claimed` false: its entry is a lease ahead, nobody else touches it), or a delivery a
 * scheduler pass claimed (claims.ts).
 */
export interface Prepared {
  record: DeliveryRecord
  leaseUntil: number
  webhook: Webhook | undefined
  app: App | undefined
  claimed?: boolean
  /** A first attempt made before anything of the delivery was stored (first-attempt.ts). */
  first?: FirstAttempt
}

export interface IntakePlanDeps {
  lanes: { startingSoon(webhookId: string): number; hasRoom(webhookId: string): boolean }
  leaseMs: number
  /** This process's id: the leases it writes carry it (leases.ts). */
  processId: string
  dropped(d: NewDelivery, why: 'webhook deleted' | "another app's webhook"): void
}

export interface IntakePlan {
  results: AcceptResult[]
  /** Records, log entries, schedule entries and leases of those stored now. */
  ops: StoreOp[]
  /** Duplicates whose pending record may have lost its schedule entry. */
  repairs: Scheduled[]
  /** What starts in its lane: first attempts (with `first`) and stored ones with room. */
  starts: Array<{ d: NewDelivery; fresh: Prepared }>
}

/** Plans a batch from what `readIntake` found (no I/O). */
export function planIntake(deps: IntakePlanDeps, list: NewDelivery[], reads: IntakeReads, now: number): IntakePlan {
  const { webhookOf, appOf, existing } = reads
  const plan: IntakePlan = { results: [], ops: [], repairs: [], starts: [] }
  const seen = new Set<string>()
  /** Slots of each webhook this batch's first attempts take, as it plans. */
  const free = new Map<string, number>()
  list.forEach((d, i) => {
    const webhook = webhookOf.get(d.webhook_id)
    if (!webhook || webhook.app_id !== d.app_id) {
      deps.dropped(d, webhook ? "another app's webhook" : 'webhook deleted')
      plan.results.push('dropped')
      return
    }
    const entry: Scheduled = { webhookId: d.webhook_id, deliveryId: d.delivery_id }
    const prior = existing[i]
    if (prior || seen.has(d.delivery_id)) {
      // A redelivered message: the first copy's record stands. Repair a missing schedule entry.
      if (prior?.status === 'pending') plan.repairs.push(entry)
      plan.results.push('duplicate')
      return
    }
    seen.add(d.delivery_id)
    const record = newRecord(d, now)
    const leaseUntil = now + deps.leaseMs
    const slots = free.get(d.webhook_id) ?? deps.lanes.startingSoon(d.webhook_id)
    if (slots > 0) {
      free.set(d.webhook_id, slots - 1)
      plan.starts.push({ d, fresh: { record, leaseUntil, webhook, app: appOf.get(d.app_id), first: new FirstAttempt(record, leaseUntil) } })
    } else if (deps.lanes.hasRoom(d.webhook_id)) {
      plan.ops.push(...pendingOps(record, dueAt(entry, leaseUntil)), leaseOp(deps.processId, entry, leaseUntil))
      plan.starts.push({ d, fresh: { record, leaseUntil, webhook, app: appOf.get(d.app_id) } })
    } else plan.ops.push(...pendingOps(record, dueAt(entry, now)))
    plan.results.push('accepted')
  })
  return plan
}
