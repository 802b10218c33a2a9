import { createHash } from 'node:crypto'
import type { ActivityEvent } from './subscription-filter'
import type { Subscription } from './subscriptions'
import type { Delivery, Envelope } from '../common/bus/deliveries'

/**
 * Deliveries: one event matched by one subscription, published on
 * `activity.deliveries`. The message (Delivery) is a contract with the
 * stream and webhooks services and lives in services/common/bus/deliveries.ts.
 */

export type { Delivery, Envelope } from '../common/bus/deliveries'

/**
 * A name-based UUID (RFC 4122 version 5 layout over SHA-256) of the match, so
 * redelivering the same event to the matcher yields the same delivery_id and
 * consumers can recognise the repeat.
 */
export function deliveryId(eventUuid: string, subscriptionId: string): string {
  const h = createHash('sha256').update(`${eventUuid}/${subscriptionId}`).digest()
  h[6] = ((h[6] as number) & 0x0f) | 0x50
  h[8] = ((h[8] as number) & 0x3f) | 0x80
  const hex = h.subarray(0, 16).toString('hex')
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`
}

export function buildEnvelope(event: ActivityEvent, sub: Subscription): Envelope {
  return {
    data: {
      event_uuid: event.event_uuid,
      filter: { ...sub.filter },
      event_type: event.event_type,
      ...(sub.tag !== undefined ? { tag: sub.tag } : {}),
      payload: event.payload,
      includes: event.includes ?? {}
    }
  }
}

export function buildDelivery(event: ActivityEvent, sub: Subscription, now = new Date()): Delivery {
  return {
    delivery_id: deliveryId(event.event_uuid, sub.subscription_id),
    app_id: sub.app_id,
    subscription_id: sub.subscription_id,
    ...(sub.webhook_id !== undefined ? { webhook_id: sub.webhook_id } : {}),
    created_at: now.toISOString(),
    envelope: buildEnvelope(event, sub)
  }
}
