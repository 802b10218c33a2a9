import { TOPICS, type BusMessage, type Consumer } from '../common/bus/types'
import type { Worker } from '../common/service'
import type { WebhooksParts } from './parts'
import { type ConsumerDeps, FIRST_ATTEMPT_HANDOVER_MS, onDeliveries, onEvents } from './delivery'
import { PollingWorker } from './polling'

/**
 * The webhooks service's background work:
 *  - the two consumer groups of the delivery path (delivery/consumer.ts):
 *    `webhooks-delivery` on `activity.deliveries` and
 *    `webhooks-account-activity` on `activity.events`;
 *  - the retry scheduler, the periodic CRC, and housekeeping (log trimming,
 *    replay jobs orphaned by a dead process).
 */

export const DELIVERY_GROUP = 'webhooks-delivery'
export const ACCOUNT_ACTIVITY_GROUP = 'webhooks-account-activity'
const HOUSEKEEPING_MS = 60_000
/** Deliveries made durable per store round trip. */
const DELIVERY_BATCH = 500

export async function startBackgroundWork(core: WebhooksParts): Promise<Worker[]> {
  const { ctx, engine, accountActivity, metrics } = core
  const log = ctx.log

  const deps: ConsumerDeps = { usage: core.usage, accountActivity, metrics, log }
  const onDeliveriesBatch = (messages: BusMessage[]): Promise<void> => onDeliveries(deps, messages)
  const onEventsBatch = (messages: BusMessage[]): Promise<void> => onEvents(deps, messages)

  // Both groups join at once: on Kafka a join takes seconds (the group's rebalance delay), and they are independent.
  const joined = await Promise.allSettled([
    ctx.bus.subscribe({ groupId: DELIVERY_GROUP, topics: [TOPICS.activityDeliveries], batchHandler: onDeliveriesBatch, maxBatch: DELIVERY_BATCH, handoverMs: FIRST_ATTEMPT_HANDOVER_MS }),
    ctx.bus.subscribe({ groupId: ACCOUNT_ACTIVITY_GROUP, topics: [TOPICS.activityEvents], batchHandler: onEventsBatch, maxBatch: DELIVERY_BATCH, handoverMs: FIRST_ATTEMPT_HANDOVER_MS })
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
