import { JsonValues } from './json'
import { Journal } from './memory-journal'
import { type Entry, Keyspace, type JournalRecord, type Value } from './memory-keyspace'
import { incremented } from './numbers'
import { StoreUnavailableError } from './unavailable'
import type { RangeOptions, ScoredMember, Store, StoreOp, BatchOptions } from './types'

/**
 * In-memory Store for embedded mode: the Store calls over a Keyspace
 * (./memory-keyspace, where writes are checked and applied). Durability:
 * when given a directory, every write is journaled (./memory-journal) before
 * the call resolves, and the snapshot and journal are replayed on open.
 * Expiries are stored as absolute times so they survive a restart.
 */

export class MemoryStore extends JsonValues implements Store {
  readonly kind = 'memory' as const
  private readonly keyspace = new Keyspace()
  private journal: Journal | undefined
  private closed = false
  private sweepTimer: NodeJS.Timeout | undefined

  private constructor() {
    super()
  }

  /** Opens a store; with `dir`, state is loaded from and journaled to it. */
  static async open(dir?: string): Promise<MemoryStore> {
    const store = new MemoryStore()
    if (dir !== undefined) store.journal = Journal.open(dir, store.keyspace)
    store.sweepTimer = setInterval(() => store.keyspace.sweepExpired(), 1000)
    store.sweepTimer.unref()
    return store
  }

  /** Writes a snapshot and starts an empty journal (done by itself once the journal outgrows the data). */
  compact(): void {
    this.journal?.compact()
  }

  /**
   * Applies writes at once (later calls see them) and journals them;
   * resolves with the ops' results once they are journaled. Relative TTLs
   * are journaled as absolute times.
   */
  private async write(ops: StoreOp[]): Promise<number[]> {
    this.assertOpen()
    this.keyspace.validate(ops)
    const results = ops.map((op) => this.keyspace.apply(op))
    const records: JournalRecord[] = []
    for (const op of ops) {
      if (op.op === 'set') {
        const e = this.keyspace.data.get(op.key)
        records.push({ op: 'setAt', key: op.key, value: op.value, ...(e?.expiresAt !== undefined ? { at: e.expiresAt } : {}) })
      } else if (op.op === 'pexpire') {
        const e = this.keyspace.data.get(op.key)
        if (e?.expiresAt !== undefined) records.push({ op: 'expireAt', key: op.key, at: e.expiresAt })
      } else {
        records.push(op)
      }
    }
    if (this.journal) await this.journal.append(records)
    return results
  }

  private assertOpen(): void {
    if (this.closed) throw new StoreUnavailableError('store is closed')
  }

  private live(key: string): Entry | undefined {
    this.assertOpen()
    return this.keyspace.live(key)
  }

  private typed<T extends Value['t']>(key: string, t: T, create: boolean): Extract<Value, { t: T }> | undefined {
    this.assertOpen()
    return this.keyspace.typed(key, t, create)
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
    return z.v.rangeByScore(min, max, options.offset ?? 0, options.limit ?? Infinity, options.reverse === true).map((m) => ({ ...m }))
  }

  async zrange(key: string, start: number, stop: number, options: { reverse?: boolean } = {}): Promise<ScoredMember[]> {
    const z = this.typed(key, 'zset', false)
    if (!z) return []
    const n = z.v.size
    const s = start < 0 ? Math.max(0, n + start) : start
    const e = stop < 0 ? n + stop : Math.min(stop, n - 1)
    return z.v.rangeByRank(s, e, options.reverse === true).map((m) => ({ ...m }))
  }

  async zpopByScore(key: string, max: number, limit: number): Promise<ScoredMember[]> {
    if (limit <= 0) return []
    // Range and removal in one synchronous step, so concurrent pollers never share a member.
    const z = this.typed(key, 'zset', false)
    if (!z) return []
    const due = z.v.rangeByScore(-Infinity, max, 0, limit).map((m) => ({ ...m }))
    if (due.length > 0) await this.write([{ op: 'zrem', key, members: due.map((m) => m.member) }])
    return due
  }

  async *scanPrefix(prefix: string): AsyncIterable<string> {
    for (const key of [...this.keyspace.data.keys()]) if (key.startsWith(prefix) && this.live(key)) yield key
  }

  /** Options change nothing here: one process, always atomic, nothing to replicate. */
  async batch(ops: StoreOp[], _options?: BatchOptions): Promise<void> {
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
    this.journal?.close()
  }
}
