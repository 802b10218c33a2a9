import Redis from 'ioredis'
import { JsonValues } from './json'
import { assertFiniteNumber, isIntegerIncrement } from './numbers'
import type { Logger } from 'pino'
import { globEscape, pairs, parseScore, scoreArg, ttlArg } from './redis-args'
import { defineScripts, encodeOp, type ScriptedRedis } from './redis-scripts'
import type { RangeOptions, ScoredMember, Store, StoreOp } from './types'
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
 * Arguments Redis would refuse (NaN scores, increments or TTLs) are refused
 * here (redis-args.ts) before the command or script is sent.
 */

const RECONNECT_MIN_MS = 50
const RECONNECT_MAX_MS = 1000
const MAX_RETRIES_PER_REQUEST = 14
const CONNECT_TIMEOUT_MS = 10_000
const PING_TIMEOUT_MS = 1000
const SCAN_COUNT = 500

/** redis://user:secret@host -> redis://user:***@host, for logs. */
export function redactRedisUrl(url: string): string {
  return url.replace(/(\/\/[^:/@]*:)[^@/]*@/, '$1***@')
}

export class RedisStore extends JsonValues implements Store {
  readonly kind = 'redis' as const
  private closed = false

  private constructor(
    private readonly redis: ScriptedRedis,
    private readonly log: Logger
  ) {
    super()
  }

  /** Connects and waits until Redis answers (at most 10 s by default), then stays connected through outages. */
  static async connect(url: string, log: Logger, options: { connectTimeoutMs?: number } = {}): Promise<RedisStore> {
    const connectTimeoutMs = options.connectTimeoutMs ?? CONNECT_TIMEOUT_MS
    const where = redactRedisUrl(url)
    const storeLog = log.child({ component: 'store', redis: where })
    const client = new Redis(url, {
      lazyConnect: true,
      enableOfflineQueue: true,
      maxRetriesPerRequest: MAX_RETRIES_PER_REQUEST,
      connectTimeout: 2000,
      // Never give up: back off to RECONNECT_MAX_MS and keep trying while the process lives.
      retryStrategy: (times) => Math.min(RECONNECT_MIN_MS * 2 ** Math.min(times, 10), RECONNECT_MAX_MS),
      connectionName: 'activity-gateway',
      // Commands issued in one event-loop turn (many requests' token reads, nonces and rate-limit
      // counters) go out in one socket write instead of one write each: the profile of a signed read
      // on Redis spent a third of its time in per-command socket writes.
      enableAutoPipelining: true
    })
    const redis = defineScripts(client)

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
    return new RedisStore(redis, storeLog)
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
    return (await this.r.mget(...keys)).map((v) => v ?? undefined)
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
    return this.r.del(...keys)
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
    let cursor = '0'
    do {
      const [next, keys] = await this.r.scan(cursor, 'MATCH', pattern, 'COUNT', SCAN_COUNT)
      cursor = next
      for (const key of keys) {
        if (seen.has(key)) continue
        seen.add(key)
        yield key
      }
    } while (cursor !== '0')
  }

  async batch(ops: StoreOp[]): Promise<void> {
    if (ops.length === 0) return
    const keys = [...new Set(ops.map((op) => op.key))]
    await this.r.gwBatch(keys.length, ...keys, JSON.stringify(ops.map(encodeOp)))
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
