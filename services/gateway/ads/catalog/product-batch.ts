import type { ServiceContext } from '../../../common/context'
import { newNumericId } from '../../../common/ids'
import type { StoreOp } from '../../../common/store/types'
import type { Actor } from '../conventions'
import { commitEntityChanges } from '../entities'
import { type ImageCheck, ImageChecker } from './images'
import { additionalImages, type ItemMessage, type Product, sameProduct, validateProduct } from './products'
import { PRODUCT_KEY } from './request'
import {
  type Catalog,
  CatalogKeys,
  evaluationOps,
  itemGroupKeyFor,
  productKeysByIds,
  productChange,
  productsByKeys,
  publicProduct,
  refreshGroupListing,
  type StoredProduct
} from './store'

/**
 * The product batches of PUT and DELETE .../products: per-item results,
 * image checks before the write lease, and one atomic commit of the
 * products, their entity changes and the FILTERED sets' re-evaluation.
 */

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

export type ImageCheckFn = (urls: string[]) => Promise<Map<string, ImageCheck>>

/**
 * Fetches the images a batch would add, before the catalog's write lease is
 * taken (a slow image host must not hold up other writers). Returns the
 * lookup the locked pass uses; a URL it has not seen (the catalog changed in
 * between) is fetched there.
 */
export async function prefetchImages(ctx: ServiceContext, catalog: Catalog, items: unknown[], checker: ImageChecker): Promise<ImageCheckFn> {
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

export async function upsertProducts(ctx: ServiceContext, catalog: Catalog, items: unknown[], actor: Actor, checkImages?: ImageCheckFn): Promise<ItemResult[]> {
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

export async function deleteProducts(ctx: ServiceContext, catalog: Catalog, keys: string[], actor: Actor): Promise<Array<{ product_key: string; failed_product_key: string | null; message: string | null }>> {
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
