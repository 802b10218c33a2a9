import { AuthKeys, type App } from '../../common/auth/records'
import type { Store, StoreOp } from '../../common/store/types'
import type { DeliveryRecord } from '../delivery-log'
import { WebhookKeys } from '../keys'
import type { Webhook, WebhookRegistry } from '../registry'
import { dueAt, KNOWN_KEYS, unscheduled } from './schedule'
import { leaseOp } from './leases'

/**
 * The scheduler's claims, a batch at a time. A due delivery may be attempted
 * by any webhooks process; before one does, it claims the delivery (a key
 * only one process can set), re-reads its record (another process may have
 * finished or rescheduled it) and pushes its schedule entry a lease ahead (a
 * process that dies mid-attempt leaves it due again for the others).
 *
 * Done one delivery at a time that is four store round trips in a row before
 * the POST, and every delivery that did not fit its webhook's lane at intake
 * takes this path: under a backlog the schedule is where the work is. Here a
 * whole pass goes together: the claims in one pipeline, the records, webhooks
 * and apps in one (the apps of the webhooks in a second only when they were
 * not known), and every lease, give-back and release in one batch.
 */

export interface ClaimDeps {
  store: Store
  registry: WebhookRegistry
  nodeId: string
  leaseMs: number
}

export interface DueDelivery {
  webhookId: string
  deliveryId: string
}

/** A delivery this process now holds: its claim is set and its schedule entry leased until `leaseUntil`. */
export interface ClaimedDelivery extends DueDelivery {
  record: DeliveryRecord
  leaseUntil: number
  /** Read in the same pass (a pass is at most a scheduler period old when its attempts start). */
  webhook: Webhook | undefined
  app: App | undefined
}

/** What a claim left the schedule as it found it: its entry stays, its claim goes. */
export function releaseOps(d: DueDelivery, at: number): StoreOp[] {
  return [
    dueAt(d, at),
    { op: 'del', key: WebhookKeys.claim(d.deliveryId) }
  ]
}

/** Claims `due` for this process; returns those it now holds and may attempt. */
export async function claimDue(deps: ClaimDeps, due: DueDelivery[], now = Date.now()): Promise<ClaimedDelivery[]> {
  const { store } = deps
  if (due.length === 0) return []
  const won = await Promise.all(due.map((d) => store.setIfAbsent(WebhookKeys.claim(d.deliveryId), deps.nodeId, deps.leaseMs)))
  const mine = due.filter((_, i) => won[i])
  if (mine.length === 0) return []

  const webhookIds = [...new Set(mine.map((d) => d.webhookId))]
  const [records, webhooks] = await Promise.all([
    store.mgetJson<DeliveryRecord>(mine.map((d) => WebhookKeys.delivery(d.deliveryId))),
    Promise.all(webhookIds.map((id) => deps.registry.get(id)))
  ])
  const webhookOf = new Map(webhookIds.map((id, i) => [id, webhooks[i]]))
  const appIds = [...new Set(webhooks.flatMap((w) => (w ? [w.app_id] : [])))]
  const apps = appIds.length > 0 ? await store.mgetJson<App>(appIds.map((id) => AuthKeys.app(id))) : []
  const appOf = new Map(appIds.map((id, i) => [id, apps[i]]))

  const leaseUntil = now + deps.leaseMs
  const ops: StoreOp[] = []
  const held: ClaimedDelivery[] = []
  mine.forEach((d, i) => {
    const record = records[i]
    if (!record || record.status !== 'pending') {
      // Finished (or expired) since it was scheduled: its entry goes.
      ops.push(unscheduled(d), { op: 'del', key: WebhookKeys.claim(d.deliveryId) })
    } else if (record.next_attempt_at > now + 1000) {
      // Rescheduled by another process since this pass read the schedule: keep its entry at the new due time.
      ops.push(...releaseOps(d, record.next_attempt_at))
    } else {
      ops.push(dueAt(d, leaseUntil), leaseOp(deps.nodeId, d, leaseUntil))
      const webhook = webhookOf.get(d.webhookId)
      held.push({ ...d, record, leaseUntil, webhook, app: webhook ? appOf.get(webhook.app_id) : undefined })
    }
  })
  if (ops.length > 0) await store.batch(ops, KNOWN_KEYS)
  return held
}
