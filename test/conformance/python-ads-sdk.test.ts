import t from 'tap'
import { adsFixture, createCampaign } from '../ads/campaigns-fixtures'
import { Recorder } from './support/recorder'
import { CAMPAIGN, LINE_ITEM, PyClient, PyCursor, PyResource, SDK_VERSION, SdkError } from './support/python-ads-sdk'

/**
 * The official Python ads SDK cannot run here (no Python registry); its
 * requests are replayed exactly (support/python-ads-sdk.ts says from which
 * source lines) and each scenario asserts what the SDK would read back: its
 * objects' attributes, its cursor's count, its Error subclass and details.
 */

async function rejection(promise: Promise<unknown>): Promise<SdkError> {
  try {
    await promise
  } catch (err) {
    if (err instanceof SdkError) return err
    throw err
  }
  throw new Error('expected the SDK to raise')
}

t.test('Python ads SDK (replayed): save() new and loaded entities, True booleans, cursor paging, with_total_count, errors', async (t) => {
  const f = await adsFixture(t)
  const recorder = await Recorder.start(t, f.rt.baseUrl)
  const client = new PyClient(recorder.url, { key: f.id.token.token, secret: f.id.token.secret }, { key: f.id.app.consumer_key, secret: f.id.app.consumer_secret })
  const accountId = f.account.id

  // campaign = Campaign(account); campaign.funding_instrument_id = ...; campaign.save()
  const campaign = new PyResource(client, CAMPAIGN, accountId)
    .set('funding_instrument_id', f.fi.id)
    .set('name', 'Spring sale')
    .set('entity_status', 'PAUSED')
    .set('daily_budget_amount_local_micro', 5_000_000)
  await campaign.save()
  t.match(campaign.get('id'), /^[a-z0-9]+$/, 'POST: the SDK object has its id')
  t.equal(campaign.get('currency'), 'USD')
  t.equal(campaign.get('servable'), null, 'servable false is skipped by from_response (a Python bool is an int 0)')
  t.same(campaign.get('reasons_not_servable'), ['PAUSED_BY_ADVERTISER', 'INCOMPLETE'])

  // campaign.name = ...; campaign.save(): every loaded property goes back, read-only ones included.
  campaign.set('name', 'Spring sale, extended').set('entity_status', 'ACTIVE')
  const put = client.sent.length
  await campaign.save()
  const sentPut = client.sent[put]
  t.equal(sentPut?.method, 'PUT')
  for (const readOnly of ['id=', 'created_at=', 'updated_at=', 'currency=USD', 'effective_status=', 'reasons_not_servable=PAUSED_BY_ADVERTISER', 'reasons_not_servable=INCOMPLETE', 'standard_delivery=true']) {
    t.ok(sentPut?.url.includes(`&${readOnly}`) || sentPut?.url.includes(`?${readOnly}`), `save() sent ${readOnly}`)
  }
  t.equal(campaign.get('name'), 'Spring sale, extended', 'PUT: the SDK reads the new name back')
  t.equal(campaign.get('entity_status'), 'ACTIVE')
  t.equal(campaign.get('daily_budget_amount_local_micro'), 5_000_000)

  // Campaign.load(account, id) then save() with a change.
  const loaded = await PyResource.load(client, CAMPAIGN, accountId, String(campaign.get('id')))
  t.equal(loaded.get('name'), 'Spring sale, extended')
  loaded.set('daily_budget_amount_local_micro', 7_000_000)
  await loaded.save()
  t.equal(loaded.get('daily_budget_amount_local_micro'), 7_000_000, 'load + save: the change is applied')
  t.equal(loaded.get('created_at'), campaign.get('created_at'))

  // LineItem(account) ... save(); then a change and save() again (create-only fields repeated).
  const lineItem = new PyResource(client, LINE_ITEM, accountId)
    .set('campaign_id', String(campaign.get('id')))
    .set('objective', 'ENGAGEMENTS')
    .set('product_type', 'PROMOTED_TWEETS')
    .set('placements', ['ALL_ON_SVC'])
    .set('name', 'First line item')
  await lineItem.save()
  t.equal(lineItem.get('goal'), 'ENGAGEMENT', 'the SDK reads the objective\'s defaults back')
  lineItem.set('name', 'First line item (renamed)').set('bid_amount_local_micro', 1_500_000).set('bid_strategy', 'MAX')
  await lineItem.save()
  t.equal(lineItem.get('name'), 'First line item (renamed)', 'line item save() of a loaded object')
  t.equal(lineItem.get('bid_amount_local_micro'), 1_500_000)
  t.equal(lineItem.get('campaign_id'), campaign.get('id'))

  // More campaigns for paging.
  for (const name of ['Summer', 'Autumn', 'Winter']) await createCampaign(f, { name })
  const all = await PyCursor.all(client, CAMPAIGN, accountId, { count: 2 })
  const items = await all.toArray()
  t.equal(items.length, 4, 'Campaign.all(account, count=2): the cursor pages through every campaign')
  t.equal(new Set(items.map((c) => c.get('id'))).size, 4, 'no campaign twice')
  t.ok(client.sent.some((r) => /[?&]cursor=/.test(r.url) && /[?&]count=2/.test(r.url)), 'the next page repeats the first request\'s params with cursor')

  const counted = await PyCursor.all(client, CAMPAIGN, accountId, { with_total_count: true, count: 2 })
  t.equal(counted.count, 4, 'with_total_count=True (sent as "True"): cursor.count is total_count')
  t.equal(counted.fetched, 2)
  t.ok(client.sent.at(-1)?.url.includes('with_total_count=True'), 'the SDK spells it True')
  // cursor.py keeps with_total_count in the params of the next page: the platform refuses it with cursor.
  const exclusive = await rejection(counted.toArray())
  t.equal(exclusive.kind, 'BadRequest')
  t.match(exclusive.details, [{ code: 'EXCLUSIVE_PARAMETERS' }], 'iterating past page 1 of a with_total_count listing raises BadRequest (documented in docs/conformance.md)')

  const winter = items.find((c) => c.get('name') === 'Winter') as PyResource
  await winter.delete()
  t.equal(winter.get('deleted'), true, 'delete(): the SDK reads deleted=true')
  const live = await (await PyCursor.all(client, CAMPAIGN, accountId)).toArray()
  t.equal(live.length, 3)
  const withDeleted = await (await PyCursor.all(client, CAMPAIGN, accountId, { with_deleted: true })).toArray()
  t.equal(withDeleted.length, 4, 'with_deleted=True (sent as "True") lists the deleted campaign')
  t.ok(client.sent.at(-1)?.url.includes('with_deleted=True'))

  // Errors as the SDK raises them.
  const missing = await rejection(PyResource.load(client, CAMPAIGN, accountId, 'nope1'))
  t.equal(missing.kind, 'NotFound')
  t.match(missing.details, [{ code: 'CAMPAIGN_NOT_FOUND' }])
  const bad = await rejection(PyCursor.all(client, CAMPAIGN, accountId, { count: 5000 }))
  t.equal(bad.kind, 'BadRequest')
  t.match(bad.details, [{ code: 'INVALID_PARAMETER', parameter: 'count' }])

  t.equal(recorder.exchanges.length, client.sent.length, 'the recorder saw every replayed request')
  t.comment(`client twitter-python-ads-sdk@${SDK_VERSION} (replayed): ${client.sent.length} calls`)
})
