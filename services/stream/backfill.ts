/**
 * The per-node recent buffer behind `backfill_minutes`: every stream node
 * consumes every delivery, so each keeps the last STREAM_BACKFILL of every
 * application's lines and a reconnecting client gets them from whichever
 * node it lands on.
 *
 * Memory is bounded three ways, the oldest lines going first:
 *  - per application: at most `maxEventsPerApp` lines and `maxBytesPerApp` bytes;
 *  - per node: at most `maxBytes` bytes over all applications, so many busy
 *    applications cannot add up to an unbounded buffer.
 * A line's size is its length plus a fixed per-entry overhead (the lines are
 * JSON, mostly one byte per character in memory).
 *
 * Every operation is O(1) amortized per line (ring buffers, no array
 * splicing); `since` is a binary search.
 */

/** Approximate memory of one entry besides its line (object, ring slot, bookkeeping). */
export const ENTRY_OVERHEAD_BYTES = 64

export interface BackfillLimits {
  windowMs: number
  maxEventsPerApp: number
  maxBytesPerApp: number
  maxBytes: number
}

/** A growable ring buffer: push at the tail, shift at the head, index from the head. */
export class Deque<T> {
  private items: Array<T | undefined>
  private head = 0
  private count = 0

  constructor(capacity = 16) {
    this.items = new Array<T | undefined>(Math.max(2, capacity))
  }

  get length(): number {
    return this.count
  }

  push(item: T): void {
    if (this.count === this.items.length) this.grow()
    this.items[(this.head + this.count) % this.items.length] = item
    this.count++
  }

  shift(): T | undefined {
    if (this.count === 0) return undefined
    const item = this.items[this.head]
    this.items[this.head] = undefined
    this.head = (this.head + 1) % this.items.length
    this.count--
    return item
  }

  /** The i-th item from the head (0 = oldest). */
  at(i: number): T | undefined {
    if (i < 0 || i >= this.count) return undefined
    return this.items[(this.head + i) % this.items.length]
  }

  peek(): T | undefined {
    return this.at(0)
  }

  /** Keeps only the items `keep` accepts, in order (O(n)). */
  retain(keep: (item: T) => boolean): void {
    const kept: T[] = []
    for (let i = 0; i < this.count; i++) {
      const item = this.at(i) as T
      if (keep(item)) kept.push(item)
    }
    this.items = new Array<T | undefined>(Math.max(16, kept.length * 2))
    for (let i = 0; i < kept.length; i++) this.items[i] = kept[i]
    this.head = 0
    this.count = kept.length
  }

  private grow(): void {
    const next = new Array<T | undefined>(this.items.length * 2)
    for (let i = 0; i < this.count; i++) next[i] = this.items[(this.head + i) % this.items.length]
    this.items = next
    this.head = 0
  }
}

interface Entry {
  appId: string
  at: number
  line: string
  bytes: number
  /** Set when the entry left its application's list (the node-wide order drops it lazily). */
  gone: boolean
}

interface AppLog {
  entries: Deque<Entry>
  bytes: number
}

export class RecentBuffer {
  private readonly byApp = new Map<string, AppLog>()
  /** Every live entry in arrival order (plus entries already gone, dropped when they reach the head). */
  private readonly arrival = new Deque<Entry>(1024)
  private liveEntries = 0
  private totalBytes = 0

  constructor(private readonly limits: BackfillLimits) {}

  /**
   * Keeps `line` of `appId`, received (or published) at `at`. Times are kept
   * non-decreasing per application, so `since` can search them.
   */
  push(appId: string, line: string, at = Date.now()): void {
    const { windowMs, maxEventsPerApp, maxBytesPerApp, maxBytes } = this.limits
    const bytes = line.length + ENTRY_OVERHEAD_BYTES
    if (windowMs <= 0 || maxEventsPerApp <= 0 || bytes > maxBytesPerApp || bytes > maxBytes) return
    let log = this.byApp.get(appId)
    if (!log) {
      log = { entries: new Deque<Entry>(), bytes: 0 }
      this.byApp.set(appId, log)
    }
    const last = log.entries.at(log.entries.length - 1)
    const entry: Entry = { appId, at: last && last.at > at ? last.at : at, line, bytes, gone: false }
    log.entries.push(entry)
    log.bytes += bytes
    this.arrival.push(entry)
    this.liveEntries++
    this.totalBytes += bytes
    while (log.entries.length > maxEventsPerApp || log.bytes > maxBytesPerApp) this.dropOldestOf(log)
    while (this.totalBytes > maxBytes) this.dropOldestOfNode()
    this.compactIfSparse()
  }

  /** Lines of `appId` received at or after `fromMs`, oldest first. */
  since(appId: string, fromMs: number): string[] {
    const entries = this.byApp.get(appId)?.entries
    if (!entries) return []
    let lo = 0
    let hi = entries.length
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if ((entries.at(mid) as Entry).at < fromMs) lo = mid + 1
      else hi = mid
    }
    const out: string[] = []
    for (let i = lo; i < entries.length; i++) out.push((entries.at(i) as Entry).line)
    return out
  }

  /** Drops what is older than the window (run periodically). */
  trim(now = Date.now()): void {
    const cutoff = now - this.limits.windowMs
    for (const log of [...this.byApp.values()]) {
      while (log.entries.length > 0 && (log.entries.peek() as Entry).at < cutoff) this.dropOldestOf(log)
    }
    this.compactIfSparse()
  }

  /** Lines held (all applications). */
  size(): number {
    return this.liveEntries
  }

  /** Bytes held (all applications), as counted against the budget. */
  bytes(): number {
    return this.totalBytes
  }

  private dropOldestOf(log: AppLog): void {
    const entry = log.entries.shift()
    if (!entry) return
    entry.gone = true
    // The node-wide order may still reference the entry until it reaches the head: release the line now.
    entry.line = ''
    log.bytes -= entry.bytes
    this.totalBytes -= entry.bytes
    this.liveEntries--
    if (log.entries.length === 0) this.byApp.delete(entry.appId)
  }

  /** The oldest line of the node, whichever application it belongs to. */
  private dropOldestOfNode(): void {
    for (;;) {
      const entry = this.arrival.shift()
      if (!entry) return
      if (entry.gone) continue
      // Arrival order within one application is its list order: this entry is its application's oldest.
      const log = this.byApp.get(entry.appId) as AppLog
      this.dropOldestOf(log)
      return
    }
  }

  /** Entries dropped per application stay in the arrival order until it is compacted: keep them under half. */
  private compactIfSparse(): void {
    while (this.arrival.length > 0 && (this.arrival.peek() as Entry).gone) this.arrival.shift()
    if (this.arrival.length > 1024 && this.arrival.length > this.liveEntries * 2) this.arrival.retain((e) => !e.gone)
  }
}
