import type { Logger } from 'pino'
import { FailureCounter, runBatch, shouldDeadLetter, type BatchPlan } from './batch'
import type { BusMessage } from './types'

/**
 * One assigned partition's fetched records, handled apart from fetching.
 *
 * kafkajs fetches a broker's partitions again only once every batch of the
 * previous fetch has been handled, and librdkafka's mock cluster (tests,
 * `make up`) answers a fetch with at most one record batch per partition:
 * handling inside the fetch loop made a slow handler pace fetching, with
 * batches of a few messages however long the backlog grew (bench/PROFILES.md
 * "the mock cluster's one batch per fetch"). Here the fetch loop only appends to the queue (the
 * consumer resolves the offsets, so kafkajs fetches on), and the drain hands
 * the handler everything queued, up to the plan's size, in offset order.
 *
 * At least once: an offset is committed only past the prefix whose handling
 * is durable (at most one commit in flight, at most every commitIntervalMs
 * while draining, at once when stopping). A failed message stops its
 * partition: it is retried after a growing backoff until it succeeds or,
 * failing for a reason other than an outage, is dead-lettered (batch.ts).
 * Records already queued are skipped when kafkajs fetches them again (it
 * restarts from the committed offset after a rebalance). A revoked
 * partition's queue is dropped: its owner reads on from the commit. When the
 * partition comes back to this process while the dropped queue still has a
 * chunk in hand, the new queue waits for that chunk to end.
 */

export interface Entry {
  offset: string
  /** Undefined for a record that is not JSON: skipped, but committed past. */
  message?: BusMessage
}

export interface QueueDeps {
  plan: BatchPlan
  groupId: string
  log: Logger
  failures: FailureCounter
  retryMinMs: number
  retryMaxMs: number
  commitIntervalMs: number
  /** Commits `offset` (the next one to read) for the partition. */
  commit(topic: string, partition: number, offset: string): Promise<void>
  /** Publishes the message to the dead-letter topic; false when even that failed. */
  deadLetter(message: BusMessage, error: Error, attempts: number): Promise<boolean>
  /** The consumer is closing: stop after the chunk in hand. */
  stopping(): boolean
  /** Records `count` messages of the partition gone before this group read them. */
  gone(topic: string, partition: number, count: number): void
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

export class PartitionQueue {
  private entries: Entry[] = []
  /** Highest offset ever queued. */
  private taken = -1n
  private running: Promise<void> | undefined
  private commitWanted: string | undefined
  private committing: Promise<void> | undefined
  private lastCommitAt = 0
  private revoked = false

  /**
   * `after`: the drain of this partition's previous queue in this process, when it was revoked
   * and the partition came back. Its chunk in hand may still be running; this queue starts once
   * it has ended, so one process never handles a partition's records out of order.
   */
  constructor(
    readonly topic: string,
    readonly partition: number,
    private readonly deps: QueueDeps,
    private readonly after?: Promise<void>
  ) {}

  /** Records queued and not handled yet. */
  get size(): number {
    return this.entries.length
  }

  /** Appends the records not queued before, and starts the drain. */
  add(entries: Entry[]): void {
    for (const e of entries) {
      const offset = BigInt(e.offset)
      if (offset <= this.taken) continue
      // Offsets of our topics are contiguous (no compaction, no transactions): a jump means the
      // broker dropped records before this group read them (retention; kafkajs then logs only
      // "Offset out of range" and reads on from the earliest it still has). Said with the count.
      if (this.taken >= 0n && offset > this.taken + 1n) {
        const lost = Number(offset - this.taken - 1n)
        this.deps.log.error(
          { group: this.deps.groupId, topic: this.topic, partition: this.partition, from: (this.taken + 1n).toString(), to: (offset - 1n).toString(), lost },
          'messages gone from the partition before this group read them (the topic keeps less than the group lags): raise the retention'
        )
        this.deps.gone(this.topic, this.partition, lost)
      }
      this.taken = offset
      this.entries.push(e)
    }
    if (!this.running && this.entries.length > 0 && !this.halted()) this.running = this.drain()
  }

  /** The partition went to another member: nothing more is handled or committed here. */
  revoke(): void {
    this.revoked = true
    this.entries = []
  }

  /** Resolves once the drain has stopped and the last commit was answered. */
  async idle(): Promise<void> {
    await this.running
    this.flushCommit()
    await this.committing
  }

  private halted(): boolean {
    return this.revoked || this.deps.stopping()
  }

  private async drain(): Promise<void> {
    const { plan, failures } = this.deps
    if (this.after) await this.after
    for (;;) {
      if (this.entries.length === 0 || this.halted()) {
        this.running = undefined
        return
      }
      // The next chunk: up to plan.size decodable messages, and where each one sits in the queue.
      const chunk: BusMessage[] = []
      const at: number[] = []
      let end = 0
      while (end < this.entries.length && chunk.length < plan.size) {
        const message = (this.entries[end] as Entry).message
        if (message) {
          chunk.push(message)
          at.push(end)
        }
        end++
      }
      const { done, error } = chunk.length > 0 ? await runBatch(plan.handler, chunk) : { done: 0, error: undefined }
      if (this.revoked) {
        this.running = undefined
        return
      }
      if (error === undefined) {
        this.settle(end)
        failures.clear(this.topic, this.partition)
        continue
      }
      // The durable prefix (and undecodable records inside it) is settled; the failed message is not.
      const failedAt = at[done] as number
      if (failedAt > 0) this.settle(failedAt)
      const failed = chunk[done] as BusMessage
      const attempts = failures.fail(failed)
      if (shouldDeadLetter(plan, attempts, error) && (await this.deps.deadLetter(failed, error, attempts))) {
        if (!this.revoked) this.settle(1)
        failures.clear(this.topic, this.partition)
        continue
      }
      const delay = Math.min(this.deps.retryMinMs * 2 ** (attempts - 1), this.deps.retryMaxMs)
      this.deps.log.warn({ err: error, group: this.deps.groupId, topic: this.topic, partition: this.partition, offset: failed.offset, attempt: attempts, retryInMs: delay }, 'handler failed; message will be handled again')
      const until = Date.now() + delay
      while (Date.now() < until && !this.halted()) await sleep(Math.min(100, until - Date.now()))
    }
  }

  /** The first `n` entries are handled: they leave the queue and their offsets are committed. */
  private settle(n: number): void {
    const last = this.entries[n - 1] as Entry
    this.entries.splice(0, n)
    this.commitWanted = (BigInt(last.offset) + 1n).toString()
    if (!this.committing) this.committing = this.commitLoop()
  }

  private flushCommit(): void {
    if (this.commitWanted !== undefined && !this.committing && !this.revoked) this.committing = this.commitLoop()
  }

  private async commitLoop(): Promise<void> {
    for (;;) {
      const wait = this.lastCommitAt + this.deps.commitIntervalMs - Date.now()
      if (wait > 0 && !this.halted()) await sleep(wait)
      const offset = this.commitWanted
      if (offset === undefined || this.revoked) {
        this.committing = undefined
        return
      }
      this.commitWanted = undefined
      this.lastCommitAt = Date.now()
      try {
        await this.deps.commit(this.topic, this.partition, offset)
      } catch (err) {
        // A rebalance took the partition (or the group is rejoining): its next owner reads on from the last commit.
        this.deps.log.debug({ err, group: this.deps.groupId, topic: this.topic, partition: this.partition, offset }, 'offset commit refused')
      }
    }
  }
}
