import { incremented, assertFiniteNumber } from './numbers'
import { SortedSet } from './sorted-set'
import type { StoreOp } from './types'

/**
 * The data of the in-memory store (MemoryStore, ./memory): typed values by
 * key with absolute expiry times, the one place writes are applied (live,
 * replayed from the journal, restored from a snapshot), and the check that
 * refuses a write list before any of it is applied.
 */

export type Value =
  | { t: 'str'; v: string }
  | { t: 'hash'; v: Map<string, string> }
  | { t: 'set'; v: Set<string> }
  | { t: 'zset'; v: SortedSet }

export interface Entry {
  value: Value
  expiresAt?: number
}

/** A write as the journal records it: relative TTLs become absolute times. */
export type JournalRecord = StoreOp | { op: 'expireAt'; key: string; at: number } | { op: 'setAt'; key: string; value: string; at?: number }

export interface SnapshotEntry {
  key: string
  value:
    | { t: 'str'; v: string }
    | { t: 'hash'; v: Record<string, string> }
    | { t: 'set'; v: string[] }
    | { t: 'zset'; v: Array<[string, number]> }
  expiresAt?: number | undefined
}

/** The value type each collection op works on. */
const OP_TYPES: Record<'hset' | 'hdel' | 'sadd' | 'srem' | 'zadd' | 'zrem', Value['t']> = {
  hset: 'hash',
  hdel: 'hash',
  sadd: 'set',
  srem: 'set',
  zadd: 'zset',
  zrem: 'zset'
}

export class Keyspace {
  readonly data = new Map<string, Entry>()

  get size(): number {
    return this.data.size
  }

  live(key: string): Entry | undefined {
    const e = this.data.get(key)
    if (e === undefined) return undefined
    if (e.expiresAt !== undefined && e.expiresAt <= Date.now()) {
      this.data.delete(key)
      return undefined
    }
    return e
  }

  sweepExpired(): void {
    const now = Date.now()
    for (const [key, e] of this.data) if (e.expiresAt !== undefined && e.expiresAt <= now) this.data.delete(key)
  }

  typed<T extends Value['t']>(key: string, t: T, create: boolean): Extract<Value, { t: T }> | undefined {
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

  dropIfEmpty(key: string): void {
    const e = this.data.get(key)
    if (e === undefined || e.value.t === 'str') return
    if (e.value.v.size === 0) this.data.delete(key)
  }

  /** Applies one write without journaling; returns the op's numeric result where it has one. */
  apply(r: JournalRecord): number {
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
  validate(ops: StoreOp[]): void {
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

  /** Every live entry, as the snapshot file holds it. */
  snapshot(): SnapshotEntry[] {
    const out: SnapshotEntry[] = []
    const now = Date.now()
    for (const [key, e] of this.data) {
      if (e.expiresAt !== undefined && e.expiresAt <= now) continue
      const v = e.value
      let value: SnapshotEntry['value']
      if (v.t === 'str') value = { t: 'str', v: v.v }
      else if (v.t === 'hash') value = { t: 'hash', v: Object.fromEntries(v.v) }
      else if (v.t === 'set') value = { t: 'set', v: [...v.v] }
      else value = { t: 'zset', v: v.v.toArray().map((m) => [m.member, m.score] as [string, number]) }
      out.push({ key, value, expiresAt: e.expiresAt })
    }
    return out
  }


  restore(entries: SnapshotEntry[]): void {
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
}

/** Scores may be ±Infinity (Redis's -inf/+inf) but never NaN, which Redis refuses. */
function assertScore(score: number): void {
  if (Number.isNaN(score)) throw new TypeError('score must be a number, got NaN')
}
