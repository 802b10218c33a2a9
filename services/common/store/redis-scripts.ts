import type { Cluster, Redis } from 'ioredis'
import { assertFiniteNumber, isIntegerIncrement } from './numbers'
import { scoreArg, ttlArg } from './redis-args'
import type { StoreOp } from './types'

/**
 * The Lua scripts RedisStore runs for its multi-step operations (incr with
 * TTL, zpopByScore, batch), which Redis runs without interleaving, and the
 * form a batch's ops take on their way into the batch script (encodeOp).
 *
 * Redis never rolls back half a script, so the batch script first simulates
 * every op (key types, and the value each increment would read, with Redis's
 * number syntax: see numbers.ts) and writes nothing unless every op would
 * succeed.
 */

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

/** ARGV[1]: JSON array of ops (see encodeOp); KEYS: every key (one hash slot on a cluster). */
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

export interface ScriptCommands {
  gwIncr(key: string, by: string, ttl: string, kind: 'int' | 'float'): Promise<string>
  gwZpop(key: string, max: string, limit: string): Promise<string[]>
  gwBatch(numKeys: number, ...args: string[]): Promise<number>
}

/** One Redis, or a Redis Cluster (whose scripts are routed by their first key: all keys of one call share a slot). */
export type ScriptedRedis = (Redis | Cluster) & ScriptCommands

/** Registers the scripts on a client (before it connects). */
export function defineScripts(redis: Redis | Cluster): ScriptedRedis {
  redis.defineCommand('gwIncr', { numberOfKeys: 1, lua: INCR_SCRIPT })
  redis.defineCommand('gwZpop', { numberOfKeys: 1, lua: ZPOP_SCRIPT })
  redis.defineCommand('gwBatch', { lua: BATCH_SCRIPT })
  return redis as ScriptedRedis
}

/** One op of a batch as the batch script reads it; arguments Redis would refuse (NaN scores, increments or TTLs) are refused here. */
export function encodeOp(op: StoreOp): Record<string, unknown> {
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
