import type { BatchOptions, Store, StoreOp } from './types'

/**
 * Store writes of many concurrent callers, made in one batch.
 *
 * Work that finishes many small units at once (a webhooks process settling
 * dozens of POSTs that came back in the same turn of the event loop) would
 * otherwise pay one store round trip per unit. Each caller hands its ops to
 * `write` and awaits it as it would `store.batch`: the ops of every caller
 * in the same turn go to the store in one batch (atomic, in the order they
 * were handed in), and every caller's promise settles with that batch. A
 * batch that fails rejects each caller with the same error, so each one
 * handles it as it would a failure of its own write.
 *
 * A turn's ops past `maxOps` start a batch of their own at once, so one
 * batch stays a size the store handles without stalling others.
 *
 * Counters are written once per batch (compactCounters): dozens of
 * attempts settling together each add to the same per-minute counters.
 */

interface Waiter {
  resolve: () => void
  reject: (err: unknown) => void
}

const DEFAULT_MAX_OPS = 2000

export class WriteCoalescer {
  private ops: StoreOp[] = []
  private waiters: Waiter[] = []
  private scheduled = false
  /** Batches sent and not answered yet (close waits for them). */
  private readonly inFlight = new Set<Promise<void>>()

  constructor(
    private readonly store: Pick<Store, 'batch'>,
    private readonly maxOps = DEFAULT_MAX_OPS,
    /** How each batch is written (a writer of its own known keys passes `trusted`). */
    private readonly options: BatchOptions = {},
    /**
     * Under load (a batch went out less than this long ago), how long the first write of the next
     * batch waits for others; otherwise, and with 0, a batch waits for the rest of the turn only.
     * Answers that come one per turn then still share a batch, and an idle writer adds no delay.
     */
    private readonly lingerMs = 0
  ) {}

  private lastFlushAt = 0

  /** Resolves once `ops` (with whatever else was handed in this turn) are written. */
  write(ops: StoreOp[]): Promise<void> {
    if (ops.length === 0) return Promise.resolve()
    return new Promise<void>((resolve, reject) => {
      this.ops.push(...ops)
      this.waiters.push({ resolve, reject })
      if (this.ops.length >= this.maxOps) this.flush()
      else if (!this.scheduled) {
        this.scheduled = true
        if (this.lingerMs > 0 && Date.now() - this.lastFlushAt < this.lingerMs) setTimeout(() => this.flush(), this.lingerMs)
        else setImmediate(() => this.flush())
      }
    })
  }

  private flush(): void {
    this.scheduled = false
    if (this.waiters.length === 0) return
    this.lastFlushAt = Date.now()
    const ops = compactCounters(this.ops)
    const waiters = this.waiters
    this.ops = []
    this.waiters = []
    const sent = this.store.batch(ops, this.options).then(
      () => {
        for (const w of waiters) w.resolve()
      },
      (err: unknown) => {
        for (const w of waiters) w.reject(err)
      }
    )
    this.inFlight.add(sent)
    void sent.finally(() => this.inFlight.delete(sent))
  }

  /** Sends what is waiting now and resolves when every batch sent has been answered. */
  async drain(): Promise<void> {
    this.flush()
    await Promise.allSettled([...this.inFlight])
  }
}

/**
 * The same writes in fewer commands. A key whose every op in the batch is an
 * `incr` or a `pexpire` (the console's per-minute counters, which each
 * attempt of an app adds to and renews) gets one `incr` of the sum, at its
 * first increment's place, and one `pexpire`, at its last expiry's place.
 * The batch is applied atomically, so no reader sees the states in between,
 * and the key ends with the value and the expiry the full list gives it: an
 * expiry before the first increment finds the key as it was before the batch
 * either way, and one after it finds the key in place. Keys touched by any
 * other op keep their ops as they are.
 */
export function compactCounters(ops: StoreOp[]): StoreOp[] {
  const others = new Set<string>()
  const counters = new Map<string, { by: number; ops: number; firstIncr: number; lastExpire: number }>()
  ops.forEach((op, i) => {
    if (op.op !== 'incr' && op.op !== 'pexpire') {
      others.add(op.key)
      return
    }
    const c = counters.get(op.key) ?? { by: 0, ops: 0, firstIncr: -1, lastExpire: -1 }
    c.ops++
    if (op.op === 'incr') {
      c.by += op.by
      if (c.firstIncr < 0) c.firstIncr = i
    } else c.lastExpire = i
    counters.set(op.key, c)
  })
  const fewer = (c: { ops: number; firstIncr: number; lastExpire: number }): boolean => c.ops > (c.firstIncr >= 0 ? 1 : 0) + (c.lastExpire >= 0 ? 1 : 0)
  if (![...counters].some(([key, c]) => fewer(c) && !others.has(key))) return ops
  const out: StoreOp[] = []
  ops.forEach((op, i) => {
    const c = op.op === 'incr' || op.op === 'pexpire' ? counters.get(op.key) : undefined
    if (!c || others.has(op.key)) out.push(op)
    else if (op.op === 'incr' && i === c.firstIncr) out.push({ op: 'incr', key: op.key, by: c.by })
    else if (op.op === 'pexpire' && i === c.lastExpire) out.push(op)
  })
  return out
}
