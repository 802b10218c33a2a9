import type { StoreOp } from '../../common/store/types'
import { logEntryOp, type DeliveryRecord } from '../delivery-log'
import { WebhookKeys } from '../keys'

/**
 * A delivery's first attempt, made before anything of it is stored
 * (docs/webhooks.md "Delivery").
 *
 * The bus message is the delivery's durable copy until its consumer commits
 * the batch's offsets, and the consumer commits only once every delivery of
 * the batch is durable in the store. A delivery whose webhook's lane in this
 * process starts it soon (a free slot, or one round of answers away) is
 * attempted first; when the answer comes within
 * FIRST_ATTEMPT_WAIT_MS its outcome is the delivery's first and only write
 * (the record as delivered, or failed with its next attempt scheduled).
 * Those still in flight then are stored as pending, their schedule entry a
 * lease ahead, as any attempt in flight is; their outcome follows that
 * write. A process that dies before the commit leaves the batch to be
 * consumed again: an attempt whose outcome was not stored is made again
 * (at least once, as after a crash during any attempt).
 *
 * What that saves is the store work of the common case: one write of the
 * record per delivery answered 2xx at the first attempt, no schedule entry
 * written and removed, no record written twice.
 */

/** How long a batch waits for its first attempts before storing those still in flight. */
export const FIRST_ATTEMPT_WAIT_MS = 500

/**
 * How long a partition that moved to this process waits before its records
 * are handled (the bus's handoverMs): the previous owner's first attempts of
 * records it had not committed are then stored, and found here as
 * duplicates rather than POSTed a second time.
 */
export const FIRST_ATTEMPT_HANDOVER_MS = 4 * FIRST_ATTEMPT_WAIT_MS

export class FirstAttempt {
  /** Its pending record is stored: the outcome finds a schedule entry to remove. */
  stored = false
  /** Its outcome is being written: the batch leaves it to that write. */
  writing = false
  /** The write storing it as pending, while it is in flight. */
  storing: Promise<void> | undefined
  private finished = false
  /** Resolves once the delivery is durable (outcome or pending record stored); rejects when that write failed. */
  readonly durable: Promise<void>
  private resolve!: () => void
  private reject!: (err: unknown) => void

  constructor(
    readonly record: DeliveryRecord,
    /** Where its schedule entry goes if it must be stored while in flight. */
    readonly leaseUntil: number
  ) {
    this.durable = new Promise<void>((resolve, reject) => {
      this.resolve = resolve
      this.reject = reject
    })
    // Awaited by the batch; a rejection nobody awaits yet must not crash the process.
    this.durable.catch(() => undefined)
  }

  get done(): boolean {
    return this.finished
  }

  settled(): void {
    this.finished = true
    this.resolve()
  }

  failed(err: unknown): void {
    this.finished = true
    this.reject(err)
  }
}

/** A delivery's writes as pending: its record (no expiry until its final write), its log entry, its schedule entry. */
export function pendingOps(record: DeliveryRecord, schedule: StoreOp): StoreOp[] {
  return [
    // Without an expiry, a batch's records go in one MSET per hash slot.
    { op: 'set', key: WebhookKeys.delivery(record.delivery_id), value: JSON.stringify(record) },
    logEntryOp(record),
    schedule
  ]
}

/**
 * Resolves once every first attempt of a batch is durable: those answered
 * within `waitMs` by their outcome's write, the rest by `store` (their pending
 * records, one batch). Rejects when one of those writes failed: the batch is
 * then not committed, and the bus hands it over again.
 */
export async function untilDurable(firsts: FirstAttempt[], waitMs: number, store: (late: FirstAttempt[]) => Promise<void>): Promise<void> {
  if (firsts.length === 0) return
  let timer: NodeJS.Timeout | undefined
  await Promise.race([Promise.allSettled(firsts.map((f) => f.durable)), new Promise<void>((resolve) => (timer = setTimeout(resolve, waitMs)))])
  clearTimeout(timer)
  const late = firsts.filter((f) => !f.done && !f.writing)
  if (late.length > 0) {
    const storing = store(late).then(() => {
      for (const f of late) f.stored = true
    })
    for (const f of late) f.storing = storing
    try {
      await storing
      for (const f of late) if (!f.done) f.settled()
    } catch (err) {
      for (const f of late) if (!f.done) f.failed(err)
    }
  }
  await Promise.all(firsts.map((f) => f.durable))
}
