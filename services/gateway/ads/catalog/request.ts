import type { FastifyRequest } from 'fastify'
import { type AdsWorld, worldOf } from '../../../common/ads/world'
import type { ServiceContext } from '../../../common/context'
import { Ads, AdsError } from '../../../common/errors'
import { type Params, userIdOf } from '../conventions'
import { actingUser } from './access'
import { withLock } from './lock'
import { type Catalog, CatalogKeys, requireCatalog } from './store'

/**
 * What the catalog routes (./routes, ./product-set-routes) read from a
 * request: the path's catalog (the caller's or a delegating user's), its
 * write lease, the listing cursors and the common parameters.
 */

const MAX_NAME = 255
export const PRODUCT_KEY = /^[0-9]{1,19}$/

export const params = (request: FastifyRequest): Record<string, string> => request.params as Record<string, string>

export function readUserId(p: Params): string | undefined {
  const raw = p.raw('user_id')
  if (raw === undefined || raw === '') return undefined
  if (typeof raw !== 'string' || !/^[0-9]{1,19}$/.test(raw)) throw Ads.invalid('user_id', `Expected Long, got ${JSON.stringify(raw)} for user_id`)
  return raw
}

export async function catalogOfRequest(ctx: ServiceContext, request: FastifyRequest): Promise<Catalog> {
  const callerId = userIdOf(request)
  const catalog = await requireCatalogOrDelegated(ctx, callerId, params(request).product_catalog_id ?? '', worldOf(request))
  return catalog
}

/** The path's catalog, owned by the caller or by a user the caller may act for. */
async function requireCatalogOrDelegated(ctx: ServiceContext, callerId: string, catalogId: string, world: AdsWorld): Promise<Catalog> {
  try {
    return await requireCatalog(ctx, callerId, catalogId, world)
  } catch (err) {
    if (!(err instanceof AdsError) || err.statusCode !== 403) throw err
    const owner = (await ctx.store.getJson<Catalog>(CatalogKeys.catalog(catalogId)))?.user_id
    if (owner === undefined) throw err
    try {
      await actingUser(ctx, callerId, owner, world)
    } catch {
      throw err
    }
    return requireCatalog(ctx, owner, catalogId, world)
  }
}

/**
 * Runs `fn` under the catalog's write lease with the catalog as it is now.
 * The catalog of the path is resolved before the lease is taken; a DELETE of
 * the catalog may have run in between, and writing then would leave orphan
 * products or sets behind a catalog that no longer exists: 404 instead.
 */
export async function withCatalogLock<T>(ctx: ServiceContext, catalog: Catalog, fn: (current: Catalog) => Promise<T>): Promise<T> {
  return withLock(ctx.store, CatalogKeys.lock(catalog.id), async () => {
    const current = await ctx.store.getJson<Catalog>(CatalogKeys.catalog(catalog.id))
    if (!current || current.user_id !== catalog.user_id) {
      throw new AdsError(404, { code: 'NOT_FOUND', message: `Product catalog ${catalog.id} was not found`, parameter: 'product_catalog_id' })
    }
    return fn(current)
  })
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

export function encodeProductCursor(c: ProductCursor): string {
  return Buffer.from(JSON.stringify(c)).toString('base64url')
}

export function decodeProductCursor(raw: string, group: string): ProductCursor {
  try {
    const c = JSON.parse(Buffer.from(raw, 'base64url').toString('utf8')) as ProductCursor | null
    const idOk = group === 'sets' ? typeof c?.id === 'string' && PRODUCT_KEY.test(c.id) : c?.id === undefined
    if (c && Number.isSafeInteger(c.seq) && c.seq >= 0 && c.group === group && idOk) return c
  } catch {
    // reported below
  }
  throw Ads.invalid('cursor', `Invalid cursor "${raw.slice(0, 60)}"`)
}

export function readName(p: Params, required: boolean): string | undefined {
  const name = p.string('name', { required, max: MAX_NAME })
  if (name !== undefined && name.trim() === '') throw Ads.invalid('name', 'name must not be blank')
  return name?.trim()
}
