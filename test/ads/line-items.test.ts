import t, { type Test } from 'tap'
import { adsFixture, createCampaign, createLineItem, expectError, type AdsFixture, OPERATOR_TOKEN } from '../support/fixtures/campaigns'
import type { TestResponse } from '../support/http'
import { startTestRuntime } from '../support/runtime'
import { eventually } from '../support/util'
import { redisStore, startRedis } from '../support/infra'
import { checkChain, collectChanges } from '../support/fixtures/change'

/**
 * Line items: create/list/read as the public platform shapes them, and
 * every rule of docs/ads.md (bid strategy per objective, bid amounts,
 * app store ids, PREROLL_VIEWS categories, frequency cap, duration,
 * budgets, PUBLISHER_NETWORK, pay_by, entity_status, delete twice),
 * each refused with its code and parameter.
 */

type Query = Record<string, string>

async function postItem(f: AdsFixture, campaignId: string, query: Query): Promise<TestResponse> {
  return f.call('POST', '/line_items', { query: { campaign_id: campaignId, objective: 'ENGAGEMENTS', product_type: 'PROMOTED_TWEETS', placements: 'ALL_ON_SVC', ...query } })
}

t.test('create has the public shape, defaults from the objective, and reads back', async (t) => {
  const f = await adsFixture(t)
  const campaign = await createCampaign(f)
  const res = await postItem(f, campaign.id as string, { bid_amount_local_micro: '3210000', entity_status: 'PAUSED', start_time: '2030-06-15', name: 'li-1' })
  t.equal(res.status, 200, res.text)
  const body = res.json<{ data: Record<string, unknown>; data_type: string; request: { params: Record<string, unknown> } }>()
  t.equal(body.data_type, 'line_item')
  t.equal(res.headers.get('x-current-api-version'), '12')
  t.match(body.data, {
    campaign_id: campaign.id,
    funding_instrument_id: f.fi.id,
    name: 'li-1',
    objective: 'ENGAGEMENTS',
    product_type: 'PROMOTED_TWEETS',
    placements: ['ALL_ON_SVC'],
    goal: 'ENGAGEMENT',
    bid_strategy: 'MAX',
    bid_amount_local_micro: 3210000,
    pay_by: 'ENGAGEMENT',
    currency: 'USD',
    entity_status: 'PAUSED',
    start_time: '2030-06-15T00:00:00Z',
    end_time: null,
    categories: [],
    advertiser_user_id: f.id.user.id,
    creative_source: 'MANUAL',
    target_cpa_local_micro: null,
    automatic_tweet_promotion: null,
    deleted: false
  })
  for (const field of ['id', 'created_at', 'updated_at', 'frequency_cap', 'duration_in_days', 'standard_delivery', 'total_budget_amount_local_micro', 'daily_budget_amount_local_micro', 'advertiser_domain', 'android_app_store_identifier', 'ios_app_store_identifier', 'primary_web_event_tag']) {
    t.ok(field in body.data, `field ${field} present`)
  }
  t.same(body.request.params.placements, ['ALL_ON_SVC'], 'a list parameter is echoed as an array, as the public examples show')
  const id = body.data.id as string
  const read = await f.call('GET', `/line_items/${id}`)
  t.equal(read.status, 200)
  t.same(read.json<{ data: unknown }>().data, body.data)

  // Defaults: no bid amount -> AUTO; REACH with an amount -> TARGET.
  const auto = await createLineItem(f, campaign.id as string)
  t.match(auto, { bid_strategy: 'AUTO', bid_amount_local_micro: null, goal: 'ENGAGEMENT', entity_status: 'ACTIVE', name: null })
  const reachCampaign = await createCampaign(f)
  const reach = await createLineItem(f, reachCampaign.id as string, { objective: 'REACH', bid_amount_local_micro: '500000' })
  t.match(reach, { bid_strategy: 'TARGET', goal: 'MAX_REACH', pay_by: 'IMPRESSION', bid_amount_local_micro: 500000 })
})

t.test('list filters, paginates and hides deleted and draft items unless asked', async (t) => {
  const f = await adsFixture(t)
  const c1 = await createCampaign(f, { name: 'one' })
  const c2 = await createCampaign(f, { name: 'two' })
  const a = await createLineItem(f, c1.id as string, { name: 'Alpha' })
  const b = await createLineItem(f, c1.id as string, { name: 'beta' })
  const c = await createLineItem(f, c2.id as string, { name: 'alpine', entity_status: 'DRAFT' })

  const all = await f.call('GET', '/line_items')
  t.equal(all.status, 200)
  t.same(all.json<{ data: Array<{ id: string }> }>().data.map((x) => x.id), [a.id, b.id], 'drafts hidden by default')
  const withDraft = await f.call('GET', '/line_items', { query: { with_draft: 'true' } })
  t.equal(withDraft.json<{ data: unknown[] }>().data.length, 3)
  const byCampaign = await f.call('GET', '/line_items', { query: { campaign_ids: `${c2.id}`, with_draft: 'true' } })
  t.same(byCampaign.json<{ data: Array<{ id: string }> }>().data.map((x) => x.id), [c.id])
  const byName = await f.call('GET', '/line_items', { query: { q: 'al', with_draft: 'true' } })
  t.same(byName.json<{ data: Array<{ id: string }> }>().data.map((x) => x.id).sort(), [a.id, c.id].sort(), 'q is a case-insensitive name prefix')
  const byIds = await f.call('GET', '/line_items', { query: { line_item_ids: `${b.id}` } })
  t.same(byIds.json<{ data: Array<{ id: string }> }>().data.map((x) => x.id), [b.id])

  const page1 = await f.call('GET', '/line_items', { query: { count: '1', with_draft: 'true' } })
  const p1 = page1.json<{ data: Array<{ id: string }>; next_cursor: string | null }>()
  t.equal(p1.data.length, 1)
  t.type(p1.next_cursor, 'string')
  const page2 = await f.call('GET', '/line_items', { query: { count: '1', with_draft: 'true', cursor: p1.next_cursor as string } })
  t.not(page2.json<{ data: Array<{ id: string }> }>().data[0]?.id, p1.data[0]?.id)
  const total = await f.call('GET', '/line_items', { query: { with_total_count: 'true' } })
  t.equal(total.json<{ total_count: number }>().total_count, 2)

  expectError(t, await f.call('GET', '/line_items', { query: { count: '0' } }), 400, 'INVALID_PARAMETER', 'count')
  expectError(t, await f.call('GET', '/line_items', { query: { count: '1001' } }), 400, 'INVALID_PARAMETER', 'count')
  expectError(t, await f.call('GET', '/line_items', { query: { with_total_count: 'true', cursor: p1.next_cursor as string } }), 400, 'EXCLUSIVE_PARAMETERS', 'with_total_count')
  expectError(t, await f.call('GET', '/line_items', { query: { sort_by: 'nope-asc' } }), 400, 'INVALID_PARAMETER', 'sort_by')
  expectError(t, await f.call('GET', '/line_items/zzzzzz'), 404, 'LINE_ITEM_NOT_FOUND', undefined)
})

t.test('create refuses each broken rule with its code and parameter', async (t) => {
  const f = await adsFixture(t)
  const campaign = await createCampaign(f)
  const cid = campaign.id as string
  const lineLevel = (await createCampaign(f, { budget_optimization: 'LINE_ITEM' })).id as string
  const preroll = { objective: 'PREROLL_VIEWS', product_type: 'MEDIA', placements: 'ALL_ON_SVC' }
  const fresh = async (): Promise<string> => (await createCampaign(f)).id as string

  const cases: Array<{ name: string; campaign?: () => Promise<string>; query: Query; status: number; code: string; parameter: string }> = [
    { name: 'campaign_id required', query: { campaign_id: '' }, status: 400, code: 'MISSING_PARAMETER', parameter: 'campaign_id' },
    { name: 'objective required', query: { objective: '' }, status: 400, code: 'MISSING_PARAMETER', parameter: 'objective' },
    { name: 'objective enum', query: { objective: 'SALES' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'objective' },
    { name: 'product_type enum', query: { product_type: 'PROMOTED_TRENDS' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'product_type' },
    { name: 'placements required', query: { placements: '' }, status: 400, code: 'MISSING_PARAMETER', parameter: 'placements' },
    { name: 'unknown placement', query: { placements: 'ALL_ON_TWITTER' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'placements' },
    { name: 'placement combination per product type', query: { product_type: 'PROMOTED_ACCOUNT', placements: 'SVC_SEARCH' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'placements' },
    { name: 'unknown campaign', query: { campaign_id: 'nosuch' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'campaign_id' },
    { name: 'MAX unavailable for REACH', campaign: fresh, query: { objective: 'REACH', bid_strategy: 'MAX', bid_amount_local_micro: '100' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'bid_strategy' },
    { name: 'MAX unavailable for FOLLOWERS', campaign: fresh, query: { objective: 'FOLLOWERS', bid_strategy: 'MAX', bid_amount_local_micro: '100' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'bid_strategy' },
    { name: 'TARGET unavailable for ENGAGEMENTS', query: { bid_strategy: 'TARGET', bid_amount_local_micro: '100' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'bid_strategy' },
    { name: 'TARGET unavailable for FOLLOWERS', campaign: fresh, query: { objective: 'FOLLOWERS', bid_strategy: 'TARGET', bid_amount_local_micro: '100' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'bid_strategy' },
    { name: 'bid_strategy enum', query: { bid_strategy: 'LOWEST' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'bid_strategy' },
    { name: 'MAX needs a bid amount', query: { bid_strategy: 'MAX' }, status: 400, code: 'MISSING_PARAMETER', parameter: 'bid_amount_local_micro' },
    { name: 'TARGET needs a bid amount', campaign: fresh, query: { objective: 'WEBSITE_CLICKS', bid_strategy: 'TARGET' }, status: 400, code: 'MISSING_PARAMETER', parameter: 'bid_amount_local_micro' },
    { name: 'bid amount zero', query: { bid_amount_local_micro: '0' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'bid_amount_local_micro' },
    { name: 'bid amount negative', query: { bid_amount_local_micro: '-5' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'bid_amount_local_micro' },
    { name: 'bid amount not a long', query: { bid_amount_local_micro: '1.5' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'bid_amount_local_micro' },
    { name: 'APP_INSTALLS needs an app store id', campaign: fresh, query: { objective: 'APP_INSTALLS' }, status: 400, code: 'MISSING_PARAMETER', parameter: 'android_app_store_identifier' },
    { name: 'APP_ENGAGEMENTS needs an app store id', campaign: fresh, query: { objective: 'APP_ENGAGEMENTS' }, status: 400, code: 'MISSING_PARAMETER', parameter: 'android_app_store_identifier' },
    { name: 'ios id is numeric', campaign: fresh, query: { objective: 'APP_INSTALLS', ios_app_store_identifier: 'id333903271' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'ios_app_store_identifier' },
    { name: 'PREROLL_VIEWS needs categories', campaign: fresh, query: { ...preroll }, status: 400, code: 'MISSING_PARAMETER', parameter: 'categories' },
    { name: 'PREROLL_VIEWS takes at most two business categories', campaign: fresh, query: { ...preroll, categories: 'IAB7,IAB2,IAB18' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'categories' },
    { name: 'PREROLL_VIEWS categories must be business categories', campaign: fresh, query: { ...preroll, categories: 'IAB1' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'categories' },
    { name: 'categories are IAB codes', campaign: fresh, query: { ...preroll, categories: 'sports' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'categories' },
    { name: 'frequency_cap only for four objectives', campaign: fresh, query: { objective: 'WEBSITE_CLICKS', frequency_cap: '3' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'frequency_cap' },
    { name: 'frequency_cap is an integer', query: { frequency_cap: 'often' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'frequency_cap' },
    { name: 'duration_in_days is 1, 7 or 30', query: { frequency_cap: '2', duration_in_days: '3' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'duration_in_days' },
    { name: 'daily budget needs line-item optimization', query: { daily_budget_amount_local_micro: '1000000' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'daily_budget_amount_local_micro' },
    { name: 'standard_delivery needs line-item optimization', query: { standard_delivery: 'false' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'standard_delivery' },
    { name: 'daily budget <= total budget', campaign: async () => lineLevel, query: { daily_budget_amount_local_micro: '2000000', total_budget_amount_local_micro: '1000000' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'daily_budget_amount_local_micro' },
    { name: 'total budget > 0', query: { total_budget_amount_local_micro: '0' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'total_budget_amount_local_micro' },
    { name: 'PUBLISHER_NETWORK needs advertiser_domain', query: { placements: 'PUBLISHER_NETWORK', categories: 'IAB19' }, status: 400, code: 'MISSING_PARAMETER', parameter: 'advertiser_domain' },
    { name: 'PUBLISHER_NETWORK needs categories', query: { placements: 'ALL_ON_SVC,PUBLISHER_NETWORK', advertiser_domain: 'example.com' }, status: 400, code: 'MISSING_PARAMETER', parameter: 'categories' },
    { name: 'advertiser_domain has no protocol', query: { placements: 'PUBLISHER_NETWORK', categories: 'IAB19', advertiser_domain: 'https://example.com' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'advertiser_domain' },
    { name: 'pay_by fixed for ENGAGEMENTS', query: { pay_by: 'IMPRESSION' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'pay_by' },
    { name: 'pay_by enum', campaign: fresh, query: { objective: 'APP_INSTALLS', android_app_store_identifier: 'com.example.app', pay_by: 'FOLLOW' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'pay_by' },
    { name: 'pay_by fixed for goal APP_PURCHASES', campaign: fresh, query: { objective: 'APP_INSTALLS', goal: 'APP_PURCHASES', android_app_store_identifier: 'com.example.app', pay_by: 'APP_CLICK' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'pay_by' },
    { name: 'LINK_CLICKS with TARGET is not billed by IMPRESSION', campaign: fresh, query: { objective: 'WEBSITE_CLICKS', bid_strategy: 'TARGET', bid_amount_local_micro: '100', pay_by: 'IMPRESSION' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'pay_by' },
    { name: 'goal must fit the objective', query: { goal: 'MAX_REACH' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'goal' },
    { name: 'WEBSITE_CONVERSIONS needs a web event tag', campaign: fresh, query: { objective: 'WEBSITE_CLICKS', goal: 'WEBSITE_CONVERSIONS' }, status: 400, code: 'MISSING_PARAMETER', parameter: 'primary_web_event_tag' },
    { name: 'entity_status enum', query: { entity_status: 'RUNNING' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'entity_status' },
    { name: 'end_time after start_time', query: { start_time: '2030-01-02T00:00:00Z', end_time: '2030-01-01T00:00:00Z' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'end_time' },
    { name: 'start_time is ISO 8601', query: { start_time: 'tomorrow' }, status: 400, code: 'INVALID_PARAMETER', parameter: 'start_time' },
    { name: 'name at most 255', query: { name: 'x'.repeat(256) }, status: 400, code: 'INVALID_PARAMETER', parameter: 'name' }
  ]
  for (const c of cases) {
    const campaignId = c.campaign ? await c.campaign() : cid
    const res = await postItem(f, campaignId, c.query)
    t.test(c.name, async (t) => expectError(t, res, c.status, c.code, c.parameter))
  }

  // One objective and product type per campaign.
  await createLineItem(f, cid)
  expectError(t, await postItem(f, cid, { objective: 'REACH' }), 400, 'INVALID_PARAMETER', 'objective')
  expectError(t, await postItem(f, cid, { product_type: 'PROMOTED_ACCOUNT' }), 400, 'INVALID_PARAMETER', 'product_type')
  t.equal((await f.call('GET', '/line_items')).json<{ data: unknown[] }>().data.length, 1, 'no refused request created anything')
})

t.test('create accepts what the rules allow', async (t) => {
  const f = await adsFixture(t)
  const ok = async (query: Query): Promise<Record<string, unknown>> => createLineItem(f, (await createCampaign(f)).id as string, query)

  t.match(await ok({ objective: 'REACH', bid_strategy: 'TARGET', bid_amount_local_micro: '100' }), { bid_strategy: 'TARGET', pay_by: 'IMPRESSION' })
  t.match(await ok({ objective: 'WEBSITE_CLICKS', bid_strategy: 'TARGET', bid_amount_local_micro: '100' }), { goal: 'LINK_CLICKS', pay_by: 'LINK_CLICK' })
  t.match(await ok({ objective: 'WEBSITE_CLICKS' }), { goal: 'LINK_CLICKS', pay_by: 'IMPRESSION', bid_strategy: 'AUTO' })
  t.match(await ok({ objective: 'WEBSITE_CLICKS', pay_by: 'LINK_CLICK' }), { pay_by: 'LINK_CLICK' })
  t.match(await ok({ objective: 'FOLLOWERS', bid_amount_local_micro: '100' }), { bid_strategy: 'AUTO', bid_amount_local_micro: null, pay_by: 'FOLLOW' }, 'AUTO ignores the bid amount')
  t.match(await ok({ objective: 'APP_INSTALLS', ios_app_store_identifier: '333903271' }), { goal: 'APP_INSTALLS', pay_by: 'IMPRESSION', ios_app_store_identifier: '333903271' })
  t.match(await ok({ objective: 'APP_INSTALLS', android_app_store_identifier: 'com.example.app', pay_by: 'APP_CLICK' }), { pay_by: 'APP_CLICK' })
  t.match(await ok({ objective: 'APP_ENGAGEMENTS', android_app_store_identifier: 'com.example.app' }), { goal: 'APP_CLICKS', pay_by: 'APP_CLICK' })
  t.match(await ok({ objective: 'PREROLL_VIEWS', product_type: 'MEDIA', categories: 'IAB9-26,IAB9-18' }), { categories: ['IAB9-26', 'IAB9-18'], goal: 'PREROLL' }, 'codes of one business category count once')
  t.match(await ok({ objective: 'PREROLL_VIEWS', product_type: 'MEDIA', categories: 'IAB7,IAB2', frequency_cap: '3', duration_in_days: '7' }), { frequency_cap: 3, duration_in_days: 7 })
  t.match(await ok({ objective: 'REACH', frequency_cap: '5', duration_in_days: '30' }), { frequency_cap: 5, duration_in_days: 30 })
  t.match(await ok({ placements: 'PUBLISHER_NETWORK', advertiser_domain: 'Example.com', categories: 'IAB19' }), { advertiser_domain: 'example.com', categories: ['IAB19'] })
  t.match(await ok({ placements: 'SVC_SEARCH,SVC_TIMELINE', entity_status: 'DRAFT' }), { placements: ['SVC_SEARCH', 'SVC_TIMELINE'], entity_status: 'DRAFT' })
  t.match(await ok({ objective: 'WEBSITE_CLICKS', goal: 'WEBSITE_CONVERSIONS', primary_web_event_tag: 'nvo4z' }), { goal: 'WEBSITE_CONVERSIONS' })
  const lineLevel = (await createCampaign(f, { budget_optimization: 'LINE_ITEM' })).id as string
  t.match(await createLineItem(f, lineLevel, { daily_budget_amount_local_micro: '1000000', total_budget_amount_local_micro: '1000000' }), {
    daily_budget_amount_local_micro: 1000000,
    total_budget_amount_local_micro: 1000000,
    standard_delivery: true
  })
})

t.test('PUT applies the same rules to the resulting line item', async (t) => {
  const f = await adsFixture(t)
  const campaign = await createCampaign(f)
  const item = await createLineItem(f, campaign.id as string)
  const put = (id: string, query: Query): Promise<TestResponse> => f.call('PUT', `/line_items/${id}`, { query })
  const id = item.id as string

  expectError(t, await put(id, { bid_strategy: 'MAX' }), 400, 'MISSING_PARAMETER', 'bid_amount_local_micro')
  expectError(t, await put(id, { bid_strategy: 'TARGET', bid_amount_local_micro: '100' }), 400, 'INVALID_PARAMETER', 'bid_strategy')
  expectError(t, await put(id, { bid_amount_local_micro: '0' }), 400, 'INVALID_PARAMETER', 'bid_amount_local_micro')
  expectError(t, await put(id, { duration_in_days: '2' }), 400, 'INVALID_PARAMETER', 'duration_in_days')
  expectError(t, await put(id, { daily_budget_amount_local_micro: '100' }), 400, 'INVALID_PARAMETER', 'daily_budget_amount_local_micro')
  expectError(t, await put(id, { entity_status: 'DRAFT' }), 400, 'INVALID_PARAMETER', 'entity_status')
  expectError(t, await put(id, { pay_by: 'LINK_CLICK' }), 400, 'INVALID_PARAMETER', 'pay_by')
  expectError(t, await put(id, { goal: 'FOLLOWERS' }), 400, 'INVALID_PARAMETER', 'goal')
  expectError(t, await put(id, { placements: 'PUBLISHER_NETWORK' }), 400, 'INVALID_PARAMETER', 'placements')
  expectError(t, await put(id, { objective: 'REACH' }), 400, 'INVALID_PARAMETER', 'objective')
  expectError(t, await put(id, { audience_expansion: 'HUGE' }), 400, 'INVALID_PARAMETER', 'audience_expansion')
  expectError(t, await put(id, { bid_strategy: '' }), 400, 'INVALID_PARAMETER', 'bid_strategy')

  const updated = await put(id, { bid_strategy: 'MAX', bid_amount_local_micro: '140000', name: 'renamed', entity_status: 'PAUSED', frequency_cap: '4', duration_in_days: '1', audience_expansion: 'BROAD' })
  t.equal(updated.status, 200, updated.text)
  t.match(updated.json<{ data: unknown }>().data, { bid_strategy: 'MAX', bid_amount_local_micro: 140000, name: 'renamed', entity_status: 'PAUSED', frequency_cap: 4, duration_in_days: 1, audience_expansion: 'BROAD' })
  t.match((await put(id, { entity_status: 'ACTIVE' })).json<{ data: unknown }>().data, { entity_status: 'ACTIVE' })
  const unset = await put(id, { name: '', frequency_cap: '', duration_in_days: '' })
  t.match(unset.json<{ data: unknown }>().data, { name: null, frequency_cap: null, duration_in_days: null }, 'an empty value unsets a field')
  expectError(t, await put(id, { bid_amount_local_micro: '' }), 400, 'MISSING_PARAMETER', 'bid_amount_local_micro')
  t.match((await put(id, { bid_strategy: 'AUTO' })).json<{ data: unknown }>().data, { bid_strategy: 'AUTO', bid_amount_local_micro: null })

  // Budgets under line-item optimization: total may not drop below the daily budget.
  const lineLevel = await createCampaign(f, { budget_optimization: 'LINE_ITEM' })
  const budgeted = await createLineItem(f, lineLevel.id as string, { daily_budget_amount_local_micro: '1000000' })
  expectError(t, await put(budgeted.id as string, { total_budget_amount_local_micro: '500000' }), 400, 'INVALID_PARAMETER', 'total_budget_amount_local_micro')
  t.match((await put(budgeted.id as string, { total_budget_amount_local_micro: '5000000' })).json<{ data: unknown }>().data, { total_budget_amount_local_micro: 5000000 })

  // App store ids cannot all be unset on an app objective; frequency cap refused outside the four.
  const app = await createLineItem(f, (await createCampaign(f)).id as string, { objective: 'APP_INSTALLS', ios_app_store_identifier: '333903271' })
  expectError(t, await put(app.id as string, { ios_app_store_identifier: '' }), 400, 'MISSING_PARAMETER', 'ios_app_store_identifier')
  expectError(t, await put(app.id as string, { frequency_cap: '2' }), 400, 'INVALID_PARAMETER', 'frequency_cap')
  t.match((await put(app.id as string, { pay_by: 'APP_CLICK' })).json<{ data: unknown }>().data, { pay_by: 'APP_CLICK' })
  // Switching the goal resets a billing unit the new goal does not have.
  t.match((await put(app.id as string, { goal: 'APP_PURCHASES' })).json<{ data: unknown }>().data, { goal: 'APP_PURCHASES', pay_by: 'IMPRESSION' })

  const preroll = await createLineItem(f, (await createCampaign(f)).id as string, { objective: 'PREROLL_VIEWS', product_type: 'MEDIA', categories: 'IAB7' })
  expectError(t, await put(preroll.id as string, { categories: '' }), 400, 'MISSING_PARAMETER', 'categories')
  expectError(t, await put(preroll.id as string, { categories: 'IAB7,IAB2,IAB3' }), 400, 'INVALID_PARAMETER', 'categories')
  t.match((await put(preroll.id as string, { categories: 'IAB7,IAB3' })).json<{ data: unknown }>().data, { categories: ['IAB7', 'IAB3'] })

  const website = await createLineItem(f, (await createCampaign(f)).id as string, { objective: 'WEBSITE_CLICKS' })
  t.match((await put(website.id as string, { bid_strategy: 'TARGET', bid_amount_local_micro: '100' })).json<{ data: unknown }>().data, { pay_by: 'LINK_CLICK' }, 'TARGET moves LINK_CLICKS billing off IMPRESSION')
  expectError(t, await put(website.id as string, { pay_by: 'IMPRESSION' }), 400, 'INVALID_PARAMETER', 'pay_by')

  expectError(t, await put('nosuch', { name: 'x' }), 404, 'LINE_ITEM_NOT_FOUND', undefined)
})

t.test('DELETE marks deleted, a second DELETE is 404, children are not cascaded', async (t) => {
  const f = await adsFixture(t)
  const campaign = await createCampaign(f)
  const preroll = await createLineItem(f, campaign.id as string, { objective: 'PREROLL_VIEWS', product_type: 'MEDIA', categories: 'IAB17' })
  const link = await f.call('POST', '/line_item_curated_categories', { query: { line_item_id: preroll.id as string, curated_category_id: '9ddrgesiap6o' } })
  t.equal(link.status, 200, link.text)
  const linkId = link.json<{ data: { id: string } }>().data.id

  const del = await f.call('DELETE', `/line_items/${preroll.id as string}`)
  t.equal(del.status, 200)
  t.match(del.json<{ data: unknown }>().data, { id: preroll.id, deleted: true })
  expectError(t, await f.call('DELETE', `/line_items/${preroll.id as string}`), 404, 'LINE_ITEM_NOT_FOUND', undefined)
  expectError(t, await f.call('GET', `/line_items/${preroll.id as string}`), 404, 'LINE_ITEM_NOT_FOUND', undefined)
  expectError(t, await f.call('PUT', `/line_items/${preroll.id as string}`, { query: { name: 'x' } }), 404, 'LINE_ITEM_NOT_FOUND', undefined)
  t.match((await f.call('GET', `/line_items/${preroll.id as string}`, { query: { with_deleted: 'true' } })).json<{ data: unknown }>().data, { deleted: true })
  t.same((await f.call('GET', '/line_items')).json<{ data: unknown[] }>().data, [])
  t.equal((await f.call('GET', '/line_items', { query: { with_deleted: 'true' } })).json<{ data: unknown[] }>().data.length, 1)

  const child = await f.call('GET', `/line_item_curated_categories/${linkId}`)
  t.equal(child.status, 200)
  t.match(child.json<{ data: unknown }>().data, { line_item_id: preroll.id, deleted: false }, 'the child association is not deleted with its line item')
})

t.test('line_items/placements lists the combinations per product type', async (t) => {
  const f = await adsFixture(t)
  const all = await f.api('GET', '/12/line_items/placements')
  t.equal(all.status, 200)
  const data = all.json<{ data: Array<{ product_type: string; placements: string[][] }> }>().data
  t.same(data.map((d) => d.product_type), ['MEDIA', 'PROMOTED_ACCOUNT', 'PROMOTED_TWEETS'])
  const one = await f.api('GET', '/12/line_items/placements', { query: { product_type: 'PROMOTED_ACCOUNT' } })
  t.same(one.json<{ data: unknown }>().data, [{ product_type: 'PROMOTED_ACCOUNT', placements: [['ALL_ON_SVC'], ['SVC_TIMELINE']] }])
  t.same(one.json<{ request: { params: unknown } }>().request.params, { product_type: 'PROMOTED_ACCOUNT' })
  expectError(t, await f.api('GET', '/12/line_items/placements', { query: { product_type: 'TRENDS' } }), 400, 'INVALID_PARAMETER', 'product_type')
  const unauthenticated = await fetch(`${f.rt.baseUrl}/12/line_items/placements`)
  t.equal(unauthenticated.status, 401)
})

t.test('another user cannot reach the account', async (t) => {
  const f = await adsFixture(t)
  const other = await adsFixture(t, { rt: f.rt })
  const campaign = await createCampaign(f)
  const item = await createLineItem(f, campaign.id as string)
  const res = await other.api('GET', `/12/accounts/${f.account.id}/line_items/${item.id as string}`)
  expectError(t, res, 403, 'ACCOUNT_NOT_FOUND', 'account_id')
  expectError(t, await other.api('GET', '/12/accounts/nosuchaccount/line_items'), 404, 'NOT_FOUND', 'account_id')
})

t.test('curated categories: list by country, read', async (t) => {
  const f = await adsFixture(t)
  const list = await f.call('GET', '/curated_categories', { query: { country_codes: 'US' } })
  t.equal(list.status, 200)
  const body = list.json<{ data: Array<Record<string, unknown>>; data_type: string; next_cursor: null; request: { params: Record<string, unknown> } }>()
  t.equal(body.data_type, 'curated_category')
  t.equal(body.data.length, 9)
  t.same(body.request.params.country_codes, ['US'], 'a list parameter is echoed as an array')
  for (const c of body.data) {
    t.match(c, { id: /^[0-9a-z]+$/, name: String, description: String, country_codes: ['US'], publisher_user_ids: Array, videos_monetized_in_last_thirty_days: Number, created_at: String, updated_at: String })
  }
  t.same((await f.call('GET', '/curated_categories', { query: { country_codes: 'gb,de' } })).json<{ data: unknown[] }>().data, [], 'none available there')
  t.equal((await f.call('GET', '/curated_categories', { query: { country_codes: 'GB,us' } })).json<{ data: unknown[] }>().data.length, 9)
  const paged = await f.call('GET', '/curated_categories', { query: { country_codes: 'US', count: '4' } })
  t.equal(paged.json<{ data: unknown[] }>().data.length, 4)
  expectError(t, await f.call('GET', '/curated_categories'), 400, 'MISSING_PARAMETER', 'country_codes')
  expectError(t, await f.call('GET', '/curated_categories', { query: { country_codes: 'USA' } }), 400, 'INVALID_PARAMETER', 'country_codes')

  const read = await f.call('GET', '/curated_categories/9ddrgesiap6o')
  t.equal(read.status, 200)
  t.match(read.json<{ data: unknown }>().data, { id: '9ddrgesiap6o', name: 'Soccer' })
  expectError(t, await f.call('GET', '/curated_categories/nosuch'), 404, 'CURATED_CATEGORY_NOT_FOUND', undefined)
})

t.test('line item curated categories: create, list, read, update, delete', async (t) => {
  const f = await adsFixture(t)
  const campaign = await createCampaign(f)
  const preroll = await createLineItem(f, campaign.id as string, { objective: 'PREROLL_VIEWS', product_type: 'MEDIA', categories: 'IAB17' })
  const second = await createLineItem(f, campaign.id as string, { objective: 'PREROLL_VIEWS', product_type: 'MEDIA', categories: 'IAB17', name: 'second' })
  const engagement = await createLineItem(f, (await createCampaign(f)).id as string)
  const post = (query: Query) => f.call('POST', '/line_item_curated_categories', { query })

  expectError(t, await post({ line_item_id: preroll.id as string }), 400, 'MISSING_PARAMETER', 'curated_category_id')
  expectError(t, await post({ curated_category_id: '9ddrgesiap6o' }), 400, 'MISSING_PARAMETER', 'line_item_id')
  expectError(t, await post({ line_item_id: preroll.id as string, curated_category_id: 'nosuch' }), 400, 'INVALID_PARAMETER', 'curated_category_id')
  expectError(t, await post({ line_item_id: 'nosuch', curated_category_id: '9ddrgesiap6o' }), 400, 'INVALID_PARAMETER', 'line_item_id')
  expectError(t, await post({ line_item_id: engagement.id as string, curated_category_id: '9ddrgesiap6o' }), 400, 'INVALID_PARAMETER', 'line_item_id')

  const created = await post({ line_item_id: preroll.id as string, curated_category_id: '9ddrgesiap6o' })
  t.equal(created.status, 200, created.text)
  const link = created.json<{ data: Record<string, unknown>; data_type: string }>()
  t.equal(link.data_type, 'line_item_curated_category')
  t.match(link.data, { line_item_id: preroll.id, curated_category_id: '9ddrgesiap6o', deleted: false, created_at: String, updated_at: String })
  const id = link.data.id as string
  expectError(t, await post({ line_item_id: preroll.id as string, curated_category_id: '9ddrgesiap6o' }), 400, 'DUPLICATE', 'curated_category_id')

  t.same((await f.call('GET', '/line_item_curated_categories')).json<{ data: Array<{ id: string }> }>().data.map((x) => x.id), [id])
  t.match((await f.call('GET', `/line_item_curated_categories/${id}`)).json<{ data: unknown }>().data, { id })
  const moved = await f.call('PUT', `/line_item_curated_categories/${id}`, { query: { curated_category_id: '8tujl1p3yn0g', line_item_id: second.id as string } })
  t.equal(moved.status, 200, moved.text)
  t.match(moved.json<{ data: unknown }>().data, { id, curated_category_id: '8tujl1p3yn0g', line_item_id: second.id })
  expectError(t, await f.call('PUT', `/line_item_curated_categories/${id}`, { query: { curated_category_id: 'nosuch' } }), 400, 'INVALID_PARAMETER', 'curated_category_id')
  expectError(t, await f.call('PUT', `/line_item_curated_categories/${id}`, { query: { line_item_id: engagement.id as string } }), 400, 'INVALID_PARAMETER', 'line_item_id')

  const deleted = await f.call('DELETE', `/line_item_curated_categories/${id}`)
  t.match(deleted.json<{ data: unknown }>().data, { id, deleted: true })
  expectError(t, await f.call('DELETE', `/line_item_curated_categories/${id}`), 404, 'LINE_ITEM_CURATED_CATEGORY_NOT_FOUND', undefined)
  expectError(t, await f.call('GET', `/line_item_curated_categories/${id}`), 404, 'LINE_ITEM_CURATED_CATEGORY_NOT_FOUND', undefined)
  t.match((await f.call('GET', `/line_item_curated_categories/${id}`, { query: { with_deleted: 'true' } })).json<{ data: unknown }>().data, { deleted: true })
  t.same((await f.call('GET', '/line_item_curated_categories')).json<{ data: unknown[] }>().data, [])
  t.equal((await f.call('GET', '/line_item_curated_categories', { query: { with_deleted: 'true', with_total_count: 'true' } })).json<{ total_count: number }>().total_count, 1)
  // After the delete the same pair can be associated again.
  t.equal((await post({ line_item_id: preroll.id as string, curated_category_id: '9ddrgesiap6o' })).status, 200)
})

/** A fixture on Redis: requests really interleave there (the memory store answers in microtasks). */
async function redisFixture(t: Test): Promise<AdsFixture> {
  const store = await redisStore(t, await startRedis(t))
  return adsFixture(t, { rt: await startTestRuntime(t, { env: { OPERATOR_TOKEN }, store }) })
}

t.test('concurrent PUTs of one line item: the rules hold on the result, no change is lost, the changes chain', async (t) => {
  const f = await redisFixture(t)
  const changes = await collectChanges(t, f.rt.ctx.bus, 'line-item-concurrent')
  const campaign = await createCampaign(f, { budget_optimization: 'LINE_ITEM' })

  // Each PUT is valid alone; together the daily budget would exceed the total: exactly one passes.
  const rounds = 8
  for (let round = 0; round < rounds; round++) {
    const li = await createLineItem(f, campaign.id as string, { total_budget_amount_local_micro: '10000000' })
    const [daily, total] = await Promise.all([
      f.call('PUT', `/line_items/${li.id as string}`, { query: { daily_budget_amount_local_micro: '8000000' } }),
      f.call('PUT', `/line_items/${li.id as string}`, { query: { total_budget_amount_local_micro: '5000000' } })
    ])
    t.same([daily.status, total.status].sort(), [200, 400], `round ${round}: one PUT passes, the other is refused (${daily.text.slice(0, 120)} / ${total.text.slice(0, 120)})`)
    const refused = daily.status === 400 ? daily : total
    expectError(t, refused, 400, 'INVALID_PARAMETER', daily.status === 400 ? 'daily_budget_amount_local_micro' : 'total_budget_amount_local_micro')
    const stored = (await f.call('GET', `/line_items/${li.id as string}`)).json<{ data: Record<string, unknown> }>().data
    t.same(
      [stored.daily_budget_amount_local_micro, stored.total_budget_amount_local_micro],
      daily.status === 200 ? [8000000, 10000000] : [null, 5000000],
      `round ${round}: the stored line item is the one accepted change`
    )
  }

  // PUTs of different fields all land, and their change events chain.
  const li = await createLineItem(f, campaign.id as string)
  const id = li.id as string
  const puts: Query[] = [
    { name: 'concurrent' },
    { frequency_cap: '5' },
    { entity_status: 'PAUSED' },
    { start_time: '2031-01-01T00:00:00Z' },
    { advertiser_domain: 'example.com' },
    { bid_strategy: 'MAX', bid_amount_local_micro: '1500000' },
    { total_budget_amount_local_micro: '90000000' },
    { audience_expansion: 'BROAD' }
  ]
  const results = await Promise.all(puts.map((query) => f.call('PUT', `/line_items/${id}`, { query })))
  t.same(results.map((r) => r.status), puts.map(() => 200), 'every PUT passes')
  const final = (await f.call('GET', `/line_items/${id}`)).json<{ data: Record<string, unknown> }>().data
  t.match(final, {
    name: 'concurrent',
    frequency_cap: 5,
    entity_status: 'PAUSED',
    start_time: '2031-01-01T00:00:00Z',
    advertiser_domain: 'example.com',
    bid_strategy: 'MAX',
    bid_amount_local_micro: 1500000,
    total_budget_amount_local_micro: 90000000,
    audience_expansion: 'BROAD'
  }, 'no change was lost')
  await eventually(() => changes.filter((c) => c.entity_id === id).length >= puts.length + 1)
  const mine = changes.filter((c) => c.entity_id === id)
  t.same(mine.map((c) => c.change_type), ['CREATE', ...puts.map(() => 'UPDATE')])
  checkChain(t, mine)
  t.same(mine[mine.length - 1]?.entity_data, final, 'the last change carries the line item as read')
})

t.test('concurrent creates in one campaign cannot mix objectives', async (t) => {
  const f = await redisFixture(t)
  const campaign = await createCampaign(f)
  const results = await Promise.all(
    ['ENGAGEMENTS', 'REACH', 'ENGAGEMENTS', 'REACH'].map((objective) =>
      f.call('POST', '/line_items', { query: { campaign_id: campaign.id as string, objective, product_type: 'PROMOTED_TWEETS', placements: 'ALL_ON_SVC' } })
    )
  )
  const created = results.filter((r) => r.status === 200).map((r) => r.json<{ data: { objective: string } }>().data.objective)
  t.equal(new Set(created).size, 1, `the created line items share one objective (${created.join(', ')})`)
  for (const r of results.filter((r) => r.status !== 200)) expectError(t, r, 400, 'INVALID_PARAMETER', 'objective')
})
