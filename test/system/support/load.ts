/**
 * A steady stream of `post.create` activity events through the operator
 * ingest route (POST /admin/activity/events, NDJSON batches), the way an
 * upstream producer feeds the system.
 *
 * The generator names every event itself (`event_uuid`), so it can retry a
 * batch that failed or whose answer was lost (to the next activity instance:
 * a client-side load balancer) until one is acknowledged: an event counts as
 * published only then. A retried batch that had in fact been published
 * reaches the receiver twice; the receiver dedupes on `event_uuid`.
 */

import { retryOrRefuse, RetryingSender } from './retrying'

export interface LoadOptions {
  /** Base URLs of the activity instances, read at every attempt (instances come and go). */
  targets: () => string[]
  operatorToken: string
  /** user_id of each event, in turn. */
  users: string[]
  /** Events per second. */
  rate: number
  /** Batches per second (the rate is spread over them). */
  batchesPerSecond?: number
  /** Per-request timeout. */
  requestTimeoutMs?: number
}

export interface LoadStats {
  /** Acknowledged events (event_uuid -> user_id). */
  published: Map<string, string>
  /** Events generated (acknowledged or still being retried). */
  generated: number
  /** Failed requests that were retried. */
  retries: number
  /** Status codes / error names of failed requests, with counts. */
  failures: Record<string, number>
}

let runCounter = 0

export class LoadGenerator {
  readonly published = new Map<string, string>()
  /** event_uuid -> when its batch was sent (ms). */
  readonly sentAt = new Map<string, number>()
  generated = 0
  /** Slowest acknowledged request (ms): how long producers waited during a fault. */
  slowestMs = 0
  /** Set when the system refused a generated batch as invalid (a 4xx): the test fails with it. */
  refused: Error | undefined
  private timer: NodeJS.Timeout | undefined
  private readonly pending = new Set<Promise<void>>()
  private readonly prefix: string
  private seq = 0
  private readonly sender: RetryingSender

  constructor(private readonly options: LoadOptions) {
    this.sender = new RetryingSender(options.targets)
    runCounter++
    // 1, 10 digits of time + 2 of run + 6 of sequence: unique, numeric, 19 digits (bursts of thousands fit).
    this.prefix = `1${String(Date.now() % 1e10).padStart(10, '0')}${String(runCounter % 100).padStart(2, '0')}`
  }

  start(): this {
    const perSecond = this.options.batchesPerSecond ?? 10
    const size = Math.max(1, Math.round(this.options.rate / perSecond))
    this.timer = setInterval(() => this.fire(size), Math.round(1000 / perSecond))
    return this
  }

  /**
   * Sends `count` events in one batch (outside the steady rate); resolves
   * with their event_uuids once acknowledged (or given up on: see stop).
   */
  async burst(count: number): Promise<string[]> {
    const uuids: string[] = []
    await this.fire(count, uuids)
    return uuids
  }

  /**
   * Stops generating and waits until every generated batch is acknowledged
   * (or `timeoutMs` passes: the unacknowledged ones stay out of `published`).
   */
  async stop(timeoutMs = 60_000): Promise<void> {
    if (this.timer) clearInterval(this.timer)
    this.timer = undefined
    this.sender.giveUpAfter(timeoutMs)
    while (this.pending.size > 0) await Promise.allSettled([...this.pending])
  }

  get retries(): number {
    return this.sender.retries
  }

  get failures(): Record<string, number> {
    return this.sender.failures
  }

  get unacknowledged(): number {
    return this.generated - this.published.size
  }

  stats(): LoadStats {
    return { published: this.published, generated: this.generated, retries: this.retries, failures: this.failures }
  }

  private fire(count: number, names: string[] = []): Promise<void> {
    const events: Array<{ uuid: string; user: string; line: string }> = []
    const now = new Date().toISOString()
    for (let i = 0; i < count; i++) {
      this.seq++
      const uuid = `${this.prefix}${String(this.seq).padStart(6, '0')}`
      const user = this.options.users[this.seq % this.options.users.length] as string
      const event = {
        event_uuid: uuid,
        event_type: 'post.create',
        user_id: user,
        created_at: now,
        payload: { id: uuid, text: `fault test post ${this.seq}`, author_id: user, created_at: now }
      }
      events.push({ uuid, user, line: JSON.stringify(event) })
      names.push(uuid)
    }
    this.generated += count
    const sent = Date.now()
    for (const e of events) this.sentAt.set(e.uuid, sent)
    const body = `${events.map((e) => e.line).join('\n')}\n`
    const run = this.send(body).then(
      (ok) => {
        if (ok) for (const e of events) this.published.set(e.uuid, e.user)
      },
      (err: unknown) => {
        this.refused ??= err as Error
      }
    )
    this.pending.add(run)
    void run.finally(() => this.pending.delete(run))
    return run
  }

  /** Posts `body` until an instance acknowledges it; false when it gave up (stop's deadline). */
  private async send(body: string): Promise<boolean> {
    const timeout = this.options.requestTimeoutMs ?? 5000
    const acknowledged = await this.sender.send(async (target) => {
      const sentAt = Date.now()
      const res = await fetch(`${target}/admin/activity/events`, {
        method: 'POST',
        headers: { authorization: `Bearer ${this.options.operatorToken}`, 'content-type': 'application/x-ndjson' },
        body,
        signal: AbortSignal.timeout(timeout)
      })
      await res.arrayBuffer()
      if (res.status !== 200) return retryOrRefuse(res.status, `ingest refused a generated batch with ${res.status}`)
      this.slowestMs = Math.max(this.slowestMs, Date.now() - sentAt)
      return true
    })
    return acknowledged === true
  }
}
