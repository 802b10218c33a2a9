import type { ServiceContext } from '../../common/context'
import { AdsError } from '../../common/errors'
import { newShortId, newUuid } from '../../common/ids'
import { TOPICS } from '../../common/bus/types'
import type { StoreOp } from '../../common/store/types'
import { type OutboxMessage, outboxOf } from '../outbox'
import { nowIso } from './accounts'
import { withLock } from './catalog/lock'
import type { Actor } from './conventions'
import type { ChangeType, EntityChange, EntityChangeInput } from '../../common/ads/entity-changes'

/**
 * Store-backed repository of one kind of advertising entity, scoped by
 * account. Every create, update and delete announces an entity change on
 * `ads.entity-changes` (key: account id) which the account-history service
 * consumes. Keys:
 *
 *   ads:{kind}:{account_id}:{id}        the entity (JSON)
 *   ads:{kind}-index:{account_id}       sorted set of ids by creation position
 *   ads:{kind}-lock:{account_id}:{id}   the lease that serializes changes of one entity
 *
 * No change is lost:
 *  - the entity write and its change event are ONE atomic store batch (the
 *    event goes to the gateway's outbox, services/gateway/outbox.ts, which
 *    publishes it after the commit and keeps retrying until the bus took it);
 *  - changes of one entity are serialized by its lease, so a change always
 *    starts from the latest committed state (two concurrent PUTs both land)
 *    and the diff's old values are the previous change's new values.
 */

export interface AdsEntity {
  id: string
  created_at: string
  updated_at: string
  deleted: boolean
}

export type { ChangeType, EntityChange, EntityChangeInput } from '../../common/ads/entity-changes'

export type NewFields<T extends AdsEntity> = Omit<T, keyof AdsEntity> & Partial<Pick<T, 'id'>>

export interface EntityRepoOptions<T> {
  /**
   * The public rendering of the entity, what the ads read returns. Account
   * history gets this (snapshot and diff), never the stored record with its
   * internal fields. Default: the stored record.
   */
  render?: (entity: T) => Record<string, unknown>
  /** How long a change waits for another change of the same entity before 423 LOCK_ACQUISITION_TIMEOUT. */
  lockWaitMs?: number
  /** Lease of one change; it expires by itself if its holder dies. */
  lockLeaseMs?: number
}

export interface CreateOptions<T> {
  /** Further messages committed with the entity (e.g. `post.create` of an organic post). */
  alsoPublish?: (entity: T) => OutboxMessage[]
}

/** Field-by-field difference of two snapshots (timestamps excluded). */
export function diffFields(before: Record<string, unknown> | undefined, after: Record<string, unknown>): EntityChange['changes'] {
  const changes: EntityChange['changes'] = {}
  const keys = new Set([...Object.keys(before ?? {}), ...Object.keys(after)])
  for (const k of keys) {
    if (k === 'updated_at') continue
    const a = before?.[k] ?? null
    const b = after[k] ?? null
    if (JSON.stringify(a) !== JSON.stringify(b)) changes[k] = { old: a, new: b }
  }
  return changes
}

export class EntityRepo<T extends AdsEntity> {
  private readonly render: (entity: T) => Record<string, unknown>

  constructor(
    private readonly ctx: ServiceContext,
    /** Entity type as account history names it: CAMPAIGN, LINE_ITEM, CARD... */
    readonly entityType: string,
    /** Keyspace segment: campaign, line_item, card... */
    readonly kind: string,
    private readonly options: EntityRepoOptions<T> = {}
  ) {
    this.render = options.render ?? ((e) => ({ ...(e as unknown as Record<string, unknown>) }))
  }

  key(accountId: string, id: string): string {
    return `ads:${this.kind}:${accountId}:${id}`
  }

  indexKey(accountId: string): string {
    return `ads:${this.kind}-index:${accountId}`
  }

  lockKey(accountId: string, id: string): string {
    return `ads:${this.kind}-lock:${accountId}:${id}`
  }

  async create(accountId: string, fields: NewFields<T>, actor: Actor, options: CreateOptions<T> = {}): Promise<T> {
    const id = fields.id ?? newShortId()
    const created = await this.locked(accountId, id, async () => {
      if (await this.ctx.store.exists(this.key(accountId, id))) return undefined
      const now = nowIso()
      const entity = { ...fields, id, created_at: now, updated_at: now, deleted: false } as unknown as T
      // A per-account sequence, not the clock: entities created in the same millisecond keep creation order.
      const position = await this.ctx.store.incr(`ads:${this.kind}-seq:${accountId}`)
      const writes: StoreOp[] = [
        { op: 'set', key: this.key(accountId, id), value: JSON.stringify(entity) },
        { op: 'zadd', key: this.indexKey(accountId), score: position, member: id }
      ]
      await this.commit(accountId, writes, 'CREATE', entity, undefined, actor, options.alsoPublish?.(entity) ?? [])
      return entity
    })
    if (created) return created
    if (fields.id !== undefined) throw new AdsError(409, { code: 'DUPLICATE', message: `${this.entityType} ${fields.id} already exists` })
    // A generated id that collided: astronomically rare, a new one is as good.
    return this.create(accountId, fields, actor, options)
  }

  async get(accountId: string, id: string, options: { withDeleted?: boolean } = {}): Promise<T | undefined> {
    const e = await this.ctx.store.getJson<T>(this.key(accountId, id))
    if (!e || (e.deleted && !options.withDeleted)) return undefined
    return e
  }

  async require(accountId: string, id: string, options: { withDeleted?: boolean; notFoundCode?: string } = {}): Promise<T> {
    const e = await this.get(accountId, id, options)
    if (!e) throw new AdsError(404, { code: (options.notFoundCode ?? 'NOT_FOUND') as 'NOT_FOUND', message: `${this.entityType} ${id} was not found` })
    return e
  }

  /** Every entity of the account in creation order, deleted ones included. */
  async list(accountId: string): Promise<T[]> {
    const ids = await this.ctx.store.zrange(this.indexKey(accountId), 0, -1)
    const all = await this.ctx.store.mgetJson<T>(ids.map((m) => this.key(accountId, m.member)))
    return all.filter((e): e is T => e !== undefined)
  }

  async update(accountId: string, id: string, patch: Partial<T>, actor: Actor, options: { notFoundCode?: string } = {}): Promise<T> {
    return this.updateWith(accountId, id, () => patch, actor, options)
  }

  /**
   * Read-modify-write of one entity under its lease: `change` receives the
   * entity as last committed and returns the patch (it may throw an
   * AdsError to refuse: nothing is written). Rules that look at several
   * fields must be checked inside `change`, against that entity, never
   * against one read before: this is what keeps two concurrent updates
   * from losing each other's changes or passing a rule neither would pass
   * together.
   */
  async updateWith(accountId: string, id: string, change: (before: T) => Partial<T> | Promise<Partial<T>>, actor: Actor, options: { notFoundCode?: string } = {}): Promise<T> {
    return this.locked(accountId, id, async () => {
      const before = await this.require(accountId, id, options)
      const patch = await change(before)
      const after = { ...before, ...patch, id: before.id, created_at: before.created_at, deleted: before.deleted, updated_at: nowIso() } as T
      await this.commit(accountId, [{ op: 'set', key: this.key(accountId, id), value: JSON.stringify(after) }], 'UPDATE', after, before, actor)
      return after
    })
  }

  async softDelete(accountId: string, id: string, actor: Actor, options: { notFoundCode?: string } = {}): Promise<T> {
    return this.locked(accountId, id, async () => {
      const before = await this.require(accountId, id, options)
      const after = { ...before, deleted: true, updated_at: nowIso() } as T
      await this.commit(accountId, [{ op: 'set', key: this.key(accountId, id), value: JSON.stringify(after) }], 'DELETE', after, before, actor)
      return after
    })
  }

  /** Permanently removes the entity (catalogs, products, poll cards). */
  async hardDelete(accountId: string, id: string, actor: Actor, options: { notFoundCode?: string } = {}): Promise<T> {
    return this.locked(accountId, id, async () => {
      const before = await this.require(accountId, id, options)
      const after = { ...before, deleted: true, updated_at: nowIso() } as T
      const writes: StoreOp[] = [
        { op: 'del', key: this.key(accountId, id) },
        { op: 'zrem', key: this.indexKey(accountId), members: [id] }
      ]
      await this.commit(accountId, writes, 'DELETE', after, before, actor)
      return after
    })
  }

  /** Runs `fn` holding the entity's lease (every change of one entity, across gateway processes, one at a time). */
  private locked<R>(accountId: string, id: string, fn: () => Promise<R>): Promise<R> {
    return withLock(this.ctx.store, this.lockKey(accountId, id), fn, {
      leaseMs: this.options.lockLeaseMs ?? 30_000,
      waitMs: this.options.lockWaitMs ?? 10_000
    })
  }

  /** The entity writes and their change event, committed together. */
  private async commit(accountId: string, writes: StoreOp[], changeType: ChangeType, after: T, before: T | undefined, actor: Actor, extra: OutboxMessage[] = []): Promise<void> {
    const data = this.render(after)
    const change = entityChangeMessage({
      account_id: accountId,
      entity_type: this.entityType,
      entity_id: after.id,
      change_type: changeType,
      changed_by: actor,
      changes: diffFields(before === undefined ? undefined : this.render(before), data),
      entity_data: data
    })
    await outboxOf(this.ctx).commit(writes, [change, ...extra])
  }
}

/** The outbox message of one entity change (a new change id; changed_at now unless given). */
export function entityChangeMessage(change: EntityChangeInput): OutboxMessage {
  const event: EntityChange = { change_id: newUuid(), changed_at: change.changed_at ?? new Date().toISOString(), ...change }
  return { topic: TOPICS.adsEntityChanges, key: change.account_id, value: event }
}

/**
 * Commits `writes` and the change events in one atomic store batch; the
 * outbox publishes them afterwards. For entities not kept in an EntityRepo
 * (accounts, catalogs, audience uploads): pass the writes of the change here
 * rather than writing them first, so that the change and its event cannot
 * part.
 */
export async function commitEntityChanges(ctx: ServiceContext, writes: StoreOp[], changes: EntityChangeInput[]): Promise<void> {
  await outboxOf(ctx).commit(writes, changes.map(entityChangeMessage))
}

/**
 * Announces one entity change whose writes are already committed. The
 * event is durable (the outbox retries it until the bus took it), but a
 * crash between those writes and this call loses it: prefer
 * commitEntityChanges with the writes.
 */
export async function publishEntityChange(ctx: ServiceContext, change: EntityChangeInput): Promise<void> {
  await commitEntityChanges(ctx, [], [change])
}
