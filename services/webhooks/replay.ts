import type { Logger } from 'pino'
import { AuthKeys, type App } from '../common/auth/records'
import { newNumericId } from '../common/ids'
import type { Store } from '../common/store/types'
import type { DeliveryEngine } from './delivery'
import type { DeliveryLog, DeliveryRecord } from './delivery-log'
import { WebhookKeys } from './keys'
import type { WebhookMetrics } from './metrics'
import type { Webhook, WebhookRegistry } from './registry'
import type { UsageMeter } from '../common/usage'

/**
 * Replay jobs (POST /2/webhooks/replay, platform-facts §2): re-deliver every
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
  log: DeliveryLog
  engine: DeliveryEngine
  metrics: WebhookMetrics
  logger: Logger
  concurrency: number
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
      { op: 'sadd', key: WebhookKeys.replayJobs(), members: [job.job_id] }
    ])
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
      const records = (await this.deps.log.window(job.webhook_id, job.from_ms, job.to_ms)).filter(wasDeliveredOrAttempted)
      total = records.length
      let next = 0
      const worker = async (): Promise<void> => {
        while (!control.abort && next < records.length) {
          const record = records[next++] as DeliveryRecord
          const result = await this.redeliver(record)
          if (result === 'delivered') delivered++
          else failed++
          if (result === 'stop') control.abort = true
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
  private async redeliver(record: DeliveryRecord): Promise<'delivered' | 'failed' | 'stop'> {
    const target = await this.target(record.webhook_id)
    if (!target) return 'stop'
    const out = await this.deps.engine.runner.post(target.webhook, target.app, record.body)
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
      const out = await this.deps.engine.runner.post(target.webhook, target.app, JSON.stringify(status))
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
