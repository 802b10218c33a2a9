import type { Logger } from 'pino'
import { AuthKeys, type App } from '../common/auth/records'
import { TOPICS, type Bus } from '../common/bus/types'
import { newUuid } from '../common/ids'
import type { Worker } from '../common/service'
import type { Store, StoreOp } from '../common/store/types'
import { type AttemptLog, RESPONSE_BODY_KEEP } from './attempt-log'
import type { DeliveryLog, DeliveryRecord, DeliverySource, DeliveryStatus } from './delivery-log'
import type { HttpOutcome, WebhookClient } from './http-client'
import { parseRetryMember, retryMember, WebhookKeys } from './keys'
import type { DeliveryOutcome, WebhookMetrics } from './metrics'
import { PollingWorker } from './polling'
import type { Webhook, WebhookRegistry } from './registry'
import { SIGNATURE_HEADER, webhookSignature } from './signature'

/**
 * Signed delivery with durable retries.
 *
 * A delivery is first made durable: its record, its delivery-log entry and
 * an entry in the retry schedule (`webhooks:retries`, due time as score) are
 * written in one atomic batch. Only then does the consumer return, so the
 * bus offset is committed once the delivery's future is recorded. The
 * attempt itself runs in the webhook's lane (at most WEBHOOK_CONCURRENCY in
 * flight per webhook per process).
 *
 * While an attempt runs, its schedule entry is pushed one lease ahead, so a
 * process that dies mid-attempt leaves a due entry behind for another (or
 * the restarted) process. A claim key keeps two processes from attempting
 * the same delivery at once, and the record's status and due time are
 * re-read after claiming, so a delivery that another process finished or
 * rescheduled is left alone.
 *
 * After a failure the next attempt is due after the next step of
 * WEBHOOK_RETRY_SCHEDULE (with jitter), or after Retry-After on 429/503.
 * 410 Gone disables the webhook. When the schedule is exhausted the delivery
 * goes to `webhook.dead-letter` and stays in the log as `failed`, where an
 * operator can re-send it.
 *
 * An invalid webhook's turns are skipped (each counts as a failed attempt);
 * when a CRC passes again its pending deliveries are made due at once
 * (`pullForward`) rather than left waiting for their next step.
 *
 * A delivery for a webhook that no longer exists (deleted, while activity
 * subscriptions still name it) is a clean drop: nothing is stored, retried
 * or dead-lettered, and it is counted as `webhook_deleted`. Deliveries
 * already pending when the webhook was deleted end `cancelled`.
 */

export interface NewDelivery {
  delivery_id: string
  webhook_id: string
  app_id: string
  source: DeliverySource
  event_uuid?: string
  for_user_id?: string
  body: string
  /** Event time (ms); clamped to now. */
  event_time: number
}

export type AcceptResult = 'accepted' | 'duplicate' | 'dropped'

export interface EngineOptions {
  /** Delay before attempt n+1 (index n); its length is the number of attempts. */
  schedule: number[]
  concurrency: number
  /** Retention of records (the log). */
  retentionMs: number
}

export interface EngineDeps {
  store: Store
  bus: Bus
  registry: WebhookRegistry
  log: DeliveryLog
  client: WebhookClient
  metrics: WebhookMetrics
  logger: Logger
  /** The console's record of attempts (attempt-log.ts). */
  attempts?: AttemptLog
}

/** A queued attempt; `fresh` is the record this process just stored (its first attempt needs no claim). */
interface Queued {
  deliveryId: string
  fresh?: { record: DeliveryRecord; leaseUntil: number }
}

interface Lane {
  active: number
  queue: Queued[]
  /** A submit was refused for lack of room: the scheduler must look again when a slot frees. */
  overflowed: boolean
}

/** Queued deliveries per lane beyond those in flight. */
const QUEUE_FACTOR = 32
/** Largest Retry-After honoured. */
const MAX_RETRY_AFTER_MS = 24 * 3_600_000
const SCHEDULER_BATCH = 1000
/** Consecutive refusals (full lanes) after which a scheduler pass stops early. */
const SCHEDULER_GIVE_UP = 128

export function withJitter(delayMs: number, random: () => number = Math.random): number {
  if (delayMs <= 0) return 0
  return Math.round(delayMs * (0.9 + random() * 0.2))
}

/** Retry-After as delta-seconds or an HTTP date; undefined when absent or unreadable. */
export function parseRetryAfter(value: string | string[] | undefined, now = Date.now()): number | undefined {
  const raw = Array.isArray(value) ? value[0] : value
  if (raw === undefined) return undefined
  const text = raw.trim()
  let ms: number
  if (/^\d+$/.test(text)) ms = Number(text) * 1000
  else {
    // An HTTP date names its weekday and month ("Wed, 21 Oct 2025 07:28:00 GMT"); bare numbers are not dates.
    if (!/[a-z]{3}/i.test(text)) return undefined
    const at = Date.parse(text)
    if (Number.isNaN(at)) return undefined
    ms = at - now
  }
  return Math.min(Math.max(ms, 0), MAX_RETRY_AFTER_MS)
}

interface Failure {
  status?: number
  error: string
  retryAfterMs?: number
}

export class DeliveryEngine {
  private readonly nodeId = newUuid()
  private readonly lanes = new Map<string, Lane>()
  /** Delivery ids queued or in flight in this process. */
  private readonly local = new Set<string>()
  private readonly inflight = new Set<Promise<void>>()
  private scheduler: PollingWorker | undefined
  private closing = false
  readonly leaseMs: number

  constructor(
    private readonly deps: EngineDeps,
    private readonly options: EngineOptions
  ) {
    this.leaseMs = deps.client.timeoutMs + 30_000
  }

  get attemptsAllowed(): number {
    return this.options.schedule.length
  }

  private count(outcome: DeliveryOutcome): void {
    this.deps.metrics.deliveries.inc({ outcome })
  }

  // ------------------------------------------------------------ intake

  /** Makes a delivery durable (record, log, schedule) and starts it when its lane has room. */
  async accept(d: NewDelivery): Promise<AcceptResult> {
    const { store, registry } = this.deps
    const webhook = await registry.get(d.webhook_id)
    if (!webhook) {
      this.count('webhook_deleted')
      this.deps.logger.debug({ delivery_id: d.delivery_id, webhook_id: d.webhook_id }, 'delivery for a deleted (or unknown) webhook dropped')
      return 'dropped'
    }
    if (webhook.app_id !== d.app_id) {
      this.count('dropped')
      this.deps.logger.debug({ delivery_id: d.delivery_id, webhook_id: d.webhook_id }, "delivery naming another app's webhook dropped")
      return 'dropped'
    }
    const member = retryMember(d.webhook_id, d.delivery_id)
    const existing = await this.deps.log.get(d.delivery_id)
    if (existing) {
      // A redelivered message: the first copy's record stands. Repair a missing schedule entry.
      if (existing.status === 'pending' && (await store.zscore(WebhookKeys.retries(), member)) === undefined) {
        await store.zadd(WebhookKeys.retries(), Date.now(), member)
      }
      return 'duplicate'
    }
    const now = Date.now()
    const record: DeliveryRecord = {
      delivery_id: d.delivery_id,
      webhook_id: d.webhook_id,
      app_id: d.app_id,
      source: d.source,
      body: d.body,
      event_time: Math.min(Number.isFinite(d.event_time) ? d.event_time : now, now),
      created_at: new Date(now).toISOString(),
      status: 'pending',
      attempts: 0,
      next_attempt_at: now
    }
    if (d.event_uuid !== undefined) record.event_uuid = d.event_uuid
    if (d.for_user_id !== undefined) record.for_user_id = d.for_user_id
    const startHere = this.hasRoom(d.webhook_id)
    await store.batch([
      { op: 'set', key: WebhookKeys.delivery(d.delivery_id), value: JSON.stringify(record), ttlMs: this.options.retentionMs },
      { op: 'zadd', key: WebhookKeys.log(d.webhook_id), score: record.event_time, member: d.delivery_id },
      { op: 'zadd', key: WebhookKeys.retries(), score: startHere ? now + this.leaseMs : now, member }
    ])
    if (startHere && !this.submit(d.webhook_id, d.delivery_id, { record, leaseUntil: now + this.leaseMs })) {
      await store.zadd(WebhookKeys.retries(), Date.now(), member)
    }
    return 'accepted'
  }

  private hasRoom(webhookId: string): boolean {
    if (this.closing) return false
    const lane = this.lanes.get(webhookId)
    return !lane || lane.active + lane.queue.length < this.laneCapacity
  }

  /** Attempts a lane holds (in flight and queued) before new ones are left to the scheduler. */
  private get laneCapacity(): number {
    return this.options.concurrency * QUEUE_FACTOR
  }

  /** Queues an attempt in the webhook's lane; false when the lane is full (the scheduler retries later). */
  private submit(webhookId: string, deliveryId: string, fresh?: Queued['fresh']): boolean {
    if (this.local.has(deliveryId)) return true
    let lane = this.lanes.get(webhookId)
    if (!lane) {
      lane = { active: 0, queue: [], overflowed: false }
      this.lanes.set(webhookId, lane)
    }
    if (this.closing || lane.active + lane.queue.length >= this.laneCapacity) {
      lane.overflowed = true
      return false
    }
    this.local.add(deliveryId)
    lane.queue.push(fresh ? { deliveryId, fresh } : { deliveryId })
    this.pump(webhookId, lane)
    return true
  }

  private pump(webhookId: string, lane: Lane): void {
    while (!this.closing && lane.active < this.options.concurrency && lane.queue.length > 0) {
      const { deliveryId, fresh } = lane.queue.shift() as Queued
      lane.active++
      const run: Promise<void> = (fresh ? this.firstAttempt(webhookId, fresh) : this.attempt(webhookId, deliveryId))
        .catch((err: unknown) => this.deps.logger.warn({ err, delivery_id: deliveryId, webhook_id: webhookId }, 'delivery attempt failed; it stays scheduled'))
        .finally(() => {
          lane.active--
          this.local.delete(deliveryId)
          this.inflight.delete(run)
          // Refill in chunks: once half the queue has drained, the scheduler brings in what overflowed.
          if (lane.overflowed && lane.queue.length <= this.laneCapacity / 2) {
            lane.overflowed = false
            this.scheduler?.poke()
          }
          if (lane.active === 0 && lane.queue.length === 0 && this.lanes.get(webhookId) === lane) this.lanes.delete(webhookId)
          else this.pump(webhookId, lane)
        })
      this.inflight.add(run)
    }
  }

  // ------------------------------------------------------------ attempts

  /**
   * A scheduled attempt: claim it across processes, re-read the record,
   * push the schedule entry a lease ahead, then attempt.
   */
  private async attempt(webhookId: string, deliveryId: string): Promise<void> {
    const { store } = this.deps
    if (!(await store.setIfAbsent(WebhookKeys.claim(deliveryId), this.nodeId, this.leaseMs))) return
    try {
      const record = await this.deps.log.get(deliveryId)
      const member = retryMember(webhookId, deliveryId)
      if (!record || record.status !== 'pending') {
        await store.zrem(WebhookKeys.retries(), member)
        return
      }
      // Rescheduled by another process since this attempt was queued: keep its entry at the new due time.
      if (record.next_attempt_at > Date.now() + 1000) {
        await store.zadd(WebhookKeys.retries(), record.next_attempt_at, member)
        return
      }
      await this.run(record, () => store.zadd(WebhookKeys.retries(), Date.now() + this.leaseMs, member))
    } finally {
      await store.del(WebhookKeys.claim(deliveryId))
    }
  }

  /**
   * The first attempt of a delivery this process has just stored: its
   * schedule entry is already a lease ahead, so no other process touches it
   * before the lease runs out, and no claim or re-read is needed. Queued
   * past its lease, it takes the scheduled path like any other.
   */
  private async firstAttempt(webhookId: string, fresh: NonNullable<Queued['fresh']>): Promise<void> {
    if (Date.now() + this.deps.client.timeoutMs + 5000 > fresh.leaseUntil) return this.attempt(webhookId, fresh.record.delivery_id)
    await this.run(fresh.record, async () => undefined)
  }

  /** Checks the webhook and its app, then POSTs and records the outcome. `lease` runs just before the POST. */
  private async run(record: DeliveryRecord, lease: () => Promise<unknown>): Promise<void> {
    const webhook = await this.deps.registry.get(record.webhook_id)
    const app = webhook ? await this.deps.store.getJson<App>(AuthKeys.app(record.app_id)) : undefined
    if (!webhook || !app || webhook.app_id !== record.app_id) {
      await this.finish(record, 'cancelled', { last_error: webhook ? 'the application was deleted' : 'the webhook was deleted' })
      this.count(webhook ? 'cancelled' : 'webhook_deleted')
      return
    }
    if (webhook.disabled_at) {
      await this.deadLetter(record, 'gone', { error: 'the webhook is disabled (it answered 410 Gone)' })
      return
    }
    if (!webhook.valid) {
      await this.fail(record, { error: `the webhook is invalid: ${webhook.invalid_reason ?? 'CRC failing'}` }, 'skipped_invalid')
      return
    }
    await lease()
    const out = await this.post(webhook, app, record.body)
    await this.deps.attempts?.record(record, out).catch((err: unknown) => this.deps.logger.warn({ err, delivery_id: record.delivery_id }, 'could not record the attempt for the console'))
    await this.settle(record, webhook, out)
  }

  /** One signed POST of `body` to the webhook (also used by replays). */
  async post(webhook: Webhook, app: App, body: string): Promise<HttpOutcome> {
    const out = await this.deps.client.send('POST', webhook.url, {
      headers: { 'content-type': 'application/json', [SIGNATURE_HEADER]: webhookSignature(app.consumer_secret, body) },
      body,
      lane: webhook.id,
      // The start of the answer is kept with the attempt (the console shows it).
      maxBodyBytes: RESPONSE_BODY_KEEP
    })
    const ok = out.kind === 'response' && out.status >= 200 && out.status < 300
    this.deps.metrics.latency.observe({ result: ok ? 'success' : 'failure' }, out.ms / 1000)
    return out
  }

  /** 410 Gone (to a delivery or a replay): nothing more is sent until a CRC passes. */
  async disableGone(webhookId: string, what: string): Promise<void> {
    await this.deps.registry.update(webhookId, {
      valid: false,
      set: { disabled_at: new Date().toISOString(), invalid_reason: `Gone: ${what} was answered 410; a passing CRC (PUT /2/webhooks/{id}) re-enables it` }
    })
    this.deps.logger.warn({ webhook_id: webhookId }, `webhook answered 410 Gone to ${what}: disabled`)
    this.count('gone')
  }

  private async settle(record: DeliveryRecord, webhook: Webhook, out: HttpOutcome): Promise<void> {
    const now = new Date().toISOString()
    record.first_attempt_at ??= now
    if (out.kind === 'response' && out.status >= 200 && out.status < 300) {
      record.attempts++
      await this.finish(record, 'delivered', { delivered_at: now, last_attempt_at: now, last_status: out.status, last_error: undefined })
      this.count('delivered')
      return
    }
    if (out.kind === 'response' && out.status === 410) {
      record.attempts++
      record.last_attempt_at = now
      record.last_status = 410
      await this.disableGone(webhook.id, 'a delivery')
      await this.deadLetter(record, 'gone', { status: 410, error: 'the webhook answered 410 Gone' })
      return
    }
    if (out.kind === 'response') {
      const failure: Failure = { status: out.status, error: `the webhook answered ${out.status}` }
      if (out.status === 429 || out.status === 503) {
        const retryAfter = parseRetryAfter(out.headers['retry-after'])
        if (retryAfter !== undefined) failure.retryAfterMs = retryAfter
      }
      await this.fail(record, failure, 'retry_scheduled')
      return
    }
    await this.fail(record, { error: out.failure === 'timeout' ? `no answer within ${this.deps.client.timeoutMs} ms` : out.message }, 'retry_scheduled')
  }

  /** Counts a failed attempt: schedules the next one, or dead-letters when the schedule is exhausted. */
  private async fail(record: DeliveryRecord, failure: Failure, outcome: DeliveryOutcome): Promise<void> {
    const now = Date.now()
    record.attempts++
    record.last_attempt_at = new Date(now).toISOString()
    record.last_error = failure.error
    if (failure.status !== undefined) record.last_status = failure.status
    if (record.attempts >= this.options.schedule.length) {
      await this.deadLetter(record, 'exhausted', failure)
      return
    }
    const delay = failure.retryAfterMs ?? withJitter(this.options.schedule[record.attempts] ?? 0)
    record.next_attempt_at = now + delay
    await this.deps.store.batch([
      this.saveOp(record),
      { op: 'zadd', key: WebhookKeys.retries(), score: record.next_attempt_at, member: retryMember(record.webhook_id, record.delivery_id) }
    ])
    this.count(outcome)
  }

  private async deadLetter(record: DeliveryRecord, reason: 'exhausted' | 'gone', failure: Failure): Promise<void> {
    const now = new Date().toISOString()
    const event: Record<string, unknown> = {
      delivery_id: record.delivery_id,
      webhook_id: record.webhook_id,
      app_id: record.app_id,
      source: record.source,
      reason,
      attempts: record.attempts,
      last_error: failure.error,
      created_at: record.created_at,
      dead_at: now,
      body: record.body
    }
    if (record.event_uuid !== undefined) event.event_uuid = record.event_uuid
    if (record.for_user_id !== undefined) event.for_user_id = record.for_user_id
    if (failure.status !== undefined) event.last_status = failure.status
    // Published before the record turns `failed`: a crash in between re-publishes rather than loses it.
    await this.deps.bus.publish(TOPICS.webhookDeadLetter, record.webhook_id, event)
    await this.finish(record, 'failed', { failed_at: now, failure_reason: reason, last_error: failure.error })
    this.count('dead_lettered')
    this.deps.logger.warn({ delivery_id: record.delivery_id, webhook_id: record.webhook_id, attempts: record.attempts, reason }, 'delivery dead-lettered')
  }

  private saveOp(record: DeliveryRecord): StoreOp {
    return { op: 'set', key: WebhookKeys.delivery(record.delivery_id), value: JSON.stringify(record), ttlMs: this.options.retentionMs }
  }

  private async finish(record: DeliveryRecord, status: DeliveryStatus, fields: Partial<DeliveryRecord>): Promise<void> {
    Object.assign(record, fields, { status })
    for (const k of Object.keys(fields) as Array<keyof DeliveryRecord>) if (record[k] === undefined) delete record[k]
    await this.deps.store.batch([this.saveOp(record), { op: 'zrem', key: WebhookKeys.retries(), members: [retryMember(record.webhook_id, record.delivery_id)] }])
  }

  // ------------------------------------------------------------ schedule

  /** One scheduler pass: every due delivery not already queued here goes to its lane. */
  async runDue(now = Date.now()): Promise<number> {
    if (this.closing) return 0
    const due = await this.deps.store.zrangeByScore(WebhookKeys.retries(), 0, now, { limit: SCHEDULER_BATCH })
    let started = 0
    let refusedInARow = 0
    for (const { member } of due) {
      const parsed = parseRetryMember(member)
      if (!parsed || this.local.has(parsed.deliveryId)) continue
      if (this.submit(parsed.webhookId, parsed.deliveryId)) {
        started++
        refusedInARow = 0
      } else if (++refusedInARow >= SCHEDULER_GIVE_UP) {
        // Lanes are full: the next pass comes when they have drained.
        break
      }
    }
    return started
  }

  /** The retry scheduler: polls often enough for the shortest step of the schedule. */
  startScheduler(): Worker {
    const steps = this.options.schedule.filter((d) => d > 0)
    const shortest = steps.length > 0 ? Math.min(...steps) : 1000
    const period = Math.min(1000, Math.max(25, Math.floor(shortest / 4)))
    this.scheduler = new PollingWorker('webhooks-retries', period, () => this.runDue(), this.deps.logger)
    return this.scheduler
  }

  /**
   * Makes the webhook's pending deliveries due now; returns how many moved.
   * Called when a CRC passes on a webhook that was invalid: its skipped
   * deliveries would otherwise wait for their next step (up to 10 h).
   * A delivery another process is attempting right now is left to it.
   */
  async pullForward(webhookId: string): Promise<number> {
    const { store } = this.deps
    const now = Date.now()
    let moved = 0
    for (const listed of await this.deps.log.list(webhookId, { status: 'pending' })) {
      if (listed.next_attempt_at <= now) continue
      const claim = WebhookKeys.claim(listed.delivery_id)
      if (!(await store.setIfAbsent(claim, this.nodeId, this.leaseMs))) continue
      try {
        const record = await this.deps.log.get(listed.delivery_id)
        if (!record || record.status !== 'pending' || record.next_attempt_at <= now) continue
        record.next_attempt_at = now
        await store.batch([this.saveOp(record), { op: 'zadd', key: WebhookKeys.retries(), score: now, member: retryMember(webhookId, record.delivery_id) }])
        moved++
      } finally {
        await store.del(claim)
      }
    }
    if (moved > 0) this.scheduler?.poke()
    return moved
  }

  /** Puts logged deliveries back on the schedule (operator re-send; `deliveryId`: just that one); returns how many. */
  async resend(webhookId: string, filter: { since: number; status?: DeliveryStatus; deliveryId?: string }): Promise<number> {
    const records = filter.deliveryId !== undefined
      ? [await this.deps.log.get(filter.deliveryId)].filter((r): r is DeliveryRecord => r !== undefined && r.webhook_id === webhookId)
      : await this.deps.log.list(webhookId, { since: filter.since, status: filter.status ?? 'failed' })
    const now = Date.now()
    let count = 0
    for (const r of records) {
      if (r.status === 'pending') continue
      const again: DeliveryRecord = { ...r, status: 'pending', attempts: 0, next_attempt_at: now, resent_at: new Date(now).toISOString() }
      delete again.failed_at
      delete again.failure_reason
      delete again.delivered_at
      await this.deps.store.batch([this.saveOp(again), { op: 'zadd', key: WebhookKeys.retries(), score: now, member: retryMember(webhookId, r.delivery_id) }])
      count++
    }
    if (count > 0) this.scheduler?.poke()
    return count
  }

  /** Stops taking work; queued attempts are handed back to the schedule as due; waits for those in flight. */
  async close(): Promise<void> {
    this.closing = true
    await this.scheduler?.close()
    const handBack: StoreOp[] = []
    const now = Date.now()
    for (const [webhookId, lane] of this.lanes) {
      for (const { deliveryId } of lane.queue.splice(0)) {
        this.local.delete(deliveryId)
        handBack.push({ op: 'zadd', key: WebhookKeys.retries(), score: now, member: retryMember(webhookId, deliveryId) })
      }
    }
    if (handBack.length > 0) await this.deps.store.batch(handBack).catch((err: unknown) => this.deps.logger.warn({ err }, 'could not hand queued deliveries back'))
    await Promise.allSettled([...this.inflight])
  }
}
