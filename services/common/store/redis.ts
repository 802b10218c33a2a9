import Redis from 'ioredis'
import { JsonValues } from './json'
import { assertFiniteNumber, isIntegerIncrement } from './numbers'
import type { Logger } from 'pino'
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
 * Lua scripts, which Redis runs without interleaving. Redis never rolls back
 * half a script, so `batch` first simulates every op (key types, and the
 * value each increment would read, with Redis's number syntax: see
 * numbers.ts) and writes nothing unless every op would succeed. Arguments
 * Redis would refuse (NaN scores, increments or TTLs) are refused here
 * before the script is sent.
 */

const RECONNECT_MIN_MS = 50
const RECONNECT_MAX_MS = 1000
const MAX_RETRIES_PER_REQUEST = 14
const CONNECT_TIMEOUT_MS = 10_000
const PING_TIMEOUT_MS = 1000
const SCAN_COUNT = 500
/** Lua's unpack() has a stack limit: variadic commands are sent in slices. */
const LUA_SLICE = 1000

const INCR_SCRIPT = `
local existed = redis.call('EXISTS', KEYS[1])
local v
if ARGV[3] == 'int' then v = redis.call('INCRBY', KEYS[1], ARGV[1]) else v = redis.call('INCRBYFLOAT', KEYS[1], ARGV[1]) end
if existed == 0 and ARGV[2] ~= '' then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return tostring(v)
`

const ZPOP_SCRIPT = `
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
for i = 1, #due, 2 do redis.call('ZREM', KEYS[1], due[i]) end
return due
`

/** ARGV[1]: JSON array of ops (see encodeOp); KEYS: every key, for cluster routing. */
const BATCH_SCRIPT = `
local ops = cjson.decode(ARGV[1])
local slice = ${LUA_SLICE}
local needs = { hset = 'hash', hdel = 'hash', sadd = 'set', srem = 'set', zadd = 'zset', zrem = 'zset', incr = 'string' }
local creates = { hset = true, sadd = true, zadd = true, incr = true }
local types = {}
local function typeof(k)
  if types[k] == nil then types[k] = redis.call('TYPE', k).ok end
  return types[k]
end
-- What INCRBY / INCRBYFLOAT would read: 'int' (canonical 64-bit integer, as Redis's
-- string2ll accepts), 'float' (plain decimal), or 'text'; with its numeric value.
local INT64 = 9223372036854775807
local function isint(v)
  if v == '0' then return true end
  if string.find(v, '^%-?[1-9]%d*$') == nil then return false end
  local digits = string.gsub(v, '^%-', '')
  if #digits ~= 19 then return #digits < 19 end
  if string.sub(v, 1, 1) == '-' then return digits <= '9223372036854775808' end
  return digits <= '9223372036854775807'
end
local function isdecimal(v)
  local mantissa = string.match(v, '^(.-)[eE][-+]?%d+$') or v
  return (string.find(mantissa, '^[-+]?%d+%.?%d*$') ~= nil or string.find(mantissa, '^[-+]?%.%d+$') ~= nil)
end
local function classify(v)
  if isint(v) then return { kind = 'int', num = tonumber(v) } end
  local n = tonumber(v)
  if isdecimal(v) and n ~= nil and n == n and n ~= math.huge and n ~= -math.huge then return { kind = 'float', num = n } end
  return { kind = 'text', num = 0 }
end
local values = {}
local function valueof(k)
  if values[k] == nil then
    if typeof(k) == 'string' then values[k] = classify(redis.call('GET', k)) else values[k] = { kind = 'none', num = 0 } end
  end
  return values[k]
end
local function refuse(i, op, why)
  return redis.error_reply('ERR batch op ' .. i .. ' (' .. op.op .. ') on key ' .. op.key .. ': ' .. why)
end
for i, op in ipairs(ops) do
  local t = typeof(op.key)
  local need = needs[op.op]
  if need and t ~= 'none' and t ~= need then
    return redis.error_reply('WRONGTYPE batch op ' .. i .. ' (' .. op.op .. ') on key ' .. op.key .. ' holding a ' .. t)
  end
  if op.op == 'set' then
    types[op.key] = 'string'
    values[op.key] = classify(op.value)
  elseif op.op == 'del' then
    types[op.key] = 'none'
    values[op.key] = { kind = 'none', num = 0 }
  elseif op.op == 'incr' then
    local cur = valueof(op.key)
    local n = cur.num + tonumber(op.by)
    if op.int then
      if cur.kind ~= 'none' and cur.kind ~= 'int' then return refuse(i, op, 'value is not an integer or out of range') end
      -- Lua numbers are doubles: refuse slightly early rather than let INCRBY fail half-way.
      if n >= INT64 - 4096 or n <= -INT64 + 4096 then return refuse(i, op, 'increment would overflow') end
      values[op.key] = { kind = 'int', num = n }
    else
      if cur.kind == 'text' then return refuse(i, op, 'value is not a valid float') end
      if n ~= n or n == math.huge or n == -math.huge then return refuse(i, op, 'increment would produce NaN or Infinity') end
      -- INCRBYFLOAT stores an integral result without a fraction ("3"), which INCRBY accepts later.
      local integral = n == math.floor(n) and n < INT64 - 4096 and n > -INT64 + 4096
      values[op.key] = { kind = integral and 'int' or 'float', num = n }
    end
    types[op.key] = 'string'
  elseif creates[op.op] then
    types[op.key] = need
  end
end
local function variadic(cmd, key, items)
  for s = 1, #items, slice do
    redis.call(cmd, key, unpack(items, s, math.min(s + slice - 1, #items)))
  end
end
for _, op in ipairs(ops) do
  local o = op.op
  if o == 'set' then
    if op.ttl then redis.call('SET', op.key, op.value, 'PX', op.ttl) else redis.call('SET', op.key, op.value) end
  elseif o == 'del' then redis.call('DEL', op.key)
  elseif o == 'hset' then if #op.items > 0 then variadic('HSET', op.key, op.items) end
  elseif o == 'hdel' then if #op.items > 0 then variadic('HDEL', op.key, op.items) end
  elseif o == 'sadd' then if #op.items > 0 then variadic('SADD', op.key, op.items) end
  elseif o == 'srem' then if #op.items > 0 then variadic('SREM', op.key, op.items) end
  elseif o == 'zrem' then if #op.items > 0 then variadic('ZREM', op.key, op.items) end
  elseif o == 'zadd' then redis.call('ZADD', op.key, op.score, op.member)
  elseif o == 'incr' then
    if op.int then redis.call('INCRBY', op.key, op.by) else redis.call('INCRBYFLOAT', op.key, op.by) end
  elseif o == 'pexpire' then redis.call('PEXPIRE', op.key, op.ttl)
  end
end
return #ops
`

interface ScriptedRedis extends Redis {
  gwIncr(key: string, by: string, ttl: string, kind: 'int' | 'float'): Promise<string>
  gwZpop(key: string, max: string, limit: string): Promise<string[]>
  gwBatch(numKeys: number, ...args: string[]): Promise<number>
}

/** Redis score syntax (Infinity is `+inf`). */
function scoreArg(score: number): string {
  if (score === Number.POSITIVE_INFINITY) return '+inf'
  if (score === Number.NEGATIVE_INFINITY) return '-inf'
  if (Number.isNaN(score)) throw new TypeError('score must be a number, got NaN')
  return String(score)
}

function parseScore(raw: string): number {
  if (raw === 'inf' || raw === '+inf') return Number.POSITIVE_INFINITY
  if (raw === '-inf') return Number.NEGATIVE_INFINITY
  return Number(raw)
}

function pairs(flat: string[]): ScoredMember[] {
  const out: ScoredMember[] = []
  for (let i = 0; i + 1 < flat.length; i += 2) out.push({ member: flat[i] as string, score: parseScore(flat[i + 1] as string) })
  return out
}

/** Redis wants a positive integer number of milliseconds. */
function ttlArg(ttlMs: number): string {
  if (!Number.isFinite(ttlMs)) throw new TypeError(`ttl must be a finite number of ms, got ${ttlMs}`)
  return String(Math.max(1, Math.round(ttlMs)))
}

function encodeOp(op: StoreOp): Record<string, unknown> {
  switch (op.op) {
    case 'set':
      return op.ttlMs === undefined ? { op: 'set', key: op.key, value: op.value } : { op: 'set', key: op.key, value: op.value, ttl: ttlArg(op.ttlMs) }
    case 'del':
      return { op: 'del', key: op.key }
    case 'hset':
      return { op: 'hset', key: op.key, items: Object.entries(op.fields).flat() }
    case 'hdel':
      return { op: 'hdel', key: op.key, items: op.fields }
    case 'sadd':
    case 'srem':
      return { op: op.op, key: op.key, items: op.members }
    case 'zrem':
      return { op: 'zrem', key: op.key, items: op.members }
    case 'zadd':
      return { op: 'zadd', key: op.key, score: scoreArg(op.score), member: op.member }
    case 'incr':
      assertFiniteNumber(op.by, 'increment')
      return { op: 'incr', key: op.key, by: String(op.by), int: isIntegerIncrement(op.by) }
    case 'pexpire':
      assertFiniteNumber(op.ttlMs, 'ttl')
      return { op: 'pexpire', key: op.key, ttl: String(Math.round(op.ttlMs)) }
  }
}

/** Glob-escapes a literal prefix for SCAN MATCH. */
function globEscape(prefix: string): string {
  return prefix.replace(/[*?[\]\\]/g, (c) => `\\${c}`)
}

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
    const redis = new Redis(url, {
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
    }) as ScriptedRedis
    redis.defineCommand('gwIncr', { numberOfKeys: 1, lua: INCR_SCRIPT })
    redis.defineCommand('gwZpop', { numberOfKeys: 1, lua: ZPOP_SCRIPT })
    redis.defineCommand('gwBatch', { lua: BATCH_SCRIPT })

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
