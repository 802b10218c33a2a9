import type { Store, StoreOp } from '../../common/store/types'
import type { AttemptEntry, DeliveryRecord } from '../delivery-log'
import type { HttpOutcome } from '../http-client'
import { KNOWN_KEYS } from './schedule'
import { WebhookKeys } from '../keys'

/**
 * What the console shows of delivery attempts:
 *  - each attempt of a delivery (time, status code, the start of the
 *    answer's body, timing), in the delivery's record (`attempt_log`),
 *    which the outcome rewrites anyway: no write of its own;
 *  - the app's tail of recent attempts (the live tail reads it, so it works
 *    whichever webhooks process made the attempt), kept in process and
 *    written once a second with the counters below (one ZADD per app);
 *  - per-minute counters per app (attempts, successes, a latency histogram)
 *    for the charts: deliveries per minute, success rate, p50/p99. Counted
 *    in process and written once a second, every counter once per flush,
 *    so no counter takes a write per attempt; this process's reads include
 *    what it has not written yet, another's see it a second later.
 */

export type { AttemptEntry } from '../delivery-log'

export interface TailEntry {
  delivery_id: string
  webhook_id: string
  at: number
  n: number
  outcome: 'delivered' | 'failed'
  status?: number
  error?: string
  ms: number
  event_type?: string
  /** A replay job's send (the console marks it). */
  replay_job?: string
}

export interface StatsPoint {
  /** Start of the bucket (ms). */
  t: number
  count: number
  per_minute: number
  success_pct: number | null
  p50_ms: number | null
  p99_ms: number | null
}

/** Upper bounds (ms) of the latency histogram; the last bucket is everything slower. */
export const LATENCY_BOUNDS_MS = [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, Number.POSITIVE_INFINITY]
/** Bytes of a receiver's answer kept with the attempt. */
export const RESPONSE_BODY_KEEP = 2048
const RESPONSE_HEADERS_KEEP = 20

/** The answer's headers as kept with an attempt: bounded in number and length. */
function keptHeaders(headers: Record<string, string | string[] | undefined>): Record<string, string> {
  const out: Record<string, string> = {}
  for (const [name, value] of Object.entries(headers).slice(0, RESPONSE_HEADERS_KEEP)) {
    if (value !== undefined) out[name] = (Array.isArray(value) ? value.join(', ') : value).slice(0, 200)
  }
  return out
}
const TAIL_KEEP_MS = 10 * 60_000
/** Attempts a record keeps (a delivery re-sent over and over keeps its latest). */
const ATTEMPTS_KEPT = 50
/** How long chart counters stay in the process before they are written. */
const STATS_FLUSH_MS = 1000
const STATS_KEEP_MS = 25 * 3_600_000
const MINUTE = 60_000

/** The event's type, read from the delivered body (activity envelope, or Account Activity's `<type>_events`). */
export function eventTypeOf(body: string): string | undefined {
  try {
    const parsed = JSON.parse(body) as Record<string, unknown>
    const data = parsed.data as Record<string, unknown> | undefined
    if (data && typeof data.event_type === 'string') return data.event_type
    return Object.keys(parsed).find((k) => k.endsWith('_events'))
  } catch {
    return undefined
  }
}

/** A record's type as the console shows it: kept with the record since intake, else read from its body. */
export function recordEventType(record: Pick<DeliveryRecord, 'body' | 'event_type'>): string | undefined {
  return record.event_type ?? eventTypeOf(record.body)
}

function bucketOf(ms: number): number {
  return LATENCY_BOUNDS_MS.findIndex((b) => ms <= b)
}

/** The q-quantile of a histogram, interpolated inside its bucket. */
export function quantile(counts: number[], q: number): number | null {
  const total = counts.reduce((a, b) => a + b, 0)
  if (total === 0) return null
  const rank = q * total
  let seen = 0
  for (let i = 0; i < counts.length; i++) {
    const c = counts[i] ?? 0
    if (c > 0 && seen + c >= rank) {
      const low = i === 0 ? 0 : (LATENCY_BOUNDS_MS[i - 1] ?? 0)
      const high = Number.isFinite(LATENCY_BOUNDS_MS[i]) ? (LATENCY_BOUNDS_MS[i] as number) : low * 2
      return Math.round(low + ((rank - seen) / c) * (high - low))
    }
    seen += c
  }
  return null
}

export class AttemptLog {
  private writes = 0
  /** Chart counters not written yet, per key. */
  private pendingStats = new Map<string, number>()
  /** Tail entries not written yet, per app. */
  private pendingTail = new Map<string, Array<{ score: number; member: string }>>()
  private flushTimer: NodeJS.Timeout | undefined

  constructor(
    private readonly store: Store,
    private readonly retentionMs: number
  ) {}

  /**
   * Notes one attempt: its entry goes into `record.attempt_log` (the caller
   * writes the record), its tail entry and chart counts into this process's
   * buffers, written within STATS_FLUSH_MS.
   */
  note(record: DeliveryRecord, out: HttpOutcome, now = Date.now()): void {
    const attempt = this.count(record, out, now)
    record.attempt_log = [...(record.attempt_log ?? []), attempt].slice(-ATTEMPTS_KEPT)
  }

  /**
   * Notes a replay job's send of a delivery in the tail and the charts and
   * returns its entry (marked with the job) for the replay runner to keep:
   * the delivery's record is not the replay's to rewrite.
   */
  noteReplay(record: DeliveryRecord, out: HttpOutcome, jobId: string, now = Date.now()): AttemptEntry {
    return this.count(record, out, now, jobId)
  }

  private count(record: DeliveryRecord, out: HttpOutcome, now: number, replayJob?: string): AttemptEntry {
    // Numbered across re-sends: a re-send starts `attempts` over, not the delivery's history. A replay's
    // send is listed after the attempts made so far without taking the number of the next one.
    const n = (record.attempts_before_resend ?? 0) + record.attempts + (replayJob === undefined ? 1 : 0)
    const ok = out.kind === 'response' && out.status >= 200 && out.status < 300
    const attempt: AttemptEntry = { n, at: new Date(now).toISOString(), ms: Math.round(out.ms) }
    const tail: TailEntry = { delivery_id: record.delivery_id, webhook_id: record.webhook_id, at: now, n, outcome: ok ? 'delivered' : 'failed', ms: attempt.ms }
    if (out.kind === 'response') {
      attempt.status = out.status
      tail.status = out.status
      attempt.response_body = out.body.slice(0, RESPONSE_BODY_KEEP)
      const type = out.headers['content-type']
      if (typeof type === 'string') attempt.response_content_type = type
      attempt.response_headers = keptHeaders(out.headers)
    } else {
      attempt.error = out.message
      tail.error = out.message
    }
    if (replayJob !== undefined) {
      attempt.replay_job = replayJob
      tail.replay_job = replayJob
    }
    const eventType = recordEventType(record)
    if (eventType !== undefined) tail.event_type = eventType
    const minute = Math.floor(now / MINUTE) * MINUTE
    for (const f of ['n', `b${bucketOf(attempt.ms)}`, ...(ok ? ['ok'] : [])]) {
      const key = WebhookKeys.stats(record.app_id, minute, f)
      this.pendingStats.set(key, (this.pendingStats.get(key) ?? 0) + 1)
    }
    const tails = this.pendingTail.get(record.app_id) ?? []
    tails.push({ score: now, member: JSON.stringify(tail) })
    this.pendingTail.set(record.app_id, tails)
    this.flushTimer ??= setTimeout(() => void this.flush().catch(() => undefined), STATS_FLUSH_MS).unref()
    return attempt
  }

  /** Writes the chart counters counted so far (kept for the next flush when the store refuses). */
  async flush(): Promise<void> {
    clearTimeout(this.flushTimer)
    this.flushTimer = undefined
    const taken = this.pendingStats
    const tails = this.pendingTail
    this.pendingStats = new Map()
    this.pendingTail = new Map()
    if (taken.size === 0 && tails.size === 0) return
    const ops: StoreOp[] = []
    for (const [key, by] of taken) ops.push({ op: 'incr', key, by }, { op: 'pexpire', key, ttlMs: STATS_KEEP_MS })
    for (const [appId, entries] of tails) for (const e of entries) ops.push({ op: 'zadd', key: WebhookKeys.tail(appId), score: e.score, member: e.member })
    try {
      await this.store.batch(ops, KNOWN_KEYS)
    } catch (err) {
      for (const [appId, entries] of tails) this.pendingTail.set(appId, [...entries, ...(this.pendingTail.get(appId) ?? [])])
      for (const [key, by] of taken) this.pendingStats.set(key, (this.pendingStats.get(key) ?? 0) + by)
      this.flushTimer ??= setTimeout(() => void this.flush().catch(() => undefined), STATS_FLUSH_MS).unref()
      throw err
    }
  }

  /** Records one attempt on its own, its record included (the delivery engine batches ops() with its own writes instead). */
  async record(record: DeliveryRecord, out: HttpOutcome, now = Date.now()): Promise<void> {
    this.note(record, out, now)
    await this.store.batch([{ op: 'set', key: WebhookKeys.delivery(record.delivery_id), value: JSON.stringify(record), ttlMs: this.retentionMs }], KNOWN_KEYS)
    await this.flush()
    await this.trimTail(record.app_id, now)
  }

  /** The tail keeps minutes, not history: trimmed every hundredth write by whoever writes. */
  async trimTail(appId: string, now = Date.now()): Promise<void> {
    if (++this.writes % 100 !== 1) return
    const old = await this.store.zrangeByScore(WebhookKeys.tail(appId), 0, now - TAIL_KEEP_MS, { limit: 5000 })
    if (old.length > 0) await this.store.zrem(WebhookKeys.tail(appId), ...old.map((m) => m.member))
  }

  /** The delivery's attempts, oldest first (records written before they kept them: the old per-delivery set). */
  async attempts(deliveryId: string): Promise<AttemptEntry[]> {
    const record = await this.store.getJson<DeliveryRecord>(WebhookKeys.delivery(deliveryId))
    if (record?.attempt_log) return record.attempt_log
    return (await this.store.zrange(WebhookKeys.attempts(deliveryId), 0, -1)).map((m) => JSON.parse(m.member) as AttemptEntry)
  }

  /** The app's attempts with time > `after` (ms), oldest first. */
  async tailSince(appId: string, after: number, limit = 200): Promise<TailEntry[]> {
    const members = await this.store.zrangeByScore(WebhookKeys.tail(appId), after + 1, Number.MAX_SAFE_INTEGER, { limit })
    return this.withPendingTail(appId, members).filter((e) => e.at > after).slice(0, limit)
  }

  /** The newest `limit` attempts of the app, oldest first. */
  async tailLatest(appId: string, limit: number): Promise<TailEntry[]> {
    const members = await this.store.zrangeByScore(WebhookKeys.tail(appId), 0, Number.MAX_SAFE_INTEGER, { limit, reverse: true })
    return this.withPendingTail(appId, members).slice(-limit)
  }

  /** Stored tail entries with this process's not yet written ones, oldest first. */
  private withPendingTail(appId: string, stored: Array<{ member: string; score: number }>): TailEntry[] {
    const all = [...stored, ...(this.pendingTail.get(appId) ?? [])].sort((a, b) => a.score - b.score)
    const seen = new Set<string>()
    return all.filter((m) => (seen.has(m.member) ? false : (seen.add(m.member), true))).map((m) => JSON.parse(m.member) as TailEntry)
  }

  /**
   * Chart points over the last `spanMs` in buckets of `bucketMs` (whole
   * minutes), from the per-minute counters: one MGET for the whole range.
   */
  async stats(appId: string, spanMs: number, bucketMs: number, now = Date.now()): Promise<{ points: StatsPoint[]; total: number }> {
    const lastMinute = Math.floor(now / MINUTE) * MINUTE
    const minutes: number[] = []
    for (let m = lastMinute - spanMs + MINUTE; m <= lastMinute; m += MINUTE) minutes.push(m)
    const fields = ['n', 'ok', ...LATENCY_BOUNDS_MS.map((_, i) => `b${i}`)]
    const keys = minutes.flatMap((m) => fields.map((f) => WebhookKeys.stats(appId, m, f)))
    const values = (await this.store.mget(keys)).map((v, i) => String(Number(v ?? 0) + (this.pendingStats.get(keys[i] as string) ?? 0)))
    const perBucket = Math.max(1, Math.round(bucketMs / MINUTE))
    const points: StatsPoint[] = []
    let total = 0
    for (let start = 0; start < minutes.length; start += perBucket) {
      let count = 0
      let ok = 0
      const hist = LATENCY_BOUNDS_MS.map(() => 0)
      for (let i = start; i < Math.min(start + perBucket, minutes.length); i++) {
        const at = (k: number): number => Number(values[i * fields.length + k] ?? 0)
        count += at(0)
        ok += at(1)
        for (let b = 0; b < hist.length; b++) hist[b] = (hist[b] ?? 0) + at(2 + b)
      }
      total += count
      points.push({
        t: minutes[start] as number,
        count,
        per_minute: Math.round((count / perBucket) * 10) / 10,
        success_pct: count === 0 ? null : Math.round((ok / count) * 1000) / 10,
        p50_ms: quantile(hist, 0.5),
        p99_ms: quantile(hist, 0.99)
      })
    }
    return { points, total }
  }
}
