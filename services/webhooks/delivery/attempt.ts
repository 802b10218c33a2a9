import type { Logger } from 'pino'
import type { App } from '../../common/auth/records'
import { TOPICS, type Bus } from '../../common/bus/types'
import { WriteCoalescer } from '../../common/store/coalescer'
import type { Store, StoreOp } from '../../common/store/types'
import { type AttemptLog, RESPONSE_BODY_KEEP } from './attempt-log'
import { logEntryOp, type DeliveryRecord, type DeliveryStatus } from '../delivery-log'
import type { FirstAttempt } from './first-attempt'
import { endAttemptSpan, startAttemptSpan } from './attempt-span'
import type { HttpOutcome, WebhookClient } from '../http-client'
import type { DeliveryOutcome, WebhookMetrics } from '../metrics'
import type { Webhook, WebhookRegistry } from '../registry'
import { saveOp } from './rescheduling'
import { dueAt, KNOWN_KEYS, unscheduled } from './schedule'
import { deadLetterEvent, type Failure, parseRetryAfter, withJitter } from './retry-policy'
import { SIGNATURE_HEADER, standardHeaders, webhookSignature } from '../signature'
import { activeSecrets } from '../standard-webhooks'

/**
 * One attempt of a delivery and what its outcome does to the record
 * (DeliveryEngine decides when an attempt runs and who may run it; this
 * module runs it once it may).
 *
 * The webhook and its app are checked first: a deleted webhook or app
 * cancels the delivery, a disabled one (410 Gone) dead-letters it, an
 * invalid one (CRC failing) counts as a failed attempt without a POST.
 * Then one signed POST, recorded for the console, and its outcome settled:
 * 2xx delivers; 410 disables the webhook and dead-letters; any other answer
 * or no answer schedules the next step of WEBHOOK_RETRY_SCHEDULE (with
 * jitter, or Retry-After on 429/503), or dead-letters to
 * `webhook.dead-letter` when the schedule is exhausted.
 */

export interface AttemptRunnerDeps {
  store: Store
  bus: Bus
  registry: WebhookRegistry
  client: WebhookClient
  metrics: WebhookMetrics
  logger: Logger
  /** The console's record of attempts (attempt-log.ts). */
  attempts?: AttemptLog
}

export interface AttemptRunnerOptions {
  /** Delay before attempt n+1 (index n); its length is the number of attempts. */
  schedule: number[]
  /** Retention of records (the log). */
  retentionMs: number
}

/** How long an outcome's write waits for others' while outcomes keep coming (the receiver has its answer). */
const OUTCOME_LINGER_MS = 5

export class AttemptRunner {
  /**
   * An attempt's outcome (its record, its schedule entry, the console's record of it) is one
   * set of writes; attempts settling in the same turn share one store batch.
   */
  private readonly writer: WriteCoalescer
  /** Records of first attempts made before anything of them was stored (first-attempt.ts). */
  private readonly firsts = new WeakMap<DeliveryRecord, FirstAttempt>()

  constructor(
    private readonly deps: AttemptRunnerDeps,
    private readonly options: AttemptRunnerOptions
  ) {
    // Replicated: a first attempt's outcome may be what makes its delivery durable before the bus commit.
    // Under load the outcomes of a few ms share one batch (one transaction, one ZADD per webhook log)
    // rather than one batch per answer when answers come one per turn.
    this.writer = new WriteCoalescer(deps.store, undefined, { ...KNOWN_KEYS, replicated: true }, OUTCOME_LINGER_MS)
  }

  count(outcome: DeliveryOutcome): void {
    this.deps.metrics.deliveries.inc({ outcome })
  }

  /**
   * Checks the webhook and its app (as read with the record), then POSTs and records the outcome.
   * Resolves once the POST has its answer (or none), with `written`, which resolves once the
   * outcome is stored: a caller that bounds attempts per receiver (the lanes) frees the receiver's
   * slot at the answer, since the store round trips after it are not the receiver's.
   * `first`: a first attempt made before the delivery was stored, whose outcome makes it durable.
   */
  async attempt(record: DeliveryRecord, webhook: Webhook | undefined, app: App | undefined, first?: FirstAttempt): Promise<{ written: Promise<void> }> {
    if (first) this.firsts.set(record, first)
    const done = { written: Promise.resolve() }
    const span = startAttemptSpan(record, first !== undefined)
    if (!webhook || !app || webhook.app_id !== record.app_id) {
      endAttemptSpan(span, webhook ? 'app_deleted' : 'webhook_deleted')
      await this.finish(record, 'cancelled', { last_error: webhook ? 'the application was deleted' : 'the webhook was deleted' })
      this.count(webhook ? 'cancelled' : 'webhook_deleted')
      return done
    }
    if (webhook.disabled_at) {
      endAttemptSpan(span, 'webhook_disabled')
      await this.deadLetter(record, 'gone', { error: 'the webhook is disabled (it answered 410 Gone)' })
      return done
    }
    if (!webhook.valid) {
      endAttemptSpan(span, 'webhook_invalid')
      await this.fail(record, { error: `the webhook is invalid: ${webhook.invalid_reason ?? 'CRC failing'}` }, 'skipped_invalid')
      return done
    }
    const out = await this.post(webhook, app, record.body, record.delivery_id)
    endAttemptSpan(span, out)
    // Before settle() counts the attempt: the entry is numbered after the attempts made so far.
    this.deps.attempts?.note(record, out)
    const written = this.settle(record, webhook, out).then(() =>
      this.deps.attempts?.trimTail(record.app_id).catch((err: unknown) => this.deps.logger.warn({ err, app_id: record.app_id }, 'could not trim the console tail of attempts'))
    )
    return { written }
  }

  /**
   * One signed POST of `body` to the webhook (also used by replays). A webhook
   * that opted into Standard Webhooks also gets its three headers, with
   * `messageId` as `webhook-id` (a delivery's id: the same on every attempt
   * and replay of it) and this attempt's time as `webhook-timestamp`.
   */
  async post(webhook: Webhook, app: App, body: string, messageId: string): Promise<HttpOutcome> {
    const now = Date.now()
    const secrets = activeSecrets(webhook, now)
    const out = await this.deps.client.send('POST', webhook.url, {
      headers: {
        'content-type': 'application/json',
        [SIGNATURE_HEADER]: webhookSignature(app.consumer_secret, body),
        ...(secrets.length > 0 ? standardHeaders(secrets, messageId, now, body) : {})
      },
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
    await this.writeOutcome(record, () => [dueAt({ webhookId: record.webhook_id, deliveryId: record.delivery_id }, record.next_attempt_at)])
    this.count(outcome)
  }

  private async deadLetter(record: DeliveryRecord, reason: 'exhausted' | 'gone', failure: Failure): Promise<void> {
    const now = new Date().toISOString()
    const event = deadLetterEvent(record, reason, failure, now)
    // Published before the record turns `failed`: a crash in between re-publishes rather than loses it.
    await this.deps.bus.publish(TOPICS.webhookDeadLetter, record.webhook_id, event)
    await this.finish(record, 'failed', { failed_at: now, failure_reason: reason, last_error: failure.error })
    this.count('dead_lettered')
    this.deps.logger.warn({ delivery_id: record.delivery_id, webhook_id: record.webhook_id, attempts: record.attempts, reason }, 'delivery dead-lettered')
  }

  private async finish(record: DeliveryRecord, status: DeliveryStatus, fields: Partial<DeliveryRecord>): Promise<void> {
    Object.assign(record, fields, { status })
    for (const k of Object.keys(fields) as Array<keyof DeliveryRecord>) if (record[k] === undefined) delete record[k]
    await this.writeOutcome(record, (stored) => (stored ? [unscheduled({ webhookId: record.webhook_id, deliveryId: record.delivery_id })] : []))
  }

  /**
   * The outcome's writes: the record (with the console's entry of the attempt) and `schedule(stored)`. A first attempt made
   * before its delivery was stored waits for that write if it is under way; never stored, it has
   * no schedule entry to remove and its log entry is written now.
   */
  private async writeOutcome(record: DeliveryRecord, schedule: (stored: boolean) => StoreOp[]): Promise<void> {
    const first = this.firsts.get(record)
    if (first?.storing) await first.storing.catch(() => undefined)
    const stored = !first || first.stored
    if (first) first.writing = true
    const ops = [saveOp(record, this.options.retentionMs), ...schedule(stored), ...(stored ? [] : [logEntryOp(record)])]
    try {
      await this.writer.write(ops)
      first?.settled()
    } catch (err) {
      if (first && !first.stored) first.failed(err)
      throw err
    } finally {
      this.firsts.delete(record)
    }
  }
}
