/**
 * A delivery: one event matched by one subscription, published by the
 * activity matcher on `activity.deliveries` and consumed by the stream and
 * webhooks services (key: `app_id:user_id`, see deliveryKey in services/activity/worker.ts;
 * schemas/events/activity.deliveries.json).
 * Its envelope is what the stream and the webhook send, byte for byte
 * (JSON.stringify of `envelope`), with the field order of platform-facts §5.
 */

/** The subscription's filter as the envelope carries it (activity's SubscriptionFilter). */
export interface DeliveryFilter {
  user_id: string
  keyword?: string
  direction?: 'sent' | 'received'
}

export interface Envelope {
  data: {
    event_uuid: string
    filter: DeliveryFilter
    event_type: string
    tag?: string
    payload: Record<string, unknown>
    includes: Record<string, unknown>
  }
}

export interface Delivery {
  delivery_id: string
  app_id: string
  subscription_id: string
  webhook_id?: string
  created_at: string
  envelope: Envelope
}
