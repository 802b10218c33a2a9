import type { FastifyInstance } from 'fastify'
import { worldOf } from '../../../common/ads/world'
import type { ServiceContext } from '../../../common/context'
import { Ads } from '../../../common/errors'
import { ADS_AUTH, actorOf, Params, requireJsonBody, sendData, userIdOf } from '../conventions'
import { actingUser } from './access'
import { ImageChecker } from './images'
import { deleteProducts, prefetchImages, upsertProducts } from './product-batch'
import { registerProductSetRoutes } from './product-set-routes'
import { catalogOfRequest, decodeProductCursor, encodeProductCursor, readName, readUserId, withCatalogLock } from './request'
import { CatalogKeys, catalogOfUser, createCatalog, deleteCatalog, productPage, publicCatalog, publicProduct, renameCatalog } from './store'

/**
 * Catalog management (docs/contract.md "Catalog management"): product catalogs
 * (one per user), products in batches of up to 25 with per-item results,
 * permanent product deletion by key (./product-batch), and MANUAL / FILTERED
 * product sets (./product-set-routes).
 */

export const MAX_PRODUCTS_PER_BATCH = 25

export async function registerCatalogRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  const route = { config: { auth: ADS_AUTH } }

  app.get('/12/product_catalogs', route, async (request, reply) => {
    const p = Params.query(request)
    const userId = await actingUser(ctx, userIdOf(request), readUserId(p), worldOf(request))
    const catalog = await catalogOfUser(ctx, userId, worldOf(request))
    return sendData(request, reply, catalog ? [publicCatalog(catalog)] : [], 'product_catalog', { next_cursor: null })
  })

  app.post('/12/product_catalogs', route, async (request, reply) => {
    const p = Params.query(request)
    const name = readName(p, true) as string
    const userId = await actingUser(ctx, userIdOf(request), readUserId(p), worldOf(request))
    const catalog = await createCatalog(ctx, userId, worldOf(request), name, actorOf(request))
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

  await registerProductSetRoutes(app, ctx)
}
