import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { ServiceContext } from '../../../common/context'
import { Ads, AdsError } from '../../../common/errors'
import { requireAccount } from '../accounts'
import { actorOf, ADS_AUTH, listOptions, paginate, Params, sendData } from '../conventions'
import { type AdsEntity, EntityRepo } from '../entities'
import { type LineItem, lineItems } from './line-items'
import { pageExtras } from './lists'
import { allCuratedCategories, curatedCategory } from './reference-data'

/**
 * Curated categories (publisher lists for in-stream video, read-only data
 * in schemas/data/curated-categories.json) and their association with
 * PREROLL_VIEWS line items (line item curated categories, CRUD).
 */

export interface LineItemCuratedCategory extends AdsEntity {
  line_item_id: string
  curated_category_id: string
}

export function lineItemCuratedCategories(ctx: ServiceContext): EntityRepo<LineItemCuratedCategory> {
  return new EntityRepo<LineItemCuratedCategory>(ctx, 'LINE_ITEM_CURATED_CATEGORY', 'line_item_curated_category')
}

const COUNTRY = /^[A-Za-z]{2}$/

function curatedCategoryParam(id: string): string {
  if (!curatedCategory(id)) throw Ads.invalid('curated_category_id', `Curated category ${id.slice(0, 64)} does not exist (see GET accounts/:account_id/curated_categories)`)
  return id
}

/** Curated categories serve in-stream video: only PREROLL_VIEWS line items can use them. */
async function prerollLineItem(ctx: ServiceContext, accountId: string, id: string): Promise<LineItem> {
  const li = await lineItems(ctx).get(accountId, id)
  if (!li) throw Ads.invalid('line_item_id', `Line item ${id.slice(0, 64)} was not found in account ${accountId}`)
  if (li.objective !== 'PREROLL_VIEWS') throw Ads.invalid('line_item_id', `Curated categories apply to PREROLL_VIEWS line items only; line item ${li.id} has objective ${li.objective}`)
  return li
}

async function refuseDuplicate(ctx: ServiceContext, accountId: string, lineItemId: string, curatedCategoryId: string, self?: string): Promise<void> {
  const existing = (await lineItemCuratedCategories(ctx).list(accountId)).find(
    (x) => !x.deleted && x.id !== self && x.line_item_id === lineItemId && x.curated_category_id === curatedCategoryId
  )
  if (existing) {
    throw new AdsError(400, { code: 'DUPLICATE', message: `Line item ${lineItemId} is already associated with curated category ${curatedCategoryId} (${existing.id})`, parameter: 'curated_category_id' })
  }
}

async function createAssociation(ctx: ServiceContext, request: FastifyRequest, accountId: string): Promise<LineItemCuratedCategory> {
  const p = Params.query(request)
  const curatedCategoryId = curatedCategoryParam(p.string('curated_category_id', { required: true, max: 64 }) as string)
  const lineItemId = p.string('line_item_id', { required: true, max: 64 }) as string
  const li = await prerollLineItem(ctx, accountId, lineItemId)
  await refuseDuplicate(ctx, accountId, li.id, curatedCategoryId)
  return lineItemCuratedCategories(ctx).create(accountId, { line_item_id: li.id, curated_category_id: curatedCategoryId }, actorOf(request))
}

async function updateAssociation(ctx: ServiceContext, request: FastifyRequest, accountId: string, id: string): Promise<LineItemCuratedCategory> {
  const repo = lineItemCuratedCategories(ctx)
  const current = await repo.require(accountId, id, { notFoundCode: 'LINE_ITEM_CURATED_CATEGORY_NOT_FOUND' })
  const p = Params.query(request)
  const patch: Partial<LineItemCuratedCategory> = {}
  const curated = p.string('curated_category_id', { max: 64 })
  if (curated !== undefined) patch.curated_category_id = curatedCategoryParam(curated)
  const lineItemId = p.string('line_item_id', { max: 64 })
  if (lineItemId !== undefined) patch.line_item_id = (await prerollLineItem(ctx, accountId, lineItemId)).id
  await refuseDuplicate(ctx, accountId, patch.line_item_id ?? current.line_item_id, patch.curated_category_id ?? current.curated_category_id, current.id)
  return repo.update(accountId, id, patch, actorOf(request), { notFoundCode: 'LINE_ITEM_CURATED_CATEGORY_NOT_FOUND' })
}

export async function registerCuratedCategoryRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  const repo = lineItemCuratedCategories(ctx)

  // The list path and its required country_codes follow the public platform.
  app.get<{ Params: { account_id: string } }>('/12/accounts/:account_id/curated_categories', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    await requireAccount(ctx, request, request.params.account_id)
    const p = Params.query(request)
    const countries = new Set((p.list('country_codes', { required: true, max: 200, itemPattern: COUNTRY }) as string[]).map((c) => c.toUpperCase()))
    const opts = listOptions(p, { countDefault: 200, countMax: 1000, sortable: ['name', 'created_at', 'updated_at', 'id'], deletable: false })
    const page = paginate(allCuratedCategories().filter((c) => c.country_codes.some((cc) => countries.has(cc))), opts)
    return sendData(request, reply, page.data, 'curated_category', pageExtras(page))
  })

  app.get<{ Params: { account_id: string; curated_category_id: string } }>(
    '/12/accounts/:account_id/curated_categories/:curated_category_id',
    { config: { auth: ADS_AUTH } },
    async (request, reply) => {
      await requireAccount(ctx, request, request.params.account_id)
      const c = curatedCategory(request.params.curated_category_id)
      if (!c) throw Ads.notFound('CURATED_CATEGORY_NOT_FOUND', `Curated category ${request.params.curated_category_id.slice(0, 64)} was not found`)
      return sendData(request, reply, c, 'curated_category')
    }
  )

  app.get<{ Params: { account_id: string } }>('/12/accounts/:account_id/line_item_curated_categories', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const p = Params.query(request)
    const opts = listOptions(p, { countDefault: 200, countMax: 1000, sortable: ['created_at', 'updated_at', 'id', 'line_item_id', 'curated_category_id'] })
    const page = paginate(await repo.list(account.id), opts)
    return sendData(request, reply, page.data, 'line_item_curated_category', pageExtras(page))
  })

  app.get<{ Params: { account_id: string; id: string } }>('/12/accounts/:account_id/line_item_curated_categories/:id', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const withDeleted = Params.query(request).bool('with_deleted', { default: false })
    const x = await repo.require(account.id, request.params.id, { withDeleted, notFoundCode: 'LINE_ITEM_CURATED_CATEGORY_NOT_FOUND' })
    return sendData(request, reply, x, 'line_item_curated_category')
  })

  app.post<{ Params: { account_id: string } }>('/12/accounts/:account_id/line_item_curated_categories', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    return sendData(request, reply, await createAssociation(ctx, request, account.id), 'line_item_curated_category')
  })

  app.put<{ Params: { account_id: string; id: string } }>('/12/accounts/:account_id/line_item_curated_categories/:id', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    return sendData(request, reply, await updateAssociation(ctx, request, account.id, request.params.id), 'line_item_curated_category')
  })

  app.delete<{ Params: { account_id: string; id: string } }>('/12/accounts/:account_id/line_item_curated_categories/:id', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const x = await repo.softDelete(account.id, request.params.id, actorOf(request), { notFoundCode: 'LINE_ITEM_CURATED_CATEGORY_NOT_FOUND' })
    return sendData(request, reply, x, 'line_item_curated_category')
  })
}
