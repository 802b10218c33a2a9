import t from 'tap'
import { TOPICS, type BusMessage } from '../../services/common/bus/types'
import { lineItems } from '../../services/gateway/ads/campaigns/line-items'
import type { EntityChange } from '../../services/gateway/ads/entities'
import { adsFixture, createCampaign, createLineItem, expectError, OPERATOR_TOKEN } from '../support/fixtures/campaigns'
import { startTestRuntime } from '../support/runtime'
import { eventually } from '../support/util'
import { redisStore, startRedis } from '../support/infra'
import { checkChain, collectChanges } from '../support/fixtures/change'

/** Campaigns (CRUD) and funding instruments (read, list) as the public platform shapes them. */

t.test('campaign create, read, list, update, delete', async (t) => {
  const f = await adsFixture(t)
  const res = await f.call('POST', '/campaigns', {
    query: { funding_instrument_id: f.fi.id, name: 'demo', daily_budget_amount_local_micro: '140000000', entity_status: 'PAUSED', standard_delivery: 'false', purchase_order_number: 'PO-1' }
  })
  t.equal(res.status, 200, res.text)
  const body = res.json<{ data: Record<string, unknown>; data_type: string }>()
  t.equal(body.data_type, 'campaign')
  t.match(body.data, {
    name: 'demo',
    budget_optimization: 'CAMPAIGN',
    funding_instrument_id: f.fi.id,
    daily_budget_amount_local_micro: 140000000,
    total_budget_amount_local_micro: null,
    entity_status: 'PAUSED',
    standard_delivery: false,
    purchase_order_number: 'PO-1',
    duration_in_days: null,
    frequency_cap: null,
    currency: 'USD',
    servable: false,
    reasons_not_servable: ['PAUSED_BY_ADVERTISER', 'INCOMPLETE'],
    effective_status: 'PAUSED',
    deleted: false
  })
  const id = body.data.id as string

  // A line item and ACTIVE status make it servable.
  await createLineItem(f, id)
  const active = await f.call('PUT', `/campaigns/${id}`, { query: { entity_status: 'ACTIVE', total_budget_amount_local_micro: '500000000', purchase_order_number: '' } })
  t.equal(active.status, 200, active.text)
  t.match(active.json<{ data: unknown }>().data, { entity_status: 'ACTIVE', total_budget_amount_local_micro: 500000000, purchase_order_number: null, servable: true, reasons_not_servable: [], effective_status: 'RUNNING' })

  const read = await f.call('GET', `/campaigns/${id}`)
  t.equal(read.status, 200)
  t.match(read.json<{ data: unknown }>().data, { id, name: 'demo', servable: true })

  const other = await createCampaign(f, { name: 'Other', entity_status: 'DRAFT' })
  const list = await f.call('GET', '/campaigns')
  t.same(list.json<{ data: Array<{ id: string }> }>().data.map((c) => c.id), [id], 'draft campaigns need with_draft')
  const withDraft = await f.call('GET', '/campaigns', { query: { with_draft: 'true', sort_by: 'name-desc' } })
  t.same(withDraft.json<{ data: Array<{ name: string }> }>().data.map((c) => c.name), ['Other', 'demo'])
  const byId = await f.call('GET', '/campaigns', { query: { campaign_ids: `${other.id as string}`, with_draft: 'true' } })
  t.same(byId.json<{ data: Array<{ id: string }> }>().data.map((c) => c.id), [other.id])
  const byFi = await f.call('GET', '/campaigns', { query: { funding_instrument_ids: 'nope' } })
  t.same(byFi.json<{ data: unknown[] }>().data, [])
  const byQ = await f.call('GET', '/campaigns', { query: { q: 'DEM' } })
  t.equal(byQ.json<{ data: unknown[] }>().data.length, 1)

  const del = await f.call('DELETE', `/campaigns/${id}`)
  t.equal(del.status, 200)
  t.match(del.json<{ data: unknown }>().data, { id, deleted: true, servable: false })
  expectError(t, await f.call('DELETE', `/campaigns/${id}`), 404, 'CAMPAIGN_NOT_FOUND', undefined)
  expectError(t, await f.call('GET', `/campaigns/${id}`), 404, 'CAMPAIGN_NOT_FOUND', undefined)
  t.equal((await f.call('GET', `/campaigns/${id}`, { query: { with_deleted: 'true' } })).status, 200)
  t.same((await f.call('GET', '/campaigns')).json<{ data: unknown[] }>().data, [])
  expectError(t, await createLineItemRaw(f, id), 400, 'INVALID_PARAMETER', 'campaign_id')
})

async function createLineItemRaw(f: Awaited<ReturnType<typeof adsFixture>>, campaignId: string) {
  return f.call('POST', '/line_items', { query: { campaign_id: campaignId, objective: 'ENGAGEMENTS', product_type: 'PROMOTED_TWEETS', placements: 'ALL_ON_SVC' } })
}

t.test('campaign parameters are validated with their code and parameter', async (t) => {
  const f = await adsFixture(t)
  const post = (query: Record<string, string>) => f.call('POST', '/campaigns', { query: { funding_instrument_id: f.fi.id, name: 'c', ...query } })
  expectError(t, await f.call('POST', '/campaigns', { query: { name: 'c' } }), 400, 'MISSING_PARAMETER', 'funding_instrument_id')
  expectError(t, await f.call('POST', '/campaigns', { query: { funding_instrument_id: f.fi.id } }), 400, 'MISSING_PARAMETER', 'name')
  expectError(t, await post({ name: 'n'.repeat(256) }), 400, 'INVALID_PARAMETER', 'name')
  expectError(t, await post({ funding_instrument_id: 'nosuch' }), 400, 'INVALID_PARAMETER', 'funding_instrument_id')
  expectError(t, await post({ budget_optimization: 'ACCOUNT' }), 400, 'INVALID_PARAMETER', 'budget_optimization')
  expectError(t, await post({ daily_budget_amount_local_micro: 'lots' }), 400, 'INVALID_PARAMETER', 'daily_budget_amount_local_micro')
  expectError(t, await post({ daily_budget_amount_local_micro: '0' }), 400, 'INVALID_PARAMETER', 'daily_budget_amount_local_micro')
  expectError(t, await post({ daily_budget_amount_local_micro: '5', total_budget_amount_local_micro: '4' }), 400, 'INVALID_PARAMETER', 'daily_budget_amount_local_micro')
  expectError(t, await post({ entity_status: 'DELETED' }), 400, 'INVALID_PARAMETER', 'entity_status')
  expectError(t, await post({ purchase_order_number: 'p'.repeat(51) }), 400, 'INVALID_PARAMETER', 'purchase_order_number')
  expectError(t, await post({ budget_optimization: 'LINE_ITEM', standard_delivery: 'true' }), 400, 'INVALID_PARAMETER', 'standard_delivery')
  expectError(t, await post({ standard_delivery: 'maybe' }), 400, 'INVALID_PARAMETER', 'standard_delivery')

  const c = await createCampaign(f, { budget_optimization: 'LINE_ITEM' })
  t.match(c, { budget_optimization: 'LINE_ITEM', standard_delivery: null })
  const put = (query: Record<string, string>) => f.call('PUT', `/campaigns/${c.id as string}`, { query })
  expectError(t, await put({ entity_status: 'DRAFT' }), 400, 'INVALID_PARAMETER', 'entity_status')
  expectError(t, await put({ name: '' }), 400, 'INVALID_PARAMETER', 'name')
  expectError(t, await put({ standard_delivery: 'true' }), 400, 'INVALID_PARAMETER', 'standard_delivery')
  await createLineItem(f, c.id as string, { daily_budget_amount_local_micro: '100' })
  expectError(t, await put({ budget_optimization: 'CAMPAIGN' }), 400, 'INVALID_PARAMETER', 'budget_optimization')
  expectError(t, await f.call('PUT', '/campaigns/nosuch', { query: { name: 'x' } }), 404, 'CAMPAIGN_NOT_FOUND', undefined)
})

t.test('funding instruments: list and read', async (t) => {
  const f = await adsFixture(t)
  const list = await f.call('GET', '/funding_instruments')
  t.equal(list.status, 200)
  const body = list.json<{ data: Array<Record<string, unknown>>; data_type: string; next_cursor: null }>()
  t.equal(body.data_type, 'funding_instrument')
  t.equal(body.next_cursor, null)
  t.equal(body.data.length, 1)
  t.match(body.data[0], { id: f.fi.id, account_id: f.account.id, type: 'CREDIT_CARD', currency: 'USD', entity_status: 'ACTIVE', able_to_fund: true, reasons_not_able_to_fund: [], deleted: false })
  for (const field of ['description', 'start_time', 'end_time', 'io_header', 'credit_limit_local_micro', 'credit_remaining_local_micro', 'funded_amount_local_micro', 'created_at', 'updated_at']) {
    t.ok(field in (body.data[0] as object), `field ${field}`)
  }
  const read = await f.call('GET', `/funding_instruments/${f.fi.id}`)
  t.equal(read.status, 200)
  t.match(read.json<{ data: unknown }>().data, { id: f.fi.id })
  const filtered = await f.call('GET', '/funding_instruments', { query: { funding_instrument_ids: 'other' } })
  t.same(filtered.json<{ data: unknown[] }>().data, [])
  expectError(t, await f.call('GET', '/funding_instruments/nosuch'), 404, 'FUNDING_INSTRUMENT_NOT_FOUND', undefined)
  expectError(t, await f.call('GET', '/funding_instruments', { query: { count: '1001' } }), 400, 'INVALID_PARAMETER', 'count')
  // Creating and deleting instruments is sandbox-only.
  expectError(t, await f.call('POST', '/funding_instruments', { query: { currency: 'USD', start_time: '2030-01-01T00:00:00Z', type: 'CREDIT_CARD' } }), 404, 'ROUTE_NOT_FOUND', undefined)
  expectError(t, await f.call('DELETE', `/funding_instruments/${f.fi.id}`), 404, 'ROUTE_NOT_FOUND', undefined)
})

t.test('switching budget_optimization moves pacing between the campaign and its line items', async (t) => {
  const f = await adsFixture(t)
  const changes: EntityChange[] = []
  const consumer = await f.rt.ctx.bus.subscribe({ groupId: 'pacing-changes', topics: [TOPICS.adsEntityChanges], handler: async (m: BusMessage) => { changes.push(m.value as EntityChange) } })
  t.teardown(() => consumer.close())

  const c = await createCampaign(f, { budget_optimization: 'LINE_ITEM' })
  const campaignId = c.id as string
  const item = await createLineItem(f, campaignId)
  t.equal(item.standard_delivery, true, 'line items pace themselves under LINE_ITEM optimization')
  const itemId = item.id as string
  const read = async (): Promise<Record<string, unknown>> => (await f.call('GET', `/line_items/${itemId}`)).json<{ data: Record<string, unknown> }>().data

  const toCampaign = await f.call('PUT', `/campaigns/${campaignId}`, { query: { budget_optimization: 'CAMPAIGN', standard_delivery: 'false' } })
  t.equal(toCampaign.status, 200, toCampaign.text)
  t.match(toCampaign.json<{ data: unknown }>().data, { budget_optimization: 'CAMPAIGN', standard_delivery: false })
  t.equal((await read()).standard_delivery, null, 'the switch clears the line item pacing')
  const cleared = await eventually(() => changes.find((e) => e.entity_type === 'LINE_ITEM' && e.entity_id === itemId && e.change_type === 'UPDATE'))
  t.same(cleared.changes.standard_delivery, { old: true, new: null }, 'the clearing is published as a line item change')

  // Every later edit of the line item works again (it used to fail on standard_delivery).
  const renamed = await f.call('PUT', `/line_items/${itemId}`, { query: { name: 'after the switch' } })
  t.equal(renamed.status, 200, renamed.text)
  t.match(renamed.json<{ data: unknown }>().data, { name: 'after the switch', standard_delivery: null })
  expectError(t, await f.call('PUT', `/line_items/${itemId}`, { query: { standard_delivery: 'true' } }), 400, 'INVALID_PARAMETER', 'standard_delivery')

  // Back to LINE_ITEM: the campaign's pacing goes down to its line items.
  const toLineItem = await f.call('PUT', `/campaigns/${campaignId}`, { query: { budget_optimization: 'LINE_ITEM' } })
  t.equal(toLineItem.status, 200, toLineItem.text)
  t.match(toLineItem.json<{ data: unknown }>().data, { budget_optimization: 'LINE_ITEM', standard_delivery: null })
  t.equal((await read()).standard_delivery, false, 'the line item takes the campaign pacing (accelerated)')
  const restored = await eventually(() => changes.find((e) => e.entity_type === 'LINE_ITEM' && e.entity_id === itemId && e.changes.standard_delivery?.new === false))
  t.same(restored.changes.standard_delivery, { old: null, new: false })
  t.equal((await f.call('PUT', `/line_items/${itemId}`, { query: { name: 'again', standard_delivery: 'true' } })).status, 200)

  // Pacing stored under a CAMPAIGN campaign by an older version does not block edits either.
  const legacyCampaign = await createCampaign(f)
  const legacy = await createLineItem(f, legacyCampaign.id as string)
  await lineItems(f.rt.ctx).update(f.account.id, legacy.id as string, { standard_delivery: true }, { user_id: f.id.user.id, platform: 'API' })
  const healed = await f.call('PUT', `/line_items/${legacy.id as string}`, { query: { name: 'x' } })
  t.equal(healed.status, 200, healed.text)
  t.match(healed.json<{ data: unknown }>().data, { name: 'x', standard_delivery: null })
})

t.test('concurrent writes of a campaign and its line items: rules hold on the result, no change is lost', async (t) => {
  // On Redis: requests really interleave there (the memory store answers in microtasks).
  const store = await redisStore(t, await startRedis(t))
  const f = await adsFixture(t, { rt: await startTestRuntime(t, { env: { OPERATOR_TOKEN }, store }) })
  const changes = await collectChanges(t, f.rt.ctx.bus, 'campaign-concurrent')
  const rounds = 6
  for (let round = 0; round < rounds; round++) {
    // A switch to CAMPAIGN optimization and a line item daily budget: each valid alone, not together.
    const c = await createCampaign(f, { budget_optimization: 'LINE_ITEM' })
    const li = await createLineItem(f, c.id as string)
    const [toCampaign, daily] = await Promise.all([
      f.call('PUT', `/campaigns/${c.id as string}`, { query: { budget_optimization: 'CAMPAIGN' } }),
      f.call('PUT', `/line_items/${li.id as string}`, { query: { daily_budget_amount_local_micro: '1000000' } })
    ])
    t.same([toCampaign.status, daily.status].sort(), [200, 400], `round ${round}: one passes (${toCampaign.text.slice(0, 100)} / ${daily.text.slice(0, 100)})`)
    if (toCampaign.status === 400) expectError(t, toCampaign, 400, 'INVALID_PARAMETER', 'budget_optimization')
    else expectError(t, daily, 400, 'INVALID_PARAMETER', 'daily_budget_amount_local_micro')
    const campaign = (await f.call('GET', `/campaigns/${c.id as string}`)).json<{ data: Record<string, unknown> }>().data
    const item = (await f.call('GET', `/line_items/${li.id as string}`)).json<{ data: Record<string, unknown> }>().data
    if (campaign.budget_optimization === 'CAMPAIGN') t.match(item, { daily_budget_amount_local_micro: null, standard_delivery: null }, `round ${round}: CAMPAIGN, the line item has no budget nor pacing`)
    else t.match(item, { daily_budget_amount_local_micro: 1000000, standard_delivery: true }, `round ${round}: LINE_ITEM, the line item keeps its budget`)

    // Two campaign PUTs valid alone (daily <= total) but not together.
    const budgeted = await createCampaign(f, { total_budget_amount_local_micro: '10000000' })
    const [dailyPut, totalPut] = await Promise.all([
      f.call('PUT', `/campaigns/${budgeted.id as string}`, { query: { daily_budget_amount_local_micro: '8000000' } }),
      f.call('PUT', `/campaigns/${budgeted.id as string}`, { query: { total_budget_amount_local_micro: '5000000' } })
    ])
    t.same([dailyPut.status, totalPut.status].sort(), [200, 400], `round ${round}: one budget PUT passes`)
    const stored = (await f.call('GET', `/campaigns/${budgeted.id as string}`)).json<{ data: Record<string, unknown> }>().data
    t.same(
      [stored.daily_budget_amount_local_micro, stored.total_budget_amount_local_micro],
      dailyPut.status === 200 ? [8000000, 10000000] : [null, 5000000],
      `round ${round}: the stored campaign is the one accepted change`
    )
  }

  // Campaign PUTs of different fields all land; their change events chain.
  const c = await createCampaign(f)
  const id = c.id as string
  const puts: Array<Record<string, string>> = [{ name: 'renamed' }, { entity_status: 'PAUSED' }, { purchase_order_number: 'PO-1' }, { end_time: '2040-01-01T00:00:00Z' }, { standard_delivery: 'false' }, { daily_budget_amount_local_micro: '1000000' }]
  const results = await Promise.all(puts.map((query) => f.call('PUT', `/campaigns/${id}`, { query })))
  t.same(results.map((r) => r.status), puts.map(() => 200))
  const final = (await f.call('GET', `/campaigns/${id}`)).json<{ data: Record<string, unknown> }>().data
  t.match(final, { name: 'renamed', entity_status: 'PAUSED', purchase_order_number: 'PO-1', end_time: '2040-01-01T00:00:00Z', standard_delivery: false, daily_budget_amount_local_micro: 1000000 }, 'no change was lost')
  await eventually(() => changes.filter((ch) => ch.entity_id === id).length >= puts.length + 1)
  const mine = changes.filter((ch) => ch.entity_id === id)
  t.same(mine.map((ch) => ch.change_type), ['CREATE', ...puts.map(() => 'UPDATE')])
  checkChain(t, mine)
})
