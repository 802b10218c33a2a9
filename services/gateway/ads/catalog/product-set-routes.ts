import type { FastifyInstance } from 'fastify'
import type { ServiceContext } from '../../../common/context'
import { Ads, AdsError } from '../../../common/errors'
import { newNumericId } from '../../../common/ids'
import type { StoreOp } from '../../../common/store/types'
import { nowIso } from '../accounts'
import { ADS_AUTH, actorOf, Params, requireJsonBody, sendData } from '../conventions'
import { commitEntityChanges } from '../entities'
import { parseFilters } from './filters'
import { catalogOfRequest, decodeProductCursor, encodeProductCursor, params, PRODUCT_KEY, readName, withCatalogLock } from './request'
import { catalogChange, CatalogKeys, productSetPage, productsByKeys, publicProductSet, requireProductSet, type StoredProductSet } from './store'

/**
 * Product sets of a catalog (docs/contract.md "Catalog management"): MANUAL
 * sets (a list of product keys) and FILTERED ones (filters the evaluator
 * applies, ./evaluator). A MANUAL set's name, description and product keys
 * can be updated; a FILTERED set cannot be updated at all (as on the public
 * platform), only read, re-evaluated and deleted.
 */

const MAX_SET_DESCRIPTION = 1000

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

export async function registerProductSetRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  const route = { config: { auth: ADS_AUTH } }

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
    // "Updating FILTERED product sets is not supported" (docs/ads.md, catalog management): no field of one changes.
    if (existing.type === 'FILTERED') {
      throw Ads.invalid('product_set_id', `Product set ${setId} is FILTERED, and updating FILTERED product sets is not supported; delete it and create a new one`)
    }
    if (p.has('type') && p.raw('type') !== existing.type) throw Ads.invalid('type', 'The type of a product set cannot be changed')
    if (p.has('filters')) throw Ads.invalid('filters', 'filters apply to FILTERED product sets; a MANUAL set is defined by product_keys')
    const name = readName(p, false)
    const description = readDescription(p)
    const productKeys = p.has('product_keys') ? await readManualKeys(ctx, catalog.id, p) : undefined
    if (name === undefined && description === undefined && productKeys === undefined) {
      throw new AdsError(400, { code: 'MISSING_PARAMETER', message: 'Nothing to update: send name, description or product_keys', parameter: 'name' })
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
