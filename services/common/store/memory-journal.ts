import fs from 'node:fs'
import path from 'node:path'
import type { JournalRecord, Keyspace, SnapshotEntry } from './memory-keyspace'
import { StoreUnavailableError } from './unavailable'

/**
 * Durability of the in-memory store (MemoryStore, ./memory) in a directory:
 * `store.snapshot.json` and the `store.journal` appended after it. Every
 * write is appended before its call resolves, so a crash (even kill -9)
 * keeps everything that was acknowledged. Writes of one event-loop turn are
 * appended together (group commit: one write(2) for all of them, each call
 * resolving after it), which keeps that promise at a fraction of the system
 * calls a write per call costs on a busy server. The journal is compacted
 * into a fresh snapshot once it is much larger than the live data.
 */

const COMPACT_MIN_RECORDS = 50_000

export class Journal {
  private fd: number | undefined
  private records = 0
  /** Journal lines of this turn not yet written, and the calls waiting for them. */
  private pendingLines: string[] = []
  private pendingWaiters: Array<{ resolve: () => void; reject: (err: unknown) => void }> = []
  private flushScheduled = false

  private constructor(
    private readonly dir: string,
    private readonly keyspace: Keyspace
  ) {}

  /** Replays the directory's snapshot and journal into `keyspace`, then appends to the journal. */
  static open(dir: string, keyspace: Keyspace): Journal {
    const journal = new Journal(dir, keyspace)
    journal.load()
    return journal
  }

  private snapshotPath(): string {
    return path.join(this.dir, 'store.snapshot.json')
  }

  private journalPath(): string {
    return path.join(this.dir, 'store.journal')
  }

  private load(): void {
    fs.mkdirSync(this.dir, { recursive: true })
    const snap = this.snapshotPath()
    if (fs.existsSync(snap)) this.keyspace.restore(JSON.parse(fs.readFileSync(snap, 'utf8')) as SnapshotEntry[])
    const journal = this.journalPath()
    if (fs.existsSync(journal)) {
      const text = fs.readFileSync(journal, 'utf8')
      // A torn last line (a crash mid-write) is cut off, or the next append would glue onto it and be lost with it.
      const end = text.lastIndexOf('\n') + 1
      if (end < text.length) fs.truncateSync(journal, Buffer.byteLength(text.slice(0, end)))
      const lines = text.slice(0, end).split('\n')
      for (const line of lines) {
        if (line === '') continue
        let records: JournalRecord[]
        try {
          records = JSON.parse(line) as JournalRecord[]
        } catch {
          // Not a record (a damaged line): everything else was acknowledged and is kept.
          continue
        }
        for (const r of records) this.keyspace.apply(r)
        this.records++
      }
    }
    this.fd = fs.openSync(journal, 'a')
  }

  /** Queues records for this turn's append; resolves once they are in the journal. */
  append(records: JournalRecord[]): Promise<void> {
    this.pendingLines.push(JSON.stringify(records))
    const written = new Promise<void>((resolve, reject) => this.pendingWaiters.push({ resolve, reject }))
    if (!this.flushScheduled) {
      this.flushScheduled = true
      setImmediate(() => this.flush())
    }
    return written
  }

  /** Appends every queued line in one write and settles their calls. */
  flush(): void {
    this.flushScheduled = false
    const lines = this.pendingLines
    const waiters = this.pendingWaiters
    this.pendingLines = []
    this.pendingWaiters = []
    if (lines.length === 0) return
    try {
      if (this.fd === undefined) throw new StoreUnavailableError('store is closed')
      fs.writeSync(this.fd, `${lines.join('\n')}\n`)
    } catch (err) {
      for (const w of waiters) w.reject(err)
      return
    }
    this.records += lines.length
    for (const w of waiters) w.resolve()
    // Nothing is queued here, so the snapshot holds exactly what the journal held.
    if (this.records > COMPACT_MIN_RECORDS && this.records > this.keyspace.size * 4) this.compact()
  }

  /** Writes a snapshot atomically (tmp + rename) and starts an empty journal. */
  compact(): void {
    if (this.fd === undefined) return
    // Queued lines are already applied to the data the snapshot is taken from: appending them after it would apply them twice.
    const waiters = this.pendingWaiters
    this.pendingLines = []
    this.pendingWaiters = []
    const snap = this.snapshotPath()
    const tmp = `${snap}.tmp`
    fs.writeFileSync(tmp, JSON.stringify(this.keyspace.snapshot()))
    fs.renameSync(tmp, snap)
    fs.closeSync(this.fd)
    fs.writeFileSync(this.journalPath(), '')
    this.fd = fs.openSync(this.journalPath(), 'a')
    this.records = 0
    for (const w of waiters) w.resolve()
  }

  /** Writes what is queued and closes the file. */
  close(): void {
    this.flush()
    if (this.fd !== undefined) {
      fs.closeSync(this.fd)
      this.fd = undefined
    }
  }
}
