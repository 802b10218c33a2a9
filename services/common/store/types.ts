/**
 * The state store every service keeps its keyspace in. Two implementations
 * share this contract (test/common/store.contract.ts runs against both):
 * MemoryStore (embedded mode, journaled to DATA_DIR) and RedisStore (ioredis).
 *
 * Values are strings; JSON helpers serialize. Every key a service writes is
 * prefixed with the service's keyspace (`auth:`, `webhooks:`, `activity:` ...).
 */

export interface ScoredMember {
  member: string
  score: number
}

export interface RangeOptions {
  /** Skip this many matching members. */
  offset?: number
  /** Return at most this many. */
  limit?: number
  /** Highest score first. */
  reverse?: boolean
}

/** One write of an atomic batch. */
export type StoreOp =
  | { op: 'set'; key: string; value: string; ttlMs?: number }
  | { op: 'del'; key: string }
  | { op: 'hset'; key: string; fields: Record<string, string> }
  | { op: 'hdel'; key: string; fields: string[] }
  | { op: 'sadd'; key: string; members: string[] }
  | { op: 'srem'; key: string; members: string[] }
  | { op: 'zadd'; key: string; score: number; member: string }
  | { op: 'zrem'; key: string; members: string[] }
  | { op: 'incr'; key: string; by: number }
  | { op: 'pexpire'; key: string; ttlMs: number }

/** How a batch is written (both default to false). */
export interface BatchOptions {
  /**
   * The ops' key types are known by construction (the service's own keys,
   * never data from outside): written without checking each key's type
   * first, in fewer commands (redis-commands.ts). A wrong type then fails
   * its own op instead of refusing the whole batch, and a slot's plain
   * string writes (whole records) may be seen one before another.
   */
  trusted?: boolean
  /**
   * The batch gates something that cannot be taken back (a bus offset
   * commit): it resolves once a replica of each Redis master written has
   * acknowledged it too (WAIT), where the master has replicas.
   */
  replicated?: boolean
}

export interface Store {
  readonly kind: 'memory' | 'redis'

  get(key: string): Promise<string | undefined>
  mget(keys: string[]): Promise<Array<string | undefined>>
  set(key: string, value: string, ttlMs?: number): Promise<void>
  /** SET NX (PX): true when this call created the key. Used for nonces and locks. */
  setIfAbsent(key: string, value: string, ttlMs?: number): Promise<boolean>
  del(...keys: string[]): Promise<number>
  exists(key: string): Promise<boolean>
  pexpire(key: string, ttlMs: number): Promise<boolean>
  /** Remaining lifetime in ms; -1 without expiry, -2 when absent. */
  pttl(key: string): Promise<number>

  getJson<T>(key: string): Promise<T | undefined>
  mgetJson<T>(keys: string[]): Promise<Array<T | undefined>>
  setJson(key: string, value: unknown, ttlMs?: number): Promise<void>
  setJsonIfAbsent(key: string, value: unknown, ttlMs?: number): Promise<boolean>

  /** Atomic increment; when `ttlMs` is given and the key is new, it expires after ttlMs. */
  incr(key: string, by?: number, ttlMs?: number): Promise<number>

  hget(key: string, field: string): Promise<string | undefined>
  hset(key: string, fields: Record<string, string>): Promise<void>
  hdel(key: string, ...fields: string[]): Promise<number>
  hgetall(key: string): Promise<Record<string, string>>
  hincr(key: string, field: string, by?: number): Promise<number>

  sadd(key: string, ...members: string[]): Promise<number>
  srem(key: string, ...members: string[]): Promise<number>
  smembers(key: string): Promise<string[]>
  sismember(key: string, member: string): Promise<boolean>
  scard(key: string): Promise<number>

  zadd(key: string, score: number, member: string): Promise<void>
  zrem(key: string, ...members: string[]): Promise<number>
  zscore(key: string, member: string): Promise<number | undefined>
  zcard(key: string): Promise<number>
  /** Members with min <= score <= max, lowest first (or highest first with `reverse`). */
  zrangeByScore(key: string, min: number, max: number, options?: RangeOptions): Promise<ScoredMember[]>
  /** Members by rank, 0-based inclusive `start`..`stop` (-1 = last), like ZRANGE. */
  zrange(key: string, start: number, stop: number, options?: { reverse?: boolean }): Promise<ScoredMember[]>
  /** Atomically removes and returns up to `limit` members with score <= max (lowest first). */
  zpopByScore(key: string, max: number, limit: number): Promise<ScoredMember[]>

  /** Every key starting with `prefix` (SCAN-based on Redis; order unspecified). */
  scanPrefix(prefix: string): AsyncIterable<string>

  /**
   * All writes applied atomically, in order. On a Redis Cluster a batch is
   * atomic per hash slot: keys that must change together share a {hash tag}.
   */
  batch(ops: StoreOp[], options?: BatchOptions): Promise<void>

  /** Round-trip health check; throws when the store is unreachable. */
  ping(): Promise<void>
  close(): Promise<void>
}
