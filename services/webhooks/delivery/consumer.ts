import type { Logger } from 'pino'
import type { BusMessage } from '../../common/bus/types'
import { carriedTraceparent, tracingOn } from '../../common/tracing'
import type { AccountActivity } from '../account-activity'
import type { WebhookMetrics } from '../metrics'
import type { NewDelivery } from './intake'
import { type ActivityEventMessage, eventTime, isActivityDelivery, isActivityEvent } from './messages'
import type { UsageGate } from './usage-gate'

/**
 * The first stage: the bus batches the webhooks service consumes, turned
 * into deliveries for the usage gate.
 *
 *  - `activity.deliveries` (group `webhooks-delivery`): a match of an
 *    activity subscription that names a webhook becomes a delivery; the
 *    batch's offsets are committed once the gate and the engine have made
 *    its deliveries durable.
 *  - `activity.events` (group `webhooks-account-activity`): events of users
 *    subscribed through Account Activity, routed a batch at a time by
 *    account-activity.ts (which hands its deliveries to the same gate).
 *
 * A message this consumer cannot use is counted and skipped rather than
 * blocking its partition forever.
 */

export interface ConsumerDeps {
  usage: UsageGate
  accountActivity: AccountActivity
  metrics: WebhookMetrics
  log: Logger
}

/** A batch of `activity.deliveries`: read in one round trip, written in one batch (intake.ts). */
export async function onDeliveries(deps: ConsumerDeps, messages: BusMessage[]): Promise<void> {
  const accepted: NewDelivery[] = []
  for (const message of messages) {
    const v = message.value
    if (!isActivityDelivery(v)) {
      deps.metrics.deliveries.inc({ outcome: 'dropped' })
      deps.log.warn({ topic: message.topic, partition: message.partition, offset: message.offset }, 'unusable activity.deliveries message skipped')
      continue
    }
    if (v.webhook_id === undefined) continue // stream-only subscription
    const traceparent = carriedTraceparent(message.headers)
    accepted.push({
      ...(traceparent !== undefined ? { traceparent } : {}),
      delivery_id: v.delivery_id,
      webhook_id: v.webhook_id,
      app_id: v.app_id,
      source: 'activity',
      event_uuid: v.envelope.data.event_uuid,
      body: JSON.stringify(v.envelope),
      ...(typeof v.envelope.data.event_type === 'string' ? { event_type: v.envelope.data.event_type } : {}),
      event_time: eventTime(v.created_at, message.timestamp)
    })
  }
  // Through the usage gate: counted as posts consumed, or held while the app is over a cap.
  if (accepted.length > 0) await deps.usage.take(accepted)
}

/** A batch of `activity.events` for Account Activity subscriptions. */
export async function onEvents(deps: ConsumerDeps, messages: BusMessage[]): Promise<void> {
  const events: ActivityEventMessage[] = []
  const traceparents = tracingOn() ? ([] as Array<string | undefined>) : undefined
  for (const message of messages) {
    const v = message.value
    if (isActivityEvent(v)) {
      events.push(v)
      traceparents?.push(carriedTraceparent(message.headers))
    } else deps.log.warn({ topic: message.topic, partition: message.partition, offset: message.offset }, 'unusable activity.events message skipped')
  }
  await deps.accountActivity.onEvents(events, traceparents)
}
