import type { BusMessage } from '../common/bus/types'
import type { Store } from '../common/store/types'
import type { EntityChange } from '../gateway/ads/entities'

/**
 * The account-history keyspace. One entry per entity change, indexed per
 * entity by change time:
 *
 *   history:entry:{change_id}                               HistoryEntry (JSON)
 *   history:entity:{account_id}:{entity_type}:{entity_id}   sorted set: change_id by change time (ms)
 *
 * Recording is idempotent (keyed by change_id), so a change the bus hands
 * over twice (at least once delivery, a restart before the commit) is
 * stored once. Changes of one entity made within the same millisecond are
 * ordered by their position on the topic: the topic is keyed by account,
 * so one account's changes share a partition and its offsets give the
 * order they were made in.
 */

export interface HistoryEntry {
  change_id: string
  account_id: string
  entity_type: string
  entity_id: string
  change_type: EntityChange['change_type']
  changed_at: string
  changed_at_ms: number
  change_by: EntityChange['changed_by']
  changes: EntityChange['changes']
  entity_data: EntityChange['entity_data']
  /** Where the change was read from, for ordering changes made in the same millisecond. */
  partition: number
  offset: string
}

export const HistoryKeys = {
  entry: (changeId: string) => `history:entry:${changeId}`,
  entity: (accountId: string, entityType: string, entityId: string) => `history:entity:${accountId}:${entityType}:${entityId}`
}

export function entryFromMessage(change: EntityChange, message: Pick<BusMessage, 'partition' | 'offset'>): HistoryEntry {
  return {
    change_id: change.change_id,
    account_id: change.account_id,
    entity_type: change.entity_type,
    entity_id: change.entity_id,
    change_type: change.change_type,
    changed_at: change.changed_at,
    changed_at_ms: Date.parse(change.changed_at),
    change_by: change.changed_by,
    changes: change.changes,
    entity_data: change.entity_data,
    partition: message.partition,
    offset: message.offset
  }
}

export async function recordEntry(store: Store, entry: HistoryEntry): Promise<void> {
  await store.batch([
    { op: 'set', key: HistoryKeys.entry(entry.change_id), value: JSON.stringify(entry) },
    { op: 'zadd', key: HistoryKeys.entity(entry.account_id, entry.entity_type, entry.entity_id), score: entry.changed_at_ms, member: entry.change_id }
  ])
}

function compareEntries(a: HistoryEntry, b: HistoryEntry): number {
  if (a.changed_at_ms !== b.changed_at_ms) return a.changed_at_ms - b.changed_at_ms
  if (a.partition !== b.partition) return a.partition - b.partition
  const oa = BigInt(a.offset)
  const ob = BigInt(b.offset)
  return oa < ob ? -1 : oa > ob ? 1 : 0
}

export interface HistoryQuery {
  accountId: string
  entityType: string
  entityId: string
  /** Inclusive, ms. */
  fromMs: number
  /** Exclusive, ms. */
  toMs: number
  userId?: string
}

/** The entity's changes within [fromMs, toMs), oldest first, optionally only those one user made. */
export async function queryEntries(store: Store, q: HistoryQuery): Promise<HistoryEntry[]> {
  const members = await store.zrangeByScore(HistoryKeys.entity(q.accountId, q.entityType, q.entityId), q.fromMs, q.toMs - 1)
  if (members.length === 0) return []
  const entries = await store.mgetJson<HistoryEntry>(members.map((m) => HistoryKeys.entry(m.member)))
  return entries
    .filter((e): e is HistoryEntry => e !== undefined && (q.userId === undefined || e.change_by.user_id === q.userId))
    .sort(compareEntries)
}
