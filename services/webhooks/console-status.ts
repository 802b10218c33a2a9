import type { WebhooksParts } from './parts'
import type { DeliveryRecord } from './delivery-log'
import type { Webhook } from './registry'

/**
 * What the console says about a delivery and a webhook so that it cannot be
 * misread: a delivery that is still scheduled but whose attempts failed is
 * `failing` (not just `pending`), with its next attempt and a way to make
 * that attempt now; a webhook carries a health line (last success, share of
 * failures over the last hour); a webhook that is invalid or disabled says
 * so before anything is re-sent to it.
 */

export type DisplayStatus = DeliveryRecord['status'] | 'failing'

export const DISPLAY_STATUSES: readonly DisplayStatus[] = ['pending', 'failing', 'delivered', 'failed', 'cancelled']

/** `failing`: pending after at least one failed attempt of this send (a success would have made it delivered). */
export function displayStatus(r: DeliveryRecord): DisplayStatus {
  return r.status === 'pending' && r.attempts > 0 ? 'failing' : r.status
}

/** Whether a record is shown under the status filter `wanted` (`failed` is the failures filter: failing ones too). */
export function statusMatches(r: DeliveryRecord, wanted: DisplayStatus): boolean {
  const shown = displayStatus(r)
  return wanted === 'failed' ? shown === 'failed' || shown === 'failing' : shown === wanted
}

/** Every attempt of the delivery, across re-sends (`attempts` alone counts the current send's). */
export function totalAttempts(r: DeliveryRecord): number {
  return (r.attempts_before_resend ?? 0) + r.attempts
}

/** Why nothing sent to this webhook can arrive now, or undefined when it may be sent to. */
export function notSendable(w: Webhook | undefined): string | undefined {
  if (!w) return 'The webhook was deleted.'
  if (w.disabled_at !== undefined) return `Webhook ${w.id} is disabled (it answered 410 Gone): run "Validate now" on the Webhooks page first; a passing check sends its waiting deliveries.`
  if (!w.valid) return `Webhook ${w.id} is invalid (${w.invalid_reason ?? 'its CRC check fails'}): run "Validate now" on the Webhooks page first; a passing check sends its waiting deliveries.`
  return undefined
}

export interface WebhookHealth {
  /** Newest delivered_at among the webhook's recent deliveries. */
  lastSuccess?: string
  /** Deliveries of events of the last hour: how many, and how many failed or are failing. */
  lastHour: number
  failingLastHour: number
  errorPct: number | null
  /** Deliveries being retried after failures (any age). */
  failing: number
}

const HEALTH_SCAN = 500

/** The webhook's health line, from its newest deliveries in the log. */
export async function webhookHealth(core: WebhooksParts, w: Webhook, now = Date.now()): Promise<WebhookHealth> {
  const recent = await core.deliveryLog.list(w.id, { limit: HEALTH_SCAN, newestFirst: true })
  const hour = recent.filter((r) => r.event_time >= now - 3_600_000 && r.attempts + (r.attempts_before_resend ?? 0) > 0)
  const bad = hour.filter((r) => statusMatches(r, 'failed')).length
  const lastSuccess = recent.map((r) => r.delivered_at).filter((d): d is string => d !== undefined).sort().at(-1)
  return {
    ...(lastSuccess !== undefined ? { lastSuccess } : {}),
    lastHour: hour.length,
    failingLastHour: bad,
    errorPct: hour.length === 0 ? null : Math.round((bad / hour.length) * 1000) / 10,
    failing: recent.filter((r) => displayStatus(r) === 'failing').length
  }
}
