import { Problems, type ProblemError } from './errors'

/**
 * The vocabulary of usage caps (services/common/usage.ts): periods and
 * scopes, the `usage:` keys, UTC days and billing cycles, the usage-capped
 * Problem, and the allowance one batch of deliveries draws from.
 */

export type UsagePeriod = 'Daily' | 'Monthly'
export type UsageScope = 'Account' | 'Product'

/** An app's own caps; absent: the configured default; 0: no cap. */
export interface AppCaps {
  daily?: number
  monthly?: number
  updated_at?: string
}

export interface CapHit {
  period: UsagePeriod
  scope: UsageScope
  cap: number
  /** When the period that is capped ends (ms). */
  resetsAt: number
}

export const DAY_MS = 86_400_000
/** How long counters are kept: past the 90 days of the report and a whole cycle. */
export const USAGE_KEEP_MS = 100 * DAY_MS
/** How long a read of counters and caps serves the event paths before it is read again. */
export const USAGE_CACHE_MS = 1000
/** How long counts of posts consumed stay in a process before they are written (usage.ts). */
export const USAGE_FLUSH_MS = 1000
export const USAGE_DAYS_MAX = 90

export const UsageKeys = {
  appDay: (appId: string, day: string) => `usage:app-day:${appId}:${day}`,
  appCycle: (appId: string, cycle: string) => `usage:app-cycle:${appId}:${cycle}`,
  projectDay: (day: string) => `usage:project-day:${day}`,
  projectCycle: (cycle: string) => `usage:project-cycle:${cycle}`,
  caps: (appId: string) => `usage:caps:${appId}`,
  projectId: () => 'usage:project-id'
}

/** `yyyymmdd` of a UTC day. */
export function dayKey(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10).replace(/-/g, '')
}

/** Midnight UTC of the day of `ms`. */
export function dayStart(ms: number): number {
  return Math.floor(ms / DAY_MS) * DAY_MS
}

/** The start (UTC midnight, ms) of the billing cycle holding `ms`: the last `resetDay` of a month at or before it. */
export function cycleStart(ms: number, resetDay: number): number {
  const d = new Date(ms)
  const y = d.getUTCFullYear()
  const m = d.getUTCMonth()
  return d.getUTCDate() >= resetDay ? Date.UTC(y, m, resetDay) : Date.UTC(y, m - 1, resetDay)
}

/** The start of the next billing cycle after the one holding `ms`. */
export function nextCycleStart(ms: number, resetDay: number): number {
  const start = new Date(cycleStart(ms, resetDay))
  return Date.UTC(start.getUTCFullYear(), start.getUTCMonth() + 1, resetDay)
}

/** The usage-capped Problem (429), worded as the platform words it. */
export function usageCappedProblem(hit: Pick<CapHit, 'period' | 'scope'>): ProblemError {
  return Problems.usageCapped(`Usage cap exceeded: ${hit.period} ${hit.scope === 'Product' ? 'product' : 'account'} cap`, hit.period, hit.scope)
}

/** What one batch may still consume: each app's room and the project's, taken one post at a time. */
export class UsageAllowance {
  private readonly projectLeft: { n: number }
  constructor(
    private readonly rooms: Map<string, { left: number; limit?: CapHit }>,
    project: { left: number; limit?: CapHit }
  ) {
    this.projectLeft = { n: project.left }
    this.projectLimit = project.limit
  }

  private readonly projectLimit: CapHit | undefined

  /** Takes one post for `appId`: false (nothing taken) when a cap stands in the way. */
  take(appId: string): boolean {
    const room = this.rooms.get(appId)
    if (this.projectLeft.n <= 0) return false
    if (room && room.left <= 0) return false
    if (room) room.left--
    this.projectLeft.n--
    return true
  }

  /** The cap that stops `appId` now, if one does. */
  blocked(appId: string): CapHit | undefined {
    const room = this.rooms.get(appId)
    if (this.projectLeft.n <= 0) return this.projectLimit
    if (room && room.left <= 0) return room.limit
    return undefined
  }
}
