import { TOPICS, type BusMessage, type Consumer } from '../common/bus/types'
import type { Worker } from '../common/service'
import type { WebhooksCore } from './core'
import type { NewDelivery } from './delivery'
import { type ActivityEventMessage, eventTime, isActivityDelivery, isActivityEvent } from './messages'
import { PollingWorker } from './polling'

/**
 * The webhooks service's background work:
 *  - `webhooks-delivery` group on `activity.deliveries`, a batch at a time:
 *    deliveries that name a webhook become durable deliveries (the offset is
 *    committed once the batch's records and schedule entries are stored);
 *  - `webhooks-account-activity` group on `activity.events`, a batch at a
 *    time too: events of users subscribed through Account Activity become
 *    deliveries (one pipelined read of the batch's users, one intake batch);
 *  - the retry scheduler, the periodic CRC, and housekeeping (log trimming,
 *    replay jobs orphaned by a dead process).
 */

export const DELIVERY_GROUP = 'webhooks-delivery'
export const ACCOUNT_ACTIVITY_GROUP = 'webhooks-account-activity'
const HOUSEKEEPING_MS = 60_000
/** Deliveries made durable per store round trip. */
const DELIVERY_BATCH = 500

export async function startWorkers(core: WebhooksCore): Promise<Worker[]> {
  const { ctx, engine, accountActivity, metrics } = core
  const log = ctx.log

  // A batch of deliveries becomes durable together (one read round trip, one write batch); the
  // attempts then run in the webhooks' lanes, never in this consumer's path.
  const onDeliveries = async (messages: BusMessage[]): Promise<void> => {
    const accepted: NewDelivery[] = []
    for (const message of messages) {
      const v = message.value
      if (!isActivityDelivery(v)) {
        metrics.deliveries.inc({ outcome: 'dropped' })
        log.warn({ topic: message.topic, partition: message.partition, offset: message.offset }, 'unusable activity.deliveries message skipped')
        continue
      }
      if (v.webhook_id === undefined) continue // stream-only subscription
      accepted.push({
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
    if (accepted.length > 0) await core.usage.take(accepted)
  }

  // Account Activity: a batch of events routed together (account-activity.ts onEvents).
  const onEvents = async (messages: BusMessage[]): Promise<void> => {
    const events: ActivityEventMessage[] = []
    for (const message of messages) {
      const v = message.value
      if (isActivityEvent(v)) events.push(v)
      else log.warn({ topic: message.topic, partition: message.partition, offset: message.offset }, 'unusable activity.events message skipped')
    }
    await accountActivity.onEvents(events)
  }

  // Both groups join at once: on Kafka a join takes seconds (the group's rebalance delay), and they are independent.
  const joined = await Promise.allSettled([
    ctx.bus.subscribe({ groupId: DELIVERY_GROUP, topics: [TOPICS.activityDeliveries], batchHandler: onDeliveries, maxBatch: DELIVERY_BATCH }),
    ctx.bus.subscribe({ groupId: ACCOUNT_ACTIVITY_GROUP, topics: [TOPICS.activityEvents], batchHandler: onEvents, maxBatch: DELIVERY_BATCH })
  ])
  const consumers: Consumer[] = joined.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []))
  const refused = joined.find((r): r is PromiseRejectedResult => r.status === 'rejected')
  if (refused) {
    await Promise.allSettled(consumers.map((c) => c.close()))
    throw refused.reason
  }

  const retries = engine.startScheduler()
  const released = core.usage.startReleaser()
  const crc = core.checker.startSchedule()
  const housekeeping = new PollingWorker('webhooks-housekeeping', HOUSEKEEPING_MS, async () => {
    for (const w of await core.registry.listAll()) await core.deliveryLog.trim(w.id)
    await core.replay.sweepOrphans()
  }, log)

  // One worker closing: no new messages and no new scheduled attempts or checks (all stop at once: a
  // consumer's close on Kafka takes seconds, the leave and the commits, and attempts the scheduler
  // claimed meanwhile would be cut off or spend retries that belong to the next process), then the
  // in-flight ones finish and what is still queued goes back on the schedule.
  const all: Worker = {
    name: 'webhooks',
    async close() {
      await Promise.allSettled([...consumers.map((c) => c.close()), retries.close(), crc.close(), housekeeping.close(), released.close()])
      await core.close()
    }
  }
  return [all]
}
