import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { ServiceContext } from '../../../common/context'
import { Ads, AdsError } from '../../../common/errors'
import { requireAccount } from '../accounts'
import { actorOf, ADS_AUTH, listOptions, Params, sendData } from '../conventions'
import type { EntityRepo } from '../entities'
import { type BudgetOptimization, BUDGET_OPTIMIZATIONS, type Campaign, CAMPAIGN_CREATE_STATUSES, CAMPAIGN_UPDATE_STATUSES, campaigns } from './campaign-records'
import { ableToFund, fundingInstruments } from './funding-instruments'
import { type LineItem, lineItems } from './line-items'
import { filterByIds, matchesNamePrefix, pageExtras } from './lists'
import { keepChangesOnly, type WholeObjectRules } from '../whole-object'

/**
 * Campaigns: a schedule and a budget drawn from a funding instrument; line
 * items spend it. Shapes and parameters follow the public platform's
 * campaign reference. `servable`, `reasons_not_servable` and
 * `effective_status` are derived at read time from the campaign, its line
 * items and its funding instrument, so they never go stale. The stored
 * campaign, its repository and its lease are in ./campaign-records (line
 * items need them too).
 */

export interface RenderedCampaign extends Campaign {
  servable: boolean | null
  reasons_not_servable: string[]
  effective_status: string
}

const NAME_MAX = 255
const PURCHASE_ORDER_MAX = 50

/** A budget amount: a long greater than zero. */
function budget(p: Params, name: string): number | undefined {
  const v = p.long(name)
  if (v !== undefined && v <= 0) throw Ads.invalid(name, `${name} must be greater than zero, got ${v}`)
  return v
}

function checkBudgets(daily: number | null, total: number | null): void {
  if (daily !== null && total !== null && daily > total) {
    throw Ads.invalid('daily_budget_amount_local_micro', `daily_budget_amount_local_micro (${daily}) must be less than or equal to total_budget_amount_local_micro (${total})`)
  }
}

function checkTimes(start: string | null, end: string | null): void {
  if (start !== null && end !== null && Date.parse(end) <= Date.parse(start)) throw Ads.invalid('end_time', 'end_time must be later than start_time')
}

/** Derived serving state: why the campaign cannot deliver right now, if it cannot. */
export function renderCampaign(c: Campaign, liveLineItems: number, fundingOk: boolean, now = Date.now()): RenderedCampaign {
  const reasons: string[] = []
  if (c.deleted) reasons.push('DELETED')
  if (c.entity_status === 'DRAFT') reasons.push('DRAFT')
  if (c.entity_status === 'PAUSED') reasons.push('PAUSED_BY_ADVERTISER')
  if (liveLineItems === 0) reasons.push('INCOMPLETE')
  if (c.end_time !== null && Date.parse(c.end_time) <= now) reasons.push('EXPIRED')
  if (!fundingOk) reasons.push('FUNDING_INSTRUMENT_NOT_ABLE_TO_FUND')
  const servable = reasons.length === 0
  let effective = 'UNKNOWN'
  if (servable) effective = c.start_time !== null && Date.parse(c.start_time) > now ? 'SCHEDULED' : 'RUNNING'
  else if (reasons.includes('EXPIRED')) effective = 'EXPIRED'
  else if (reasons.includes('PAUSED_BY_ADVERTISER')) effective = 'PAUSED'
  return { ...c, servable, reasons_not_servable: reasons, effective_status: effective }
}

/** Renders campaigns of one account, counting their live line items once. */
async function renderAll(ctx: ServiceContext, accountId: string, list: Campaign[]): Promise<RenderedCampaign[]> {
  const items = await lineItems(ctx).list(accountId)
  const live = new Map<string, number>()
  for (const li of items) if (!li.deleted) live.set(li.campaign_id, (live.get(li.campaign_id) ?? 0) + 1)
  const instruments = new Map((await fundingInstruments(ctx).list(accountId)).map((fi) => [fi.id, fi]))
  return list.map((c) => {
    const fi = instruments.get(c.funding_instrument_id)
    return renderCampaign(c, live.get(c.id) ?? 0, fi !== undefined && ableToFund(fi).able)
  })
}

async function renderOne(ctx: ServiceContext, accountId: string, c: Campaign): Promise<RenderedCampaign> {
  return (await renderAll(ctx, accountId, [c]))[0] as RenderedCampaign
}

/** The campaign a line item is created under: it must exist in the account and not be deleted. */
export async function campaignForLineItem(ctx: ServiceContext, accountId: string, campaignId: string): Promise<Campaign> {
  const c = await campaigns(ctx).get(accountId, campaignId)
  if (!c) throw Ads.invalid('campaign_id', `Campaign ${campaignId} was not found in account ${accountId}`)
  return c
}

async function createCampaign(ctx: ServiceContext, request: FastifyRequest, accountId: string): Promise<Campaign> {
  const p = Params.query(request)
  const fundingInstrumentId = p.string('funding_instrument_id', { required: true, max: 64 }) as string
  const name = p.string('name', { required: true, max: NAME_MAX }) as string
  const optimization = p.enumOf('budget_optimization', BUDGET_OPTIMIZATIONS) ?? 'CAMPAIGN'
  const daily = budget(p, 'daily_budget_amount_local_micro') ?? null
  const total = budget(p, 'total_budget_amount_local_micro') ?? null
  const status = p.enumOf('entity_status', CAMPAIGN_CREATE_STATUSES) ?? 'ACTIVE'
  const purchaseOrder = p.string('purchase_order_number', { max: PURCHASE_ORDER_MAX }) ?? null
  const standardDelivery = p.bool('standard_delivery')
  const start = p.time('start_time') ?? null
  const end = p.time('end_time') ?? null
  if (standardDelivery !== undefined && optimization !== 'CAMPAIGN') {
    throw Ads.invalid('standard_delivery', 'standard_delivery is only available when budget_optimization is CAMPAIGN')
  }
  checkBudgets(daily, total)
  checkTimes(start, end)
  const fi = await fundingInstruments(ctx).get(accountId, fundingInstrumentId)
  if (!fi) throw Ads.invalid('funding_instrument_id', `Funding instrument ${fundingInstrumentId} was not found in account ${accountId}`)
  const funding = ableToFund(fi)
  if (!funding.able) throw Ads.invalid('funding_instrument_id', `Funding instrument ${fundingInstrumentId} cannot fund new campaigns (${funding.reasons.join(', ')})`)
  return campaigns(ctx).create(
    accountId,
    {
      name,
      funding_instrument_id: fi.id,
      budget_optimization: optimization,
      daily_budget_amount_local_micro: daily,
      total_budget_amount_local_micro: total,
      entity_status: status,
      purchase_order_number: purchaseOrder,
      standard_delivery: optimization === 'CAMPAIGN' ? (standardDelivery ?? true) : null,
      start_time: start,
      end_time: end,
      duration_in_days: null,
      frequency_cap: null,
      currency: fi.currency
    },
    actorOf(request)
  )
}

/** What a whole-object campaign PUT (an SDK's save()) may repeat: funding instrument and currency are fixed at create. */
const CAMPAIGN_WHOLE_OBJECT: WholeObjectRules = {
  readOnly: ['funding_instrument_id', 'currency'],
  computed: ['servable', 'reasons_not_servable', 'effective_status']
}

/** The parameters of a campaign PUT, read and checked one by one (no look at the stored campaign yet). */
interface CampaignPut {
  patch: Partial<Campaign>
  optimization: BudgetOptimization | undefined
  standardDelivery: boolean | undefined
}

function readCampaignPut(p: Params): CampaignPut {
  const patch: Partial<Campaign> = {}
  if (p.isEmpty('name')) throw Ads.invalid('name', 'name cannot be empty')
  const name = p.string('name', { max: NAME_MAX })
  if (name !== undefined) patch.name = name
  const optimization = p.enumOf('budget_optimization', BUDGET_OPTIMIZATIONS)
  if (optimization !== undefined) patch.budget_optimization = optimization
  const status = p.enumOf('entity_status', CAMPAIGN_UPDATE_STATUSES)
  if (status !== undefined) patch.entity_status = status
  for (const field of ['daily_budget_amount_local_micro', 'total_budget_amount_local_micro'] as const) {
    if (p.isEmpty(field)) patch[field] = null
    else {
      const v = budget(p, field)
      if (v !== undefined) patch[field] = v
    }
  }
  if (p.isEmpty('purchase_order_number')) patch.purchase_order_number = null
  else {
    const po = p.string('purchase_order_number', { max: PURCHASE_ORDER_MAX })
    if (po !== undefined) patch.purchase_order_number = po
  }
  for (const field of ['start_time', 'end_time'] as const) {
    if (p.isEmpty(field)) patch[field] = null
    else {
      const v = p.time(field)
      if (v !== undefined) patch[field] = v
    }
  }
  return { patch, optimization, standardDelivery: p.bool('standard_delivery') }
}

/**
 * PUT of a campaign. The cross-field rules (budgets, times, pacing under
 * the budget optimization) and the switch of optimization, which moves
 * pacing to or from the line items, run inside the campaign's
 * read-modify-write (EntityRepo.updateWith) against the campaign as last
 * committed: concurrent PUTs neither lose each other's changes nor pass a
 * rule together that neither would break alone.
 */
async function updateCampaign(ctx: ServiceContext, request: FastifyRequest, accountId: string, campaignId: string): Promise<Campaign> {
  const repo = campaigns(ctx)
  const notFound = { notFoundCode: 'CAMPAIGN_NOT_FOUND' }
  // An unknown campaign is 404 before any parameter is looked at.
  const stored = await repo.require(accountId, campaignId, notFound)
  keepChangesOnly(request, stored, CAMPAIGN_WHOLE_OBJECT)
  const put = readCampaignPut(Params.query(request))
  const actor = actorOf(request)
  return repo.updateWith(
    accountId,
    campaignId,
    async (current) => {
      const patch = { ...put.patch }
      const next = { ...current, ...patch }
      const switching = put.optimization !== undefined && put.optimization !== current.budget_optimization
      if (put.standardDelivery !== undefined) {
        if (next.budget_optimization !== 'CAMPAIGN') throw Ads.invalid('standard_delivery', 'standard_delivery is only available when budget_optimization is CAMPAIGN')
        patch.standard_delivery = put.standardDelivery
      } else if (switching) {
        patch.standard_delivery = put.optimization === 'CAMPAIGN' ? true : null
      }
      checkBudgets(next.daily_budget_amount_local_micro, next.total_budget_amount_local_micro)
      checkTimes(next.start_time, next.end_time)
      if (switching) await movePacing(ctx, accountId, current, put.optimization as BudgetOptimization, actor)
      return patch
    },
    actor,
    notFound
  )
}

/**
 * Budget pacing (standard_delivery) lives where the budget is optimized: on
 * the campaign under CAMPAIGN, on each line item under LINE_ITEM (the
 * public reference: "only available when budget_optimization is ..."). A
 * switch therefore moves it, as line item updates that publish their own
 * entity changes: to CAMPAIGN clears the line items' pacing (the campaign
 * takes `standard_delivery`, default true); to LINE_ITEM gives each line
 * item the campaign's pacing. Line item daily budgets are money the
 * advertiser chose, so a switch to CAMPAIGN is refused while any carries
 * one rather than dropping it. The line items are updated before the
 * campaign: if the campaign update then failed, null pacing under a
 * LINE_ITEM campaign is still a valid, editable state.
 *
 * Runs under the campaign's lease (updateCampaign), which line item creates
 * and PUTs take too: no line item of the campaign gains a daily budget
 * between the check and the switch. Each line item is changed under its
 * own lease, from its latest copy.
 */
async function movePacing(ctx: ServiceContext, accountId: string, current: Campaign, to: BudgetOptimization, actor: ReturnType<typeof actorOf>): Promise<void> {
  const repo = lineItems(ctx)
  const live = (await repo.list(accountId)).filter((li) => li.campaign_id === current.id && !li.deleted)
  if (to === 'CAMPAIGN') {
    const budgeted = live.filter((li) => li.daily_budget_amount_local_micro !== null)
    if (budgeted.length > 0) {
      throw Ads.invalid('budget_optimization', `budget_optimization cannot become CAMPAIGN while line items (${budgeted.map((li) => li.id).join(', ')}) carry a daily budget`)
    }
    for (const li of live) if (li.standard_delivery !== null) await setPacing(repo, accountId, li.id, null, actor)
    return
  }
  const pacing = current.standard_delivery ?? true
  for (const li of live) if (li.standard_delivery === null) await setPacing(repo, accountId, li.id, pacing, actor)
}

/** Sets a line item's pacing; one deleted meanwhile (DELETE does not wait for the campaign) is skipped. */
async function setPacing(repo: EntityRepo<LineItem>, accountId: string, lineItemId: string, pacing: boolean | null, actor: ReturnType<typeof actorOf>): Promise<void> {
  try {
    await repo.updateWith(accountId, lineItemId, () => ({ standard_delivery: pacing }), actor)
  } catch (err) {
    if (err instanceof AdsError && err.statusCode === 404) return
    throw err
  }
}

export async function registerCampaignEntityRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  const repo = campaigns(ctx)

  app.get<{ Params: { account_id: string } }>('/12/accounts/:account_id/campaigns', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const p = Params.query(request)
    const ids = p.list('campaign_ids', { max: 200 })
    const fundingIds = p.list('funding_instrument_ids', { max: 200 })
    const q = p.string('q', { max: 255 })
    const withDraft = p.bool('with_draft', { default: false })
    const opts = listOptions(p, { countDefault: 200, countMax: 1000, sortable: ['name', 'created_at', 'updated_at', 'id', 'entity_status', 'start_time', 'end_time'] })
    const all = (await repo.list(account.id)).filter(
      (c) => (withDraft || c.entity_status !== 'DRAFT') && matchesNamePrefix(c.name, q) && (fundingIds === undefined || fundingIds.includes(c.funding_instrument_id))
    )
    const page = filterByIds(all, ids, opts)
    return sendData(request, reply, await renderAll(ctx, account.id, page.data), 'campaign', pageExtras(page))
  })

  app.get<{ Params: { account_id: string; campaign_id: string } }>('/12/accounts/:account_id/campaigns/:campaign_id', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const withDeleted = Params.query(request).bool('with_deleted', { default: false })
    const c = await repo.require(account.id, request.params.campaign_id, { withDeleted, notFoundCode: 'CAMPAIGN_NOT_FOUND' })
    return sendData(request, reply, await renderOne(ctx, account.id, c), 'campaign')
  })

  app.post<{ Params: { account_id: string } }>('/12/accounts/:account_id/campaigns', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const c = await createCampaign(ctx, request, account.id)
    return sendData(request, reply, await renderOne(ctx, account.id, c), 'campaign')
  })

  app.put<{ Params: { account_id: string; campaign_id: string } }>('/12/accounts/:account_id/campaigns/:campaign_id', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const c = await updateCampaign(ctx, request, account.id, request.params.campaign_id)
    return sendData(request, reply, await renderOne(ctx, account.id, c), 'campaign')
  })

  app.delete<{ Params: { account_id: string; campaign_id: string } }>('/12/accounts/:account_id/campaigns/:campaign_id', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    // Deleting is not reversible; a second delete finds nothing (404), like line items.
    const c = await repo.softDelete(account.id, request.params.campaign_id, actorOf(request), { notFoundCode: 'CAMPAIGN_NOT_FOUND' })
    return sendData(request, reply, await renderOne(ctx, account.id, c), 'campaign')
  })
}
