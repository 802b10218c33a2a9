import { lagSource } from '../common/admin-bus'
import type { ServiceContext } from '../common/context'
import { Problems } from '../common/errors'

/**
 * Backpressure of the ingest route (docs/operations.md "Overload"): once the
 * events accepted and not yet handled downstream (the consumer lag of
 * INGEST_BACKLOG_GROUPS) pass INGEST_BACKLOG_LIMIT, a batch is refused with
 * 503 and Retry-After before anything of it is published, so the backlog
 * stops growing while the consumers drain it at their own rate. What was
 * accepted is never dropped.
 *
 * The lag is read at most once per READ_EVERY_MS (one offsets request per
 * group, shared by every request meanwhile); Retry-After is the time the
 * consumers took to drain the excess at the rate seen between two readings,
 * bounded to 1..MAX_RETRY_AFTER_S.
 */

const READ_EVERY_MS = 1000
const MAX_RETRY_AFTER_S = 30
const DEFAULT_RETRY_AFTER_S = 2

export class IngestBacklog {
  private lag = 0
  private readAt = 0
  private previous: { lag: number; at: number } | undefined
  private reading: Promise<void> | undefined
  /** Events admitted since the lag was last read: counted against the bound until the next reading sees them. */
  private admittedSinceRead = 0

  constructor(private readonly ctx: ServiceContext) {}

  private async read(): Promise<void> {
    const source = lagSource(this.ctx.bus)
    if (!source) return
    const offsets = await source.groupOffsets(this.ctx.config.ingestBacklogGroups)
    const now = Date.now()
    this.previous = this.readAt > 0 ? { lag: this.lag, at: this.readAt } : undefined
    this.lag = offsets.reduce((sum, o) => sum + Math.max(0, o.lag), 0)
    this.readAt = now
    this.admittedSinceRead = 0
  }

  /**
   * Throws the 503 Problem (its Retry-After in `retryAfterSeconds`) when the backlog is past the
   * bound. Between two readings of the lag what was admitted counts too (`admitted`): a flood would
   * otherwise be let in whole for a second after a reading found room.
   */
  async admit(): Promise<void> {
    const limit = this.ctx.config.ingestBacklogLimit
    if (limit <= 0) return
    if (Date.now() - this.readAt >= READ_EVERY_MS) {
      this.reading ??= this.read()
        .catch((err: unknown) => this.ctx.log.warn({ err }, 'ingest backlog unreadable: admitting'))
        .finally(() => (this.reading = undefined))
      await this.reading
    }
    const backlog = this.lag + this.admittedSinceRead
    if (backlog <= limit) return
    throw new BacklogFullError(backlog, limit, this.retryAfterSeconds(limit))
  }

  /** `events` of an admitted batch are about to be published. */
  admitted(events: number): void {
    this.admittedSinceRead += events
  }

  private retryAfterSeconds(limit: number): number {
    const p = this.previous
    if (!p || p.lag <= this.lag) return DEFAULT_RETRY_AFTER_S
    const perSecond = ((p.lag - this.lag) * 1000) / Math.max(1, this.readAt - p.at)
    return Math.min(MAX_RETRY_AFTER_S, Math.max(1, Math.ceil((this.lag - limit) / perSecond)))
  }
}

/** The ingest route's 503: the interface's Problem, with how long to wait. */
export class BacklogFullError extends Error {
  readonly problem
  constructor(
    readonly lag: number,
    readonly limit: number,
    readonly retryAfterSeconds: number
  ) {
    super('ingest backlog full')
    this.problem = Problems.generic(503, `${lag} events accepted earlier are waiting to be delivered (the bound is ${limit}); none of this batch was published. Retry after ${retryAfterSeconds} s.`)
  }
}
