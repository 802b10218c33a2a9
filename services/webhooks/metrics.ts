import { scheduleSize } from './delivery/schedule'
import client from 'prom-client'
import type { Store } from '../common/store/types'

/**
 * What an operator watches: deliveries by outcome, the retry queue, delivery
 * latency and CRC results. Registered in the service context's registry
 * (served at /metrics).
 */

export type DeliveryOutcome =
  | 'delivered' // 2xx
  | 'retry_scheduled' // failed, another attempt is scheduled
  | 'dead_lettered' // retries exhausted (or 410): webhook.dead-letter
  | 'gone' // 410: the webhook was disabled
  | 'skipped_invalid' // the webhook is invalid (CRC failing): counted as a failed attempt
  | 'cancelled' // the app was deleted while the delivery was pending
  | 'webhook_deleted' // the webhook no longer exists (deleted): dropped, or a pending delivery cancelled
  | 'dropped' // an unusable message, or a delivery naming another app's webhook
  | 'replayed' // a replay job re-delivered it
  | 'replay_failed'
  | 'usage_held' // over its app's (or the project's) usage cap: held until there is room (delivery/usage-gate.ts)
  | 'usage_released' // a held delivery went through once there was room

export interface WebhookMetrics {
  deliveries: client.Counter<'outcome'>
  latency: client.Histogram<'result'>
  crc: client.Counter<'trigger' | 'result'>
}

export function createMetrics(registry: client.Registry, store: Store): WebhookMetrics {
  const deliveries = new client.Counter({
    name: 'webhook_deliveries_total',
    help: 'Webhook delivery attempts and their outcome',
    labelNames: ['outcome'] as const,
    registers: [registry]
  })
  const latency = new client.Histogram({
    name: 'webhook_delivery_duration_seconds',
    help: 'Time of one delivery POST until the receiver answered (or failed)',
    labelNames: ['result'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry]
  })
  const crc = new client.Counter({
    name: 'webhook_crc_checks_total',
    help: 'CRC checks by trigger (create, put, periodic) and result (pass, invalid, transient)',
    labelNames: ['trigger', 'result'] as const,
    registers: [registry]
  })
  new client.Gauge({
    name: 'webhook_retry_queue_depth',
    help: 'Deliveries waiting for an attempt (scheduled retries and leased in-flight attempts)',
    registers: [registry],
    async collect() {
      this.set(await scheduleSize(store))
    }
  })
  return { deliveries, latency, crc }
}
