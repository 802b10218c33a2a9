import fs from 'node:fs'
import path from 'node:path'
import { JsonValues } from './json'
import { StoreUnavailableError } from './unavailable'
import { assertFiniteNumber, incremented } from './numbers'
import type { RangeOptions, ScoredMember, Store, StoreOp } from './types'

/**
 * In-memory Store for embedded mode.
 *
 * Durability: when given a directory, every write is appended to
 * `store.journal` before the call resolves, so a crash (even kill -9) keeps
 * everything that was acknowledged. Writes of one event-loop turn are
 * appended together (group commit: one write(2) for all of them, each call
 * resolving after it), which keeps that promise at a fraction of the system
 * calls a write per call costs on a busy server. On open the snapshot and journal are
 * replayed; the journal is compacted into a fresh snapshot once it is much
 * larger than the live data. Expiries are stored as absolute times so they
 * survive a restart.
 */

type Value =
  | { t: 'str'; v: string }
  | { t: 'hash'; v: Map<string, string> }
  | { t: 'set'; v: Set<string> }
  | { t: 'zset'; v: SortedSet }

interface Entry {
  value: Value
  expiresAt?: number
}

/** Members kept sorted by (score, member) for range queries; a map gives O(1) score lookup. */
class SortedSet {
  readonly scores = new Map<string, number>()
  private sorted: ScoredMember[] = []

  get size(): number {
    return this.scores.size
  }

  add(member: string, score: number): void {
    if (this.scores.has(member)) this.remove(member)
    this.scores.set(member, score)
    const i = this.indexFor(score, member)
    this.sorted.splice(i, 0, { member, score })
  }

  remove(member: string): boolean {
    const score = this.scores.get(member)
    if (score === undefined) return false
    this.scores.delete(member)
    const i = this.indexFor(score, member)
    if (this.sorted[i]?.member === member) this.sorted.splice(i, 1)
    else this.sorted = this.sorted.filter((m) => m.member !== member)
    return true
  }

  all(): ScoredMember[] {
    return this.sorted
  }

  /** First index whose (score, member) is >= the given pair. */
  indexFor(score: number, member: string): number {
    let lo = 0
    let hi = this.sorted.length
    while (lo < hi) {
      const mid = (lo + hi) >> 1
      const m = this.sorted[mid] as ScoredMember
      if (m.score < score || (m.score === score && m.member < member)) lo = mid + 1
      else hi = mid
    }
    return lo
  }

  lowerBound(score: number): number {
    return this.indexFor(score, '')
  }
}

type JournalRecord = StoreOp | { op: 'expireAt'; key: string; at: number } | { op: 'setAt'; key: string; value: string; at?: number }

const COMPACT_MIN_RECORDS = 50_000
const JOURNALED: Promise<void> = Promise.resolve()

/** The value type each collection op works on. */
const OP_TYPES: Record<'hset' | 'hdel' | 'sadd' | 'srem' | 'zadd' | 'zrem', Value['t']> = {
  hset: 'hash',
  hdel: 'hash',
  sadd: 'set',
  srem: 'set',
  zadd: 'zset',
  zrem: 'zset'
}

export class MemoryStore extends JsonValues implements Store {
  readonly kind = 'memory' as const
  private data = new Map<string, Entry>()
  private journalFd: number | undefined
  private journalRecords = 0
  /** Journal lines of this turn not yet written, and the calls waiting for them. */
  private pendingLines: string[] = []
  private pendingWaiters: Array<{ resolve: () => void; reject: (err: unknown) => void }> = []
  private flushScheduled = false
  private closed = false
  private sweepTimer: NodeJS.Timeout | undefined

  private constructor(private readonly dir: string | undefined) {
    super()
  }

  /** Opens a store; with `dir`, state is loaded from and journaled to it. */
  static async open(dir?: string): Promise<MemoryStore> {
    const store = new MemoryStore(dir)
    if (dir !== undefined) store.load(dir)
    store.sweepTimer = setInterval(() => store.sweepExpired(), 1000)
    store.sweepTimer.unref()
    return store
  }

  // ------------------------------------------------------------ persistence

  private snapshotPath(dir: string): string {
    return path.join(dir, 'store.snapshot.json')
  }

  private journalPath(dir: string): string {
    return path.join(dir, 'store.journal')
  }

  private load(dir: string): void {
    fs.mkdirSync(dir, { recursive: true })
    const snap = this.snapshotPath(dir)
    if (fs.existsSync(snap)) this.restoreSnapshot(JSON.parse(fs.readFileSync(snap, 'utf8')) as SnapshotEntry[])
    const journal = this.journalPath(dir)
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
        for (const r of records) this.applyRecord(r)
        this.journalRecords++
      }
    }
    this.journalFd = fs.openSync(journal, 'a')
  }

  /** Queues records for this turn's append; resolves once they are in the journal. */
  private journal(records: JournalRecord[]): Promise<void> {
    if (this.journalFd === undefined) return JOURNALED
    this.pendingLines.push(JSON.stringify(records))
    const written = new Promise<void>((resolve, reject) => this.pendingWaiters.push({ resolve, reject }))
    if (!this.flushScheduled) {
      this.flushScheduled = true
      setImmediate(() => this.flush())
    }
    return written
  }

  /** Appends every queued line in one write and settles their calls. */
  private flush(): void {
    this.flushScheduled = false
    const lines = this.pendingLines
    const waiters = this.pendingWaiters
    this.pendingLines = []
    this.pendingWaiters = []
    if (lines.length === 0) return
    try {
      if (this.journalFd === undefined) throw new StoreUnavailableError('store is closed')
      fs.writeSync(this.journalFd, `${lines.join('\n')}\n`)
    } catch (err) {
      for (const w of waiters) w.reject(err)
      return
    }
    this.journalRecords += lines.length
    for (const w of waiters) w.resolve()
    // Nothing is queued here, so the snapshot holds exactly what the journal held.
    if (this.journalRecords > COMPACT_MIN_RECORDS && this.journalRecords > this.data.size * 4) this.compact()
  }

  /** Writes a snapshot atomically (tmp + rename) and starts an empty journal. */
  compact(): void {
    if (this.dir === undefined || this.journalFd === undefined) return
    // Queued lines are already applied to the data the snapshot is taken from: appending them after it would apply them twice.
    const waiters = this.pendingWaiters
    this.pendingLines = []
    this.pendingWaiters = []
    const snap = this.snapshotPath(this.dir)
    const tmp = `${snap}.tmp`
    fs.writeFileSync(tmp, JSON.stringify(this.snapshot()))
    fs.renameSync(tmp, snap)
    fs.closeSync(this.journalFd)
    fs.writeFileSync(this.journalPath(this.dir), '')
    this.journalFd = fs.openSync(this.journalPath(this.dir), 'a')
    this.journalRecords = 0
    for (const w of waiters) w.resolve()
  }

  private snapshot(): SnapshotEntry[] {
    const out: SnapshotEntry[] = []
    const now = Date.now()
    for (const [key, e] of this.data) {
      if (e.expiresAt !== undefined && e.expiresAt <= now) continue
      const v = e.value
      let value: SnapshotEntry['value']
      if (v.t === 'str') value = { t: 'str', v: v.v }
      else if (v.t === 'hash') value = { t: 'hash', v: Object.fromEntries(v.v) }
      else if (v.t === 'set') value = { t: 'set', v: [...v.v] }
      else value = { t: 'zset', v: v.v.all().map((m) => [m.member, m.score] as [string, number]) }
      out.push({ key, value, expiresAt: e.expiresAt })
    }
    return out
  }

  private restoreSnapshot(entries: SnapshotEntry[]): void {
    for (const { key, value, expiresAt } of entries) {
      let v: Value
      if (value.t === 'str') v = { t: 'str', v: value.v }
      else if (value.t === 'hash') v = { t: 'hash', v: new Map(Object.entries(value.v)) }
      else if (value.t === 'set') v = { t: 'set', v: new Set(value.v) }
      else {
        const z = new SortedSet()
        for (const [m, s] of value.v) z.add(m, s)
        v = { t: 'zset', v: z }
      }
      this.data.set(key, expiresAt === undefined ? { value: v } : { value: v, expiresAt })
    }
  }

  // ------------------------------------------------------------ primitives

  private live(key: string): Entry | undefined {
    this.assertOpen()
    const e = this.data.get(key)
    if (e === undefined) return undefined
    if (e.expiresAt !== undefined && e.expiresAt <= Date.now()) {
      this.data.delete(key)
      return undefined
    }
    return e
  }

  private sweepExpired(): void {
    const now = Date.now()
    for (const [key, e] of this.data) if (e.expiresAt !== undefined && e.expiresAt <= now) this.data.delete(key)
  }

  private typed<T extends Value['t']>(key: string, t: T, create: boolean): Extract<Value, { t: T }> | undefined {
    const e = this.live(key)
    if (e === undefined) {
      if (!create) return undefined
      const value = (t === 'str' ? { t, v: '' } : t === 'hash' ? { t, v: new Map() } : t === 'set' ? { t, v: new Set() } : { t, v: new SortedSet() }) as Extract<Value, { t: T }>
      this.data.set(key, { value })
      return value
    }
    if (e.value.t !== t) throw new Error(`WRONGTYPE key ${key} holds a ${e.value.t}, not a ${t}`)
    return e.value as Extract<Value, { t: T }>
  }

  private dropIfEmpty(key: string): void {
    const e = this.data.get(key)
    if (e === undefined || e.value.t === 'str') return
    if (e.value.v.size === 0) this.data.delete(key)
  }

  /** Applies one write without journaling; returns the op's numeric result where it has one. */
  private applyRecord(r: JournalRecord): number {
    switch (r.op) {
      case 'set': {
        const entry: Entry = { value: { t: 'str', v: r.value } }
        if (r.ttlMs !== undefined) entry.expiresAt = Date.now() + r.ttlMs
        this.data.set(r.key, entry)
        return 1
      }
      case 'setAt': {
        this.data.set(r.key, r.at === undefined ? { value: { t: 'str', v: r.value } } : { value: { t: 'str', v: r.value }, expiresAt: r.at })
        return 1
      }
      case 'del':
        return this.data.delete(r.key) ? 1 : 0
      case 'hset': {
        const h = this.typed(r.key, 'hash', true) as { v: Map<string, string> }
        for (const [f, v] of Object.entries(r.fields)) h.v.set(f, v)
        return 1
      }
      case 'hdel': {
        const h = this.typed(r.key, 'hash', false)
        let n = 0
        if (h) for (const f of r.fields) if (h.v.delete(f)) n++
        this.dropIfEmpty(r.key)
        return n
      }
      case 'sadd': {
        const s = this.typed(r.key, 'set', true) as { v: Set<string> }
        let n = 0
        for (const m of r.members) if (!s.v.has(m)) { s.v.add(m); n++ }
        return n
      }
      case 'srem': {
        const s = this.typed(r.key, 'set', false)
        let n = 0
        if (s) for (const m of r.members) if (s.v.delete(m)) n++
        this.dropIfEmpty(r.key)
        return n
      }
      case 'zadd': {
        const z = this.typed(r.key, 'zset', true) as { v: SortedSet }
        z.v.add(r.member, r.score)
        return 1
      }
      case 'zrem': {
        const z = this.typed(r.key, 'zset', false)
        let n = 0
        if (z) for (const m of r.members) if (z.v.remove(m)) n++
        this.dropIfEmpty(r.key)
        return n
      }
      case 'incr': {
        const e = this.live(r.key)
        if (e && e.value.t !== 'str') throw new Error(`WRONGTYPE key ${r.key} is not a string`)
        const next = incremented(e ? (e.value as { v: string }).v : undefined, r.by, r.key)
        if (e) (e.value as { v: string }).v = next
        else this.data.set(r.key, { value: { t: 'str', v: next } })
        return Number(next)
      }
      case 'pexpire': {
        const e = this.live(r.key)
        if (!e) return 0
        e.expiresAt = Date.now() + r.ttlMs
        return 1
      }
      case 'expireAt': {
        const e = this.live(r.key)
        if (!e) return 0
        e.expiresAt = r.at
        return 1
      }
    }
  }

  /**
   * Refuses a write list that would fail part-way (an op on a key of another
   * type, an increment of a non-number, a NaN score or TTL) before anything
   * is applied, so a batch is all or nothing and memory never diverges from
   * the journal. Same rules as RedisStore's batch script.
   */
  private validate(ops: StoreOp[]): void {
    const simulated = new Map<string, { t: Value['t'] | 'none'; v?: string }>()
    const current = (key: string): { t: Value['t'] | 'none'; v?: string } => {
      const known = simulated.get(key)
      if (known) return known
      const e = this.live(key)
      if (!e) return { t: 'none' }
      return e.value.t === 'str' ? { t: 'str', v: e.value.v } : { t: e.value.t }
    }
    for (const op of ops) {
      const cur = current(op.key)
      switch (op.op) {
        case 'set':
          if (op.ttlMs !== undefined) assertFiniteNumber(op.ttlMs, 'ttl')
          simulated.set(op.key, { t: 'str', v: op.value })
          break
        case 'del':
          simulated.set(op.key, { t: 'none' })
          break
        case 'pexpire':
          assertFiniteNumber(op.ttlMs, 'ttl')
          break
        case 'incr': {
          if (cur.t !== 'none' && cur.t !== 'str') throw new Error(`WRONGTYPE key ${op.key} holds a ${cur.t}, not a str`)
          simulated.set(op.key, { t: 'str', v: incremented(cur.v, op.by, op.key) })
          break
        }
        default: {
          if (op.op === 'zadd') assertScore(op.score)
          const need = OP_TYPES[op.op]
          if (cur.t !== 'none' && cur.t !== need) throw new Error(`WRONGTYPE key ${op.key} holds a ${cur.t}, not a ${need}`)
          if (op.op === 'hset' || op.op === 'sadd' || op.op === 'zadd') simulated.set(op.key, { t: need })
        }
      }
    }
  }

  /**
   * Applies writes at once (later calls see them) and journals them;
   * resolves with the ops' results once they are journaled. Relative TTLs
   * are journaled as absolute times.
   */
  private async write(ops: StoreOp[]): Promise<number[]> {
    this.assertOpen()
    this.validate(ops)
    const results = ops.map((op) => this.applyRecord(op))
    const records: JournalRecord[] = []
    for (const op of ops) {
      if (op.op === 'set') {
        const e = this.data.get(op.key)
        records.push({ op: 'setAt', key: op.key, value: op.value, ...(e?.expiresAt !== undefined ? { at: e.expiresAt } : {}) })
      } else if (op.op === 'pexpire') {
        const e = this.data.get(op.key)
        if (e?.expiresAt !== undefined) records.push({ op: 'expireAt', key: op.key, at: e.expiresAt })
      } else {
        records.push(op)
      }
    }
    await this.journal(records)
    return results
  }

  private assertOpen(): void {
    if (this.closed) throw new StoreUnavailableError('store is closed')
  }

  // ------------------------------------------------------------ Store

  async get(key: string): Promise<string | undefined> {
    return this.typed(key, 'str', false)?.v
  }

  async mget(keys: string[]): Promise<Array<string | undefined>> {
    return keys.map((k) => this.typed(k, 'str', false)?.v)
  }

  async set(key: string, value: string, ttlMs?: number): Promise<void> {
    await this.write([ttlMs === undefined ? { op: 'set', key, value } : { op: 'set', key, value, ttlMs }])
  }

  async setIfAbsent(key: string, value: string, ttlMs?: number): Promise<boolean> {
    if (this.live(key) !== undefined) return false
    await this.set(key, value, ttlMs)
    return true
  }

  async del(...keys: string[]): Promise<number> {
    const present = keys.filter((k) => this.live(k) !== undefined)
    if (present.length === 0) return 0
    await this.write(present.map((key) => ({ op: 'del', key })))
    return present.length
  }

  async exists(key: string): Promise<boolean> {
    return this.live(key) !== undefined
  }

  async pexpire(key: string, ttlMs: number): Promise<boolean> {
    if (this.live(key) === undefined) return false
    await this.write([{ op: 'pexpire', key, ttlMs }])
    return true
  }

  async pttl(key: string): Promise<number> {
    const e = this.live(key)
    if (!e) return -2
    return e.expiresAt === undefined ? -1 : Math.max(0, e.expiresAt - Date.now())
  }


  async incr(key: string, by = 1, ttlMs?: number): Promise<number> {
    const isNew = this.live(key) === undefined
    const ops: StoreOp[] = [{ op: 'incr', key, by }]
    if (isNew && ttlMs !== undefined) ops.push({ op: 'pexpire', key, ttlMs })
    return (await this.write(ops))[0] as number
  }

  async hget(key: string, field: string): Promise<string | undefined> {
    return this.typed(key, 'hash', false)?.v.get(field)
  }

  async hset(key: string, fields: Record<string, string>): Promise<void> {
    if (Object.keys(fields).length === 0) return
    await this.write([{ op: 'hset', key, fields }])
  }

  async hdel(key: string, ...fields: string[]): Promise<number> {
    return (await this.write([{ op: 'hdel', key, fields }]))[0] as number
  }

  async hgetall(key: string): Promise<Record<string, string>> {
    const h = this.typed(key, 'hash', false)
    return h ? Object.fromEntries(h.v) : {}
  }

  async hincr(key: string, field: string, by = 1): Promise<number> {
    // Read and write in one synchronous step: no other call can interleave.
    const next = incremented(this.typed(key, 'hash', false)?.v.get(field), by, `${key} ${field}`)
    await this.write([{ op: 'hset', key, fields: { [field]: next } }])
    return Number(next)
  }

  async sadd(key: string, ...members: string[]): Promise<number> {
    if (members.length === 0) return 0
    return (await this.write([{ op: 'sadd', key, members }]))[0] as number
  }

  async srem(key: string, ...members: string[]): Promise<number> {
    if (members.length === 0) return 0
    return (await this.write([{ op: 'srem', key, members }]))[0] as number
  }

  async smembers(key: string): Promise<string[]> {
    const s = this.typed(key, 'set', false)
    return s ? [...s.v] : []
  }

  async sismember(key: string, member: string): Promise<boolean> {
    return this.typed(key, 'set', false)?.v.has(member) ?? false
  }

  async scard(key: string): Promise<number> {
    return this.typed(key, 'set', false)?.v.size ?? 0
  }

  async zadd(key: string, score: number, member: string): Promise<void> {
    await this.write([{ op: 'zadd', key, score, member }])
  }

  async zrem(key: string, ...members: string[]): Promise<number> {
    if (members.length === 0) return 0
    return (await this.write([{ op: 'zrem', key, members }]))[0] as number
  }

  async zscore(key: string, member: string): Promise<number | undefined> {
    return this.typed(key, 'zset', false)?.v.scores.get(member)
  }

  async zcard(key: string): Promise<number> {
    return this.typed(key, 'zset', false)?.v.size ?? 0
  }

  async zrangeByScore(key: string, min: number, max: number, options: RangeOptions = {}): Promise<ScoredMember[]> {
    const z = this.typed(key, 'zset', false)
    if (!z) return []
    const all = z.v.all()
    const from = z.v.lowerBound(min)
    let to = from
    while (to < all.length && (all[to] as ScoredMember).score <= max) to++
    let slice = all.slice(from, to)
    if (options.reverse) slice = slice.reverse()
    const offset = options.offset ?? 0
    const end = options.limit === undefined ? undefined : offset + options.limit
    return slice.slice(offset, end).map((m) => ({ ...m }))
  }

  async zrange(key: string, start: number, stop: number, options: { reverse?: boolean } = {}): Promise<ScoredMember[]> {
    const z = this.typed(key, 'zset', false)
    if (!z) return []
    let all = z.v.all()
    if (options.reverse) all = [...all].reverse()
    const n = all.length
    const s = start < 0 ? Math.max(0, n + start) : start
    const e = stop < 0 ? n + stop : Math.min(stop, n - 1)
    if (s > e) return []
    return all.slice(s, e + 1).map((m) => ({ ...m }))
  }

  async zpopByScore(key: string, max: number, limit: number): Promise<ScoredMember[]> {
    if (limit <= 0) return []
    // Range and removal in one synchronous step, so concurrent pollers never share a member.
    const z = this.typed(key, 'zset', false)
    if (!z) return []
    const due: ScoredMember[] = []
    for (const m of z.v.all()) {
      if (m.score > max || due.length >= limit) break
      due.push({ ...m })
    }
    if (due.length > 0) await this.write([{ op: 'zrem', key, members: due.map((m) => m.member) }])
    return due
  }

  async *scanPrefix(prefix: string): AsyncIterable<string> {
    for (const key of [...this.data.keys()]) if (key.startsWith(prefix) && this.live(key)) yield key
  }

  async batch(ops: StoreOp[]): Promise<void> {
    if (ops.length === 0) return
    await this.write(ops)
  }

  async ping(): Promise<void> {
    this.assertOpen()
  }

  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    if (this.sweepTimer) clearInterval(this.sweepTimer)
    this.flush()
    if (this.journalFd !== undefined) {
      fs.closeSync(this.journalFd)
      this.journalFd = undefined
    }
  }
}

/** Scores may be ±Infinity (Redis's -inf/+inf) but never NaN, which Redis refuses. */
function assertScore(score: number): void {
  if (Number.isNaN(score)) throw new TypeError('score must be a number, got NaN')
}

interface SnapshotEntry {
  key: string
  value:
    | { t: 'str'; v: string }
    | { t: 'hash'; v: Record<string, string> }
    | { t: 'set'; v: string[] }
    | { t: 'zset'; v: Array<[string, number]> }
  expiresAt?: number | undefined
}
