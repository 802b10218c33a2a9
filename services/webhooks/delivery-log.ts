import type { Store, StoreOp } from '../common/store/types'
import { WebhookKeys } from './keys'

/**
 * The delivery log: one record per delivery (kept WEBHOOK_LOG_RETENTION),
 * indexed per webhook by event time. Operators list and re-send from it,
 * and replay jobs read their window from it.
 */

export type DeliveryStatus = 'pending' | 'delivered' | 'failed' | 'cancelled'

export const DELIVERY_STATUSES: readonly DeliveryStatus[] = ['pending', 'delivered', 'failed', 'cancelled']

export type DeliverySource = 'activity' | 'account-activity'

/** One attempt of a delivery as the console shows it (delivery/attempt-log.ts writes it). */
export interface AttemptEntry {
  n: number
  at: string
  ms: number
  status?: number
  error?: string
  response_body?: string
  response_content_type?: string
  /** The answer's headers (bounded: attempt-log.ts). */
  response_headers?: Record<string, string>
  /** A replay job's send of the event, not an attempt of the delivery's own schedule. */
  replay_job?: string
}

export interface DeliveryRecord {
  delivery_id: string
  webhook_id: string
  app_id: string
  source: DeliverySource
  event_uuid?: string
  /** Account Activity: the subscribed user the event belongs to. */
  for_user_id?: string
  /** The exact bytes POSTed (and signed). */
  body: string
  /** The body's type as the console shows it (recordEventType); records from before it was kept lack it. */
  event_type?: string
  /** When the event happened (ms); the log and replay windows are ordered by it. */
  event_time: number
  created_at: string
  status: DeliveryStatus
  /** Attempts made (a POST, or a turn skipped because the webhook was invalid). */
  attempts: number
  /** Due time of the next attempt (ms) while pending. */
  next_attempt_at: number
  /** First real POST: a replay re-delivers what was delivered or attempted. */
  first_attempt_at?: string
  last_attempt_at?: string
  last_status?: number
  last_error?: string
  delivered_at?: string
  failed_at?: string
  /** Why it ended as failed: retries exhausted, or the webhook answered 410. */
  failure_reason?: 'exhausted' | 'gone'
  resent_at?: string
  /** Attempts made before the last re-send (which starts `attempts` and the schedule over): the console numbers on from them. */
  attempts_before_resend?: number
  /**
   * The console's record of each attempt (the last ATTEMPTS_KEPT), kept in the record itself: the
   * record is rewritten at every outcome anyway, so an attempt's entry costs no write of its own.
   */
  attempt_log?: AttemptEntry[]
  /** W3C traceparent of the span that matched it (kept only while tracing is on): every attempt's span is its child. */
  traceparent?: string
}

/** The write that lists a delivery in its webhook's log (by event time). */
export function logEntryOp(record: Pick<DeliveryRecord, 'webhook_id' | 'delivery_id' | 'event_time'>): StoreOp {
  return { op: 'zadd', key: WebhookKeys.log(record.webhook_id), score: record.event_time, member: record.delivery_id }
}

export interface LogQuery {
  status?: DeliveryStatus
  /** Event time bounds (ms), inclusive. */
  since?: number
  until?: number
  limit?: number
  /** Newest first. */
  newestFirst?: boolean
}

const PAGE = 500

export class DeliveryLog {
  constructor(
    private readonly store: Store,
    readonly retentionMs: number
  ) {}

  get(deliveryId: string): Promise<DeliveryRecord | undefined> {
    return this.store.getJson<DeliveryRecord>(WebhookKeys.delivery(deliveryId))
  }

  /** Records in the webhook's log matching `query`, paging through the index. */
  async list(webhookId: string, query: LogQuery = {}): Promise<DeliveryRecord[]> {
    const limit = query.limit ?? Number.POSITIVE_INFINITY
    const out: DeliveryRecord[] = []
    for await (const r of this.scan(webhookId, query.since ?? 0, query.until ?? Number.MAX_SAFE_INTEGER, query.newestFirst ?? false)) {
      if (query.status !== undefined && r.status !== query.status) continue
      out.push(r)
      if (out.length >= limit) break
    }
    return out
  }

  /** Every record with from <= event time < to, oldest first. */
  async window(webhookId: string, fromMs: number, toMs: number): Promise<DeliveryRecord[]> {
    const out: DeliveryRecord[] = []
    for await (const r of this.scan(webhookId, fromMs, toMs - 1, false)) out.push(r)
    return out
  }

  private async *scan(webhookId: string, min: number, max: number, reverse: boolean): AsyncGenerator<DeliveryRecord> {
    const key = WebhookKeys.log(webhookId)
    for (let offset = 0; ; offset += PAGE) {
      const page = await this.store.zrangeByScore(key, min, max, { offset, limit: PAGE, reverse })
      if (page.length === 0) return
      const records = await this.store.mgetJson<DeliveryRecord>(page.map((m) => WebhookKeys.delivery(m.member)))
      for (const r of records) if (r) yield r
      if (page.length < PAGE) return
    }
  }

  /** Drops index entries older than the retention (their records have expired). */
  async trim(webhookId: string, now = Date.now()): Promise<number> {
    const key = WebhookKeys.log(webhookId)
    const old = await this.store.zrangeByScore(key, 0, now - this.retentionMs, { limit: 5000 })
    if (old.length === 0) return 0
    return this.store.zrem(key, ...old.map((m) => m.member))
  }
}
