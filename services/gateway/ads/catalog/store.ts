import type { AdsWorld } from '../../../common/ads/world'
import type { ServiceContext } from '../../../common/context'
import { Ads, AdsError } from '../../../common/errors'
import { newNumericId } from '../../../common/ids'
import type { StoreOp } from '../../../common/store/types'
import { nowIso } from '../accounts'
import type { Actor } from '../conventions'
import { commitEntityChanges, diffFields, type EntityChangeInput } from '../entities'
import { withLock } from './lock'
import type { Filter } from './filters'
import { PRODUCT_FIELDS, type Product } from './products'

/**
 * Catalog state in the gateway's `ads:` keyspace. A catalog belongs to a
 * user (one per user), not to an ads account, so its entity changes are
 * published under the scope `user:<user_id>` (no account id can contain a
 * colon). Every change commits with its entity change event in one store
 * batch (commitEntityChanges): the gateway outbox publishes it afterwards.
 * Keys:
 *
 *   ads:catalog:by-user:{user_id}            catalog id of the user
 *   ads:catalog:{cid}                        Catalog (JSON)
 *   ads:catalog:{cid}:product:{product_key}  StoredProduct (JSON)
 *   ads:catalog:{cid}:ids                    hash item id -> product_key
 *   ads:catalog:{cid}:seq                    submission counter
 *   ads:catalog:{cid}:all                    zset product_key by submission order
 *   ads:catalog:{cid}:listed                 zset of what a fetch returns: ungrouped
 *                                            products and the first variant of each group
 *   ads:catalog:{cid}:groups                 hash item_group_id -> item_group_key
 *   ads:catalog:{cid}:group:{item_group_key} zset of the group's product keys
 *   ads:catalog:{cid}:sets                   zset of product set ids by creation
 *   ads:catalog:{cid}:set:{sid}              StoredProductSet (JSON)
 *   ads:catalog:{cid}:lock                   write lease (lock.ts)
 *   ads:catalog:by-user-lock:{user_id}       lease of a catalog create (one per user)
 *   ads:catalog:eval-queue                   zset `{cid}:{sid}` by due time (evaluator.ts)
 */

export interface Catalog {
  id: string
  name: string
  user_id: string
  created_at: string
  updated_at: string
  /** Internal: the world of the catalog (common/ads/world.ts); absent means production. */
  world?: AdsWorld
}

export type StoredProduct = Product & { seq: number }

export type ProcessingStatus = 'DONE' | 'PROCESSING' | 'FAILED'

export interface StoredProductSet {
  id: string
  catalog_id: string
  name: string
  description: string | null
  type: 'MANUAL' | 'FILTERED'
  filters: Filter[]
  /** MANUAL: the keys the set was made of (ids are resolved at read, so deleted products drop out). */
  product_keys: string[]
  /** FILTERED: the result of the last evaluation. */
  product_ids: string[]
  processing_status: ProcessingStatus
  /** Bumped each time an evaluation is requested; a stale evaluation never overwrites a newer request. */
  eval_version: number
  created_at: string
  updated_at: string
}

export interface PublicProductSet {
  id: string
  name: string
  description: string | null
  type: 'MANUAL' | 'FILTERED'
  filters: Filter[]
  product_ids: string[]
  processing_status: ProcessingStatus
  created_at: string
  updated_at: string
}

export const CatalogKeys = {
  byUser: (userId: string, world: AdsWorld) => (world === 'sandbox' ? `ads:sandbox:catalog:by-user:${userId}` : `ads:catalog:by-user:${userId}`),
  catalog: (cid: string) => `ads:catalog:${cid}`,
  prefix: (cid: string) => `ads:catalog:${cid}:`,
  product: (cid: string, key: string) => `ads:catalog:${cid}:product:${key}`,
  ids: (cid: string) => `ads:catalog:${cid}:ids`,
  seq: (cid: string) => `ads:catalog:${cid}:seq`,
  all: (cid: string) => `ads:catalog:${cid}:all`,
  listed: (cid: string) => `ads:catalog:${cid}:listed`,
  groups: (cid: string) => `ads:catalog:${cid}:groups`,
  group: (cid: string, gkey: string) => `ads:catalog:${cid}:group:${gkey}`,
  sets: (cid: string) => `ads:catalog:${cid}:sets`,
  set: (cid: string, sid: string) => `ads:catalog:${cid}:set:${sid}`,
  lock: (cid: string) => `ads:catalog:${cid}:lock`,
  userLock: (userId: string, world: AdsWorld) => (world === 'sandbox' ? `ads:sandbox:catalog:by-user-lock:${userId}` : `ads:catalog:by-user-lock:${userId}`),
  evalQueue: 'ads:catalog:eval-queue'
}

export const SYSTEM_ACTOR: Actor = { user_id: '0', platform: 'SYSTEM' }

export function catalogScope(userId: string): string {
  return `user:${userId}`
}

export function publicProduct(p: StoredProduct): Product {
  const out = {} as Record<string, unknown>
  for (const f of PRODUCT_FIELDS) out[f] = p[f] ?? null
  return out as Product
}

export function publicCatalog(c: Catalog): { id: string; name: string } {
  return { id: c.id, name: c.name }
}

/**
 * The entity change of a catalog, a product or a product set, under the
 * owner's scope. Commit it with the writes of the change
 * (commitEntityChanges), never after them: the outbox then publishes it.
 */
export function catalogChange(
  userId: string,
  entityType: 'PRODUCT_CATALOG' | 'PRODUCT' | 'PRODUCT_SET',
  changeType: 'CREATE' | 'UPDATE' | 'DELETE',
  entityId: string,
  after: Record<string, unknown>,
  before: Record<string, unknown> | undefined,
  actor: Actor
): EntityChangeInput {
  return {
    account_id: catalogScope(userId),
    entity_type: entityType,
    entity_id: entityId,
    change_type: changeType,
    changed_by: actor,
    changes: diffFields(before, after),
    entity_data: after
  }
}

/** A product's entity change: `before` undefined for a CREATE, `after` undefined for a DELETE. */
export function productChange(userId: string, before: StoredProduct | undefined, after: StoredProduct | undefined, actor: Actor): EntityChangeInput {
  const was = before ? { ...publicProduct(before) } : undefined
  if (!after) return catalogChange(userId, 'PRODUCT', 'DELETE', (before as StoredProduct).product_key, { ...was, deleted: true }, was, actor)
  return catalogChange(userId, 'PRODUCT', before ? 'UPDATE' : 'CREATE', after.product_key, { ...publicProduct(after) }, was, actor)
}

// ------------------------------------------------------------------ catalogs

export function catalogWorld(c: Pick<Catalog, 'world'>): AdsWorld {
  return c.world ?? 'production'
}

/** The user's catalog in `world`: each world has its own (one per user in each). */
export async function catalogOfUser(ctx: ServiceContext, userId: string, world: AdsWorld): Promise<Catalog | undefined> {
  const id = await ctx.store.get(CatalogKeys.byUser(userId, world))
  return id === undefined ? undefined : ctx.store.getJson<Catalog>(CatalogKeys.catalog(id))
}

/**
 * The user's catalog. Under the user's lease, so "one catalog per user"
 * holds under concurrent creates; the user's slot, the catalog and its
 * CREATE change commit in one batch.
 */
export async function createCatalog(ctx: ServiceContext, userId: string, world: AdsWorld, name: string, actor: Actor): Promise<Catalog> {
  return withLock(ctx.store, CatalogKeys.userLock(userId, world), async () => {
    const existing = await catalogOfUser(ctx, userId, world)
    if (existing) {
      throw new AdsError(409, { code: 'DUPLICATE', message: `A user can have only one product catalog; this user already has catalog ${existing.id}`, parameter: 'name' })
    }
    const now = nowIso()
    const catalog: Catalog = { id: newNumericId(), name, user_id: userId, created_at: now, updated_at: now, ...(world === 'sandbox' ? { world } : {}) }
    await commitEntityChanges(
      ctx,
      [
        { op: 'set', key: CatalogKeys.byUser(userId, world), value: catalog.id },
        { op: 'set', key: CatalogKeys.catalog(catalog.id), value: JSON.stringify(catalog) }
      ],
      [catalogChange(userId, 'PRODUCT_CATALOG', 'CREATE', catalog.id, publicCatalog(catalog), undefined, actor)]
    )
    return catalog
  })
}

/** The catalog of the path, which must be the caller's: another user's is 403, an unknown id (or another world's) 404. */
export async function requireCatalog(ctx: ServiceContext, userId: string, catalogId: string, world: AdsWorld): Promise<Catalog> {
  if (!/^[0-9]{1,19}$/.test(catalogId)) throw Ads.invalid('product_catalog_id', `Invalid product_catalog_id "${catalogId.slice(0, 40)}"`)
  const catalog = await ctx.store.getJson<Catalog>(CatalogKeys.catalog(catalogId))
  if (!catalog || catalogWorld(catalog) !== world) throw new AdsError(404, { code: 'NOT_FOUND', message: `Product catalog ${catalogId} was not found`, parameter: 'product_catalog_id' })
  if (catalog.user_id !== userId) {
    throw new AdsError(403, { code: 'ACTION_NOT_ALLOWED', message: `User does not have access to product catalog ${catalogId}`, parameter: 'product_catalog_id' })
  }
  return catalog
}

export async function renameCatalog(ctx: ServiceContext, catalog: Catalog, name: string, actor: Actor): Promise<Catalog> {
  if (catalog.name === name) return catalog
  const after = { ...catalog, name, updated_at: nowIso() }
  await commitEntityChanges(
    ctx,
    [{ op: 'set', key: CatalogKeys.catalog(catalog.id), value: JSON.stringify(after) }],
    [catalogChange(catalog.user_id, 'PRODUCT_CATALOG', 'UPDATE', catalog.id, publicCatalog(after), publicCatalog(catalog), actor)]
  )
  return after
}

/**
 * Permanent deletion of the catalog with every product and product set in
 * it. Each removed product and product set gets its own DELETE entity
 * change (consumers such as account history know them individually), then
 * the catalog's, all committed with the deletion in one batch. Call under
 * the catalog's lease (withCatalogLock).
 */
export async function deleteCatalog(ctx: ServiceContext, catalog: Catalog, actor: Actor): Promise<void> {
  const products = await allProducts(ctx, catalog.id)
  const sets = await listProductSets(ctx, catalog.id)
  // Rendered before the deletion: a MANUAL set resolves its product ids from the products.
  const renderedSets = await Promise.all(sets.map((set) => publicProductSet(ctx, set)))
  const keys: string[] = []
  for await (const key of ctx.store.scanPrefix(CatalogKeys.prefix(catalog.id))) {
    if (key !== CatalogKeys.lock(catalog.id)) keys.push(key)
  }
  const ops: StoreOp[] = [
    { op: 'del', key: CatalogKeys.catalog(catalog.id) },
    { op: 'del', key: CatalogKeys.byUser(catalog.user_id, catalogWorld(catalog)) },
    ...keys.map((key): StoreOp => ({ op: 'del', key })),
    ...sets.map((set): StoreOp => ({ op: 'zrem', key: CatalogKeys.evalQueue, members: [`${catalog.id}:${set.id}`] }))
  ]
  await commitEntityChanges(ctx, ops, [
    ...products.map((p) => productChange(catalog.user_id, p, undefined, actor)),
    ...renderedSets.map((set) => catalogChange(catalog.user_id, 'PRODUCT_SET', 'DELETE', set.id, { ...set, deleted: true }, { ...set }, actor)),
    catalogChange(catalog.user_id, 'PRODUCT_CATALOG', 'DELETE', catalog.id, { ...publicCatalog(catalog), deleted: true }, publicCatalog(catalog), actor)
  ])
}

// ------------------------------------------------------------------ products

export async function productsByKeys(ctx: ServiceContext, cid: string, keys: string[]): Promise<Array<StoredProduct | undefined>> {
  if (keys.length === 0) return []
  return ctx.store.mgetJson<StoredProduct>(keys.map((k) => CatalogKeys.product(cid, k)))
}

export async function productKeysByIds(ctx: ServiceContext, cid: string, ids: string[]): Promise<Array<string | undefined>> {
  // One hash read per id would be N round trips; the whole id map is one.
  if (ids.length === 0) return []
  const map = await ctx.store.hgetall(CatalogKeys.ids(cid))
  // Item ids are user input: "constructor" or "__proto__" must not resolve to an inherited member.
  return ids.map((id) => (Object.hasOwn(map, id) ? map[id] : undefined))
}

/** Every product of the catalog in submission order. */
export async function allProducts(ctx: ServiceContext, cid: string): Promise<StoredProduct[]> {
  const members = await ctx.store.zrange(CatalogKeys.all(cid), 0, -1)
  const products = await productsByKeys(ctx, cid, members.map((m) => m.member))
  return products.filter((p): p is StoredProduct => p !== undefined)
}

/** A page of a product zset after the submission number `afterSeq`; `more` tells whether another page exists. */
export async function productPage(ctx: ServiceContext, zsetKey: string, cid: string, afterSeq: number, count: number): Promise<{ products: StoredProduct[]; more: boolean }> {
  const members = await ctx.store.zrangeByScore(zsetKey, afterSeq + 1, Number.MAX_SAFE_INTEGER, { limit: count + 1 })
  const page = members.slice(0, count)
  const products = (await productsByKeys(ctx, cid, page.map((m) => m.member))).filter((p): p is StoredProduct => p !== undefined)
  return { products, more: members.length > count }
}

export async function itemGroupKeyFor(ctx: ServiceContext, cid: string, itemGroupId: string): Promise<string> {
  const existing = await ctx.store.hget(CatalogKeys.groups(cid), itemGroupId)
  if (existing !== undefined) return existing
  const key = newNumericId()
  await ctx.store.hset(CatalogKeys.groups(cid), { [itemGroupId]: key })
  return key
}

/**
 * Keeps `listed` true to the grouping rule after group membership changed:
 * of a group only its first-submitted variant is listed.
 */
export async function refreshGroupListing(ctx: ServiceContext, cid: string, groupKeys: Iterable<string>): Promise<void> {
  for (const gkey of new Set(groupKeys)) {
    const members = await ctx.store.zrange(CatalogKeys.group(cid, gkey), 0, -1)
    if (members.length === 0) continue
    const [first, ...rest] = members as [(typeof members)[number], ...typeof members]
    const ops: StoreOp[] = [{ op: 'zadd', key: CatalogKeys.listed(cid), score: first.score, member: first.member }]
    if (rest.length > 0) ops.push({ op: 'zrem', key: CatalogKeys.listed(cid), members: rest.map((m) => m.member) })
    await ctx.store.batch(ops)
  }
}

// ------------------------------------------------------------------ product sets

export async function getProductSet(ctx: ServiceContext, cid: string, sid: string): Promise<StoredProductSet | undefined> {
  return ctx.store.getJson<StoredProductSet>(CatalogKeys.set(cid, sid))
}

export async function requireProductSet(ctx: ServiceContext, cid: string, sid: string): Promise<StoredProductSet> {
  const set = /^[0-9]{1,19}$/.test(sid) ? await getProductSet(ctx, cid, sid) : undefined
  if (!set) throw new AdsError(404, { code: 'PRODUCT_SET_NOT_FOUND', message: `Product set ${sid.slice(0, 40)} was not found in catalog ${cid}`, parameter: 'product_set_id' })
  return set
}

/** A keyset position in the catalog's product sets: creation score and id of the last set served. */
export interface ProductSetPosition {
  score: number
  id: string
}

/**
 * A page of the catalog's product sets in creation order, after `after`
 * (a keyset position, so a set deleted between two pages shifts nothing).
 */
export async function productSetPage(ctx: ServiceContext, cid: string, after: ProductSetPosition | undefined, count: number): Promise<{ sets: StoredProductSet[]; last: ProductSetPosition | undefined; more: boolean }> {
  const order = (a: ProductSetPosition, b: ProductSetPosition): number => a.score - b.score || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)
  const members = (await ctx.store.zrange(CatalogKeys.sets(cid), 0, -1)).map((m) => ({ score: m.score, id: m.member })).sort(order)
  const rest = after === undefined ? members : members.filter((m) => order(m, after) > 0)
  const page = rest.slice(0, count)
  const sets = await ctx.store.mgetJson<StoredProductSet>(page.map((m) => CatalogKeys.set(cid, m.id)))
  return { sets: sets.filter((x): x is StoredProductSet => x !== undefined), last: page[page.length - 1], more: rest.length > count }
}

export async function listProductSets(ctx: ServiceContext, cid: string): Promise<StoredProductSet[]> {
  const ids = await ctx.store.zrange(CatalogKeys.sets(cid), 0, -1)
  const sets = await ctx.store.mgetJson<StoredProductSet>(ids.map((m) => CatalogKeys.set(cid, m.member)))
  return sets.filter((s): s is StoredProductSet => s !== undefined)
}

export async function publicProductSet(ctx: ServiceContext, set: StoredProductSet): Promise<PublicProductSet> {
  let productIds = set.product_ids
  if (set.type === 'MANUAL') {
    const products = await productsByKeys(ctx, set.catalog_id, set.product_keys)
    productIds = products.filter((p): p is StoredProduct => p !== undefined).map((p) => p.id)
  }
  return {
    id: set.id,
    name: set.name,
    description: set.description,
    type: set.type,
    filters: set.type === 'MANUAL' ? [] : set.filters,
    product_ids: productIds,
    processing_status: set.processing_status,
    created_at: set.created_at,
    updated_at: set.updated_at
  }
}

/**
 * The writes that mark the FILTERED sets of a catalog PROCESSING and queue
 * their evaluation (after products changed): commit them with the product
 * writes, so a crash cannot leave changed products with stale sets.
 */
export async function evaluationOps(ctx: ServiceContext, cid: string, sets?: StoredProductSet[]): Promise<StoreOp[]> {
  const targets = (sets ?? (await listProductSets(ctx, cid))).filter((s) => s.type === 'FILTERED')
  const now = Date.now()
  const ops: StoreOp[] = []
  for (const s of targets) {
    const next: StoredProductSet = { ...s, processing_status: 'PROCESSING', eval_version: s.eval_version + 1 }
    ops.push({ op: 'set', key: CatalogKeys.set(cid, s.id), value: JSON.stringify(next) })
    ops.push({ op: 'zadd', key: CatalogKeys.evalQueue, score: now, member: `${cid}:${s.id}` })
  }
  return ops
}
