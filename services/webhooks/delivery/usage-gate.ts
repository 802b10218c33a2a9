import type { Logger } from 'pino'
import type { Worker } from '../../common/service'
import type { Store, StoreOp } from '../../common/store/types'
import { USAGE_KEEP_MS, type UsageMeter } from '../../common/usage'
import type { DeliveryEngine } from './engine'
import type { AcceptResult, NewDelivery } from './intake'
import type { WebhookMetrics } from '../metrics'
import { KNOWN_KEYS } from './schedule'
import { PollingWorker } from '../polling'

/**
 * Usage caps on webhook deliveries (docs/webhooks.md "Usage caps").
 *
 * Every delivery on its way to the engine (activity deliveries a batch at a
 * time, Account Activity events) passes here: while its app (and the
 * project) has room under its caps it is accepted and counted as one post
 * consumed; beyond the cap it is **held**, not dropped: kept in the store in
 * arrival order (`webhooks:usage-held:{app_id}`, its body under
 * `webhooks:usage-held-delivery:{delivery_id}`) until the app has room
 * again — the UTC day or the billing cycle turned, or the operator raised or
 * removed the cap — when the releaser feeds it through here again, oldest
 * first, counting it in the period it is delivered in.
 *
 * Store cost per batch: the caps and counters come from the meter (read at
 * most once a second per app, one pipelined read), the deliveries' own
 * batch is the engine's, and one more batch writes its holds and releases
 * when it has any. The counts go to the meter, which writes them within a
 * second for the whole process (services/common/usage.ts). Only deliveries the engine accepted as new are
 * counted: a redelivered message (the bus is at least once) is a duplicate
 * there and counts nothing.
 */

export const HeldKeys = {
  queue: (appId: string) => `webhooks:usage-held:${appId}`,
  delivery: (deliveryId: string) => `webhooks:usage-held-delivery:${deliveryId}`,
  apps: () => 'webhooks:usage-held-apps'
}

/** How often held deliveries are looked at (a new day, a raised cap). */
export const RELEASE_EVERY_MS = 5000
/** Held deliveries released per app per pass. */
const RELEASE_BATCH = 500

export type GateResult = AcceptResult | 'held'

export class UsageGate {
  private releaser: PollingWorker | undefined

  constructor(
    private readonly store: Store,
    private readonly meter: UsageMeter,
    private readonly engine: DeliveryEngine,
    private readonly metrics: WebhookMetrics,
    private readonly log: Logger,
    private readonly releaseEveryMs = RELEASE_EVERY_MS
  ) {}

  /**
   * Accepts what the caps allow and holds the rest. `released`: the list
   * comes from the held queues (already held: what is still over stays put;
   * what goes through leaves its queue in the same batch as its count).
   */
  async take(list: NewDelivery[], released = false): Promise<GateResult[]> {
    if (list.length === 0) return []
    const allowance = await this.meter.allowance(list.map((d) => d.app_id), { fresh: released })
    const within: NewDelivery[] = []
    const decided: Array<'within' | 'held'> = []
    const ops: StoreOp[] = []
    const base = Date.now()
    list.forEach((d, i) => {
      if (allowance.take(d.app_id)) {
        within.push(d)
        decided.push('within')
        return
      }
      decided.push('held')
      if (released) return
      ops.push(
        { op: 'set', key: HeldKeys.delivery(d.delivery_id), value: JSON.stringify(d), ttlMs: USAGE_KEEP_MS },
        // Arrival order inside one batch kept by a fraction of a millisecond per position.
        { op: 'zadd', key: HeldKeys.queue(d.app_id), score: base + i / 1000, member: d.delivery_id },
        { op: 'sadd', key: HeldKeys.apps(), members: [d.app_id] }
      )
    })
    const accepted = within.length > 0 ? await this.engine.acceptMany(within) : []
    const counts = new Map<string, number>()
    within.forEach((d, i) => {
      if (accepted[i] === 'accepted') counts.set(d.app_id, (counts.get(d.app_id) ?? 0) + 1)
      if (released) ops.push({ op: 'zrem', key: HeldKeys.queue(d.app_id), members: [d.delivery_id] }, { op: 'del', key: HeldKeys.delivery(d.delivery_id) })
    })
    // Replicated: the consumer commits its offsets once this returns.
    if (ops.length > 0) await this.store.batch(ops, { ...KNOWN_KEYS, replicated: true })
    this.meter.count(counts)
    const held = decided.filter((x) => x === 'held').length
    if (held > 0 && !released) {
      this.metrics.deliveries.inc({ outcome: 'usage_held' }, held)
      this.log.info({ held, apps: [...new Set(list.filter((_, i) => decided[i] === 'held').map((d) => d.app_id))] }, 'deliveries held: usage cap reached')
    }
    let next = 0
    return decided.map((x) => (x === 'held' ? 'held' : (accepted[next++] as AcceptResult)))
  }

  /** One pass of the releaser: every app with held deliveries and room gets its oldest ones through. */
  async releaseDue(): Promise<number> {
    const apps = await this.store.smembers(HeldKeys.apps())
    if (apps.length === 0) return 0
    const allowance = await this.meter.allowance(apps, { fresh: true })
    let released = 0
    for (const appId of apps) {
      if (allowance.blocked(appId)) continue
      const members = await this.store.zrange(HeldKeys.queue(appId), 0, RELEASE_BATCH - 1)
      if (members.length === 0) continue
      const ids = members.map((m) => m.member)
      const bodies = await this.store.mgetJson<NewDelivery>(ids.map((id) => HeldKeys.delivery(id)))
      const missing = ids.filter((_, i) => bodies[i] === undefined)
      if (missing.length > 0) {
        // Only a body older than USAGE_KEEP_MS can be missing: its queue entry goes too.
        this.log.warn({ app_id: appId, missing: missing.length }, 'held deliveries without a body removed from the queue')
        await this.store.zrem(HeldKeys.queue(appId), ...missing)
      }
      const list = bodies.filter((b): b is NewDelivery => b !== undefined)
      const results = await this.take(list, true)
      const through = results.filter((r) => r !== 'held').length
      released += through
      if (through > 0) this.metrics.deliveries.inc({ outcome: 'usage_released' }, through)
    }
    return released
  }

  /** How many deliveries of `appId` are held. */
  held(appId: string): Promise<number> {
    return this.store.zcard(HeldKeys.queue(appId))
  }

  startReleaser(): Worker {
    this.releaser = new PollingWorker('webhooks-usage-release', this.releaseEveryMs, () => this.releaseDue(), this.log)
    return this.releaser
  }
}
