import type { Store, StoreOp } from './types'

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
    private readonly maxOps = DEFAULT_MAX_OPS
  ) {}

  /** Resolves once `ops` (with whatever else was handed in this turn) are written. */
  write(ops: StoreOp[]): Promise<void> {
    if (ops.length === 0) return Promise.resolve()
    return new Promise<void>((resolve, reject) => {
      this.ops.push(...ops)
      this.waiters.push({ resolve, reject })
      if (this.ops.length >= this.maxOps) this.flush()
      else if (!this.scheduled) {
        this.scheduled = true
        setImmediate(() => this.flush())
      }
    })
  }

  private flush(): void {
    this.scheduled = false
    if (this.waiters.length === 0) return
    const ops = this.ops
    const waiters = this.waiters
    this.ops = []
    this.waiters = []
    const sent = this.store.batch(ops).then(
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
