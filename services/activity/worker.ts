import type { BusMessage } from '../common/bus/types'
import { TOPICS } from '../common/bus/types'
import type { ServiceContext } from '../common/context'
import { describeErrors } from '../common/schemas'
import type { Worker } from '../common/service'
import { buildDelivery, type Delivery } from './deliveries'
import { type ActivityEvent, subscriptionMatches, textFields } from './matching'
import { activityMetrics } from './metrics'
import type { Subscription } from './subscriptions'
import { SubscriptionStore } from './subscriptions'

/**
 * The matcher: a consumer group on `activity.events`. For each event it reads
 * the candidate subscriptions from the (event_type, user_id) index (one store
 * round trip), applies the keyword and direction filters, and publishes the
 * event's deliveries on `activity.deliveries` together (one publishMany; the
 * Kafka bus also joins the publishes of events handled concurrently into one
 * produce request). The handler resolves only after the deliveries are
 * published, so the offset is committed only then (at least once); a failed
 * publish makes the bus hand the same event back.
 */

export const MATCHER_GROUP = 'activity-matcher'

/** The deliveries `event` produces among `candidates` (pure; used by the worker and the benchmark). */
export function matchEvent(event: ActivityEvent, candidates: Subscription[], now = new Date()): Delivery[] {
  if (candidates.length === 0) return []
  const texts = textFields(event)
  const out: Delivery[] = []
  // A subscription appears once even if the index briefly lists it twice.
  const seen = new Set<string>()
  for (const sub of candidates) {
    if (seen.has(sub.subscription_id)) continue
    seen.add(sub.subscription_id)
    if (subscriptionMatches(sub, event, texts)) out.push(buildDelivery(event, sub, now))
  }
  return out
}

export async function startMatcher(ctx: ServiceContext): Promise<Worker> {
  const subscriptions = new SubscriptionStore(ctx.store, ctx.config.subscriptionLimitPerApp)
  const metrics = activityMetrics(ctx)
  const validate = ctx.schemas.validator(`events/${TOPICS.activityEvents}`)

  const handler = async (message: BusMessage): Promise<void> => {
    const started = process.hrtime.bigint()
    if (!validate(message.value)) {
      // Producers validate before publishing; a message that still fails was
      // written around the bus contract. Retrying cannot fix it: log and skip.
      metrics.malformed.inc()
      metrics.rejected.inc({ reason: 'matcher-invalid' })
      ctx.log.warn({ topic: message.topic, partition: message.partition, offset: message.offset, problem: describeErrors(validate.errors) }, 'skipping malformed activity event')
      return
    }
    const event = message.value as ActivityEvent
    const candidates = await subscriptions.candidates(event.event_type, event.user_id)
    const deliveries = matchEvent(event, candidates)
    if (deliveries.length > 0) {
      await ctx.bus.publishMany(
        TOPICS.activityDeliveries,
        deliveries.map((d) => ({ key: d.app_id, value: d }))
      )
      metrics.matched.inc({ event_type: event.event_type }, deliveries.length)
    }
    metrics.matchSeconds.observe(Number(process.hrtime.bigint() - started) / 1e9)
  }

  const migrated = await subscriptions.migrateLegacyIndex()
  if (migrated > 0) ctx.log.info({ migrated }, 'activity match index: converted legacy id sets to match hashes')
  const consumer = await ctx.bus.subscribe({ groupId: MATCHER_GROUP, topics: [TOPICS.activityEvents], handler })
  return { name: 'activity-matcher', close: () => consumer.close() }
}
