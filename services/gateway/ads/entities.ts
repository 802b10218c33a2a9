import type { ServiceContext } from '../../common/context'
import { AdsError } from '../../common/errors'
import { newShortId, newUuid } from '../../common/ids'
import { TOPICS } from '../../common/bus/types'
import { nowIso } from './accounts'
import type { Actor } from './conventions'
import type { EventsAdsEntityChanges } from '../../common/generated/schema-types'

/**
 * Store-backed repository of one kind of advertising entity, scoped by
 * account. Every create, update and delete publishes an entity change on
 * `ads.entity-changes` (key: account id) which the account-history service
 * consumes. Keys:
 *
 *   ads:{kind}:{account_id}:{id}      the entity (JSON)
 *   ads:{kind}-index:{account_id}     sorted set of ids by creation time
 */

export interface AdsEntity {
  id: string
  created_at: string
  updated_at: string
  deleted: boolean
}

export type ChangeType = 'CREATE' | 'UPDATE' | 'DELETE'

/** The `ads.entity-changes` event, typed from schemas/events/ads.entity-changes.json. */
export type EntityChange = Omit<EventsAdsEntityChanges, 'entity_data' | 'changes'> & {
  changes: Record<string, { old: unknown; new: unknown }>
  entity_data: Record<string, unknown>
}

export type NewFields<T extends AdsEntity> = Omit<T, keyof AdsEntity> & Partial<Pick<T, 'id'>>

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
  constructor(
    private readonly ctx: ServiceContext,
    /** Entity type as account history names it: CAMPAIGN, LINE_ITEM, CARD... */
    readonly entityType: string,
    /** Keyspace segment: campaign, line_item, card... */
    readonly kind: string
  ) {}

  key(accountId: string, id: string): string {
    return `ads:${this.kind}:${accountId}:${id}`
  }

  indexKey(accountId: string): string {
    return `ads:${this.kind}-index:${accountId}`
  }

  async create(accountId: string, fields: NewFields<T>, actor: Actor): Promise<T> {
    const now = nowIso()
    const entity = { ...fields, id: fields.id ?? newShortId(), created_at: now, updated_at: now, deleted: false } as unknown as T
    const created = await this.ctx.store.setJsonIfAbsent(this.key(accountId, entity.id), entity)
    if (!created) {
      if (fields.id !== undefined) throw new AdsError(409, { code: 'DUPLICATE', message: `${this.entityType} ${fields.id} already exists` })
      return this.create(accountId, fields, actor)
    }
    // A per-account sequence, not the clock: entities created in the same millisecond keep creation order.
    const position = await this.ctx.store.incr(`ads:${this.kind}-seq:${accountId}`)
    await this.ctx.store.zadd(this.indexKey(accountId), position, entity.id)
    await this.publish(accountId, 'CREATE', entity, undefined, actor)
    return entity
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
    const before = await this.require(accountId, id, options)
    const after = { ...before, ...patch, id: before.id, created_at: before.created_at, deleted: before.deleted, updated_at: nowIso() } as T
    await this.ctx.store.setJson(this.key(accountId, id), after)
    await this.publish(accountId, 'UPDATE', after, before, actor)
    return after
  }

  async softDelete(accountId: string, id: string, actor: Actor, options: { notFoundCode?: string } = {}): Promise<T> {
    const before = await this.require(accountId, id, options)
    const after = { ...before, deleted: true, updated_at: nowIso() } as T
    await this.ctx.store.setJson(this.key(accountId, id), after)
    await this.publish(accountId, 'DELETE', after, before, actor)
    return after
  }

  /** Permanently removes the entity (catalogs, products, poll cards). */
  async hardDelete(accountId: string, id: string, actor: Actor, options: { notFoundCode?: string } = {}): Promise<T> {
    const before = await this.require(accountId, id, options)
    await this.ctx.store.batch([
      { op: 'del', key: this.key(accountId, id) },
      { op: 'zrem', key: this.indexKey(accountId), members: [id] }
    ])
    const after = { ...before, deleted: true, updated_at: nowIso() } as T
    await this.publish(accountId, 'DELETE', after, before, actor)
    return after
  }

  private async publish(accountId: string, changeType: ChangeType, after: T, before: T | undefined, actor: Actor): Promise<void> {
    await publishEntityChange(this.ctx, {
      account_id: accountId,
      entity_type: this.entityType,
      entity_id: after.id,
      change_type: changeType,
      changed_by: actor,
      changes: diffFields(before as Record<string, unknown> | undefined, after as unknown as Record<string, unknown>),
      entity_data: after as unknown as Record<string, unknown>
    })
  }
}

/** Publishes one entity change (for entities not kept in an EntityRepo, e.g. accounts). */
export async function publishEntityChange(ctx: ServiceContext, change: Omit<EntityChange, 'change_id' | 'changed_at'> & { changed_at?: string }): Promise<void> {
  const event: EntityChange = { change_id: newUuid(), changed_at: change.changed_at ?? new Date().toISOString(), ...change }
  await ctx.bus.publish(TOPICS.adsEntityChanges, change.account_id, event)
}
