import client from 'prom-client'
import type { ServiceContext } from '../common/context'

/** The activity service's metrics, registered once per context (the embedded runtime shares one registry). */
export interface ActivityMetrics {
  ingested: client.Counter<'event_type'>
  rejected: client.Counter<'reason'>
  /** Ingest requests answered from an earlier request with the same Idempotency-Key. */
  replayed: client.Counter
  matched: client.Counter<'event_type'>
  malformed: client.Counter
  matchSeconds: client.Histogram
  subscriptionChanges: client.Counter<'action'>
}

const byContext = new WeakMap<ServiceContext, ActivityMetrics>()

export function activityMetrics(ctx: ServiceContext): ActivityMetrics {
  let m = byContext.get(ctx)
  if (m) return m
  const registers = [ctx.metrics]
  m = {
    ingested: new client.Counter({ name: 'activity_events_ingested_total', help: 'Events accepted by the ingest route and published on activity.events', labelNames: ['event_type'] as const, registers }),
    rejected: new client.Counter({ name: 'activity_events_rejected_total', help: 'Events refused by the ingest route (invalid JSON, schema violation, unknown event type) or by the matcher', labelNames: ['reason'] as const, registers }),
    replayed: new client.Counter({ name: 'activity_ingest_replayed_total', help: 'Ingest requests answered with the answer of an earlier request with the same Idempotency-Key, publishing nothing', registers }),
    matched: new client.Counter({ name: 'activity_deliveries_produced_total', help: 'Deliveries published on activity.deliveries', labelNames: ['event_type'] as const, registers }),
    malformed: new client.Counter({ name: 'activity_matcher_malformed_total', help: 'Messages on activity.events the matcher could not read (skipped and logged)', registers }),
    matchSeconds: new client.Histogram({ name: 'activity_match_seconds', help: 'Time to match one event and publish its deliveries', buckets: [0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1], registers }),
    subscriptionChanges: new client.Counter({ name: 'activity_subscription_changes_total', help: 'Subscriptions created, updated and deleted', labelNames: ['action'] as const, registers })
  }
  byContext.set(ctx, m)
  return m
}
