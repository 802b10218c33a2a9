import calculateSlot from 'cluster-key-slot'
import { compactCounters } from './coalescer'
import { assertFiniteNumber, isIntegerIncrement } from './numbers'
import { scoreArg, ttlArg } from './redis-args'
import type { StoreOp } from './types'

/**
 * A batch of writes whose key types are known by construction, as the Redis
 * commands that apply it in as few commands as the batch allows
 * (RedisStore.batch with `trusted`).
 *
 * Ops are grouped by hash slot (a Redis Cluster transaction stays in one
 * slot); within a group:
 *  - each run of one variadic op (zadd, zrem, sadd, srem, hset, hdel) on a
 *    key becomes one command, and a key's commands go out together, in
 *    its order, at the place of its first op;
 *  - keys that only get one `set` without expiry share one MSET, and keys
 *    that are only deleted share one DEL;
 *  - counters (only incr and pexpire) get one of each (compactCounters);
 *  - anything else keeps its op, in order.
 * The group is applied in one MULTI/EXEC, so no reader sees it half done:
 * reordering ops of different keys inside it changes nothing anyone sees,
 * and each key's own ops keep their order. Nothing is checked first (no
 * TYPE per key, as the validating batch script does): a wrong type fails its
 * command alone, which is why only writers of known keys use this.
 */

export type RedisCommand = [name: string, ...args: Array<string | number>]

export interface SlotCommands {
  /** A key of the group, for routing. */
  key: string
  slot: number
  commands: RedisCommand[]
}

type Mergeable = 'zadd' | 'zrem' | 'sadd' | 'srem' | 'hset' | 'hdel'
const MERGEABLE = new Set<string>(['zadd', 'zrem', 'sadd', 'srem', 'hset', 'hdel'])
/** Largest variadic command built (Redis takes more; a bound keeps one reply and one request sane). */
const MAX_ARGS = 2000

function single(op: StoreOp): RedisCommand {
  switch (op.op) {
    case 'set':
      return op.ttlMs === undefined ? ['set', op.key, op.value] : ['set', op.key, op.value, 'PX', ttlArg(op.ttlMs)]
    case 'del':
      return ['del', op.key]
    case 'hset':
      return ['hset', op.key, ...Object.entries(op.fields).flat()]
    case 'hdel':
      return ['hdel', op.key, ...op.fields]
    case 'sadd':
    case 'srem':
      return [op.op, op.key, ...op.members]
    case 'zrem':
      return ['zrem', op.key, ...op.members]
    case 'zadd':
      return ['zadd', op.key, scoreArg(op.score), op.member]
    case 'incr':
      assertFiniteNumber(op.by, 'increment')
      return isIntegerIncrement(op.by) ? ['incrby', op.key, String(op.by)] : ['incrbyfloat', op.key, String(op.by)]
    case 'pexpire':
      assertFiniteNumber(op.ttlMs, 'ttl')
      return ['pexpire', op.key, String(Math.round(op.ttlMs))]
  }
}

/** The args one op adds to its key's variadic command. */
function mergedArgs(op: StoreOp): string[] {
  switch (op.op) {
    case 'zadd':
      return [scoreArg(op.score), op.member]
    case 'hset':
      return Object.entries(op.fields).flat()
    case 'hdel':
      return op.fields
    case 'zrem':
    case 'sadd':
    case 'srem':
      return op.members
    default:
      throw new Error(`op ${op.op} is not variadic`)
  }
}

/** Commands of one slot's ops (see the header). */
export function commandsOf(ops: StoreOp[]): RedisCommand[] {
  const compact = compactCounters(ops)
  const byKey = new Map<string, StoreOp[]>()
  for (const op of compact) {
    const list = byKey.get(op.key)
    if (list) list.push(op)
    else byKey.set(op.key, [op])
  }
  const out: RedisCommand[] = []
  let mset: RedisCommand | undefined
  let del: RedisCommand | undefined
  // Each key's commands go out together, at its first op's place: the group is one transaction, so
  // the order between different keys is seen by nobody, and each key keeps its own order.
  for (const [key, list] of byKey) {
    const first = list[0] as StoreOp
    if (list.length === 1 && first.op === 'set' && first.ttlMs === undefined) {
      if (!mset) out.push((mset = ['mset']))
      mset.push(key, first.value)
      continue
    }
    if (list.every((o) => o.op === 'del')) {
      if (!del) out.push((del = ['del']))
      del.push(key)
      continue
    }
    // A run of one variadic op (the hour's HSETs before its PEXPIRE) is one command.
    for (let i = 0; i < list.length; ) {
      const op = list[i] as StoreOp
      if (!MERGEABLE.has(op.op)) {
        out.push(single(op))
        i++
        continue
      }
      let j = i
      const args: string[] = []
      while (j < list.length && (list[j] as StoreOp).op === op.op) args.push(...mergedArgs(list[j++] as StoreOp))
      const per = op.op === 'zadd' || op.op === 'hset' ? 2 : 1
      const chunk = MAX_ARGS - (MAX_ARGS % per)
      // A variadic op with nothing in it writes nothing (Redis would refuse the command).
      for (let k = 0; k < args.length; k += chunk) out.push([op.op as Mergeable, key, ...args.slice(k, k + chunk)])
      i = j
    }
  }
  return out
}

/** The batch's commands per hash slot (one group holding everything when `cluster` is false). */
export function commandsBySlot(ops: StoreOp[], cluster: boolean): SlotCommands[] {
  if (ops.length === 0) return []
  if (!cluster) return [{ key: ops[0]?.key as string, slot: 0, commands: commandsOf(ops) }]
  return [...opsBySlot(ops)].map(([slot, list]) => ({ key: list[0]?.key as string, slot, commands: commandsOf(list) }))
}

/** A batch's ops grouped by hash slot, each group in the batch's order. */
export function opsBySlot(ops: StoreOp[]): Map<number, StoreOp[]> {
  const groups = new Map<number, StoreOp[]>()
  for (const op of ops) {
    const slot = calculateSlot(op.key)
    const list = groups.get(slot)
    if (list) list.push(op)
    else groups.set(slot, [op])
  }
  return groups
}

/** Groups keys by hash slot, keeping each key's position (multi-key reads and deletes on a cluster). */
export function keysBySlot(keys: string[]): Array<{ slot: number; keys: string[]; positions: number[] }> {
  const groups = new Map<number, { slot: number; keys: string[]; positions: number[] }>()
  keys.forEach((key, i) => {
    const slot = calculateSlot(key)
    let g = groups.get(slot)
    if (!g) groups.set(slot, (g = { slot, keys: [], positions: [] }))
    g.keys.push(key)
    g.positions.push(i)
  })
  return [...groups.values()]
}
