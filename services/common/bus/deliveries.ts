import type { EventsActivityDeliveries } from '../generated/schema-types'

/**
 * A delivery: one event matched by one subscription, published by the
 * activity matcher on `activity.deliveries` and consumed by the stream and
 * webhooks services (key: `app_id:user_id`, see deliveryKey in services/activity/matcher.ts;
 * schemas/events/activity.deliveries.json).
 * Its envelope is what the stream and the webhook send, byte for byte
 * (JSON.stringify of `envelope`), with the field order of docs/architecture.md.
 */

/** A message of `activity.deliveries` (types generated from schemas/events/activity.deliveries.json). */
export type Delivery = EventsActivityDeliveries

/** What the stream and the webhook send, byte for byte. */
export type Envelope = Delivery['envelope']

/** The subscription's filter as the envelope carries it (activity's SubscriptionFilter). */
export type DeliveryFilter = Envelope['data']['filter']
