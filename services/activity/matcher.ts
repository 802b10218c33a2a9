import type { BusMessage, OutgoingMessage } from '../common/bus/types'
import { TOPICS } from '../common/bus/types'
import type { ServiceContext } from '../common/context'
import { describeErrors } from '../common/schemas'
import { consumerSpan, contextOf, endSpan, headersOf, tracingOn, type Span } from '../common/tracing'
import type { Worker } from '../common/service'
import { buildDelivery, type Delivery } from './deliveries'
import { type ActivityEvent, subscriptionMatches, textFields } from './subscription-filter'
import { activityMetrics } from './metrics'
import type { Subscription } from './subscriptions'
import { SubscriptionStore } from './subscriptions'

/**
 * The matcher: a consumer group on `activity.events`, a batch at a time (one
 * partition's fetched events, up to MATCH_BATCH). For a batch it reads the
 * candidate subscriptions of every distinct (event_type, user_id) from the
 * match index in one pipelined store round trip (the lookups are issued in
 * one event-loop turn; ioredis sends them as one pipeline), applies the
 * keyword and direction filters, and publishes all of the batch's deliveries
 * on `activity.deliveries` in one publishMany (one produce request). The
 * handler resolves only after the deliveries are published, so the offsets
 * are committed only then (at least once); a failed lookup or publish makes
 * the bus hand the same batch back. The deliveries of a redelivered event get
 * the same delivery_id (deliveries.ts), so consumers recognise repeats.
 */

export const MATCHER_GROUP = 'activity-matcher'
/** Events per handler call: large enough to share round trips, small enough that a retried batch repeats little. */
const MATCH_BATCH = 500

/**
 * The key of a delivery on `activity.deliveries`: application and filtered
 * user. One busy application's deliveries spread over every partition (and so
 * over every webhooks and stream process), while the deliveries of one user's
 * activity to one application stay on one partition, in order (the order
 * docs/webhooks.md promises).
 */
export function deliveryKey(d: Pick<Delivery, 'app_id' | 'envelope'>): string {
  return `${d.app_id}:${d.envelope.data.filter.user_id}`
}

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

/** What a match span says of its event: where it came from and what it is (never its payload). */
function matchAttributes(bus: 'memory' | 'kafka', message: BusMessage, event: ActivityEvent): Record<string, string | number> {
  return {
    'messaging.system': bus,
    'messaging.destination.name': message.topic,
    'messaging.operation.type': 'process',
    'messaging.destination.partition.id': String(message.partition),
    'messaging.kafka.offset': Number(message.offset),
    'gateway.event_type': event.event_type,
    'gateway.event_uuid': event.event_uuid
  }
}

export async function startMatcher(ctx: ServiceContext): Promise<Worker> {
  const subscriptions = new SubscriptionStore(ctx.store, ctx.config.subscriptionLimitPerApp)
  const metrics = activityMetrics(ctx)
  const validate = ctx.schemas.validator(`events/${TOPICS.activityEvents}`)

  /** The batch's valid events (and, traced, their messages); malformed ones are counted and skipped (retrying cannot fix them). */
  const validEvents = (messages: BusMessage[], sources?: BusMessage[]): ActivityEvent[] => {
    const out: ActivityEvent[] = []
    for (const message of messages) {
      if (validate(message.value)) {
        out.push(message.value as ActivityEvent)
        sources?.push(message)
        continue
      }
      // Producers validate before publishing; a message that still fails was written around the bus contract.
      metrics.malformed.inc()
      metrics.rejected.inc({ reason: 'matcher-invalid' })
      ctx.log.warn({ topic: message.topic, partition: message.partition, offset: message.offset, problem: describeErrors(validate.errors) }, 'skipping malformed activity event')
    }
    return out
  }

  const batchHandler = async (messages: BusMessage[]): Promise<void> => {
    const started = process.hrtime.bigint()
    const sources = tracingOn() ? ([] as BusMessage[]) : undefined
    const events = validEvents(messages, sources)
    // Traced: one span per event, a child of its ingest's, parent of its deliveries' handling.
    const spans = sources?.map((m, i) => consumerSpan('activity.match', contextOf(m.headers), matchAttributes(ctx.bus.kind, m, events[i] as ActivityEvent)))
    try {
      await matchAndPublish(events, spans)
    } catch (err) {
      for (const span of spans ?? []) endSpan(span, err)
      throw err
    }
    for (const span of spans ?? []) endSpan(span)
    // Per event, as before batching: the histogram keeps its meaning.
    const seconds = Number(process.hrtime.bigint() - started) / 1e9 / Math.max(1, messages.length)
    for (let i = 0; i < messages.length; i++) metrics.matchSeconds.observe(seconds)
  }

  /** The events' deliveries, published in one publishMany; each carries its event's span (traced) as its trace context. */
  const matchAndPublish = async (events: ActivityEvent[], spans: Array<Span | undefined> | undefined): Promise<void> => {
    // One lookup per distinct (event_type, user_id), all issued in this turn: one pipelined round trip.
    const lookups = new Map<string, Promise<Subscription[]>>()
    for (const e of events) {
      const k = `${e.event_type}\u0000${e.user_id}`
      if (!lookups.has(k)) lookups.set(k, subscriptions.candidates(e.event_type, e.user_id))
    }
    const found = new Map<string, Subscription[]>()
    await Promise.all([...lookups].map(async ([k, p]) => found.set(k, await p)))
    const now = new Date()
    const deliveries: OutgoingMessage[] = []
    for (let i = 0; i < events.length; i++) {
      const e = events[i] as ActivityEvent
      const matched = matchEvent(e, found.get(`${e.event_type}\u0000${e.user_id}`) ?? [], now)
      if (matched.length > 0) metrics.matched.inc({ event_type: e.event_type }, matched.length)
      const span = spans?.[i]
      span?.setAttribute('gateway.deliveries', matched.length)
      const headers = headersOf(span)
      for (const d of matched) deliveries.push(headers ? { key: deliveryKey(d), value: d, headers } : { key: deliveryKey(d), value: d })
    }
    if (deliveries.length > 0) await ctx.bus.publishMany(TOPICS.activityDeliveries, deliveries)
  }

  const migrated = await subscriptions.migrateLegacyIndex()
  if (migrated > 0) ctx.log.info({ migrated }, 'activity match index: converted legacy id sets to match hashes')
  const consumer = await ctx.bus.subscribe({ groupId: MATCHER_GROUP, topics: [TOPICS.activityEvents], batchHandler, maxBatch: MATCH_BATCH })
  return { name: 'activity-matcher', close: () => consumer.close() }
}
