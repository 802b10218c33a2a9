/**
 * Per-webhook lanes of delivery attempts in this process: at most
 * `concurrency` attempts of one webhook in flight, and a bounded queue
 * behind them (QUEUE_FACTOR times that). A webhook's slow or failing
 * receiver fills only its own lane: other webhooks' attempts, and the
 * consumer that accepts new deliveries, never wait for it. What does not fit
 * stays in the durable retry schedule, and the scheduler is poked to bring
 * it in once the lane has drained by half.
 */

/** Queued deliveries per lane beyond those in flight. */
const QUEUE_FACTOR = 32
/** A full lane with no answer for this long is stuck (a slow or hanging receiver), not merely busy. */
const STUCK_MS = 500
/** How often a wait for room looks again. */
const ROOM_POLL_MS = 10

export interface QueuedAttempt<F> {
  deliveryId: string
  /** What the attempt starts from (the record in hand: no re-read). */
  fresh: F
}

interface Lane<F> {
  /** When an attempt of this lane last ended. */
  lastDone: number
  active: number
  queue: Array<QueuedAttempt<F>>
  /** A submit was refused for lack of room: the scheduler must look again when a slot frees. */
  overflowed: boolean
}

export interface LaneHooks<F> {
  run(webhookId: string, attempt: QueuedAttempt<F>): Promise<void>
  /** A run rejected (it stays scheduled). */
  failed(err: unknown, webhookId: string, deliveryId: string): void
  /** A lane that refused work has room again. */
  drained(): void
}

export class Lanes<F> {
  private readonly lanes = new Map<string, Lane<F>>()
  /** Delivery ids queued or in flight in this process. */
  private readonly local = new Set<string>()
  private readonly inflight = new Set<Promise<void>>()
  private closing = false

  constructor(
    private readonly concurrency: number,
    private readonly hooks: LaneHooks<F>
  ) {}

  /** Attempts a lane holds (in flight and queued) before new ones are left to the scheduler. */
  private get capacity(): number {
    return this.concurrency * QUEUE_FACTOR
  }

  has(deliveryId: string): boolean {
    return this.local.has(deliveryId)
  }

  hasRoom(webhookId: string): boolean {
    if (this.closing) return false
    const lane = this.lanes.get(webhookId)
    return !lane || lane.active + lane.queue.length < this.capacity
  }

  /**
   * Attempts of the webhook that would start soon: within about one answer's time (a free slot,
   * or a place among the first `concurrency` queued behind those in flight).
   */
  startingSoon(webhookId: string): number {
    if (this.closing) return 0
    const lane = this.lanes.get(webhookId)
    if (!lane) return 2 * this.concurrency
    return Math.max(0, 2 * this.concurrency - lane.active - lane.queue.length)
  }

  /** How many more attempts the webhook's lane takes now; none marks it, so it calls `drained` once it has room. */
  room(webhookId: string): number {
    if (this.closing) return 0
    const lane = this.lanes.get(webhookId)
    if (!lane) return this.capacity
    const left = this.capacity - lane.active - lane.queue.length
    if (left <= 0) lane.overflowed = true
    return Math.max(0, left)
  }

  /**
   * Resolves once the webhook's lane can take `n` more attempts, or its receiver looks stuck (a full
   * lane with no answer for STUCK_MS), or at `deadline`. A busy lane that keeps answering is worth
   * waiting for: what waits meanwhile stays on the bus (holdForRoom).
   */
  async waitForRoom(webhookId: string, n: number, deadline: number): Promise<void> {
    for (;;) {
      const lane = this.lanes.get(webhookId)
      if (!lane || this.closing) return
      const now = Date.now()
      if (lane.active + lane.queue.length + Math.min(n, this.capacity) <= this.capacity) return
      if (now - lane.lastDone > STUCK_MS || now >= deadline) return
      await new Promise((resolve) => setTimeout(resolve, ROOM_POLL_MS))
    }
  }

  /**
   * Overload: a consumed batch whose webhooks' lanes here are full, and still answering, waits for
   * room (up to `holdMs`). The backlog then stays on the bus, in order and at no cost, and shows as
   * the consumer's lag, which the ingest route's backpressure bounds; taken in, it would be written
   * to the store as pending, claimed and read again later: work the lanes' capacity then lacks. A
   * stuck lane (a slow receiver) is not waited for: its deliveries go to the retry schedule.
   */
  async holdForRoom(webhookIds: string[], holdMs: number): Promise<void> {
    const counts = new Map<string, number>()
    for (const id of webhookIds) counts.set(id, (counts.get(id) ?? 0) + 1)
    const deadline = Date.now() + holdMs
    await Promise.all([...counts].map(([webhookId, n]) => this.waitForRoom(webhookId, n, deadline)))
  }

  /** Queues an attempt in the webhook's lane; false when the lane is full (the scheduler retries later). */
  submit(webhookId: string, deliveryId: string, fresh: F): boolean {
    if (this.local.has(deliveryId)) return true
    let lane = this.lanes.get(webhookId)
    if (!lane) {
      lane = { lastDone: Date.now(), active: 0, queue: [], overflowed: false }
      this.lanes.set(webhookId, lane)
    }
    if (this.closing || lane.active + lane.queue.length >= this.capacity) {
      lane.overflowed = true
      return false
    }
    this.local.add(deliveryId)
    lane.queue.push({ deliveryId, fresh })
    this.pump(webhookId, lane)
    return true
  }

  private pump(webhookId: string, lane: Lane<F>): void {
    while (!this.closing && lane.active < this.concurrency && lane.queue.length > 0) {
      const attempt = lane.queue.shift() as QueuedAttempt<F>
      lane.active++
      const run: Promise<void> = this.hooks
        .run(webhookId, attempt)
        .catch((err: unknown) => this.hooks.failed(err, webhookId, attempt.deliveryId))
        .finally(() => {
          lane.lastDone = Date.now()
          lane.active--
          this.local.delete(attempt.deliveryId)
          this.inflight.delete(run)
          // Refill in chunks: once half the queue has drained, the scheduler brings in what overflowed.
          if (lane.overflowed && lane.queue.length <= this.capacity / 2) {
            lane.overflowed = false
            this.hooks.drained()
          }
          if (lane.active === 0 && lane.queue.length === 0 && this.lanes.get(webhookId) === lane) this.lanes.delete(webhookId)
          else this.pump(webhookId, lane)
        })
      this.inflight.add(run)
    }
  }

  /** Stops taking work; returns the queued (not started) attempts, per webhook. */
  stop(): Array<{ webhookId: string } & QueuedAttempt<F>> {
    this.closing = true
    const out: Array<{ webhookId: string } & QueuedAttempt<F>> = []
    for (const [webhookId, lane] of this.lanes) {
      for (const attempt of lane.queue.splice(0)) {
        this.local.delete(attempt.deliveryId)
        out.push({ webhookId, ...attempt })
      }
    }
    return out
  }

  /** Resolves when the attempts in flight have finished. */
  async idle(): Promise<void> {
    await Promise.allSettled([...this.inflight])
  }
}
