import type { Logger } from 'pino'
import { safeEqual } from '../common/auth/oauth1'
import { AuthKeys, type App } from '../common/auth/records'
import { newSecret, newUuid } from '../common/ids'
import type { Worker } from '../common/service'
import type { Store } from '../common/store/types'
import type { WebhookClient } from './http-client'
import { WebhookKeys } from './keys'
import type { WebhookMetrics } from './metrics'
import type { Webhook, WebhookRegistry, WebhookUpdate } from './registry'
import { PollingWorker } from './polling'
import { crcResponseToken } from './signature'

/**
 * The challenge-response check (docs/webhooks.md): `GET <url>?crc_token=`,
 * answered by `{"response_token":"sha256=<base64 HMAC-SHA256(consumer secret, token)>"}`.
 *
 * Run on create (a failure rejects the create), on PUT /2/webhooks/{id}, and
 * periodically. Outcomes:
 *  - pass: valid again (also lifts a 410 disable);
 *  - invalid at once: a 2xx with a wrong or missing token, a 3xx, a TLS
 *    failure, or a URL that now resolves to a non-public address;
 *  - transient (other 4xx/5xx, timeout, connection closed): invalid only once
 *    28 hours have passed without a passing check.
 */

export type CrcTrigger = 'create' | 'put' | 'periodic'

export type CrcResult = { result: 'pass' } | { result: 'invalid'; reason: string } | { result: 'transient'; reason: string }

export const CRC_GRACE_MS = 28 * 3_600_000

/** A result with what the console's CRC history shows: the answer's status code and the time taken. */
export type CrcCheck = CrcResult & { status?: number; ms: number }

/** What records each check (CrcHistory). */
export interface CrcRecorder {
  record(webhookId: string, trigger: CrcTrigger | 'console', check: CrcCheck): Promise<void>
}

/** Sends one challenge to `url` and classifies the answer. */
export async function challenge(client: WebhookClient, url: string, consumerSecret: string): Promise<CrcCheck> {
  const started = Date.now()
  const r = await classifyChallenge(client, url, consumerSecret)
  return { ...r.result, ...(r.status !== undefined ? { status: r.status } : {}), ms: Math.round(r.ms ?? Date.now() - started) }
}

async function classifyChallenge(client: WebhookClient, url: string, consumerSecret: string): Promise<{ result: CrcResult; status?: number; ms?: number }> {
  const token = newSecret(24)
  const target = new URL(url)
  target.searchParams.set('crc_token', token)
  target.hash = ''
  const out = await client.send('GET', target.href, { headers: { accept: 'application/json' }, maxBodyBytes: 16 * 1024 })
  if (out.kind === 'error') {
    const ms = out.ms
    switch (out.failure) {
      case 'tls': return { result: { result: 'invalid', reason: `TLS failure (${out.message})` }, ms }
      case 'unsafe': return { result: { result: 'invalid', reason: out.message }, ms }
      case 'timeout': return { result: { result: 'transient', reason: `The webhook did not answer within ${client.timeoutMs} ms` }, ms }
      default: return { result: { result: 'transient', reason: `Could not reach the webhook (${out.message})` }, ms }
    }
  }
  const answered = { status: out.status, ms: out.ms }
  if (out.status >= 300 && out.status < 400) return { result: { result: 'invalid', reason: `The webhook answered ${out.status}; redirects are not followed` }, ...answered }
  if (out.status < 200 || out.status >= 300) return { result: { result: 'transient', reason: `The webhook answered ${out.status}` }, ...answered }
  let presented: unknown
  try {
    presented = (JSON.parse(out.body) as { response_token?: unknown }).response_token
  } catch {
    return { result: { result: 'invalid', reason: 'Invalid response_token (the answer is not JSON)' }, ...answered }
  }
  if (typeof presented !== 'string' || !safeEqual(presented, crcResponseToken(consumerSecret, token))) {
    return { result: { result: 'invalid', reason: 'Invalid response_token' }, ...answered }
  }
  return { result: { result: 'pass' }, ...answered }
}

/** How a CRC result changes the webhook, applying the 28-hour rule to transient failures. */
export function crcUpdate(w: Webhook, r: CrcResult, now: number): WebhookUpdate {
  const at = new Date(now).toISOString()
  if (r.result === 'pass') return { valid: true, set: { last_crc_at: at, last_crc_ok_at: at }, clear: ['invalid_reason', 'disabled_at'] }
  const reason = `CrcValidationFailed: ${r.reason}`
  if (r.result === 'invalid') return { valid: false, set: { last_crc_at: at, invalid_reason: reason } }
  const lastOk = Date.parse(w.last_crc_ok_at ?? w.created_at)
  if (now - lastOk > CRC_GRACE_MS) return { valid: false, set: { last_crc_at: at, invalid_reason: `${reason} (no passing check for 28 hours)` } }
  return { set: { last_crc_at: at } }
}

export interface CrcDeps {
  store: Store
  registry: WebhookRegistry
  client: WebhookClient
  metrics: WebhookMetrics
  log: Logger
  intervalMs: number
  /** Where each check of a registered webhook is recorded (the console's CRC history, ./crc-history, which imports this module's types). */
  history?: CrcRecorder
  /**
   * Called when a check passes on a webhook that was invalid (or disabled by
   * a 410): the delivery engine makes its waiting deliveries due now.
   */
  onRevalidated?: (webhookId: string) => Promise<unknown>
}

export class CrcChecker {
  private readonly nodeId = newUuid()

  constructor(private readonly deps: CrcDeps) {}

  async consumerSecret(appId: string): Promise<string | undefined> {
    return (await this.deps.store.getJson<App>(AuthKeys.app(appId)))?.consumer_secret
  }

  /** Challenges a URL before it is registered (nothing is stored). */
  async challengeNew(url: string, consumerSecret: string): Promise<CrcCheck> {
    const r = await challenge(this.deps.client, url, consumerSecret)
    this.deps.metrics.crc.inc({ trigger: 'create', result: r.result })
    return r
  }

  /** Challenges a registered webhook and records the outcome on it. */
  async check(w: Webhook, trigger: CrcTrigger | 'console'): Promise<{ result: CrcCheck; webhook: Webhook | undefined }> {
    const secret = await this.consumerSecret(w.app_id)
    const result: CrcCheck = secret === undefined ? { result: 'invalid', reason: 'The application no longer exists', ms: 0 } : await challenge(this.deps.client, w.url, secret)
    this.deps.metrics.crc.inc({ trigger, result: result.result })
    await this.deps.history?.record(w.id, trigger, result).catch((err: unknown) => this.deps.log.warn({ err, webhook_id: w.id }, 'could not record the CRC check in its history'))
    const webhook = await this.deps.registry.update(w.id, crcUpdate(w, result, Date.now()))
    if (webhook && webhook.valid !== w.valid) {
      this.deps.log.info({ webhook_id: w.id, valid: webhook.valid, trigger, reason: webhook.invalid_reason }, 'webhook validity changed')
    }
    if (webhook && result.result === 'pass' && (!w.valid || w.disabled_at !== undefined)) await this.revalidated(w.id)
    return { result, webhook }
  }

  /** Best effort: a failure here leaves the deliveries on their schedule, it does not fail the check. */
  private async revalidated(webhookId: string): Promise<void> {
    try {
      await this.deps.onRevalidated?.(webhookId)
    } catch (err) {
      this.deps.log.warn({ err, webhook_id: webhookId }, 'could not bring the deliveries of a revalidated webhook forward')
    }
  }

  /** One pass of the periodic check: every webhook whose turn has come, once across all processes. */
  async runDue(now = Date.now()): Promise<number> {
    const { store, registry, intervalMs } = this.deps
    const due = await store.zrangeByScore(WebhookKeys.crcSchedule(), 0, now, { limit: 100 })
    let checked = 0
    await Promise.all(
      due.map(async ({ member: id }) => {
        if (!(await store.setIfAbsent(WebhookKeys.crcLock(id), this.nodeId, this.deps.client.timeoutMs + 5000))) return
        try {
          await store.zadd(WebhookKeys.crcSchedule(), now + intervalMs, id)
          const w = await registry.get(id)
          if (!w) {
            await store.zrem(WebhookKeys.crcSchedule(), id)
            return
          }
          await this.check(w, 'periodic')
          checked++
        } finally {
          await store.del(WebhookKeys.crcLock(id))
        }
      })
    )
    return checked
  }

  /** The periodic CRC as a worker: polls the schedule a few times per interval. */
  startSchedule(): Worker {
    const period = Math.min(30_000, Math.max(50, Math.floor(this.deps.intervalMs / 4)))
    return new PollingWorker('webhooks-crc', period, () => this.runDue(), this.deps.log)
  }
}
