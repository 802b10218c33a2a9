import type { ServiceContext } from '../../../common/context'
import { Ads, AdsError } from '../../../common/errors'
import type { Params } from '../conventions'
import { type AdsEntity, EntityRepo } from '../entities'
import type { Campaign } from './campaign-records'
import {
  APP_OBJECTIVES,
  type BidStrategy,
  bidStrategiesFor,
  defaultBidStrategy,
  defaultGoal,
  FREQUENCY_CAP_OBJECTIVES,
  type Goal,
  goalsFor,
  type Objective,
  type PayBy,
  payByFor
} from './objectives'
import { businessCategoryOf, IAB_CODE, type ProductType } from './reference-data'

/**
 * Line items ("ad groups") and every rule the contract puts on them. The rules
 * run on the line item as it would be after the request (create: the new
 * item; PUT: the stored item with the request applied), so a rule holds no
 * matter which request tries to break it; the error names the parameter
 * the client must fix.
 */

export const LINE_ITEM_CREATE_STATUSES = ['ACTIVE', 'DRAFT', 'PAUSED'] as const
export const LINE_ITEM_UPDATE_STATUSES = ['ACTIVE', 'PAUSED'] as const
export type LineItemStatus = (typeof LINE_ITEM_CREATE_STATUSES)[number]
export const AUDIENCE_EXPANSIONS = ['BROAD', 'DEFINED', 'EXPANDED'] as const
export type AudienceExpansion = (typeof AUDIENCE_EXPANSIONS)[number]
export const DURATIONS_IN_DAYS = [1, 7, 30] as const

export interface LineItem extends AdsEntity {
  campaign_id: string
  funding_instrument_id: string
  name: string | null
  objective: Objective
  product_type: ProductType
  placements: string[]
  goal: Goal
  bid_strategy: BidStrategy
  bid_amount_local_micro: number | null
  target_cpa_local_micro: number | null
  pay_by: PayBy
  currency: string
  entity_status: LineItemStatus
  start_time: string | null
  end_time: string | null
  duration_in_days: number | null
  frequency_cap: number | null
  standard_delivery: boolean | null
  total_budget_amount_local_micro: number | null
  daily_budget_amount_local_micro: number | null
  advertiser_user_id: string | null
  advertiser_domain: string | null
  categories: string[]
  android_app_store_identifier: string | null
  ios_app_store_identifier: string | null
  primary_web_event_tag: string | null
  audience_expansion: AudienceExpansion | null
  automatic_tweet_promotion: boolean | null
  creative_source: 'MANUAL'
}

/** The line item repository. No `render`: the reads return the stored line item as it is (no internal field). */
export function lineItems(ctx: ServiceContext): EntityRepo<LineItem> {
  return new EntityRepo<LineItem>(ctx, 'LINE_ITEM', 'line_item')
}

/** The fields a client may set (create and PUT share them). */
export type LineItemSettable = Pick<
  LineItem,
  | 'name' | 'goal' | 'bid_strategy' | 'bid_amount_local_micro' | 'pay_by' | 'entity_status' | 'start_time' | 'end_time'
  | 'duration_in_days' | 'frequency_cap' | 'standard_delivery' | 'total_budget_amount_local_micro'
  | 'daily_budget_amount_local_micro' | 'advertiser_user_id' | 'advertiser_domain' | 'categories'
  | 'android_app_store_identifier' | 'ios_app_store_identifier' | 'primary_web_event_tag' | 'audience_expansion'
>

const DOMAIN = /^(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))+$/
const ANDROID_APP_ID = /^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)+$/
const IOS_APP_ID = /^\d{1,12}$/
const USER_ID = /^\d{1,19}$/

/**
 * Reads the settable parameters present in the request; `given` names
 * them. On PUT an empty value unsets a nullable field (null, or [] for
 * categories) and is refused for the fields that always have a value.
 */
export function readSettable(p: Params, mode: 'create' | 'update'): { values: Partial<LineItemSettable>; given: Set<string> } {
  const values: Partial<LineItemSettable> = {}
  const given = new Set<string>()
  const nullable = (name: keyof LineItemSettable, read: () => unknown): void => {
    if (mode === 'update' && p.isEmpty(name)) {
      ;(values as Record<string, unknown>)[name] = name === 'categories' ? [] : null
      given.add(name)
      return
    }
    const v = read()
    if (v !== undefined) {
      ;(values as Record<string, unknown>)[name] = v
      given.add(name)
    }
  }
  const required = (name: keyof LineItemSettable, read: () => unknown): void => {
    if (mode === 'update' && p.isEmpty(name)) throw Ads.invalid(name, `${name} cannot be unset`)
    const v = read()
    if (v !== undefined) {
      ;(values as Record<string, unknown>)[name] = v
      given.add(name)
    }
  }

  nullable('name', () => p.string('name', { min: 1, max: 255 }))
  required('goal', () => p.enumOf('goal', goalValues))
  required('bid_strategy', () => p.enumOf('bid_strategy', ['AUTO', 'MAX', 'TARGET'] as const))
  nullable('bid_amount_local_micro', () => positive(p, 'bid_amount_local_micro'))
  required('pay_by', () => p.enumOf('pay_by', ['APP_CLICK', 'IMPRESSION', 'LINK_CLICK'] as const))
  required('entity_status', () => p.enumOf('entity_status', mode === 'create' ? LINE_ITEM_CREATE_STATUSES : LINE_ITEM_UPDATE_STATUSES))
  nullable('start_time', () => p.time('start_time'))
  nullable('end_time', () => p.time('end_time'))
  nullable('duration_in_days', () => durationInDays(p))
  nullable('frequency_cap', () => p.int('frequency_cap', { min: 1, max: 1000 }))
  nullable('standard_delivery', () => p.bool('standard_delivery'))
  nullable('total_budget_amount_local_micro', () => positive(p, 'total_budget_amount_local_micro'))
  nullable('daily_budget_amount_local_micro', () => positive(p, 'daily_budget_amount_local_micro'))
  nullable('advertiser_user_id', () => p.string('advertiser_user_id', { pattern: USER_ID }))
  nullable('advertiser_domain', () => advertiserDomain(p))
  nullable('categories', () => categories(p))
  nullable('android_app_store_identifier', () => p.string('android_app_store_identifier', { max: 255, pattern: ANDROID_APP_ID }))
  nullable('ios_app_store_identifier', () => p.string('ios_app_store_identifier', { pattern: IOS_APP_ID }))
  nullable('primary_web_event_tag', () => p.string('primary_web_event_tag', { max: 64, pattern: /^[0-9a-z]+$/ }))
  nullable('audience_expansion', () => p.enumOf('audience_expansion', AUDIENCE_EXPANSIONS))
  return { values, given }
}

const goalValues = [
  'APP_CLICKS', 'APP_INSTALLS', 'APP_PURCHASES', 'ENGAGEMENT', 'FOLLOWERS', 'LINK_CLICKS', 'MAX_REACH', 'PREROLL',
  'PREROLL_STARTS', 'REACH_WITH_ENGAGEMENT', 'VIDEO_VIEW', 'VIEW_3S_100PCT', 'VIEW_6S', 'VIEW_15S', 'WEBSITE_CONVERSIONS'
] as const satisfies readonly Goal[]

function positive(p: Params, name: string): number | undefined {
  const v = p.long(name)
  if (v !== undefined && v <= 0) throw Ads.invalid(name, `${name} must be greater than zero, got ${v}`)
  return v
}

function durationInDays(p: Params): number | undefined {
  const v = p.int('duration_in_days')
  if (v !== undefined && !(DURATIONS_IN_DAYS as readonly number[]).includes(v)) {
    throw Ads.invalid('duration_in_days', `duration_in_days must be one of 1, 7, 30, got ${v}`)
  }
  return v
}

function advertiserDomain(p: Params): string | undefined {
  const v = p.string('advertiser_domain', { max: 255 })
  if (v === undefined) return undefined
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(v)) throw Ads.invalid('advertiser_domain', 'advertiser_domain is a domain without the protocol, e.g. example.com')
  if (!DOMAIN.test(v)) throw Ads.invalid('advertiser_domain', `Invalid domain "${v.slice(0, 100)}" for advertiser_domain`)
  return v.toLowerCase()
}

function categories(p: Params): string[] | undefined {
  const list = p.list('categories', { max: 100, itemPattern: IAB_CODE })
  return list === undefined ? undefined : [...new Set(list)]
}

function missing(parameter: string, message: string): AdsError {
  return new AdsError(400, { code: 'MISSING_PARAMETER', message, parameter })
}

/**
 * Fills the defaults the objective implies for what the client left out
 * (goal, bid strategy, pay_by), and resets a stored default the change
 * made invalid (e.g. pay_by IMPRESSION after switching to TARGET).
 */
export function applyDefaults(item: LineItem, given: Set<string>): LineItem {
  const out = { ...item }
  if (!given.has('goal') && !goalsFor(out.objective).includes(out.goal)) out.goal = defaultGoal(out.objective)
  if (!given.has('bid_strategy') && !bidStrategiesFor(out.objective).includes(out.bid_strategy)) {
    out.bid_strategy = defaultBidStrategy(out.objective, out.bid_amount_local_micro !== null)
  }
  const rule = payByFor(out.objective, out.goal, out.bid_strategy)
  if (!given.has('pay_by') && !rule.accepted.includes(out.pay_by)) out.pay_by = rule.accepted[0] as PayBy
  // AUTO bids itself: a bid amount sent with it is ignored, not stored.
  if (out.bid_strategy === 'AUTO') out.bid_amount_local_micro = null
  return out
}

/**
 * Every rule of docs/contract.md "Bid strategy rules", the PUT parameter notes
 * and the line item limits, checked on the resulting line item.
 */
export function checkLineItem(item: LineItem, campaign: Campaign, given: Set<string>): void {
  const { objective } = item
  if (!goalsFor(objective).includes(item.goal)) {
    throw Ads.invalid('goal', `goal ${item.goal} is not available for objective ${objective}; expected one of ${goalsFor(objective).join(', ')}`)
  }
  if (!bidStrategiesFor(objective).includes(item.bid_strategy)) {
    throw Ads.invalid('bid_strategy', `bid_strategy ${item.bid_strategy} is not available for objective ${objective}; expected one of ${bidStrategiesFor(objective).join(', ')}`)
  }
  if ((item.bid_strategy === 'MAX' || item.bid_strategy === 'TARGET') && item.bid_amount_local_micro === null) {
    throw missing('bid_amount_local_micro', `bid_amount_local_micro is required when bid_strategy is ${item.bid_strategy}`)
  }
  const payBy = payByFor(objective, item.goal, item.bid_strategy)
  if (!payBy.accepted.includes(item.pay_by)) {
    throw Ads.invalid(
      'pay_by',
      payBy.choosable
        ? `pay_by ${item.pay_by} is not available for goal ${item.goal} with bid_strategy ${item.bid_strategy}; expected one of ${payBy.accepted.join(', ')}`
        : `pay_by cannot be chosen for objective ${objective} with goal ${item.goal} (it is ${payBy.accepted[0]})`
    )
  }
  if (APP_OBJECTIVES.includes(objective) && item.android_app_store_identifier === null && item.ios_app_store_identifier === null) {
    const parameter = given.has('ios_app_store_identifier') ? 'ios_app_store_identifier' : 'android_app_store_identifier'
    throw missing(parameter, `Objective ${objective} needs android_app_store_identifier or ios_app_store_identifier`)
  }
  if (objective === 'PREROLL_VIEWS') checkPrerollCategories(item.categories)
  if (item.frequency_cap !== null && !FREQUENCY_CAP_OBJECTIVES.includes(objective)) {
    throw Ads.invalid('frequency_cap', `frequency_cap is only supported for objectives ${FREQUENCY_CAP_OBJECTIVES.join(', ')}, not ${objective}`)
  }
  if (item.placements.includes('PUBLISHER_NETWORK')) {
    if (item.advertiser_domain === null) throw missing('advertiser_domain', 'advertiser_domain is required when placements include PUBLISHER_NETWORK')
    if (item.categories.length === 0) throw missing('categories', 'categories is required when placements include PUBLISHER_NETWORK')
  }
  if (item.goal === 'WEBSITE_CONVERSIONS' && item.primary_web_event_tag === null) {
    throw missing('primary_web_event_tag', 'primary_web_event_tag is required when goal is WEBSITE_CONVERSIONS')
  }
  if (campaign.budget_optimization !== 'LINE_ITEM') {
    if (item.daily_budget_amount_local_micro !== null) {
      throw Ads.invalid('daily_budget_amount_local_micro', `daily_budget_amount_local_micro is only available when the campaign's budget_optimization is LINE_ITEM (campaign ${campaign.id} optimizes at CAMPAIGN level)`)
    }
    if (item.standard_delivery !== null) {
      throw Ads.invalid('standard_delivery', `standard_delivery is only available when the campaign's budget_optimization is LINE_ITEM (campaign ${campaign.id} optimizes at CAMPAIGN level)`)
    }
  }
  const daily = item.daily_budget_amount_local_micro
  const total = item.total_budget_amount_local_micro
  if (daily !== null && total !== null && daily > total) {
    const parameter = given.has('total_budget_amount_local_micro') && !given.has('daily_budget_amount_local_micro') ? 'total_budget_amount_local_micro' : 'daily_budget_amount_local_micro'
    throw Ads.invalid(parameter, `daily_budget_amount_local_micro (${daily}) must be less than or equal to total_budget_amount_local_micro (${total})`)
  }
  if (item.start_time !== null && item.end_time !== null && Date.parse(item.end_time) <= Date.parse(item.start_time)) {
    throw Ads.invalid('end_time', 'end_time must be later than start_time')
  }
}

/**
 * PREROLL_VIEWS line items carry one or two advertiser business categories,
 * given as the IAB codes of those categories (GET advertiser_business_categories).
 */
export function checkPrerollCategories(codes: string[]): void {
  if (codes.length === 0) throw missing('categories', 'PREROLL_VIEWS line items need one or two advertiser business categories in categories (their IAB codes)')
  const business = new Set<string>()
  for (const code of codes) {
    const category = businessCategoryOf(code)
    if (!category) throw Ads.invalid('categories', `${code} does not belong to any advertiser business category (see GET advertiser_business_categories)`)
    business.add(category.id)
  }
  if (business.size > 2) {
    throw Ads.invalid('categories', `PREROLL_VIEWS line items take one or two advertiser business categories; categories spans ${business.size} (${[...business].join(', ')})`)
  }
}
