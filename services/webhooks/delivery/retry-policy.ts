import type { EventsWebhookDeadLetter } from '../../common/generated/schema-types'
import type { DeliveryRecord } from '../delivery-log'

/**
 * When a failed delivery is tried again, and what a dead one looks like on
 * `webhook.dead-letter` (schemas/events/webhook.dead-letter.json).
 */

/** Largest Retry-After honoured. */
const MAX_RETRY_AFTER_MS = 24 * 3_600_000

export interface Failure {
  status?: number
  error: string
  retryAfterMs?: number
}

export function withJitter(delayMs: number, random: () => number = Math.random): number {
  if (delayMs <= 0) return 0
  return Math.round(delayMs * (0.9 + random() * 0.2))
}

/** Retry-After as delta-seconds or an HTTP date; undefined when absent or unreadable. */
export function parseRetryAfter(value: string | string[] | undefined, now = Date.now()): number | undefined {
  const raw = Array.isArray(value) ? value[0] : value
  if (raw === undefined) return undefined
  const text = raw.trim()
  let ms: number
  if (/^\d+$/.test(text)) ms = Number(text) * 1000
  else {
    // An HTTP date names its weekday and month ("Wed, 21 Oct 2025 07:28:00 GMT"); bare numbers are not dates.
    if (!/[a-z]{3}/i.test(text)) return undefined
    const at = Date.parse(text)
    if (Number.isNaN(at)) return undefined
    ms = at - now
  }
  return Math.min(Math.max(ms, 0), MAX_RETRY_AFTER_MS)
}

/** The `webhook.dead-letter` event of a delivery that will not be tried again. */
export function deadLetterEvent(record: DeliveryRecord, reason: 'exhausted' | 'gone', failure: Failure, deadAt: string): EventsWebhookDeadLetter {
  const event: EventsWebhookDeadLetter = {
    delivery_id: record.delivery_id,
    webhook_id: record.webhook_id,
    app_id: record.app_id,
    source: record.source,
    reason,
    attempts: record.attempts,
    last_error: failure.error,
    created_at: record.created_at,
    dead_at: deadAt,
    body: record.body
  }
  if (record.event_uuid !== undefined) event.event_uuid = record.event_uuid
  if (record.for_user_id !== undefined) event.for_user_id = record.for_user_id
  if (failure.status !== undefined) event.last_status = failure.status
  return event
}
