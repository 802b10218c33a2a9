import t from 'tap'
import { adsFixture } from '../support/fixtures/campaigns'
import { Recorder } from '../support/fixtures/conformance/recorder'
import { clientVersion, reportCalls } from '../support/fixtures/conformance/clients'

/**
 * The `twitter-ads` npm package, unmodified. It has no host option: its
 * hosts are the `API_HOST` / `API_SANDBOX_HOST` entries of its own
 * constants module, read at every request. Those two entries are the only
 * change (pointed at the recorder in front of the product); the package's
 * request building, OAuth 1.0a signing (the `request` library's
 * oauth-sign), parameter encoding and response/error parsing are its own.
 */

// eslint-disable-next-line @typescript-eslint/no-require-imports
const TwitterAdsAPI = require('twitter-ads') as new (config: Record<string, unknown>) => AdsClient
// eslint-disable-next-line @typescript-eslint/no-require-imports
const constants = require('twitter-ads/lib/constants') as { API_HOST: string; API_SANDBOX_HOST: string }

interface AdsError extends Error {
  allErrors: Array<{ code: string; message: string; parameter?: string }>
}

type Callback = (err: AdsError | null, resp: { statusCode: number }, body: Record<string, unknown>) => void
interface AdsClient {
  get(url: string, params: Record<string, unknown>, cb: Callback): void
  post(url: string, params: Record<string, unknown>, cb: Callback): void
  put(url: string, params: Record<string, unknown>, cb: Callback): void
  delete(url: string, params: Record<string, unknown>, cb: Callback): void
}

interface Answer<T> {
  err: AdsError | null
  status: number
  body: T
}

function call<T = Record<string, unknown>>(client: AdsClient, method: 'get' | 'post' | 'put' | 'delete', url: string, params: Record<string, unknown>): Promise<Answer<T>> {
  return new Promise((resolve, reject) => {
    try {
      client[method](url, params, (err, resp, body) => resolve({ err, status: resp?.statusCode ?? 0, body: body as T }))
    } catch (err) {
      reject(err)
    }
  })
}

interface Campaign {
  id: string
  name: string
  entity_status: string
  standard_delivery: boolean
  daily_budget_amount_local_micro: number
}

t.test('twitter-ads: accounts, funding instruments, campaigns and line items, cursors, booleans, errors', async (t) => {
  const f = await adsFixture(t)
  const recorder = await Recorder.start(t, f.rt.baseUrl)
  const saved = { ...constants }
  constants.API_HOST = `${recorder.url}/`
  constants.API_SANDBOX_HOST = `${recorder.url}/`
  t.teardown(() => Object.assign(constants, saved))
  const ads = new TwitterAdsAPI({
    consumer_key: f.id.app.consumer_key,
    consumer_secret: f.id.app.consumer_secret,
    access_token: f.id.token.token,
    access_token_secret: f.id.token.secret,
    sandbox: false,
    api_version: '12'
  })
  const account = { account_id: f.account.id }

  const accounts = await call<{ data: Array<{ id: string; name: string }> }>(ads, 'get', 'accounts', {})
  t.equal(accounts.err, null)
  t.same(accounts.body.data.map((a) => a.id), [f.account.id], 'accounts: the user\'s account')
  const one = await call<{ data: { id: string; name: string } }>(ads, 'get', 'accounts/:account_id', account)
  t.equal(one.body.data.name, f.account.name)
  const fis = await call<{ data: Array<{ id: string; currency: string }> }>(ads, 'get', 'accounts/:account_id/funding_instruments', account)
  t.same(fis.body.data.map((fi) => fi.id), [f.fi.id])

  // Campaigns: created through the package's query-string parameters (arrays joined, booleans as true/false).
  const names = ['Spring sale', 'Summer: 50% off!', "Autumn (it's back)"]
  const ids: string[] = []
  for (const name of names) {
    const created = await call<{ data: Campaign }>(ads, 'post', 'accounts/:account_id/campaigns', {
      ...account,
      funding_instrument_id: f.fi.id,
      name,
      daily_budget_amount_local_micro: 5_000_000,
      entity_status: 'PAUSED',
      standard_delivery: true
    })
    t.equal(created.err, null, created.err?.message ?? "no error")
    t.match(created.body.data, { name, daily_budget_amount_local_micro: 5_000_000, entity_status: 'PAUSED', standard_delivery: true }, `create "${name}": reserved characters survive the package's encoding and signature`)
    ids.push(created.body.data.id)
  }
  const updated = await call<{ data: Campaign }>(ads, 'put', 'accounts/:account_id/campaigns/:campaign_id', { ...account, campaign_id: ids[0], standard_delivery: false, name: 'Spring sale, extended' })
  t.match(updated.body.data, { id: ids[0], name: 'Spring sale, extended', standard_delivery: false }, 'update')

  // A JavaScript caller's whole-object update: the loaded campaign spread back, nulls and read-only fields included
  // (the package sends null as an empty value, arrays comma-joined, booleans as true/false).
  const loaded = await call<{ data: Record<string, unknown> }>(ads, 'get', 'accounts/:account_id/campaigns/:campaign_id', { ...account, campaign_id: ids[1] })
  const whole = await call<{ data: Campaign & Record<string, unknown> }>(ads, 'put', 'accounts/:account_id/campaigns/:campaign_id', { ...loaded.body.data, ...account, campaign_id: ids[1], name: 'Summer: 60% off!' })
  t.equal(whole.err, null, whole.err?.message ?? 'no error')
  t.match(whole.body.data, { id: ids[1], name: 'Summer: 60% off!', total_budget_amount_local_micro: null, end_time: null, daily_budget_amount_local_micro: 5_000_000 }, 'whole-object PUT with nulls: only the name changed')

  const first = await call<{ data: Campaign[]; next_cursor: string | null; total_count: number }>(ads, 'get', 'accounts/:account_id/campaigns', { ...account, count: 2, with_total_count: true })
  t.equal(first.body.total_count, 3, 'with_total_count')
  t.equal(first.body.data.length, 2)
  t.type(first.body.next_cursor, 'string')
  const second = await call<{ data: Campaign[]; next_cursor: string | null }>(ads, 'get', 'accounts/:account_id/campaigns', { ...account, count: 2, cursor: first.body.next_cursor })
  t.same([...first.body.data, ...second.body.data].map((c) => c.id), ids, 'cursor paging covers every campaign once')
  t.equal(second.body.next_cursor, null)
  const byIds = await call<{ data: Campaign[] }>(ads, 'get', 'accounts/:account_id/campaigns', { ...account, campaign_ids: [ids[2], ids[1]] })
  t.same(byIds.body.data.map((c) => c.id).sort(), [ids[1], ids[2]].sort(), 'an array parameter, joined with commas by the package')

  const removed = await call<{ data: Campaign & { deleted: boolean } }>(ads, 'delete', 'accounts/:account_id/campaigns/:campaign_id', { ...account, campaign_id: ids[2] })
  t.equal(removed.body.data.deleted, true, 'delete')
  const live = await call<{ data: Campaign[] }>(ads, 'get', 'accounts/:account_id/campaigns', account)
  t.equal(live.body.data.length, 2)
  const all = await call<{ data: Campaign[] }>(ads, 'get', 'accounts/:account_id/campaigns', { ...account, with_deleted: true })
  t.equal(all.body.data.length, 3, 'with_deleted=true')

  // Line items under the campaign.
  const li = await call<{ data: { id: string; campaign_id: string; objective: string; placements: string[] } }>(ads, 'post', 'accounts/:account_id/line_items', {
    ...account,
    campaign_id: ids[0],
    objective: 'ENGAGEMENTS',
    product_type: 'PROMOTED_TWEETS',
    placements: ['ALL_ON_SVC']
  })
  t.equal(li.err, null, li.err?.message ?? "no error")
  t.match(li.body.data, { campaign_id: ids[0], objective: 'ENGAGEMENTS', placements: ['ALL_ON_SVC'] }, 'line item create')

  // Errors: the package's Error with allErrors from the ads error envelope.
  const missing = await call(ads, 'get', 'accounts/:account_id/campaigns/:campaign_id', { ...account, campaign_id: 'nope1' })
  t.equal(missing.status, 404)
  t.match(missing.err?.allErrors, [{ code: 'CAMPAIGN_NOT_FOUND' }], 'not found: allErrors as the package reads them')
  t.match(missing.err?.message, /^Twitter-Ads API Error: /)
  const invalid = await call(ads, 'get', 'accounts/:account_id/campaigns', { ...account, count: 5000 })
  t.equal(invalid.status, 400)
  t.match(invalid.err?.allErrors, [{ code: 'INVALID_PARAMETER', parameter: 'count' }])
  const required = await call(ads, 'post', 'accounts/:account_id/campaigns', { ...account, name: 'no funding instrument' })
  t.match(required.err?.allErrors, [{ code: 'MISSING_PARAMETER', parameter: 'funding_instrument_id' }])

  t.ok(recorder.exchanges.every((e) => String(e.requestHeaders.authorization).startsWith('OAuth ')), 'every call OAuth 1.0a signed by the package')
  reportCalls(t, 'twitter-ads', clientVersion('twitter-ads'), recorder)
})
