import type { Logger } from 'pino'
import { AuthKeys, type App } from '../common/auth/records'
import { newNumericId } from '../common/ids'
import type { Store } from '../common/store/types'
import type { AttemptLog, DeliveryEngine } from './delivery'
import type { AttemptEntry } from './delivery-log'
import type { HttpOutcome } from './http-client'
import type { DeliveryLog, DeliveryRecord } from './delivery-log'
import { WebhookKeys } from './keys'
import type { WebhookMetrics } from './metrics'
import type { Webhook, WebhookRegistry } from './registry'
import type { UsageMeter } from '../common/usage'

/**
 * Replay jobs (POST /2/webhooks/replay, docs/webhooks.md): re-deliver every
 * event of the window that was delivered or attempted, read from the
 * delivery log, then POST `{"replay_job_status":{...}}` to the webhook.
 *
 * The webhook's state is re-read before every event: a webhook that turns
 * invalid (a failing CRC), is disabled or deleted during the job stops it
 * (Incomplete), and a 410 answer disables the webhook exactly as it does for
 * a delivery. An invalid webhook is not sent the job status either.
 *
 * One job per webhook at a time: a lock key holding the job id, kept alive
 * by a heartbeat while the job runs. A job whose process died loses its lock
 * after LOCK_TTL_MS; any process then closes it as Incomplete (and tells the
 * webhook), so the client knows to ask again.
 */

export const REPLAY_WINDOW_MS = 24 * 3_600_000
const LOCK_TTL_MS = 60_000
const HEARTBEAT_MS = 10_000
const JOB_TTL_MS = 7 * 24 * 3_600_000
/** How often a running job writes its progress (the console shows it). */
const PROGRESS_EVERY_MS = 250
const JOBS_LISTED = 20
/** Each webhook's jobs by creation time (the console lists them); trimmed to JOBS_LISTED. */
const webhookJobsKey = (webhookId: string): string => `webhooks:replay-jobs-of:${webhookId}`
/** A delivery's replayed sends (AttemptEntry JSON by time), kept as long as the jobs. */
const replaySendsKey = (deliveryId: string): string => `webhooks:replay-sends:${deliveryId}`

export type JobState = 'running' | 'Complete' | 'Incomplete'

export interface ReplayJob {
  job_id: string
  webhook_id: string
  app_id: string
  from_date: string
  to_date: string
  from_ms: number
  to_ms: number
  created_at: string
  state: JobState
  total?: number
  delivered?: number
  failed?: number
  finished_at?: string
}

export class ReplayConflictError extends Error {
  constructor(readonly webhookId: string) {
    super(`A replay job is already in progress for webhook ${webhookId}.`)
  }
}

/** `yyyymmddhhmm` (UTC) as ms; undefined when malformed or not a real minute. */
export function parseReplayDate(value: string): number | undefined {
  const m = /^(\d{4})(\d{2})(\d{2})(\d{2})(\d{2})$/.exec(value)
  if (!m) return undefined
  const [y, mo, d, h, mi] = m.slice(1).map(Number) as [number, number, number, number, number]
  const ms = Date.UTC(y, mo - 1, d, h, mi)
  const back = new Date(ms)
  if (back.getUTCFullYear() !== y || back.getUTCMonth() !== mo - 1 || back.getUTCDate() !== d || back.getUTCHours() !== h || back.getUTCMinutes() !== mi) return undefined
  return ms
}

export function formatReplayDate(ms: number): string {
  return new Date(ms).toISOString().replace(/[-T:]/g, '').slice(0, 12)
}

/** Why a window is refused, or undefined when it is acceptable. */
export function checkWindow(fromMs: number, toMs: number, now = Date.now()): string | undefined {
  if (fromMs >= toMs) return 'from_date must be earlier than to_date'
  if (toMs > now) return 'to_date is in the future'
  // Minute granularity: the minute that started 24 h ago is still inside the window.
  if (fromMs < Math.floor((now - REPLAY_WINDOW_MS) / 60_000) * 60_000) return 'from_date is older than 24 hours'
  return undefined
}

export interface ReplayDeps {
  store: Store
  registry: WebhookRegistry
  deliveryLog: DeliveryLog
  engine: DeliveryEngine
  metrics: WebhookMetrics
  logger: Logger
  concurrency: number
  /** Where each send is recorded, marked as the job's (the console's attempts, tail and charts). */
  attempts?: AttemptLog
  /** Usage caps: an app over one cannot start a replay (it re-sends posts). */
  usage?: Pick<UsageMeter, 'assertNotCapped'>
}

export class ReplayRunner {
  private readonly running = new Map<string, { abort: boolean; done: Promise<void> }>()

  constructor(private readonly deps: ReplayDeps) {}

  /** Starts a job for the webhook; throws ReplayConflictError while another one runs. */
  async create(webhook: Webhook, fromMs: number, toMs: number): Promise<ReplayJob> {
    // 429 usage-capped (services/common/usage.ts) before a job exists.
    await this.deps.usage?.assertNotCapped(webhook.app_id)
    const job: ReplayJob = {
      job_id: newNumericId(),
      webhook_id: webhook.id,
      app_id: webhook.app_id,
      from_date: formatReplayDate(fromMs),
      to_date: formatReplayDate(toMs),
      from_ms: fromMs,
      to_ms: toMs,
      created_at: new Date().toISOString(),
      state: 'running'
    }
    const { store } = this.deps
    if (!(await store.setIfAbsent(WebhookKeys.replayLock(webhook.id), job.job_id, LOCK_TTL_MS))) throw new ReplayConflictError(webhook.id)
    await store.batch([
      { op: 'set', key: WebhookKeys.replayJob(job.job_id), value: JSON.stringify(job), ttlMs: JOB_TTL_MS },
      { op: 'sadd', key: WebhookKeys.replayJobs(), members: [job.job_id] },
      { op: 'zadd', key: webhookJobsKey(webhook.id), score: Date.now(), member: job.job_id },
      { op: 'pexpire', key: webhookJobsKey(webhook.id), ttlMs: JOB_TTL_MS }
    ])
    const listed = await store.zcard(webhookJobsKey(webhook.id))
    if (listed > JOBS_LISTED) {
      const old = await store.zrange(webhookJobsKey(webhook.id), 0, listed - JOBS_LISTED - 1)
      if (old.length > 0) await store.zrem(webhookJobsKey(webhook.id), ...old.map((m) => m.member))
    }
    const control = { abort: false, done: Promise.resolve() }
    control.done = this.run(job, control)
      .catch((err: unknown) => this.deps.logger.error({ err, job_id: job.job_id }, 'replay job failed'))
      .finally(() => this.running.delete(job.job_id))
    this.running.set(job.job_id, control)
    return job
  }

  get(jobId: string): Promise<ReplayJob | undefined> {
    return this.deps.store.getJson<ReplayJob>(WebhookKeys.replayJob(jobId))
  }

  /** The webhook's latest jobs, newest first (kept JOB_TTL_MS). */
  async listForWebhook(webhookId: string): Promise<ReplayJob[]> {
    const ids = await this.deps.store.zrange(webhookJobsKey(webhookId), 0, JOBS_LISTED - 1, { reverse: true })
    return (await this.deps.store.mgetJson<ReplayJob>(ids.map((m) => WebhookKeys.replayJob(m.member)))).filter((j): j is ReplayJob => j !== undefined)
  }

  /** A delivery's sends by replay jobs, oldest first (the console lists them with its attempts). */
  async sends(deliveryId: string): Promise<AttemptEntry[]> {
    return (await this.deps.store.zrange(replaySendsKey(deliveryId), 0, -1)).map((m) => JSON.parse(m.member) as AttemptEntry)
  }

  /** Notes a send in the tail and charts and keeps it with the delivery's replayed sends. */
  private async keepSend(record: DeliveryRecord, out: HttpOutcome, jobId: string): Promise<void> {
    const attempts = this.deps.attempts
    if (!attempts) return
    const now = Date.now()
    const entry = attempts.noteReplay(record, out, jobId, now)
    await this.deps.store.batch([
      { op: 'zadd', key: replaySendsKey(record.delivery_id), score: now, member: JSON.stringify(entry) },
      { op: 'pexpire', key: replaySendsKey(record.delivery_id), ttlMs: JOB_TTL_MS }
    ])
  }

  /** The job's counts so far, while it runs. */
  private async progress(job: ReplayJob, counts: { total: number; delivered: number; failed: number }): Promise<void> {
    const current = await this.get(job.job_id)
    if (!current || current.state !== 'running') return
    await this.deps.store.set(WebhookKeys.replayJob(job.job_id), JSON.stringify({ ...current, ...counts }), JOB_TTL_MS)
  }

  private async run(job: ReplayJob, control: { abort: boolean }): Promise<void> {
    const { store } = this.deps
    const heartbeat = setInterval(() => {
      store.pexpire(WebhookKeys.replayLock(job.webhook_id), LOCK_TTL_MS).catch(() => undefined)
    }, HEARTBEAT_MS)
    heartbeat.unref()
    let delivered = 0
    let failed = 0
    let total = 0
    try {
      const records = (await this.deps.deliveryLog.window(job.webhook_id, job.from_ms, job.to_ms)).filter(wasDeliveredOrAttempted)
      total = records.length
      await this.progress(job, { total, delivered, failed })
      let next = 0
      let reported = Date.now()
      const worker = async (): Promise<void> => {
        while (!control.abort && next < records.length) {
          const record = records[next++] as DeliveryRecord
          const result = await this.redeliver(record, job.job_id)
          if (result === 'delivered') delivered++
          else failed++
          if (result === 'stop') control.abort = true
          if (Date.now() - reported >= PROGRESS_EVERY_MS) {
            reported = Date.now()
            await this.progress(job, { total, delivered, failed })
          }
        }
      }
      await Promise.all(Array.from({ length: Math.max(1, Math.min(this.deps.concurrency, records.length)) }, worker))
    } finally {
      clearInterval(heartbeat)
      const complete = !control.abort && failed === 0 && delivered === total
      await this.finish(job, complete ? 'Complete' : 'Incomplete', { total, delivered, failed })
    }
  }

  /** One event again; `stop` when the webhook may be sent nothing more (gone, invalid, disabled, deleted). */
  private async redeliver(record: DeliveryRecord, jobId: string): Promise<'delivered' | 'failed' | 'stop'> {
    const target = await this.target(record.webhook_id)
    if (!target) return 'stop'
    // The event's own delivery id: a replay is the same message sent again (Standard Webhooks' webhook-id).
    const out = await this.deps.engine.runner.post(target.webhook, target.app, record.body, record.delivery_id)
    await this.keepSend(record, out, jobId).catch((err: unknown) => this.deps.logger.warn({ err, job_id: jobId }, 'could not record a replayed send'))
    const ok = out.kind === 'response' && out.status >= 200 && out.status < 300
    this.deps.metrics.deliveries.inc({ outcome: ok ? 'replayed' : 'replay_failed' })
    if (out.kind === 'response' && out.status === 410) {
      await this.deps.engine.runner.disableGone(record.webhook_id, 'a replayed event')
      return 'stop'
    }
    return ok ? 'delivered' : 'failed'
  }

  /** The webhook and its app, when the webhook exists and may be sent events now (valid, not disabled). */
  private async target(webhookId: string): Promise<{ webhook: Webhook; app: App } | undefined> {
    const webhook = await this.deps.registry.get(webhookId)
    if (!webhook || !webhook.valid || webhook.disabled_at !== undefined) return undefined
    const app = await this.deps.store.getJson<App>(AuthKeys.app(webhook.app_id))
    return app ? { webhook, app } : undefined
  }

  /** Records the end of a job, tells the webhook, and frees the webhook for the next job. */
  private async finish(job: ReplayJob, state: 'Complete' | 'Incomplete', counts: { total: number; delivered: number; failed: number }): Promise<void> {
    const { store } = this.deps
    const ended: ReplayJob = { ...job, ...counts, state, finished_at: new Date().toISOString() }
    await store.batch([
      { op: 'set', key: WebhookKeys.replayJob(job.job_id), value: JSON.stringify(ended), ttlMs: JOB_TTL_MS },
      { op: 'srem', key: WebhookKeys.replayJobs(), members: [job.job_id] }
    ])
    // Freed before the webhook hears of it: a client may ask for the next job as soon as it does.
    if ((await store.get(WebhookKeys.replayLock(job.webhook_id))) === job.job_id) await store.del(WebhookKeys.replayLock(job.webhook_id))
    const target = await this.target(job.webhook_id)
    if (target) {
      const status = {
        replay_job_status: {
          webhook_id: job.webhook_id,
          job_state: state,
          job_state_description: state === 'Complete' ? 'Job completed successfully' : 'Job failed to deliver all events, please retry your replay job',
          job_id: job.job_id
        }
      }
      const out = await this.deps.engine.runner.post(target.webhook, target.app, JSON.stringify(status), `replay_job_${job.job_id}`)
      if (out.kind === 'response' && out.status === 410) await this.deps.engine.runner.disableGone(job.webhook_id, 'a replay job status')
      else if (out.kind === 'error' || out.status >= 300) this.deps.logger.warn({ job_id: job.job_id, webhook_id: job.webhook_id }, 'the webhook did not accept the replay job status')
    } else {
      this.deps.logger.info({ job_id: job.job_id, webhook_id: job.webhook_id }, 'replay job status not sent: the webhook is invalid, disabled or deleted')
    }
    this.deps.logger.info({ job_id: job.job_id, webhook_id: job.webhook_id, state, ...counts }, 'replay job ended')
  }

  /** Closes jobs whose process died (their lock expired or moved on) as Incomplete. */
  async sweepOrphans(): Promise<number> {
    const { store } = this.deps
    let closed = 0
    for (const jobId of await store.smembers(WebhookKeys.replayJobs())) {
      if (this.running.has(jobId)) continue
      const job = await this.get(jobId)
      if (!job || job.state !== 'running') {
        await store.srem(WebhookKeys.replayJobs(), jobId)
        continue
      }
      if ((await store.get(WebhookKeys.replayLock(job.webhook_id))) === jobId) continue
      await this.finish(job, 'Incomplete', { total: job.total ?? 0, delivered: job.delivered ?? 0, failed: job.failed ?? 0 })
      closed++
    }
    return closed
  }

  /** Stops running jobs; each ends Incomplete (the webhook is told) so the client can ask again. */
  async close(): Promise<void> {
    const jobs = [...this.running.values()]
    for (const j of jobs) j.abort = true
    await Promise.allSettled(jobs.map((j) => j.done))
  }
}

function wasDeliveredOrAttempted(r: DeliveryRecord): boolean {
  return r.status === 'delivered' || r.first_attempt_at !== undefined
}
