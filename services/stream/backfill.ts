/**
 * The per-node recent buffer behind `backfill_minutes`: every stream node
 * consumes every delivery, so each keeps the last STREAM_BACKFILL of every
 * application's lines (bounded per application by STREAM_BACKFILL_MAX_EVENTS)
 * and a reconnecting client gets them from whichever node it lands on.
 */

interface Entry {
  at: number
  line: string
}

export class RecentBuffer {
  private readonly byApp = new Map<string, Entry[]>()

  constructor(
    private readonly windowMs: number,
    private readonly maxPerApp: number
  ) {}

  push(appId: string, line: string, at = Date.now()): void {
    if (this.windowMs <= 0 || this.maxPerApp <= 0) return
    let list = this.byApp.get(appId)
    if (!list) {
      list = []
      this.byApp.set(appId, list)
    }
    list.push({ at, line })
    if (list.length > this.maxPerApp) list.splice(0, list.length - this.maxPerApp)
  }

  /** Lines of `appId` received at or after `fromMs`, oldest first. */
  since(appId: string, fromMs: number): string[] {
    const list = this.byApp.get(appId)
    if (!list) return []
    let lo = 0
    let hi = list.length
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if ((list[mid] as Entry).at < fromMs) lo = mid + 1
      else hi = mid
    }
    return list.slice(lo).map((e) => e.line)
  }

  /** Drops what is older than the window (run periodically). */
  trim(now = Date.now()): void {
    const cutoff = now - this.windowMs
    for (const [appId, list] of this.byApp) {
      let drop = 0
      while (drop < list.length && (list[drop] as Entry).at < cutoff) drop++
      if (drop === list.length) this.byApp.delete(appId)
      else if (drop > 0) list.splice(0, drop)
    }
  }

  size(): number {
    let n = 0
    for (const list of this.byApp.values()) n += list.length
    return n
  }
}
