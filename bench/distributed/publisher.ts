/**
 * The upstream producer of bench/distributed: `post.create` events at a
 * fixed rate through the operator ingest route (POST /admin/activity/events,
 * NDJSON batches) on keep-alive connections.
 *
 * Pacing: every tick (BENCH_TICK_MS, 20 ms) it sends, as one batch, every
 * event due by then (rate x elapsed time minus those sent), so a late timer
 * is caught up at the next tick instead of lowering the rate. At most
 * `maxInFlight` batches wait for their answer; beyond that it waits for one,
 * and the published rate shows that the ingest route fell behind. It stops
 * at the end of the period whether or not every event of the period could be
 * sent.
 *
 * event_uuid: `7` + phase (2 digits) + run (6) + sequence (10): numeric and
 * 19 digits as the schema wants, and the observers group arrivals by phase.
 * Each event carries `payload.bench_sent_at`: epoch ms (with a fraction) when
 * its batch was handed to the HTTP client (sent again after a 503's
 * Retry-After: when it was sent again).
 */
import { Pool } from 'undici'

export interface PublishResult {
  /** Epoch ms of the first and the last batch sent. */
  firstSend: number
  lastSend: number
  /** Events of acknowledged (200) batches. */
  published: number
  /** Events of refused or failed batches (not expected anywhere). */
  failed: number
  errors: Record<string, number>
  batches: number
  /** Events not sent because the period ended with the in-flight limit reached. */
  shortfall: number
  /** Batches refused with 503 and Retry-After, and sent again after it (`honourRetryAfter`). */
  refusals: number
}

export interface PublishProgress {
  elapsedMs: number
  sent: number
  published: number
  inFlight: number
}

const now = (): number => performance.timeOrigin + performance.now()
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

export class Publisher {
  private readonly pool: Pool
  private readonly run = String(Math.floor(Math.random() * 1e6)).padStart(6, '0')
  private seq = 0

  constructor(
    baseUrl: string,
    private readonly operatorToken: string,
    private readonly users: string[],
    private readonly options: { tickMs: number; maxInFlight: number; maxBatch: number; honourRetryAfter?: boolean }
  ) {
    this.pool = new Pool(baseUrl, { connections: options.maxInFlight, pipelining: 1, keepAliveTimeout: 30_000 })
  }

  private body(phase: number, n: number, sentAt: number): string {
    const created = new Date(sentAt).toISOString()
    const prefix = `7${String(phase).padStart(2, '0')}${this.run}`
    let out = ''
    for (let i = 0; i < n; i++) {
      this.seq++
      const uuid = `${prefix}${String(this.seq).padStart(10, '0')}`
      const user = this.users[this.seq % this.users.length] as string
      out += `{"event_uuid":"${uuid}","event_type":"post.create","user_id":"${user}","created_at":"${created}","payload":{"id":"${uuid}","text":"bench post ${this.seq}","author_id":"${user}","bench_sent_at":${sentAt}}}\n`
    }
    return out
  }

  /**
   * One batch; resolves with its status (or the error's code). With `honourRetryAfter` a 503 that
   * carries Retry-After is the ingest route's backpressure: the same batch goes again after it.
   */
  private async send(body: string, sentAt: number, refused: () => void): Promise<string> {
    for (;;) {
      const { status, retryAfter } = await this.sendOnce(body)
      if (status !== '503' || retryAfter === undefined || !this.options.honourRetryAfter) return status
      refused()
      await sleep(retryAfter * 1000)
      // Latency counts from the ingest that accepted it, not from a refused attempt: the batch goes again sent now.
      const again = now()
      body = body.replaceAll(`"bench_sent_at":${sentAt}}`, `"bench_sent_at":${again}}`)
      sentAt = again
    }
  }

  private async sendOnce(body: string): Promise<{ status: string; retryAfter?: number }> {
    try {
      const res = await this.pool.request({
        method: 'POST',
        path: '/admin/activity/events',
        headers: { authorization: `Bearer ${this.operatorToken}`, 'content-type': 'application/x-ndjson' },
        body,
        headersTimeout: 30_000,
        bodyTimeout: 30_000
      })
      await res.body.text()
      const header = res.headers['retry-after']
      const retryAfter = typeof header === 'string' && /^\d+$/.test(header) ? Number(header) : undefined
      return { status: String(res.statusCode), retryAfter }
    } catch (err) {
      return { status: (err as { code?: string }).code ?? (err as Error).name }
    }
  }

  /** Publishes `rate` events/s for `seconds` as phase `phase`; `onProgress` is called about once a second. */
  async publish(phase: number, rate: number, seconds: number, onProgress?: (p: PublishProgress) => void): Promise<PublishResult> {
    const { tickMs, maxInFlight, maxBatch } = this.options
    const total = Math.round(rate * seconds)
    const periodMs = seconds * 1000
    const inFlight = new Set<Promise<void>>()
    const result: PublishResult = { firstSend: 0, lastSend: 0, published: 0, failed: 0, errors: {}, batches: 0, shortfall: 0, refusals: 0 }
    let sent = 0
    const start = now()
    let nextProgress = start + 1000
    for (;;) {
      const t = now()
      const elapsed = t - start
      if (elapsed >= periodMs || sent >= total) break
      if (onProgress && t >= nextProgress) {
        nextProgress += 1000
        onProgress({ elapsedMs: elapsed, sent, published: result.published, inFlight: inFlight.size })
      }
      const due = Math.min(total, Math.floor((rate * elapsed) / 1000))
      if (due <= sent) {
        await sleep(tickMs - (elapsed % tickMs))
        continue
      }
      if (inFlight.size >= maxInFlight) {
        await Promise.race(inFlight)
        continue
      }
      const n = Math.min(maxBatch, due - sent)
      const sentAt = now()
      const body = this.body(phase, n, sentAt)
      if (result.batches === 0) result.firstSend = sentAt
      result.lastSend = sentAt
      result.batches++
      sent += n
      const p = this.send(body, sentAt, () => result.refusals++).then((status) => {
        if (status === '200') result.published += n
        else {
          result.failed += n
          result.errors[status] = (result.errors[status] ?? 0) + 1
        }
      })
      inFlight.add(p)
      void p.finally(() => inFlight.delete(p))
    }
    result.shortfall = total - sent
    await Promise.all(inFlight)
    return result
  }

  async close(): Promise<void> {
    await this.pool.close()
  }
}
