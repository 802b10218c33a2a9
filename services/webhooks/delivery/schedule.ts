import type { ScoredMember, Store, StoreOp } from '../../common/store/types'
import { DELIVERY_TAGS, deliveryTag } from '../keys'

/**
 * The retry schedule: which deliveries are due when. This module is the only
 * one that names its keys; every other stage asks it for the writes it
 * needs (an entry due at a time, an entry gone) and adds them to its own
 * store batch, so the schedule changes in the same atomic write as the
 * delivery's record.
 *
 * The schedule is sharded by the delivery's hash tag (keys.ts): twelve
 * sorted sets `webhooks:retries:{tag}`, member `{webhook_id}:{delivery_id}`,
 * score the due time (ms). A delivery's entry sits in the same hash slot as
 * its record and claim, and no one sorted set takes every delivery's writes:
 * on a Redis Cluster the schedule spreads over the masters
 * (docs/operations.md "Redis Cluster"). A scheduler pass reads every shard
 * (in one pipelined round) and merges their pages by due time.
 */

export interface Scheduled {
  webhookId: string
  deliveryId: string
}

export interface DueEntry extends Scheduled {
  dueAt: number
}

/**
 * How the delivery path writes its batches: every key it writes is its own,
 * of a type fixed by its name (the service's keyspace, keys.ts), so the
 * store need not check each key's type first (Store.batch `trusted`).
 */
export const KNOWN_KEYS = { trusted: true } as const

const KEY_PREFIX = 'webhooks:retries:'

function shardKey(tag: string): string {
  return `${KEY_PREFIX}{${tag}}`
}

/** The shard holding a delivery's entry. */
function keyOf(deliveryId: string): string {
  return shardKey(deliveryTag(deliveryId))
}

/** Every shard's key. */
export function scheduleKeys(): string[] {
  return DELIVERY_TAGS.map(shardKey)
}

/** The webhook id travels with the delivery id so the scheduler needs no lookup. */
/** The member naming a delivery in the schedule's sorted sets (and in a process's lease set, leases.ts). */
export function memberOf(d: Scheduled): string {
  return `${d.webhookId}:${d.deliveryId}`
}

export function parseMember(member: string): Scheduled | undefined {
  const i = member.indexOf(':')
  if (i <= 0) return undefined
  return { webhookId: member.slice(0, i), deliveryId: member.slice(i + 1) }
}

/** The write that makes `d` due at `at` (ms): a new entry, or its entry moved. */
export function dueAt(d: Scheduled, at: number): StoreOp {
  return { op: 'zadd', key: keyOf(d.deliveryId), score: at, member: memberOf(d) }
}

/** The write that takes `d` off the schedule (finished: delivered, failed or cancelled). */
export function unscheduled(d: Scheduled): StoreOp {
  return { op: 'zrem', key: keyOf(d.deliveryId), members: [memberOf(d)] }
}

/** When `d` is due, or undefined when it is not on the schedule. */
export function scheduledAt(store: Store, d: Scheduled): Promise<number | undefined> {
  return store.zscore(keyOf(d.deliveryId), memberOf(d))
}

/** Entries on the schedule, every shard together. */
export async function scheduleSize(store: Store): Promise<number> {
  const sizes = await Promise.all(scheduleKeys().map((k) => store.zcard(k)))
  return sizes.reduce((a, b) => a + b, 0)
}

/**
 * Page `page` (0 first) of the entries due by `now`, earliest first: each
 * shard's page of `perShard` entries, read together and merged. `full`: some
 * shard had a full page (more may be due past it).
 */
export async function readDue(store: Store, now: number, page: number, perShard: number): Promise<{ entries: DueEntry[]; full: boolean }> {
  const pages = await Promise.all(scheduleKeys().map((k) => store.zrangeByScore(k, 0, now, { offset: page * perShard, limit: perShard })))
  const entries: DueEntry[] = []
  let full = false
  for (const members of pages) {
    if (members.length === perShard) full = true
    for (const m of members) {
      const parsed = parseMember(m.member)
      if (parsed) entries.push({ ...parsed, dueAt: m.score })
    }
  }
  entries.sort((a, b) => a.dueAt - b.dueAt)
  return { entries, full }
}

/** Every entry with its due time (operators' and tests' view; reads whole shards). */
export async function allScheduled(store: Store): Promise<DueEntry[]> {
  const shards: ScoredMember[][] = await Promise.all(scheduleKeys().map((k) => store.zrange(k, 0, -1)))
  return shards
    .flat()
    .flatMap((m) => {
      const parsed = parseMember(m.member)
      return parsed ? [{ ...parsed, dueAt: m.score }] : []
    })
    .sort((a, b) => a.dueAt - b.dueAt)
}

/** Whether a store key is one of the schedule's (tests inspect the writes of a batch). */
export function isScheduleKey(key: string): boolean {
  return key.startsWith(KEY_PREFIX)
}
