import type { Delivery } from '../../common/bus/deliveries'
import type { EventsActivityEvents } from '../../common/generated/schema-types'

/**
 * The two topics the webhooks service consumes, as agreed with their owner
 * (the activity service): their types are generated from
 * schemas/events/activity.*.json, which the producer is checked against. The guards below only protect this
 * consumer from a message it cannot use: such a message is counted and
 * skipped rather than blocking its partition forever.
 */

/** `activity.deliveries` (key: app id): one match of an activity subscription. */
export type ActivityDeliveryMessage = Delivery

/** `activity.events` (key: user id): one piece of activity of one user. */
export type ActivityEventMessage = EventsActivityEvents

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

function isNonEmptyString(v: unknown): v is string {
  return typeof v === 'string' && v !== ''
}

export function isActivityDelivery(v: unknown): v is ActivityDeliveryMessage {
  if (!isObject(v)) return false
  if (!isNonEmptyString(v.delivery_id) || !isNonEmptyString(v.app_id)) return false
  if (v.webhook_id !== undefined && typeof v.webhook_id !== 'string') return false
  return isObject(v.envelope) && isObject(v.envelope.data)
}

export function isActivityEvent(v: unknown): v is ActivityEventMessage {
  if (!isObject(v)) return false
  return isNonEmptyString(v.event_uuid) && isNonEmptyString(v.event_type) && isNonEmptyString(v.user_id) && isObject(v.payload)
}

/** An ISO time as ms, or `fallback` when absent or unreadable. */
export function eventTime(createdAt: unknown, fallback: number): number {
  if (typeof createdAt !== 'string') return fallback
  const t = Date.parse(createdAt)
  return Number.isNaN(t) ? fallback : t
}
