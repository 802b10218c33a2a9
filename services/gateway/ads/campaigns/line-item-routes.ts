import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { ServiceContext } from '../../../common/context'
import { Ads } from '../../../common/errors'
import { requireAccount } from '../accounts'
import { actorOf, ADS_AUTH, listOptions, Params, sendData, userIdOf } from '../conventions'
import { type Campaign, campaigns, withCampaignLock } from './campaign-records'
import { campaignForLineItem } from './campaigns'
import { applyDefaults, checkLineItem, type LineItem, lineItems, type LineItemSettable, readSettable } from './line-items'
import { filterByIds, matchesNamePrefix, pageExtras } from './lists'
import { keepChangesOnly, type WholeObjectRules } from '../whole-object'
import { defaultBidStrategy, defaultGoal, OBJECTIVES, type Objective, payByFor } from './objectives'
import { isValidPlacement, placementCombinations, placementNames, PRODUCT_TYPES, type ProductType } from './reference-data'

/**
 * Line item operations: create, list and read as the public platform
 * shapes them; PUT and DELETE with the rules of docs/ads.md (see
 * line-items.ts); and the placement combinations per product type.
 */

/** Parameters fixed at creation: a PUT naming them is refused rather than silently ignored. */
const FIXED_AFTER_CREATE = ['campaign_id', 'objective', 'product_type', 'placements'] as const

/** What a whole-object line item PUT (an SDK's save()) may repeat; FIXED_AFTER_CREATE ones are refused by the route when changed. */
const LINE_ITEM_WHOLE_OBJECT: WholeObjectRules = {
  readOnly: ['funding_instrument_id', 'currency', 'creative_source', 'target_cpa_local_micro'],
  computed: []
}

/** A new line item of `campaign`: the objective's defaults, then what the client set. */
function draftLineItem(campaign: Campaign, fixed: Pick<LineItem, 'objective' | 'product_type' | 'placements' | 'advertiser_user_id'>, values: Partial<LineItemSettable>): LineItem {
  const goal = values.goal ?? defaultGoal(fixed.objective)
  const bidStrategy = values.bid_strategy ?? defaultBidStrategy(fixed.objective, values.bid_amount_local_micro != null)
  return {
    id: '',
    created_at: '',
    updated_at: '',
    deleted: false,
    campaign_id: campaign.id,
    funding_instrument_id: campaign.funding_instrument_id,
    name: null,
    objective: fixed.objective,
    product_type: fixed.product_type,
    placements: fixed.placements,
    goal,
    bid_strategy: bidStrategy,
    bid_amount_local_micro: null,
    target_cpa_local_micro: null,
    pay_by: values.pay_by ?? payByFor(fixed.objective, goal, bidStrategy).accepted[0] ?? 'IMPRESSION',
    currency: campaign.currency,
    entity_status: 'ACTIVE',
    start_time: null,
    end_time: null,
    duration_in_days: null,
    frequency_cap: null,
    standard_delivery: null,
    total_budget_amount_local_micro: null,
    daily_budget_amount_local_micro: null,
    advertiser_user_id: fixed.advertiser_user_id,
    advertiser_domain: null,
    categories: [],
    android_app_store_identifier: null,
    ios_app_store_identifier: null,
    primary_web_event_tag: null,
    audience_expansion: null,
    automatic_tweet_promotion: null,
    creative_source: 'MANUAL',
    ...values
  }
}

async function createLineItem(ctx: ServiceContext, request: FastifyRequest, accountId: string): Promise<LineItem> {
  const p = Params.query(request)
  const campaignId = p.string('campaign_id', { required: true, max: 64 }) as string
  const objective = p.enumOf('objective', OBJECTIVES, { required: true }) as Objective
  const productType = p.enumOf('product_type', PRODUCT_TYPES, { required: true }) as ProductType
  const placements = [...new Set(p.list('placements', { required: true, max: 10, values: placementNames() }) as string[])]
  if (!isValidPlacement(productType, placements)) {
    throw Ads.invalid('placements', `placements ${placements.join(',')} is not a valid combination for product_type ${productType} (see GET line_items/placements)`)
  }
  const { values, given } = readSettable(p, 'create')
  // Under the campaign's lease: a concurrent create with another objective, a budget-optimization
  // switch or a campaign delete cannot slip between the checks below and the write.
  return withCampaignLock(ctx, accountId, campaignId, async () => {
    const campaign = await campaignForLineItem(ctx, accountId, campaignId)
    const siblings = (await lineItems(ctx).list(accountId)).filter((li) => li.campaign_id === campaign.id && !li.deleted)
    const other = siblings[0]
    if (other && other.objective !== objective) {
      throw Ads.invalid('objective', `All line items of campaign ${campaign.id} must share one objective (${other.objective})`)
    }
    if (other && other.product_type !== productType) {
      throw Ads.invalid('product_type', `All line items of campaign ${campaign.id} must share one product_type (${other.product_type})`)
    }
    const draft = draftLineItem(campaign, { objective, product_type: productType, placements, advertiser_user_id: userIdOf(request) }, values)
    // Under line-item budget optimization, pacing is the line item's: standard unless told otherwise.
    if (campaign.budget_optimization === 'LINE_ITEM' && draft.standard_delivery === null) draft.standard_delivery = true
    const item = applyDefaults(draft, given)
    checkLineItem(item, campaign, given)
    const { id: _id, created_at: _c, updated_at: _u, deleted: _d, ...fields } = item
    return lineItems(ctx).create(accountId, fields, actorOf(request))
  })
}

/**
 * PUT of a line item. The rules look at several fields of the line item
 * and at its campaign, so they are checked inside the line item's
 * read-modify-write (EntityRepo.updateWith) against the copy as last
 * committed, and under the campaign's lease (the budget-optimization
 * switch takes it too): two PUTs each valid alone cannot together store a
 * line item that breaks a rule, and neither loses the other's change.
 */
async function updateLineItem(ctx: ServiceContext, request: FastifyRequest, accountId: string, lineItemId: string): Promise<LineItem> {
  const repo = lineItems(ctx)
  const notFound = { notFoundCode: 'LINE_ITEM_NOT_FOUND' }
  // An unknown line item is 404 before any parameter is looked at; campaign_id never changes after create.
  const stored = await repo.require(accountId, lineItemId, notFound)
  const campaignId = stored.campaign_id
  keepChangesOnly(request, stored, LINE_ITEM_WHOLE_OBJECT)
  const p = Params.query(request)
  for (const name of FIXED_AFTER_CREATE) {
    if (p.has(name)) throw Ads.invalid(name, `${name} cannot be changed after the line item is created`)
  }
  const { values, given } = readSettable(p, 'update')
  return withCampaignLock(ctx, accountId, campaignId, () =>
    repo.updateWith(
      accountId,
      lineItemId,
      async (current) => {
        const campaign = await campaigns(ctx).require(accountId, current.campaign_id, { withDeleted: true, notFoundCode: 'CAMPAIGN_NOT_FOUND' })
        const next = applyDefaults({ ...current, ...values }, given)
        // Pacing stored before a switch to CAMPAIGN optimization moved it (older data) is not the client's
        // to fix: it is dropped here rather than failing every later update on standard_delivery.
        if (campaign.budget_optimization !== 'LINE_ITEM' && !given.has('standard_delivery')) next.standard_delivery = null
        checkLineItem(next, campaign, given)
        return changedFields(current, next)
      },
      actorOf(request),
      notFound
    )
  )
}

/** The fields of `next` that differ from `current`. */
function changedFields(current: LineItem, next: LineItem): Partial<LineItem> {
  const patch: Partial<LineItem> = {}
  for (const [k, v] of Object.entries(next) as Array<[keyof LineItem, unknown]>) {
    if (JSON.stringify(v) !== JSON.stringify(current[k])) (patch as Record<string, unknown>)[k] = v
  }
  return patch
}

export async function registerLineItemRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  const repo = lineItems(ctx)

  app.get('/12/line_items/placements', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const productType = Params.query(request).enumOf('product_type', PRODUCT_TYPES)
    const data = placementCombinations().filter((c) => productType === undefined || c.product_type === productType)
    return sendData(request, reply, data, 'placements')
  })

  app.get<{ Params: { account_id: string } }>('/12/accounts/:account_id/line_items', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const p = Params.query(request)
    const campaignIds = p.list('campaign_ids', { max: 200 })
    const fundingIds = p.list('funding_instrument_ids', { max: 200 })
    const ids = p.list('line_item_ids', { max: 200 })
    const q = p.string('q', { max: 255 })
    const withDraft = p.bool('with_draft', { default: false })
    const opts = listOptions(p, { countDefault: 200, countMax: 1000, sortable: ['name', 'created_at', 'updated_at', 'id', 'entity_status', 'start_time', 'end_time', 'objective'] })
    const all = (await repo.list(account.id)).filter(
      (li) =>
        (withDraft || li.entity_status !== 'DRAFT') &&
        matchesNamePrefix(li.name, q) &&
        (campaignIds === undefined || campaignIds.includes(li.campaign_id)) &&
        (fundingIds === undefined || fundingIds.includes(li.funding_instrument_id))
    )
    const page = filterByIds(all, ids, opts)
    return sendData(request, reply, page.data, 'line_item', pageExtras(page))
  })

  app.get<{ Params: { account_id: string; line_item_id: string } }>('/12/accounts/:account_id/line_items/:line_item_id', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const withDeleted = Params.query(request).bool('with_deleted', { default: false })
    const li = await repo.require(account.id, request.params.line_item_id, { withDeleted, notFoundCode: 'LINE_ITEM_NOT_FOUND' })
    return sendData(request, reply, li, 'line_item')
  })

  app.post<{ Params: { account_id: string } }>('/12/accounts/:account_id/line_items', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    return sendData(request, reply, await createLineItem(ctx, request, account.id), 'line_item')
  })

  app.put<{ Params: { account_id: string; line_item_id: string } }>('/12/accounts/:account_id/line_items/:line_item_id', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    return sendData(request, reply, await updateLineItem(ctx, request, account.id, request.params.line_item_id), 'line_item')
  })

  app.delete<{ Params: { account_id: string; line_item_id: string } }>('/12/accounts/:account_id/line_items/:line_item_id', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    // A deleted line item is not found again (HTTP 404). Its children (promoted posts,
    // curated categories) are deliberately left alone: the platform does not cascade.
    const li = await repo.softDelete(account.id, request.params.line_item_id, actorOf(request), { notFoundCode: 'LINE_ITEM_NOT_FOUND' })
    return sendData(request, reply, li, 'line_item')
  })
}
