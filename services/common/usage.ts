import type { Config } from './config'
import type { ServiceContext } from './context'
import {
  type AppCaps,
  type CapHit,
  cycleStart,
  DAY_MS,
  dayKey,
  dayStart,
  nextCycleStart,
  USAGE_CACHE_MS,
  USAGE_FLUSH_MS,
  USAGE_KEEP_MS,
  UsageAllowance,
  usageCappedProblem,
  UsageKeys,
  type UsagePeriod,
  type UsageScope
} from './usage-periods'
import { newNumericId } from './ids'
import type { Store, StoreOp } from './store/types'
import { AuthKeys } from './auth/records'

/**
 * Usage of posts ("Usage caps"): every activity event handed to an
 * application — a webhook delivery accepted for one of its webhooks, an event
 * written to one of its streams — is one post consumed, counted per app per
 * UTC day and per billing cycle, and for the whole project (every app of the
 * deployment: apps have no owner in the `auth:` keyspace, so the deployment
 * is the platform's "project").
 *
 * The shared `usage:` keyspace (written by the webhooks and stream services on
 * their event paths, caps written by the gateway's operator API, read by every
 * service that refuses capped work):
 *
 *   usage:app-day:{app_id}:{yyyymmdd}        posts consumed by the app that UTC day
 *   usage:app-cycle:{app_id}:{yyyymmdd}      ... in the billing cycle starting that day
 *   usage:project-day:{yyyymmdd}             every app, that UTC day
 *   usage:project-cycle:{yyyymmdd}           every app, the billing cycle starting that day
 *   usage:caps:{app_id}                      AppCaps (JSON) set by the operator
 *   usage:project-id                         the project's id (minted once)
 *
 * Counters live USAGE_KEEP_MS (past the 90 days the usage report reaches).
 * Counting is in process: the event paths hand their counts to `count`,
 * which adds them to this process's view at once and to the store within
 * USAGE_FLUSH_MS, every key once per flush (one INCRBY and one PEXPIRE),
 * whatever the number of events: no counter, not even the project-wide
 * ones every event adds to, takes a store write per event or per batch.
 * The tolerance this buys (docs/webhooks.md "Usage caps"): another process
 * sees a count up to USAGE_FLUSH_MS (plus its USAGE_CACHE_MS) late, and a
 * process that dies loses the counts of its last USAGE_FLUSH_MS: a cap can be
 * passed by what was consumed in that window.
 *
 * Caps: an app's daily and monthly caps (operator-set, else USAGE_CAP_DAILY /
 * USAGE_CAP_MONTHLY; 0 = none) answer `usage-capped` with `scope` `Account`;
 * the project's monthly cap (USAGE_PROJECT_CAP) with `scope` `Product`, as the
 * platform answers a project over its monthly post cap ("Usage cap exceeded:
 * Monthly product cap"). The billing cycle starts on USAGE_CAP_RESET_DAY of
 * each month (UTC), the report's `cap_reset_day`.
 */

export * from './usage-periods'

interface AppState {
  day: string
  cycle: string
  dayCount: number
  cycleCount: number
  caps: AppCaps | undefined
  readAt: number
}

interface ProjectState {
  cycle: string
  count: number
  readAt: number
}

export interface UsageDay {
  date: string
  usage: number
}

export interface UsageReport {
  cap_reset_day: number
  daily_client_app_usage: Array<{ client_app_id: string; usage: UsageDay[]; usage_result_count: number }>
  daily_project_usage: { project_id: string; usage: UsageDay[] }
  project_cap?: number
  project_id: string
  project_usage: number
}

export class UsageMeter {
  private readonly apps = new Map<string, AppState>()
  private project: ProjectState | undefined
  /** Counts not written yet, per counter key (a failed flush keeps them for the next). */
  private pending = new Map<string, number>()
  private flushTimer: NodeJS.Timeout | undefined
  private flushing: Promise<void> | undefined

  constructor(
    private readonly store: Store,
    private readonly config: Pick<Config, 'usageCapDaily' | 'usageCapMonthly' | 'usageProjectCap' | 'usageCapResetDay'>,
    private readonly cacheMs = USAGE_CACHE_MS,
    private readonly clock: () => number = Date.now,
    private readonly flushMs = USAGE_FLUSH_MS
  ) {}

  /** A counter's value as read from the store plus what this process has not written yet. */
  private withPending(key: string, stored: string | undefined): number {
    return Number(stored ?? 0) + (this.pending.get(key) ?? 0)
  }

  /** Whether any cap can apply (an operator may set an app's at any time, so only the defaults tell). */
  private effectiveCaps(caps: AppCaps | undefined): { daily: number; monthly: number } {
    return {
      daily: caps?.daily ?? this.config.usageCapDaily,
      monthly: caps?.monthly ?? this.config.usageCapMonthly
    }
  }

  /**
   * Reads (or reuses, when read less than the cache time ago and still in the
   * same day and cycle) the counters and caps of `appIds` and the project:
   * one pipelined round trip when anything must be read.
   */
  private async load(appIds: string[], fresh: boolean): Promise<void> {
    const now = this.clock()
    const day = dayKey(now)
    const cycle = dayKey(cycleStart(now, this.config.usageCapResetDay))
    const stale = (s: { readAt: number } | undefined, sameWindow: boolean): boolean => fresh || !s || !sameWindow || now - s.readAt >= this.cacheMs
    const need = appIds.filter((id) => {
      const s = this.apps.get(id)
      return stale(s, s?.day === day && s.cycle === cycle)
    })
    const needProject = stale(this.project, this.project?.cycle === cycle)
    if (need.length === 0 && !needProject) return
    const keys = need.flatMap((id) => [UsageKeys.appDay(id, day), UsageKeys.appCycle(id, cycle), UsageKeys.caps(id)])
    if (needProject) keys.push(UsageKeys.projectCycle(cycle))
    const values = await this.store.mget(keys)
    need.forEach((id, i) => {
      const caps = values[i * 3 + 2]
      this.apps.set(id, {
        day,
        cycle,
        dayCount: this.withPending(keys[i * 3] as string, values[i * 3]),
        cycleCount: this.withPending(keys[i * 3 + 1] as string, values[i * 3 + 1]),
        caps: caps === undefined ? undefined : (JSON.parse(caps) as AppCaps),
        readAt: now
      })
    })
    if (needProject) this.project = { cycle, count: this.withPending(keys[keys.length - 1] as string, values[keys.length - 1]), readAt: now }
    // Bounded: apps not seen for a while are forgotten.
    if (this.apps.size > 10_000) for (const [id, s] of this.apps) if (now - s.readAt > 60_000) this.apps.delete(id)
  }

  /** The room each app (and the project) has left for a batch. `fresh`: read the store whatever the cache holds. */
  async allowance(appIds: string[], options: { fresh?: boolean } = {}): Promise<UsageAllowance> {
    const unique = [...new Set(appIds)]
    await this.load(unique, options.fresh === true)
    const now = this.clock()
    const rooms = new Map<string, { left: number; limit?: CapHit }>()
    const dayEnd = dayStart(now) + DAY_MS
    const cycleEnd = nextCycleStart(now, this.config.usageCapResetDay)
    for (const id of unique) {
      const s = this.apps.get(id)
      if (!s) continue
      const caps = this.effectiveCaps(s.caps)
      let left = Number.POSITIVE_INFINITY
      let limit: CapHit | undefined
      if (caps.monthly > 0) {
        left = caps.monthly - s.cycleCount
        limit = { period: 'Monthly', scope: 'Account', cap: caps.monthly, resetsAt: cycleEnd }
      }
      if (caps.daily > 0 && caps.daily - s.dayCount < left) {
        left = caps.daily - s.dayCount
        limit = { period: 'Daily', scope: 'Account', cap: caps.daily, resetsAt: dayEnd }
      }
      rooms.set(id, limit ? { left, limit } : { left })
    }
    const projectCap = this.config.usageProjectCap
    const project =
      projectCap > 0
        ? { left: projectCap - (this.project?.count ?? 0), limit: { period: 'Monthly' as const, scope: 'Product' as const, cap: projectCap, resetsAt: cycleEnd } }
        : { left: Number.POSITIVE_INFINITY }
    return new UsageAllowance(rooms, project)
  }

  /** The cap `appId` is over now (read fresh), if any. */
  async capped(appId: string): Promise<CapHit | undefined> {
    return (await this.allowance([appId], { fresh: true })).blocked(appId)
  }

  /** Throws the usage-capped Problem when `appId` may consume no more posts now. */
  async assertNotCapped(appId: string): Promise<void> {
    const hit = await this.capped(appId)
    if (hit) throw usageCappedProblem(hit)
  }

  /**
   * Counts posts consumed (per app), in the UTC day and cycle of now: in
   * this process's view at once, in the store at the next flush.
   */
  count(counts: Map<string, number>): void {
    const now = this.clock()
    const day = dayKey(now)
    const cycle = dayKey(cycleStart(now, this.config.usageCapResetDay))
    let total = 0
    const add = (key: string, by: number): void => {
      this.pending.set(key, (this.pending.get(key) ?? 0) + by)
    }
    for (const [appId, n] of counts) {
      if (n <= 0) continue
      total += n
      add(UsageKeys.appDay(appId, day), n)
      add(UsageKeys.appCycle(appId, cycle), n)
      const s = this.apps.get(appId)
      if (s) {
        s.dayCount += n
        s.cycleCount += n
      }
    }
    if (total === 0) return
    add(UsageKeys.projectDay(day), total)
    add(UsageKeys.projectCycle(cycle), total)
    if (this.project) this.project.count += total
    this.flushTimer ??= setTimeout(() => void this.flush().catch(() => undefined), this.flushMs).unref()
  }

  /** Writes the pending counts (one trusted batch); on failure they stay pending and the next flush is scheduled. */
  flush(): Promise<void> {
    this.flushing ??= (async () => {
      clearTimeout(this.flushTimer)
      this.flushTimer = undefined
      const taken = this.pending
      this.pending = new Map()
      if (taken.size === 0) return
      const ops: StoreOp[] = []
      for (const [key, by] of taken) ops.push({ op: 'incr', key, by }, { op: 'pexpire', key, ttlMs: USAGE_KEEP_MS })
      try {
        await this.store.batch(ops, { trusted: true })
      } catch (err) {
        for (const [key, by] of taken) this.pending.set(key, (this.pending.get(key) ?? 0) + by)
        this.flushTimer ??= setTimeout(() => void this.flush().catch(() => undefined), this.flushMs).unref()
        throw err
      }
    })().finally(() => (this.flushing = undefined))
    return this.flushing
  }

  // ------------------------------------------------------------ caps

  async getCaps(appId: string): Promise<AppCaps | undefined> {
    return this.store.getJson<AppCaps>(UsageKeys.caps(appId))
  }

  /** Sets (a number, 0 = none) or clears (null: back to the default) an app's caps. */
  async setCaps(appId: string, change: { daily?: number | null; monthly?: number | null }): Promise<AppCaps> {
    const current = (await this.getCaps(appId)) ?? {}
    const next: AppCaps = { ...current }
    for (const k of ['daily', 'monthly'] as const) {
      const v = change[k]
      if (v === null) delete next[k]
      else if (v !== undefined) next[k] = v
    }
    next.updated_at = new Date(this.clock()).toISOString()
    await this.store.setJson(UsageKeys.caps(appId), next)
    this.apps.delete(appId)
    return next
  }

  /** An app's caps in force (own or default) and its current counts, for the operator. */
  async appUsage(appId: string): Promise<{ caps: { daily: number; monthly: number }; own: AppCaps; today: number; cycle: number; cycle_start: string; capped?: { period: UsagePeriod; scope: UsageScope } }> {
    await this.load([appId], true)
    const s = this.apps.get(appId) as AppState
    const hit = (await this.allowance([appId])).blocked(appId)
    const own: AppCaps = { ...(s.caps ?? {}) }
    return {
      caps: this.effectiveCaps(s.caps),
      own,
      today: s.dayCount,
      cycle: s.cycleCount,
      cycle_start: new Date(cycleStart(this.clock(), this.config.usageCapResetDay)).toISOString(),
      ...(hit ? { capped: { period: hit.period, scope: hit.scope } } : {})
    }
  }

  // ------------------------------------------------------------ report

  async projectId(): Promise<string> {
    const existing = await this.store.get(UsageKeys.projectId())
    if (existing !== undefined) return existing
    await this.store.setIfAbsent(UsageKeys.projectId(), newNumericId())
    return (await this.store.get(UsageKeys.projectId())) as string
  }

  /**
   * `GET /2/usage/tweets`: the last `days` UTC days (today included) per app
   * of the project and for the project, the cycle's total and the caps. Days
   * without usage are left out, as the platform leaves them out.
   */
  async report(days: number): Promise<UsageReport> {
    const now = this.clock()
    const today = dayStart(now)
    const dates = Array.from({ length: days }, (_, i) => today - (days - 1 - i) * DAY_MS)
    const dayKeys = dates.map(dayKey)
    const cycle = dayKey(cycleStart(now, this.config.usageCapResetDay))
    // Every app of the project, in creation order (auth:apps is a sorted set by creation time).
    const [members, projectId] = await Promise.all([this.store.zrange(AuthKeys.apps(), 0, -1), this.projectId()])
    const appIds = members.map((m) => m.member)
    const keys = [
      UsageKeys.projectCycle(cycle),
      ...dayKeys.map((d) => UsageKeys.projectDay(d)),
      ...appIds.flatMap((id) => dayKeys.map((d) => UsageKeys.appDay(id, d)))
    ]
    const values = (await this.store.mget(keys)).map((v, i) => this.withPending(keys[i] as string, v))
    const series = (offset: number): UsageDay[] =>
      dates.flatMap((ms, i) => {
        const usage = values[offset + i] ?? 0
        return usage > 0 ? [{ date: new Date(ms).toISOString(), usage }] : []
      })
    const apps = appIds
      .map((id, a) => ({ client_app_id: id, usage: series(1 + days + a * days) }))
      .filter((a) => a.usage.length > 0)
      .map((a) => ({ ...a, usage_result_count: a.usage.length }))
    const report: UsageReport = {
      cap_reset_day: this.config.usageCapResetDay,
      daily_client_app_usage: apps,
      daily_project_usage: { project_id: projectId, usage: series(1) },
      project_id: projectId,
      project_usage: values[0] ?? 0
    }
    if (this.config.usageProjectCap > 0) report.project_cap = this.config.usageProjectCap
    return report
  }
}

const meters = new WeakMap<ServiceContext, UsageMeter>()

/** The meter of a service context (one per process in embedded mode, shared by its services). */
export function usageMeter(ctx: ServiceContext): UsageMeter {
  let meter = meters.get(ctx)
  if (!meter) {
    meter = new UsageMeter(ctx.store, ctx.config)
    meters.set(ctx, meter)
  }
  return meter
}
