import type { ServiceContext } from '../common/context'
import { AccountActivity } from './account-activity'
import { AttemptLog } from './delivery'
import { CrcChecker } from './crc'
import { CrcHistory } from './crc-history'
import { DeliveryEngine } from './delivery'
import { DeliveryLog } from './delivery-log'
import { WebhookClient } from './http-client'
import { createMetrics, type WebhookMetrics } from './metrics'
import { WebhookRegistry } from './registry'
import { ReplayRunner } from './replay'
import type { UrlPolicy } from './url-safety'
import { UsageGate } from './delivery'
import { usageMeter } from '../common/usage'

/**
 * The parts of the webhooks service, built once per service context and
 * shared by its routes and its workers.
 */
export interface WebhooksParts {
  ctx: ServiceContext
  policy: UrlPolicy
  registry: WebhookRegistry
  client: WebhookClient
  metrics: WebhookMetrics
  checker: CrcChecker
  crcHistory: CrcHistory
  deliveryLog: DeliveryLog
  attempts: AttemptLog
  engine: DeliveryEngine
  accountActivity: AccountActivity
  replay: ReplayRunner
  /** Usage caps in front of the engine: counted, or held over a cap (delivery/usage-gate.ts). */
  usage: UsageGate
  close(): Promise<void>
}

const cores = new WeakMap<ServiceContext, WebhooksParts>()

export function partsFor(ctx: ServiceContext, policyOverride?: Partial<UrlPolicy>): WebhooksParts {
  const existing = cores.get(ctx)
  if (existing) return existing
  const { config, store, bus, log } = ctx
  const policy: UrlPolicy = { allowInsecure: config.webhookAllowInsecure, ...policyOverride }
  const registry = new WebhookRegistry(store)
  const client = new WebhookClient({ policy, timeoutMs: config.webhookTimeoutMs, connectionsPerLane: config.webhookConcurrency })
  const metrics = createMetrics(ctx.metrics, store)
  const deliveryLog = new DeliveryLog(store, config.webhookLogRetentionMs)
  const attempts = new AttemptLog(store, config.webhookLogRetentionMs)
  const engine = new DeliveryEngine(
    { store, bus, registry, deliveryLog, client, metrics, logger: log, attempts, processId: ctx.liveness.id },
    { schedule: config.webhookRetrySchedule, concurrency: config.webhookConcurrency, retentionMs: config.webhookLogRetentionMs }
  )
  // A webhooks process that dies leaves its leased deliveries to whichever process notices first.
  ctx.liveness.addReaper('webhook leases', async (deadId) => void (await engine.releaseLeasesOf(deadId)))
  const crcHistory = new CrcHistory(store)
  const checker = new CrcChecker({
    store,
    history: crcHistory,
    registry,
    client,
    metrics,
    log,
    intervalMs: config.webhookCrcIntervalMs,
    onRevalidated: (webhookId) => engine.pullForward(webhookId)
  })
  const usage = new UsageGate(store, usageMeter(ctx), engine, metrics, log)
  const accountActivity = new AccountActivity(store, registry, usage, config.webhookSubscriptionLimit, log)
  const replay = new ReplayRunner({ store, registry, deliveryLog, engine, attempts, metrics, logger: log, concurrency: Math.min(4, config.webhookConcurrency), usage: usageMeter(ctx) })
  let closing: Promise<void> | undefined
  const core: WebhooksParts = {
    ctx,
    policy,
    registry,
    client,
    metrics,
    checker,
    crcHistory,
    deliveryLog,
    attempts,
    engine,
    accountActivity,
    replay,
    usage,
    close() {
      closing ??= (async () => {
        await replay.close()
        await engine.close()
        await client.close()
        await attempts.flush().catch((err: unknown) => log.warn({ err }, 'chart counters not written at shutdown'))
        await usageMeter(ctx).flush().catch((err: unknown) => log.warn({ err }, 'usage counts not written at shutdown'))
        cores.delete(ctx)
      })()
      return closing
    }
  }
  cores.set(ctx, core)
  return core
}
