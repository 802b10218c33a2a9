import type { BusMessage } from '../common/bus/types'
import type { Store } from '../common/store/types'
import type { EntityChange } from '../common/ads/entity-changes'

/**
 * The account-history keyspace. One entry per entity change, indexed per
 * entity by change time (the time window of a read):
 *
 *   history:entry:{change_id}                               HistoryEntry (JSON)
 *   history:entity:{account_id}:{entity_type}:{entity_id}   sorted set: change_id by change time (ms)
 *
 * Order: the topic is keyed by account, so one account's changes share a
 * partition, and the gateway publishes one entity's changes in the order
 * they committed (its outbox, under the entity's lease). The position on
 * the topic (partition, offset) is therefore THE order of an entity's
 * changes; the change time comes from the clock of whichever gateway made
 * the change, so with several gateways it can go backwards and is only
 * displayed (and used for the window).
 *
 * Recording is idempotent (keyed by change_id) and keeps the FIRST
 * position a change was read at: the relay publishes in order, so a
 * republished duplicate always comes after its first copy and must not
 * move it behind the changes that followed it.
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

/** Records the entry unless its change is already recorded; either way the entity index holds it. */
export async function recordEntry(store: Store, entry: HistoryEntry): Promise<void> {
  const first = await store.setJsonIfAbsent(HistoryKeys.entry(entry.change_id), entry)
  // A duplicate (or a retry after a crash between these two writes) indexes the entry as first recorded.
  const kept = first ? entry : ((await store.getJson<HistoryEntry>(HistoryKeys.entry(entry.change_id))) ?? entry)
  await store.zadd(HistoryKeys.entity(kept.account_id, kept.entity_type, kept.entity_id), kept.changed_at_ms, kept.change_id)
}

/** Where an entry was read on the topic: the order of one entity's changes, and the history cursor. */
export interface TopicPosition {
  partition: number
  offset: string
}

export function comparePositions(a: TopicPosition, b: TopicPosition): number {
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
  /** Only the entries after this position (the keyset cursor of the previous page). */
  after?: TopicPosition
}

/** The entity's changes within [fromMs, toMs) in the order they were made, optionally only those one user made. */
export async function queryEntries(store: Store, q: HistoryQuery): Promise<HistoryEntry[]> {
  const members = await store.zrangeByScore(HistoryKeys.entity(q.accountId, q.entityType, q.entityId), q.fromMs, q.toMs - 1)
  if (members.length === 0) return []
  const entries = await store.mgetJson<HistoryEntry>(members.map((m) => HistoryKeys.entry(m.member)))
  return entries
    .filter((e): e is HistoryEntry => e !== undefined && (q.userId === undefined || e.change_by.user_id === q.userId))
    .filter((e) => q.after === undefined || comparePositions(e, q.after) > 0)
    .sort(comparePositions)
}
