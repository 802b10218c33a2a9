import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { ServiceContext } from '../../../common/context'
import { Ads, AdsError } from '../../../common/errors'
import { newNumericId } from '../../../common/ids'
import type { StoreOp } from '../../../common/store/types'
import { nowIso } from '../accounts'
import { ADS_AUTH, actorOf, Params, requireJsonBody, sendData, userIdOf, type Actor } from '../conventions'
import { commitEntityChanges } from '../entities'
import { actingUser } from './access'
import { parseFilters } from './filters'
import { type ImageCheck, ImageChecker } from './images'
import { withLock } from './lock'
import { additionalImages, type ItemMessage, type Product, sameProduct, validateProduct } from './products'
import {
  type Catalog,
  catalogChange,
  CatalogKeys,
  catalogOfUser,
  createCatalog,
  deleteCatalog,
  evaluationOps,
  itemGroupKeyFor,
  productSetPage,
  productKeysByIds,
  productChange,
  productPage,
  productsByKeys,
  publicCatalog,
  publicProduct,
  publicProductSet,
  refreshGroupListing,
  renameCatalog,
  requireCatalog,
  requireProductSet,
  type StoredProduct,
  type StoredProductSet
} from './store'

/**
 * Catalog management (service-spec "Catalog management"): product catalogs
 * (one per user), products in batches of up to 25 with per-item results,
 * permanent product deletion by key, and MANUAL / FILTERED product sets.
 */

export const MAX_PRODUCTS_PER_BATCH = 25
const MAX_NAME = 255
const MAX_SET_DESCRIPTION = 1000
const PRODUCT_KEY = /^[0-9]{1,19}$/

const params = (request: FastifyRequest): Record<string, string> => request.params as Record<string, string>

function readUserId(p: Params): string | undefined {
  const raw = p.raw('user_id')
  if (raw === undefined || raw === '') return undefined
  if (typeof raw !== 'string' || !/^[0-9]{1,19}$/.test(raw)) throw Ads.invalid('user_id', `Expected Long, got ${JSON.stringify(raw)} for user_id`)
  return raw
}

async function catalogOfRequest(ctx: ServiceContext, request: FastifyRequest): Promise<Catalog> {
  const callerId = userIdOf(request)
  const catalog = await requireCatalogOrDelegated(ctx, callerId, params(request).product_catalog_id ?? '')
  return catalog
}

/** The path's catalog, owned by the caller or by a user the caller may act for. */
async function requireCatalogOrDelegated(ctx: ServiceContext, callerId: string, catalogId: string): Promise<Catalog> {
  try {
    return await requireCatalog(ctx, callerId, catalogId)
  } catch (err) {
    if (!(err instanceof AdsError) || err.statusCode !== 403) throw err
    const owner = (await ctx.store.getJson<Catalog>(CatalogKeys.catalog(catalogId)))?.user_id
    if (owner === undefined) throw err
    try {
      await actingUser(ctx, callerId, owner)
    } catch {
      throw err
    }
    return requireCatalog(ctx, owner, catalogId)
  }
}

/**
 * Runs `fn` under the catalog's write lease with the catalog as it is now.
 * The catalog of the path is resolved before the lease is taken; a DELETE of
 * the catalog may have run in between, and writing then would leave orphan
 * products or sets behind a catalog that no longer exists: 404 instead.
 */
async function withCatalogLock<T>(ctx: ServiceContext, catalog: Catalog, fn: (current: Catalog) => Promise<T>): Promise<T> {
  return withLock(ctx.store, CatalogKeys.lock(catalog.id), async () => {
    const current = await ctx.store.getJson<Catalog>(CatalogKeys.catalog(catalog.id))
    if (!current || current.user_id !== catalog.user_id) {
      throw new AdsError(404, { code: 'NOT_FOUND', message: `Product catalog ${catalog.id} was not found`, parameter: 'product_catalog_id' })
    }
    return fn(current)
  })
}

// ------------------------------------------------------------------ product batch

interface ItemResult {
  warnings: ItemMessage[]
  errors: ItemMessage[]
  product_key: string | null
  id: string | null
  status: 'CREATE_SUCCESS' | 'UPDATE_SUCCESS' | 'ERROR' | 'NO_CHANGE'
}

function sentId(item: unknown): string | null {
  if (item === null || typeof item !== 'object' || Array.isArray(item)) return null
  const id = (item as Record<string, unknown>).id
  if (typeof id === 'string' && id.trim() !== '') return id.trim()
  if (typeof id === 'number' && Number.isFinite(id)) return String(id)
  return null
}

function imageUrlsOf(p: Product): Array<{ parameter: 'image_link' | 'additional_image_link'; url: string }> {
  const out: Array<{ parameter: 'image_link' | 'additional_image_link'; url: string }> = []
  if (p.image_link) out.push({ parameter: 'image_link', url: p.image_link })
  if (p.additional_image_link) for (const url of additionalImages(p.additional_image_link)) out.push({ parameter: 'additional_image_link', url })
  return out
}

type ImageCheckFn = (urls: string[]) => Promise<Map<string, ImageCheck>>

/**
 * Fetches the images a batch would add, before the catalog's write lease is
 * taken (a slow image host must not hold up other writers). Returns the
 * lookup the locked pass uses; a URL it has not seen (the catalog changed in
 * between) is fetched there.
 */
async function prefetchImages(ctx: ServiceContext, catalog: Catalog, items: unknown[], checker: ImageChecker): Promise<ImageCheckFn> {
  const ids = items.map(sentId)
  const keys = await productKeysByIds(ctx, catalog.id, ids.map((id) => id ?? ''))
  const existing = await productsByKeys(ctx, catalog.id, keys.map((k) => k ?? '__none__'))
  const urls: string[] = []
  for (const [i, item] of items.entries()) {
    const v = validateProduct(item)
    if (!v.ok) continue
    const known = new Set(existing[i] ? imageUrlsOf(existing[i] as StoredProduct).map((u) => u.url) : [])
    for (const u of imageUrlsOf({ ...v.product, product_key: '', item_group_key: null })) if (!known.has(u.url)) urls.push(u.url)
  }
  const prefetched = await checker.checkAll(urls)
  return async (wanted) => {
    const missing = wanted.filter((u) => !prefetched.has(u))
    if (missing.length > 0) for (const [u, c] of await checker.checkAll(missing)) prefetched.set(u, c)
    return prefetched
  }
}

async function upsertProducts(ctx: ServiceContext, catalog: Catalog, items: unknown[], actor: Actor, checkImages?: ImageCheckFn): Promise<ItemResult[]> {
  const cid = catalog.id
  const ids = items.map(sentId)
  const occurrences = new Map<string, number>()
  for (const id of ids) if (id !== null) occurrences.set(id, (occurrences.get(id) ?? 0) + 1)

  const existingKeys = await productKeysByIds(ctx, cid, ids.map((id) => id ?? ''))
  const existing = await productsByKeys(ctx, cid, existingKeys.map((k) => k ?? '__none__'))
  const results: ItemResult[] = []
  const planned: Array<{ index: number; before: StoredProduct | undefined; after: StoredProduct }> = []

  for (const [i, item] of items.entries()) {
    const id = ids[i] ?? null
    const before = existingKeys[i] === undefined ? undefined : existing[i]
    const base = { product_key: before?.product_key ?? null, id }
    if (id !== null && (occurrences.get(id) ?? 0) > 1) {
      results.push({
        ...base,
        warnings: [{ code: 'DUPLICATE_ID', message: `id "${id}" appears ${occurrences.get(id)} times in this request; every instance was ignored`, parameter: 'id' }],
        errors: [],
        status: 'NO_CHANGE'
      })
      continue
    }
    const v = validateProduct(item)
    if (!v.ok) {
      results.push({ ...base, warnings: v.warnings, errors: v.errors, status: 'ERROR' })
      continue
    }
    const warnings = [...v.warnings]
    if (v.sentProductKey !== null && v.sentProductKey !== (before?.product_key ?? null)) {
      const message = before
        ? `product_key ${v.sentProductKey} does not belong to id "${id}" (its product_key is ${before.product_key})`
        : `product_key ${v.sentProductKey} is unknown in this catalog; omit it to create the product`
      results.push({ ...base, warnings, errors: [{ code: 'INVALID_PARAMETER', message, parameter: 'product_key' }], status: 'ERROR' })
      continue
    }
    const itemGroupKey = v.product.item_group_id === null ? null : await itemGroupKeyFor(ctx, cid, v.product.item_group_id)
    if (v.sentItemGroupKey !== null && v.sentItemGroupKey !== itemGroupKey) {
      warnings.push({ code: 'IGNORED_ATTRIBUTE', message: 'item_group_key is generated by the service from item_group_id; the value sent was ignored', parameter: 'item_group_key' })
    }
    const after: StoredProduct = {
      ...v.product,
      product_key: before?.product_key ?? newNumericId(),
      item_group_key: itemGroupKey,
      seq: before?.seq ?? 0
    }
    if (before && sameProduct(publicProduct(before), publicProduct(after))) {
      results.push({ ...base, warnings, errors: [], status: 'NO_CHANGE' })
      continue
    }
    results.push({ ...base, product_key: after.product_key, warnings, errors: [], status: before ? 'UPDATE_SUCCESS' : 'CREATE_SUCCESS' })
    planned.push({ index: i, before, after })
  }

  // Image bytes are checked only for images that are new to the product.
  if (checkImages && planned.length > 0) {
    const toCheck = planned.map((p) => {
      const known = new Set(p.before ? imageUrlsOf(p.before).map((u) => u.url) : [])
      return imageUrlsOf(p.after).filter((u) => !known.has(u.url))
    })
    const checks = await checkImages(toCheck.flat().map((u) => u.url))
    for (const [n, p] of planned.entries()) {
      const errors: ItemMessage[] = []
      for (const u of toCheck[n] ?? []) {
        const c = checks.get(u.url)
        if (c && !c.ok) errors.push({ code: 'INVALID_PARAMETER', message: `${u.parameter} ${u.url} ${c.message}`, parameter: u.parameter })
      }
      if (errors.length > 0) {
        const r = results[p.index] as ItemResult
        r.errors = errors
        r.status = 'ERROR'
        r.product_key = p.before?.product_key ?? null
      }
    }
  }

  const writes = planned.filter((p) => results[p.index]?.status !== 'ERROR')
  if (writes.length === 0) return results

  const ops: StoreOp[] = []
  const touchedGroups: string[] = []
  for (const w of writes) {
    if (!w.before) w.after.seq = await ctx.store.incr(CatalogKeys.seq(cid))
    const key = w.after.product_key
    ops.push({ op: 'set', key: CatalogKeys.product(cid, key), value: JSON.stringify(w.after) })
    ops.push({ op: 'hset', key: CatalogKeys.ids(cid), fields: { [w.after.id]: key } })
    ops.push({ op: 'zadd', key: CatalogKeys.all(cid), score: w.after.seq, member: key })
    const oldGroup = w.before?.item_group_key ?? null
    const newGroup = w.after.item_group_key
    if (oldGroup !== null && oldGroup !== newGroup) {
      ops.push({ op: 'zrem', key: CatalogKeys.group(cid, oldGroup), members: [key] })
      touchedGroups.push(oldGroup)
    }
    if (newGroup !== null) {
      ops.push({ op: 'zadd', key: CatalogKeys.group(cid, newGroup), score: w.after.seq, member: key })
      if (oldGroup !== newGroup) ops.push({ op: 'zrem', key: CatalogKeys.listed(cid), members: [key] })
      touchedGroups.push(newGroup)
    } else {
      ops.push({ op: 'zadd', key: CatalogKeys.listed(cid), score: w.after.seq, member: key })
    }
  }
  // The products, their entity changes and the re-evaluation of the FILTERED sets commit together.
  ops.push(...(await evaluationOps(ctx, cid)))
  await commitEntityChanges(ctx, ops, writes.map((w) => productChange(catalog.user_id, w.before, w.after, actor)))
  await refreshGroupListing(ctx, cid, touchedGroups)
  return results
}

async function deleteProducts(ctx: ServiceContext, catalog: Catalog, keys: string[], actor: Actor): Promise<Array<{ product_key: string; failed_product_key: string | null; message: string | null }>> {
  const cid = catalog.id
  const products = await productsByKeys(ctx, cid, keys.map((k) => (PRODUCT_KEY.test(k) ? k : '__invalid__')))
  const out: Array<{ product_key: string; failed_product_key: string | null; message: string | null }> = []
  const removed = new Map<string, StoredProduct>()
  for (const [i, key] of keys.entries()) {
    const product = products[i]
    if (!PRODUCT_KEY.test(key)) out.push({ product_key: key, failed_product_key: key, message: `Invalid product_key "${key.slice(0, 40)}"` })
    else if (!product) out.push({ product_key: key, failed_product_key: key, message: `Product key ${key} was not found in catalog ${cid}` })
    else if (removed.has(key)) out.push({ product_key: key, failed_product_key: key, message: `Product key ${key} appears more than once in this request; it was deleted once` })
    else {
      removed.set(key, product)
      out.push({ product_key: key, failed_product_key: null, message: null })
    }
  }
  if (removed.size === 0) return out
  const ops: StoreOp[] = []
  const groups: string[] = []
  for (const p of removed.values()) {
    ops.push({ op: 'del', key: CatalogKeys.product(cid, p.product_key) })
    ops.push({ op: 'hdel', key: CatalogKeys.ids(cid), fields: [p.id] })
    ops.push({ op: 'zrem', key: CatalogKeys.all(cid), members: [p.product_key] })
    ops.push({ op: 'zrem', key: CatalogKeys.listed(cid), members: [p.product_key] })
    if (p.item_group_key !== null) {
      ops.push({ op: 'zrem', key: CatalogKeys.group(cid, p.item_group_key), members: [p.product_key] })
      groups.push(p.item_group_key)
    }
  }
  ops.push(...(await evaluationOps(ctx, cid)))
  await commitEntityChanges(ctx, ops, [...removed.values()].map((p) => productChange(catalog.user_id, p, undefined, actor)))
  // The next variant of a group becomes the one a fetch returns.
  await refreshGroupListing(ctx, cid, groups)
  return out
}

// ------------------------------------------------------------------ product listing cursor

/**
 * Keyset cursors (opaque base64url JSON): products resume after the last
 * submission number served, product sets after the last (creation score,
 * id) served, so deletions between pages neither skip nor repeat anything.
 */
interface ProductCursor {
  seq: number
  group: string
  /** Product sets: the id of the last set served (ties on the creation score). */
  id?: string
}

function encodeProductCursor(c: ProductCursor): string {
  return Buffer.from(JSON.stringify(c)).toString('base64url')
}

function decodeProductCursor(raw: string, group: string): ProductCursor {
  try {
    const c = JSON.parse(Buffer.from(raw, 'base64url').toString('utf8')) as ProductCursor | null
    const idOk = group === 'sets' ? typeof c?.id === 'string' && PRODUCT_KEY.test(c.id) : c?.id === undefined
    if (c && Number.isSafeInteger(c.seq) && c.seq >= 0 && c.group === group && idOk) return c
  } catch {
    // reported below
  }
  throw Ads.invalid('cursor', `Invalid cursor "${raw.slice(0, 60)}"`)
}

// ------------------------------------------------------------------ product set input

function readName(p: Params, required: boolean): string | undefined {
  const name = p.string('name', { required, max: MAX_NAME })
  if (name !== undefined && name.trim() === '') throw Ads.invalid('name', 'name must not be blank')
  return name?.trim()
}

function readDescription(p: Params): string | null | undefined {
  if (p.isEmpty('description')) return null
  return p.string('description', { max: MAX_SET_DESCRIPTION })
}

async function readManualKeys(ctx: ServiceContext, cid: string, p: Params): Promise<string[]> {
  const raw = p.raw('product_keys')
  if (raw === undefined || raw === null) throw Ads.missing('product_keys')
  if (!Array.isArray(raw) || raw.some((k) => typeof k !== 'string' && typeof k !== 'number')) throw Ads.invalid('product_keys', 'product_keys must be an array of product key strings')
  const keys = [...new Set(raw.map(String))]
  if (keys.length === 0) throw Ads.invalid('product_keys', 'A MANUAL product set needs at least one product key')
  const bad = keys.find((k) => !PRODUCT_KEY.test(k))
  if (bad !== undefined) throw Ads.invalid('product_keys', `Invalid product key "${bad.slice(0, 40)}" in product_keys`)
  const products = await productsByKeys(ctx, cid, keys)
  const unknown = keys.filter((_, i) => products[i] === undefined)
  if (unknown.length > 0) throw Ads.invalid('product_keys', `Unknown product key${unknown.length > 1 ? 's' : ''} in catalog ${cid}: ${unknown.slice(0, 10).join(', ')}`)
  return keys
}

// ------------------------------------------------------------------ routes

export async function registerCatalogRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  const route = { config: { auth: ADS_AUTH } }

  app.get('/12/product_catalogs', route, async (request, reply) => {
    const p = Params.query(request)
    const userId = await actingUser(ctx, userIdOf(request), readUserId(p))
    const catalog = await catalogOfUser(ctx, userId)
    return sendData(request, reply, catalog ? [publicCatalog(catalog)] : [], 'product_catalog', { next_cursor: null })
  })

  app.post('/12/product_catalogs', route, async (request, reply) => {
    const p = Params.query(request)
    const name = readName(p, true) as string
    const userId = await actingUser(ctx, userIdOf(request), readUserId(p))
    const catalog = await createCatalog(ctx, userId, name, actorOf(request))
    return sendData(request, reply, publicCatalog(catalog), 'product_catalog')
  })

  app.put('/12/product_catalogs/:product_catalog_id', route, async (request, reply) => {
    const p = Params.query(request)
    const name = readName(p, true) as string
    const catalog = await catalogOfRequest(ctx, request)
    const updated = await withCatalogLock(ctx, catalog, (current) => renameCatalog(ctx, current, name, actorOf(request)))
    return sendData(request, reply, publicCatalog(updated), 'product_catalog')
  })

  app.delete('/12/product_catalogs/:product_catalog_id', route, async (request, reply) => {
    const catalog = await catalogOfRequest(ctx, request)
    await withCatalogLock(ctx, catalog, (current) => deleteCatalog(ctx, current, actorOf(request)))
    return sendData(request, reply, publicCatalog(catalog), 'product_catalog')
  })

  app.get('/12/product_catalogs/:product_catalog_id/products', route, async (request, reply) => {
    const p = Params.query(request)
    const count = p.int('count', { min: 1, max: 100 }) ?? 100
    const groupKey = p.string('item_group_key', { pattern: /^[0-9]{1,19}$/ }) ?? ''
    const cursor = p.string('cursor', { max: 512 })
    const catalog = await catalogOfRequest(ctx, request)
    const after = cursor === undefined ? 0 : decodeProductCursor(cursor, groupKey).seq
    const zset = groupKey === '' ? CatalogKeys.listed(catalog.id) : CatalogKeys.group(catalog.id, groupKey)
    const page = await productPage(ctx, zset, catalog.id, after, count)
    const last = page.products[page.products.length - 1]
    const next = page.more && last ? encodeProductCursor({ seq: last.seq, group: groupKey }) : null
    return sendData(request, reply, page.products.map(publicProduct), 'product', { next_cursor: next })
  })

  app.put('/12/product_catalogs/:product_catalog_id/products', route, async (request, reply) => {
    const body = requireJsonBody(request)
    const p = Params.body(request)
    const raw = body === null || typeof body !== 'object' || Array.isArray(body) ? undefined : p.raw('products')
    if (raw === undefined || raw === null) throw Ads.missing('products')
    if (!Array.isArray(raw)) throw Ads.invalid('products', 'products must be an array of product objects')
    if (raw.length === 0) throw Ads.invalid('products', `products must hold 1 to ${MAX_PRODUCTS_PER_BATCH} products`)
    if (raw.length > MAX_PRODUCTS_PER_BATCH) {
      throw Ads.invalid('products', `A batch holds at most ${MAX_PRODUCTS_PER_BATCH} products, got ${raw.length}`)
    }
    const catalog = await catalogOfRequest(ctx, request)
    if (ctx.config.catalogImageCheck !== 'fetch') {
      const results = await withCatalogLock(ctx, catalog, (current) => upsertProducts(ctx, current, raw, actorOf(request)))
      return sendData(request, reply, { products_response: results }, 'product')
    }
    const checker = new ImageChecker({ timeoutMs: ctx.config.catalogImageTimeoutMs, allowPrivate: ctx.config.catalogImageAllowPrivate, store: ctx.store })
    try {
      const checkImages = await prefetchImages(ctx, catalog, raw, checker)
      const results = await withCatalogLock(ctx, catalog, (current) => upsertProducts(ctx, current, raw, actorOf(request), checkImages))
      return sendData(request, reply, { products_response: results }, 'product')
    } finally {
      await checker.close()
    }
  })

  app.delete('/12/product_catalogs/:product_catalog_id/products', route, async (request, reply) => {
    requireJsonBody(request)
    const p = Params.body(request)
    const raw = p.raw('product_keys')
    if (raw === undefined || raw === null) throw Ads.missing('product_keys')
    if (!Array.isArray(raw) || raw.some((k) => typeof k !== 'string' && typeof k !== 'number')) throw Ads.invalid('product_keys', 'product_keys must be an array of product key strings')
    if (raw.length === 0) throw Ads.invalid('product_keys', 'product_keys must hold at least one product key')
    const catalog = await catalogOfRequest(ctx, request)
    const results = await withCatalogLock(ctx, catalog, (current) => deleteProducts(ctx, current, raw.map(String), actorOf(request)))
    return sendData(request, reply, { delete_products: results }, 'product')
  })

  app.get('/12/product_catalogs/:product_catalog_id/product_sets', route, async (request, reply) => {
    const p = Params.query(request)
    const count = p.int('count', { min: 1, max: 100 }) ?? 100
    const cursor = p.string('cursor', { max: 512 })
    const catalog = await catalogOfRequest(ctx, request)
    const position = cursor === undefined ? undefined : decodeProductCursor(cursor, 'sets')
    const page = await productSetPage(ctx, catalog.id, position && { score: position.seq, id: position.id as string }, count)
    const next = page.more && page.last ? encodeProductCursor({ seq: page.last.score, group: 'sets', id: page.last.id }) : null
    return sendData(request, reply, await Promise.all(page.sets.map((s) => publicProductSet(ctx, s))), 'product_set', { next_cursor: next })
  })

  app.get('/12/product_catalogs/:product_catalog_id/product_sets/:product_set_id', route, async (request, reply) => {
    const catalog = await catalogOfRequest(ctx, request)
    const set = await requireProductSet(ctx, catalog.id, params(request).product_set_id ?? '')
    return sendData(request, reply, await publicProductSet(ctx, set), 'product_set')
  })

  app.post('/12/product_catalogs/:product_catalog_id/product_sets', route, async (request, reply) => {
    requireJsonBody(request)
    const p = Params.body(request)
    const name = readName(p, true) as string
    const description = readDescription(p) ?? null
    const type = p.enumOf('type', ['MANUAL', 'FILTERED'] as const, { required: true }) as 'MANUAL' | 'FILTERED'
    const catalog = await catalogOfRequest(ctx, request)
    let filters: StoredProductSet['filters'] = []
    let productKeys: string[] = []
    if (type === 'FILTERED') {
      if (p.has('product_keys')) throw Ads.invalid('product_keys', 'product_keys applies to MANUAL product sets; a FILTERED set is defined by filters')
      const parsed = parseFilters(p.raw('filters'))
      if (!parsed.ok) throw parsed.error.missing ? Ads.missing(parsed.error.parameter) : Ads.invalid(parsed.error.parameter, parsed.error.message)
      filters = parsed.filters
    } else {
      if (p.has('filters') && !(Array.isArray(p.raw('filters')) && (p.raw('filters') as unknown[]).length === 0)) {
        throw Ads.invalid('filters', 'filters apply to FILTERED product sets; a MANUAL set is defined by product_keys')
      }
      productKeys = await readManualKeys(ctx, catalog.id, p)
    }
    const now = nowIso()
    const set: StoredProductSet = {
      id: newNumericId(),
      catalog_id: catalog.id,
      name,
      description,
      type,
      filters,
      product_keys: productKeys,
      product_ids: [],
      // A MANUAL set is complete at creation; a FILTERED one waits for the evaluator.
      processing_status: type === 'MANUAL' ? 'DONE' : 'PROCESSING',
      eval_version: 0,
      created_at: now,
      updated_at: now
    }
    const out = await withCatalogLock(ctx, catalog, async () => {
      const rendered = await publicProductSet(ctx, set)
      const writes: StoreOp[] = [
        { op: 'set', key: CatalogKeys.set(catalog.id, set.id), value: JSON.stringify(set) },
        { op: 'zadd', key: CatalogKeys.sets(catalog.id), score: Date.now(), member: set.id },
        ...(type === 'FILTERED' ? [{ op: 'zadd' as const, key: CatalogKeys.evalQueue, score: Date.now(), member: `${catalog.id}:${set.id}` }] : [])
      ]
      await commitEntityChanges(ctx, writes, [catalogChange(catalog.user_id, 'PRODUCT_SET', 'CREATE', set.id, { ...rendered }, undefined, actorOf(request))])
      return rendered
    })
    return sendData(request, reply, out, 'product_set')
  })

  app.put('/12/product_catalogs/:product_catalog_id/product_sets/:product_set_id', route, async (request, reply) => {
    requireJsonBody(request)
    const p = Params.body(request)
    const catalog = await catalogOfRequest(ctx, request)
    const setId = params(request).product_set_id ?? ''
    const existing = await requireProductSet(ctx, catalog.id, setId)
    if (p.has('type') && p.raw('type') !== existing.type) throw Ads.invalid('type', 'The type of a product set cannot be changed')
    if (p.has('filters')) throw Ads.invalid('filters', 'Updating the filters of a FILTERED product set is not supported; create a new set instead')
    if (existing.type === 'FILTERED' && p.has('product_keys')) throw Ads.invalid('product_keys', 'product_keys applies to MANUAL product sets only')
    const name = readName(p, false)
    const description = readDescription(p)
    const productKeys = existing.type === 'MANUAL' && p.has('product_keys') ? await readManualKeys(ctx, catalog.id, p) : undefined
    if (name === undefined && description === undefined && productKeys === undefined) {
      throw new AdsError(400, { code: 'MISSING_PARAMETER', message: `Nothing to update: send name, description${existing.type === 'MANUAL' ? ' or product_keys' : ''}`, parameter: 'name' })
    }
    const after = await withCatalogLock(ctx, catalog, async () => {
      const current = await requireProductSet(ctx, catalog.id, setId)
      const next: StoredProductSet = {
        ...current,
        ...(name !== undefined ? { name } : {}),
        ...(description !== undefined ? { description } : {}),
        ...(productKeys !== undefined ? { product_keys: productKeys } : {}),
        updated_at: nowIso()
      }
      const [was, now] = await Promise.all([publicProductSet(ctx, current), publicProductSet(ctx, next)])
      await commitEntityChanges(
        ctx,
        [{ op: 'set', key: CatalogKeys.set(catalog.id, setId), value: JSON.stringify(next) }],
        [catalogChange(catalog.user_id, 'PRODUCT_SET', 'UPDATE', setId, { ...now }, { ...was }, actorOf(request))]
      )
      return now
    })
    return sendData(request, reply, after, 'product_set')
  })

  app.delete('/12/product_catalogs/:product_catalog_id/product_sets/:product_set_id', route, async (request, reply) => {
    const catalog = await catalogOfRequest(ctx, request)
    const setId = params(request).product_set_id ?? ''
    const out = await withCatalogLock(ctx, catalog, async () => {
      const rendered = await publicProductSet(ctx, await requireProductSet(ctx, catalog.id, setId))
      const writes: StoreOp[] = [
        { op: 'del', key: CatalogKeys.set(catalog.id, setId) },
        { op: 'zrem', key: CatalogKeys.sets(catalog.id), members: [setId] },
        { op: 'zrem', key: CatalogKeys.evalQueue, members: [`${catalog.id}:${setId}`] }
      ]
      await commitEntityChanges(ctx, writes, [catalogChange(catalog.user_id, 'PRODUCT_SET', 'DELETE', setId, { ...rendered, deleted: true }, { ...rendered }, actorOf(request))])
      return rendered
    })
    return sendData(request, reply, out, 'product_set')
  })
}
