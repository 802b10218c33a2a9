import { Cluster, Redis } from 'ioredis'
import { JsonValues } from './json'
import { assertFiniteNumber, isIntegerIncrement } from './numbers'
import type { Logger } from 'pino'
import { globEscape, pairs, parseScore, scoreArg, ttlArg } from './redis-args'
import { defineScripts, encodeOp, type ScriptedRedis } from './redis-scripts'
import { commandsBySlot, keysBySlot, opsBySlot, type RedisCommand } from './redis-commands'
import type { BatchOptions, RangeOptions, ScoredMember, Store, StoreOp } from './types'
import { StoreUnavailableError } from './unavailable'

/**
 * The Store on Redis (ioredis).
 *
 * Availability: the client reconnects forever with a capped backoff and
 * queues commands while disconnected, so a command issued during a short
 * Redis restart waits for the reconnection instead of failing; only a
 * command that has waited through MAX_RETRIES_PER_REQUEST reconnection
 * attempts (about 10 s) fails. `ping` does not wait: it throws at once while
 * Redis is unreachable, which is what readiness checks want.
 *
 * Atomicity: multi-step operations (incr with TTL, zpopByScore, batch) are
 * Lua scripts (redis-scripts.ts), which Redis runs without interleaving.
 * Redis never rolls back half a script, so `batch` first simulates every op
 * (key types, and the value each increment would read, with Redis's number
 * syntax: see numbers.ts) and writes nothing unless every op would succeed.
 * A `trusted` batch (keys whose types the writer knows) skips that check and
 * goes as a MULTI/EXEC of as few commands as its ops allow
 * (redis-commands.ts). Arguments Redis would refuse (NaN scores, increments
 * or TTLs) are refused here (redis-args.ts) before anything is sent.
 *
 * Redis Cluster (`connectCluster`, ioredis Cluster): one code path for both.
 * Commands of one key go to its master; multi-key reads and deletes are
 * split by hash slot; a batch is one script or transaction per slot, so it
 * is atomic per slot (keys that change together carry one {hash tag});
 * SCAN walks every master. A `replicated` batch ends with WAIT on each master
 * it wrote to that has replicas (docs/operations.md "Redis Cluster").
 */

const RECONNECT_MIN_MS = 50
const RECONNECT_MAX_MS = 1000
const MAX_RETRIES_PER_REQUEST = 14
const CONNECT_TIMEOUT_MS = 10_000
const PING_TIMEOUT_MS = 1000
const SCAN_COUNT = 500
/** How long a `replicated` batch waits for a replica's acknowledgement before going on (and saying so). */
const REPLICA_ACK_TIMEOUT_MS = 1000

/** redis://user:secret@host -> redis://user:***@host, for logs. */
export function redactRedisUrl(url: string): string {
  return url.replace(/(\/\/[^:/@]*:)[^@/]*@/, '$1***@')
}

export class RedisStore extends JsonValues implements Store {
  readonly kind = 'redis' as const
  private closed = false
  /** Replicas of the single Redis, read at connect and refreshed once a minute (a cluster's come from its slot map). */
  private replicas = 0
  private replicasReadAt = 0
  /** Batches whose WAIT timed out: their writes are on the master only. */
  unreplicatedBatches = 0

  private constructor(
    private readonly redis: ScriptedRedis,
    private readonly log: Logger,
    readonly cluster: boolean
  ) {
    super()
  }

  /** Connects to a Redis Cluster through any of its nodes (`host:port`), as `connect` does to one Redis. */
  static async connectCluster(nodes: string[], log: Logger, options: { connectTimeoutMs?: number; password?: string } = {}): Promise<RedisStore> {
    const where = `cluster ${nodes.join(',')}`
    const startup = nodes.map((n) => {
      const i = n.lastIndexOf(':')
      return { host: n.slice(0, i), port: Number(n.slice(i + 1)) }
    })
    const client = new Cluster(startup, {
      enableOfflineQueue: true,
      // ioredis's cluster auto-pipelining refuses a pipeline whose scripts' keys span slots of one
      // node ("All keys in the pipeline should belong to the same slots allocation group").
      enableAutoPipelining: false,
      lazyConnect: true,
      // A master that died: ask the cluster for its new slot map soon and keep trying until a replica took over.
      clusterRetryStrategy: (times) => Math.min(RECONNECT_MIN_MS * 2 ** Math.min(times, 10), RECONNECT_MAX_MS),
      retryDelayOnFailover: 100,
      retryDelayOnClusterDown: 200,
      retryDelayOnTryAgain: 100,
      maxRedirections: 64,
      slotsRefreshInterval: 2000,
      redisOptions: {
        connectTimeout: 2000,
        maxRetriesPerRequest: MAX_RETRIES_PER_REQUEST,
        connectionName: 'activity-gateway',
        ...(options.password ? { password: options.password } : {})
      }
    })
    return RedisStore.open(defineScripts(client), where, log, options.connectTimeoutMs ?? CONNECT_TIMEOUT_MS, true)
  }

  /** Connects and waits until Redis answers (at most 10 s by default), then stays connected through outages. */
  static async connect(url: string, log: Logger, options: { connectTimeoutMs?: number } = {}): Promise<RedisStore> {
    const client = new Redis(url, {
      lazyConnect: true,
      enableOfflineQueue: true,
      maxRetriesPerRequest: MAX_RETRIES_PER_REQUEST,
      connectTimeout: 2000,
      // Never give up: back off to RECONNECT_MAX_MS and keep trying while the process lives.
      retryStrategy: (times) => Math.min(RECONNECT_MIN_MS * 2 ** Math.min(times, 10), RECONNECT_MAX_MS),
      connectionName: 'activity-gateway',
      // Commands issued in one event-loop turn (many requests' token reads, nonces and rate-limit
      // counters) go out in one socket write instead of one write each: per-command socket writes led
      // the profile of a signed read on Redis (bench/PROFILES.md, the first table's Redis row).
      enableAutoPipelining: true
    })
    return RedisStore.open(defineScripts(client), redactRedisUrl(url), log, options.connectTimeoutMs ?? CONNECT_TIMEOUT_MS, false)
  }

  private static async open(redis: ScriptedRedis, where: string, log: Logger, connectTimeoutMs: number, cluster: boolean): Promise<RedisStore> {
    const storeLog = log.child({ component: 'store', redis: where })
    let outage = false
    redis.on('error', (err: Error) => {
      // `err` would go through the error serializer, which expects an Error, not its message.
      if (!outage) storeLog.warn({ error: err.message }, 'redis connection error; reconnecting')
      outage = true
    })
    redis.on('ready', () => {
      if (outage) storeLog.info('redis reconnected')
      outage = false
    })

    // Startup waits for Redis through the same reconnect loop (it may still be starting), bounded.
    let lastError = ''
    const noteError = (err: Error): void => {
      lastError = err.message
    }
    redis.on('error', noteError)
    const ready = new Promise<void>((resolve) => redis.once('ready', () => resolve()))
    let timer: NodeJS.Timeout | undefined
    const timedOut = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(true), connectTimeoutMs)
    })
    redis.connect().catch(() => undefined)
    const late = await Promise.race([ready.then(() => false), timedOut])
    clearTimeout(timer)
    redis.off('error', noteError)
    if (late) {
      redis.disconnect()
      throw new Error(`cannot reach Redis at ${where} within ${connectTimeoutMs} ms${lastError ? `: ${lastError}` : ''}`)
    }
    const store = new RedisStore(redis, storeLog, cluster)
    if (!cluster) await store.readReplicas().catch(() => undefined)
    return store
  }

  private async readReplicas(): Promise<void> {
    const info = await (this.redis as Redis).info('replication')
    this.replicas = Number(/connected_slaves:(\d+)/.exec(info)?.[1] ?? 0)
    this.replicasReadAt = Date.now()
  }

  private get r(): ScriptedRedis {
    // Shutting down: requests still in flight are refused as unavailable, not failed as bugs.
    if (this.closed) throw new StoreUnavailableError('store is closed')
    return this.redis
  }

  async get(key: string): Promise<string | undefined> {
    return (await this.r.get(key)) ?? undefined
  }

  async mget(keys: string[]): Promise<Array<string | undefined>> {
    if (keys.length === 0) return []
    if (!this.cluster) return (await this.r.mget(...keys)).map((v) => v ?? undefined)
    const out = new Array<string | undefined>(keys.length)
    await Promise.all(
      keysBySlot(keys).map(async (g) => {
        const values = await this.r.mget(...g.keys)
        g.positions.forEach((at, i) => (out[at] = values[i] ?? undefined))
      })
    )
    return out
  }

  async set(key: string, value: string, ttlMs?: number): Promise<void> {
    if (ttlMs === undefined) await this.r.set(key, value)
    else await this.r.set(key, value, 'PX', ttlArg(ttlMs))
  }

  async setIfAbsent(key: string, value: string, ttlMs?: number): Promise<boolean> {
    const reply = ttlMs === undefined ? await this.r.set(key, value, 'NX') : await this.r.set(key, value, 'PX', ttlArg(ttlMs), 'NX')
    return reply === 'OK'
  }

  async del(...keys: string[]): Promise<number> {
    if (keys.length === 0) return 0
    if (!this.cluster) return this.r.del(...keys)
    const counts = await Promise.all(keysBySlot(keys).map((g) => this.r.del(...g.keys)))
    return counts.reduce((a, b) => a + b, 0)
  }

  async exists(key: string): Promise<boolean> {
    return (await this.r.exists(key)) === 1
  }

  async pexpire(key: string, ttlMs: number): Promise<boolean> {
    assertFiniteNumber(ttlMs, 'ttl')
    return (await this.r.pexpire(key, Math.round(ttlMs))) === 1
  }

  async pttl(key: string): Promise<number> {
    return this.r.pttl(key)
  }


  async incr(key: string, by = 1, ttlMs?: number): Promise<number> {
    assertFiniteNumber(by, 'increment')
    const ttl = ttlMs === undefined ? '' : ttlArg(ttlMs)
    return Number(await this.r.gwIncr(key, String(by), ttl, isIntegerIncrement(by) ? 'int' : 'float'))
  }

  async hget(key: string, field: string): Promise<string | undefined> {
    return (await this.r.hget(key, field)) ?? undefined
  }

  async hset(key: string, fields: Record<string, string>): Promise<void> {
    const flat = Object.entries(fields).flat()
    if (flat.length === 0) return
    await this.r.hset(key, ...flat)
  }

  async hdel(key: string, ...fields: string[]): Promise<number> {
    if (fields.length === 0) return 0
    return this.r.hdel(key, ...fields)
  }

  async hgetall(key: string): Promise<Record<string, string>> {
    return { ...(await this.r.hgetall(key)) }
  }

  async hincr(key: string, field: string, by = 1): Promise<number> {
    assertFiniteNumber(by, 'increment')
    if (isIntegerIncrement(by)) return this.r.hincrby(key, field, by)
    return Number(await this.r.hincrbyfloat(key, field, by))
  }

  async sadd(key: string, ...members: string[]): Promise<number> {
    if (members.length === 0) return 0
    return this.r.sadd(key, ...members)
  }

  async srem(key: string, ...members: string[]): Promise<number> {
    if (members.length === 0) return 0
    return this.r.srem(key, ...members)
  }

  async smembers(key: string): Promise<string[]> {
    return this.r.smembers(key)
  }

  async sismember(key: string, member: string): Promise<boolean> {
    return (await this.r.sismember(key, member)) === 1
  }

  async scard(key: string): Promise<number> {
    return this.r.scard(key)
  }

  async zadd(key: string, score: number, member: string): Promise<void> {
    await this.r.zadd(key, scoreArg(score), member)
  }

  async zrem(key: string, ...members: string[]): Promise<number> {
    if (members.length === 0) return 0
    return this.r.zrem(key, ...members)
  }

  async zscore(key: string, member: string): Promise<number | undefined> {
    const raw = await this.r.zscore(key, member)
    return raw === null ? undefined : parseScore(raw)
  }

  async zcard(key: string): Promise<number> {
    return this.r.zcard(key)
  }

  async zrangeByScore(key: string, min: number, max: number, options: RangeOptions = {}): Promise<ScoredMember[]> {
    const offset = Math.max(0, Math.floor(options.offset ?? 0))
    const count = options.limit === undefined ? -1 : Math.max(0, Math.floor(options.limit))
    if (count === 0) return []
    const flat = options.reverse
      ? await this.r.zrevrangebyscore(key, scoreArg(max), scoreArg(min), 'WITHSCORES', 'LIMIT', offset, count)
      : await this.r.zrangebyscore(key, scoreArg(min), scoreArg(max), 'WITHSCORES', 'LIMIT', offset, count)
    return pairs(flat)
  }

  async zrange(key: string, start: number, stop: number, options: { reverse?: boolean } = {}): Promise<ScoredMember[]> {
    const flat = options.reverse ? await this.r.zrevrange(key, start, stop, 'WITHSCORES') : await this.r.zrange(key, String(start), String(stop), 'WITHSCORES')
    return pairs(flat)
  }

  async zpopByScore(key: string, max: number, limit: number): Promise<ScoredMember[]> {
    if (limit <= 0) return []
    return pairs(await this.r.gwZpop(key, scoreArg(max), String(Math.floor(limit))))
  }

  async *scanPrefix(prefix: string): AsyncIterable<string> {
    const pattern = `${globEscape(prefix)}*`
    // SCAN may return a key more than once while the keyspace is rehashed.
    const seen = new Set<string>()
    const nodes: Redis[] = this.redis instanceof Cluster ? this.redis.nodes('master') : [this.r as Redis]
    for (const node of nodes) {
      let cursor = '0'
      do {
        const [next, keys] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', SCAN_COUNT)
        cursor = next
        for (const key of keys) {
          if (seen.has(key)) continue
          seen.add(key)
          yield key
        }
      } while (cursor !== '0')
    }
  }

  async batch(ops: StoreOp[], options: BatchOptions = {}): Promise<void> {
    if (ops.length === 0) return
    const r = this.r
    const slots: number[] = []
    if (options.trusted) {
      const groups = commandsBySlot(ops, this.cluster)
      await Promise.all(groups.map((g) => this.transaction(g.commands)))
      for (const g of groups) slots.push(g.slot)
    } else {
      const groups = this.cluster ? [...opsBySlot(ops)] : [[0, ops] as const]
      // Every argument is checked before any group is sent: a refused op writes nothing anywhere.
      const encoded = groups.map(([, g]) => ({ keys: [...new Set(g.map((op) => op.key))], json: JSON.stringify(g.map(encodeOp)) }))
      await Promise.all(encoded.map((g) => r.gwBatch(g.keys.length, ...g.keys, g.json)))
      for (const [slot] of groups) slots.push(slot)
    }
    if (options.replicated) await this.waitForReplicas(slots)
  }

  /**
   * One slot's commands: alone, or in MULTI/EXEC when there are several. Plain string writes of
   * their own keys (records written whole, each by one SET) go without it: each key is replaced
   * whole by one command, and nothing of the batch depends on which of them a reader sees first.
   */
  private async transaction(commands: RedisCommand[]): Promise<void> {
    const r = this.r
    if (commands.length === 1 || commands.every(([name]) => name === 'set' || name === 'mset')) {
      await Promise.all(commands.map(([name, ...args]) => r.call(name, ...args)))
      return
    }
    const tx = r.multi()
    for (const [name, ...args] of commands) tx.call(name, ...args)
    const replies = await tx.exec()
    const failed = replies?.find(([err]) => err)
    if (failed) throw failed[0] as Error
  }

  /**
   * WAIT on each master written (the slots' masters on a cluster) that has
   * replicas: the writes are on a replica too before the caller goes on. A
   * replica that does not answer within REPLICA_ACK_TIMEOUT_MS does not stop
   * the service: the batch counts as unreplicated and a warning says so.
   */
  private async waitForReplicas(slots: number[]): Promise<void> {
    const waits: Array<Promise<unknown>> = []
    if (this.redis instanceof Cluster) {
      const cluster = this.redis
      const masters = new Set<string>()
      for (const slot of slots) {
        const nodes = cluster.slots[slot]
        if (nodes && nodes.length > 1 && nodes[0]) masters.add(nodes[0])
      }
      if (masters.size === 0) return
      const byKey = new Map(cluster.nodes('master').map((n) => [`${n.options.host}:${n.options.port}`, n]))
      for (const m of masters) {
        const node = byKey.get(m)
        if (node) waits.push(node.call('WAIT', 1, REPLICA_ACK_TIMEOUT_MS))
      }
    } else {
      if (Date.now() - this.replicasReadAt > 60_000) await this.readReplicas().catch(() => undefined)
      if (this.replicas === 0) return
      waits.push(this.r.call('WAIT', 1, REPLICA_ACK_TIMEOUT_MS))
    }
    const acks = await Promise.all(waits)
    if (acks.some((n) => Number(n) < 1)) {
      this.unreplicatedBatches++
      this.log.warn({ masters: acks.length }, 'a replicated batch was not acknowledged by a replica in time; it is on the master only')
    }
  }

  async ping(): Promise<void> {
    const redis = this.r
    if (redis.status !== 'ready') throw new StoreUnavailableError(`redis unavailable (${redis.status})`)
    let timer: NodeJS.Timeout | undefined
    try {
      await Promise.race([
        redis.ping(),
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new StoreUnavailableError(`redis did not answer PING within ${PING_TIMEOUT_MS} ms`)), PING_TIMEOUT_MS)
        })
      ])
    } finally {
      clearTimeout(timer)
    }
  }

  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    if (this.redis.status === 'ready') {
      await this.redis.quit().catch((err: unknown) => this.log.warn({ err }, 'redis quit failed'))
    }
    this.redis.disconnect()
  }
}

