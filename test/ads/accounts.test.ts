import { spawnSync } from 'node:child_process'
import path from 'node:path'
import t from 'tap'
import { run as runAccounts } from '../../services/cli/accounts'
import { projectRoot } from '../../services/common/bus/topics'
import { createAccount, grantAccountAccess, grantFeatures } from '../../services/gateway/ads/accounts'
import { adsFixture, expectError, OPERATOR_TOKEN } from '../support/fixtures/campaigns'
import { bearerRequest, oauth1Request, plainRequest, type TestResponse } from '../support/http'
import { createIdentity, startTestRuntime, type TestIdentity } from '../support/runtime'
import { eventually } from '../support/util'
import { redisStore, startRedis } from '../support/infra'
import { checkChain, collectChanges } from '../support/fixtures/change'

/** Accounts (list, read, update), features, account apps, advertiser business categories, operator routes. */

t.test('accounts: list with filters, read, update', async (t) => {
  const f = await adsFixture(t)
  const second = await createAccount(f.rt.ctx, f.id.user.id, { name: 'Beta Brand' })
  const elsewhere = await adsFixture(t, { rt: f.rt })
  await grantAccountAccess(f.rt.ctx, elsewhere.account.id, f.id.user.id)

  const list = await f.api('GET', '/12/accounts')
  t.equal(list.status, 200)
  const body = list.json<{ data: Array<Record<string, unknown>>; data_type: string; next_cursor: string | null }>()
  t.equal(body.data_type, 'account')
  t.same(body.data.map((a) => a.id), [f.account.id, second.id, elsewhere.account.id], 'owned and shared accounts')
  t.notOk('owner_user_id' in (body.data[0] as object), 'internal fields are not exposed')
  t.match(body.data[0], { name: 'Test account', timezone: 'America/Los_Angeles', approval_status: 'ACCEPTED', business_name: null, deleted: false })
  t.same((await f.api('GET', '/12/accounts', { query: { q: 'beta' } })).json<{ data: Array<{ id: string }> }>().data.map((a) => a.id), [second.id])
  t.same((await f.api('GET', '/12/accounts', { query: { account_ids: `${second.id},${elsewhere.account.id}` } })).json<{ data: Array<{ id: string }> }>().data.map((a) => a.id), [second.id, elsewhere.account.id])
  const page = await f.api('GET', '/12/accounts', { query: { count: '2', sort_by: 'name-asc' } })
  const p = page.json<{ data: Array<{ name: string }>; next_cursor: string }>()
  t.same(p.data.map((a) => a.name), ['Beta Brand', 'Test account'], 'sort_by name-asc orders the first page')
  t.type(p.next_cursor, 'string')
  const rest = (await f.api('GET', '/12/accounts', { query: { count: '2', sort_by: 'name-asc', cursor: p.next_cursor } })).json<{ data: Array<{ name: string }>; next_cursor: string | null }>()
  t.same(rest.data.map((a) => a.name), ['Test account'], 'and the cursor continues in that order')
  t.equal(rest.next_cursor, null)
  const desc = (await f.api('GET', '/12/accounts', { query: { sort_by: 'name-desc' } })).json<{ data: Array<{ name: string }> }>()
  t.same(desc.data.map((a) => a.name), ['Test account', 'Test account', 'Beta Brand'], 'name-desc reverses it')
  const byCreation = (await f.api('GET', '/12/accounts', { query: { sort_by: 'created_at-desc' } })).json<{ data: Array<{ id: string; created_at: string }> }>()
  t.same(byCreation.data.map((a) => a.created_at), byCreation.data.map((a) => a.created_at).sort().reverse(), 'created_at-desc: newest first')
  t.equal((await f.api('GET', '/12/accounts', { query: { count: '1000' } })).status, 200, 'count 1000 is accepted')
  expectError(t, await f.api('GET', '/12/accounts', { query: { count: '1001' } }), 400, 'INVALID_PARAMETER', 'count')
  expectError(t, await f.api('GET', '/12/accounts', { query: { sort_by: 'name-sideways' } }), 400, 'INVALID_PARAMETER', 'sort_by')
  t.equal((await f.api('GET', '/12/accounts', { query: { with_total_count: 'true' } })).json<{ total_count: number }>().total_count, 3)
  expectError(t, await f.api('GET', '/12/accounts', { query: { count: '0' } }), 400, 'INVALID_PARAMETER', 'count')
  expectError(t, await f.api('GET', '/12/accounts', { query: { with_total_count: 'true', cursor: p.next_cursor } }), 400, 'EXCLUSIVE_PARAMETERS', 'with_total_count')

  const read = await f.call('GET', '')
  t.equal(read.status, 200)
  t.same(read.json<{ request: unknown }>().request, { params: { account_id: f.account.id } })

  const updated = await f.call('PUT', '', { query: { name: 'Renamed', industry_type: 'TECHNOLOGY' } })
  t.equal(updated.status, 200, updated.text)
  t.match(updated.json<{ data: unknown }>().data, { name: 'Renamed', industry_type: 'TECHNOLOGY' })
  t.match((await f.call('GET', '')).json<{ data: unknown }>().data, { name: 'Renamed', industry_type: 'TECHNOLOGY' })
  expectError(t, await f.call('PUT', '', { query: { industry_type: 'SPACE' } }), 400, 'INVALID_PARAMETER', 'industry_type')
  expectError(t, await f.call('PUT', '', { query: { name: '' } }), 400, 'INVALID_PARAMETER', 'name')
  expectError(t, await f.call('PUT', '', { query: { name: 'n'.repeat(256) } }), 400, 'INVALID_PARAMETER', 'name')

  // Someone else's account: 403 ACCOUNT_NOT_FOUND; unauthenticated: 401.
  const stranger = await adsFixture(t, { rt: f.rt })
  expectError(t, await stranger.api('GET', `/12/accounts/${f.account.id}`), 403, 'ACCOUNT_NOT_FOUND', 'account_id')
  expectError(t, await stranger.api('PUT', `/12/accounts/${f.account.id}`, { query: { name: 'mine' } }), 403, 'ACCOUNT_NOT_FOUND', 'account_id')
  expectError(t, await plainRequest('GET', `${f.rt.baseUrl}/12/accounts`), 401, 'UNAUTHORIZED_ACCESS', undefined)
  const bearer = await bearerRequest('GET', `${f.rt.baseUrl}/12/accounts`, f.id.bearer)
  t.equal(bearer.status, 403, 'app-only bearer tokens are not accepted by the ads interface')
})

t.test('features: only granted keys among the three reported ones', async (t) => {
  const f = await adsFixture(t)
  t.same((await f.call('GET', '/features')).json<{ data: unknown }>().data, [])
  await grantFeatures(f.rt.ctx, f.account.id, ['REACH_FREQUENCY_CAP', 'CONVERSATION_CARD', 'WEBSITE_CLICKS_CPM_BILLING', 'ACCOUNT_HISTORY_ACCESS'])
  t.same((await f.call('GET', '/features')).json<{ data: unknown }>().data, ['REACH_FREQUENCY_CAP', 'WEBSITE_CLICKS_CPM_BILLING'])
  const one = await f.call('GET', '/features', { query: { feature_keys: 'REACH_FREQUENCY_CAP,REACH_AND_FREQUENCY_ANALYTICS' } })
  t.same(one.json<{ data: unknown }>().data, ['REACH_FREQUENCY_CAP'])
  t.same(one.json<{ request: { params: Record<string, unknown> } }>().request.params.feature_keys, ['REACH_FREQUENCY_CAP', 'REACH_AND_FREQUENCY_ANALYTICS'])
  expectError(t, await f.call('GET', '/features', { query: { feature_keys: 'CONVERSATION_CARD' } }), 400, 'INVALID_PARAMETER', 'feature_keys')
})

t.test('operator routes grant features and register account apps', async (t) => {
  const f = await adsFixture(t)
  const admin = (method: string, path: string, json?: unknown, query?: Record<string, string>) =>
    bearerRequest(method, `${f.rt.baseUrl}/admin/ads/accounts/${path}`, OPERATOR_TOKEN, { ...(json !== undefined ? { json } : {}), ...(query ? { query } : {}) })

  t.equal((await bearerRequest('GET', `${f.rt.baseUrl}/admin/ads/accounts/${f.account.id}/features`, 'wrong')).status, 401)
  t.equal((await plainRequest('GET', `${f.rt.baseUrl}/admin/ads/accounts/${f.account.id}/features`)).status, 401)
  const granted = await admin('POST', `${f.account.id}/features`, { feature_keys: ['ACCOUNT_HISTORY_ACCESS', 'WEBSITE_CLICKS_CPM_BILLING'] })
  t.equal(granted.status, 200, granted.text)
  t.same(granted.json(), { data: { account_id: f.account.id, feature_keys: ['ACCOUNT_HISTORY_ACCESS', 'WEBSITE_CLICKS_CPM_BILLING'] } })
  t.same((await f.call('GET', '/features')).json<{ data: unknown }>().data, ['WEBSITE_CLICKS_CPM_BILLING'])
  const revoked = await admin('DELETE', `${f.account.id}/features`, undefined, { feature_keys: 'WEBSITE_CLICKS_CPM_BILLING' })
  t.same(revoked.json<{ data: { feature_keys: string[] } }>().data.feature_keys, ['ACCOUNT_HISTORY_ACCESS'])
  const bad = await admin('POST', `${f.account.id}/features`, { feature_keys: ['MAKE_IT_FREE'] })
  t.equal(bad.status, 400)
  t.match(bad.json(), { type: 'https://api.twitter.com/2/problems/invalid-request' })
  t.equal((await admin('POST', `${f.account.id}/features`, { feature_keys: [] })).status, 400)
  t.equal((await admin('POST', 'nosuch/features', { feature_keys: ['AGE_TARGETING'] })).status, 404)

  t.same((await f.call('GET', '/account_apps')).json<{ data: unknown }>().data, [])
  const app1 = await admin('POST', `${f.account.id}/account_apps`, { app_store_identifier: 'com.example.android', os_type: 'Android', deep_link_pattern: 'example://' })
  t.equal(app1.status, 201, app1.text)
  const app2 = await admin('POST', `${f.account.id}/account_apps`, { app_store_identifier: '333903271', os_type: 'iOS', conversion_tracking_enabled: true })
  t.equal(app2.status, 201)
  t.equal((await admin('POST', `${f.account.id}/account_apps`, { app_store_identifier: 'not an id', os_type: 'Android' })).status, 400)
  t.equal((await admin('POST', `${f.account.id}/account_apps`, { app_store_identifier: '1', os_type: 'Windows' })).status, 400)
  const apps = await f.call('GET', '/account_apps')
  t.equal(apps.status, 200)
  const list = apps.json<{ data: Array<Record<string, unknown>>; data_type: string }>()
  t.equal(list.data_type, 'account_app')
  t.match(list.data, [
    { app_store_identifier: 'com.example.android', os_type: 'Android', conversion_tracking_enabled: false, deep_link_pattern: 'example://', deleted: false },
    { app_store_identifier: '333903271', os_type: 'iOS', conversion_tracking_enabled: true, deep_link_pattern: null }
  ])
  t.equal((await f.call('GET', '/account_apps', { query: { count: '1' } })).json<{ data: unknown[] }>().data.length, 1)
  expectError(t, await f.call('GET', '/account_apps', { query: { count: '1001' } }), 400, 'INVALID_PARAMETER', 'count')

  // Opening an account for a user on the production host, ready for campaigns.
  const opened = await bearerRequest('POST', `${f.rt.baseUrl}/admin/ads/accounts`, OPERATOR_TOKEN, { json: { user_id: f.id.user.id, name: 'Opened by ops' } })
  t.equal(opened.status, 201, opened.text)
  const openedBody = opened.json<{ data: { account: { id: string; name: string }; funding_instrument_id: string } }>().data
  t.equal(openedBody.account.name, 'Opened by ops')
  const c = await f.api('POST', `/12/accounts/${openedBody.account.id}/campaigns`, { query: { funding_instrument_id: openedBody.funding_instrument_id, name: 'first' } })
  t.equal(c.status, 200, c.text)
  t.equal((await bearerRequest('POST', `${f.rt.baseUrl}/admin/ads/accounts`, OPERATOR_TOKEN, { json: { user_id: '123' } })).status, 404)
  t.equal((await bearerRequest('POST', `${f.rt.baseUrl}/admin/ads/accounts`, OPERATOR_TOKEN, { json: { user_id: 'x' } })).status, 400)
  t.equal((await bearerRequest('POST', `${f.rt.baseUrl}/admin/ads/accounts`, OPERATOR_TOKEN, { json: { user_id: f.id.user.id, name: '' } })).status, 400)
  t.equal((await plainRequest('POST', `${f.rt.baseUrl}/admin/ads/accounts`, { json: { user_id: f.id.user.id } })).status, 401)

  // The operator API lives on the main host only.
  const sandbox = await bearerRequest('GET', `${f.rt.sandboxUrl as string}/admin/ads/accounts/${f.account.id}/features`, OPERATOR_TOKEN)
  t.equal(sandbox.status, 404)
})

t.test('advertiser business categories: the IAB-based list', async (t) => {
  const f = await adsFixture(t)
  const res = await f.api('GET', '/12/advertiser_business_categories')
  t.equal(res.status, 200)
  const body = res.json<{ data: Array<{ id: string; name: string; iab_categories: string[] }>; data_type: string }>()
  t.equal(body.data_type, 'advertiser_business_category')
  t.equal(body.data.length, 16)
  t.match(body.data.find((c) => c.id === '1jm'), { name: 'Health & Pharma', iab_categories: ['IAB7'] })
  const codes = body.data.flatMap((c) => c.iab_categories)
  t.equal(new Set(codes).size, codes.length, 'each IAB code belongs to one business category')
  for (const code of codes) t.match(code, /^IAB\d{1,2}(-\d{1,2})?$/)
})

t.test('the account CLI grants and revokes operator-only features (account history allowlist)', async (t) => {
  const f = await adsFixture(t)
  const env = { GATEWAY_URL: f.rt.baseUrl, OPERATOR_TOKEN }
  const cli = async (argv: string[], environment: Record<string, string> = env): Promise<{ code: number; out: string; err: string }> => {
    let out = ''
    let err = ''
    const code = await runAccounts(argv, { env: environment, out: (s) => void (out += s), err: (s) => void (err += s) })
    return { code, out, err }
  }
  const hour = 3_600_000
  const start = Math.floor(Date.now() / hour) * hour - hour
  const history = (): Promise<TestResponse> => f.call('GET', '/account_history', {
    query: { entity_type: 'CAMPAIGN', entity_id: 'anything', start_time: new Date(start).toISOString(), end_time: new Date(start + 3 * hour).toISOString() }
  })
  expectError(t, await history(), 403, 'FEATURE_NOT_ENABLED', undefined)

  const granted = await cli(['feature', 'grant', '--account', f.account.id, '--feature', 'ACCOUNT_HISTORY_ACCESS', '--json'])
  t.equal(granted.code, 0, granted.err)
  t.same(JSON.parse(granted.out), { account_id: f.account.id, feature_keys: ['ACCOUNT_HISTORY_ACCESS'] })
  t.equal((await history()).status, 200, 'the allowlisted account reads its history')

  const more = await cli(['feature', 'grant', '--account', f.account.id, '--feature', 'AGE_TARGETING,REACH_FREQUENCY_CAP'])
  t.equal(more.code, 0, more.err)
  t.match(more.out, /granted AGE_TARGETING, REACH_FREQUENCY_CAP\naccount \w+: ACCOUNT_HISTORY_ACCESS, AGE_TARGETING, REACH_FREQUENCY_CAP/)
  const listed = await cli(['feature', 'list', '--account', f.account.id])
  t.equal(listed.out, `account ${f.account.id}: ACCOUNT_HISTORY_ACCESS, AGE_TARGETING, REACH_FREQUENCY_CAP\n`)

  const revoked = await cli(['feature', 'revoke', '--account', f.account.id, '--feature', 'ACCOUNT_HISTORY_ACCESS', '--feature', 'AGE_TARGETING', '--json'])
  t.equal(revoked.code, 0, revoked.err)
  t.same(JSON.parse(revoked.out).feature_keys, ['REACH_FREQUENCY_CAP'])
  expectError(t, await history(), 403, 'FEATURE_NOT_ENABLED', undefined)

  // Refusals: the gateway's (exit 1, its message) and usage (exit 2).
  const unknown = await cli(['feature', 'grant', '--account', f.account.id, '--feature', 'MAKE_IT_FREE'])
  t.equal(unknown.code, 1)
  t.match(unknown.err, /^error: 400 .*Unknown feature keys: MAKE_IT_FREE/)
  for (const name of ['constructor', '__proto__', 'toString']) {
    const proto = await cli(['feature', 'grant', '--account', f.account.id, '--feature', name])
    t.equal(proto.code, 1, `feature ${name} is an unknown key`)
    t.match(proto.err, /Unknown feature keys/)
  }
  const missing = await cli(['feature', 'grant', '--account', 'nosuch', '--feature', 'AGE_TARGETING'])
  t.equal(missing.code, 1)
  t.match(missing.err, /error: 404/)
  t.equal((await cli(['feature', 'grant', '--account', f.account.id])).code, 2, '--feature is required')
  t.equal((await cli(['feature', 'list'])).code, 2, '--account is required')
  t.equal((await cli(['feature', 'explode', '--account', f.account.id])).code, 2)
  const usage = await cli([])
  t.equal(usage.code, 2)
  t.match(usage.err, /usage:\n {2}account create/)
  const unauthorized = await cli(['feature', 'list', '--account', f.account.id], { ...env, OPERATOR_TOKEN: 'wrong' })
  t.equal(unauthorized.code, 1)
  t.match(unauthorized.err, /error: 401/)

  // Opening an account for a user.
  const opened = await cli(['create', '--user-id', f.id.user.id, '--name', 'From the CLI', '--json'])
  t.equal(opened.code, 0, opened.err)
  const openedBody = JSON.parse(opened.out) as { account: { id: string; name: string }; funding_instrument_id: string }
  t.equal(openedBody.account.name, 'From the CLI')
  t.equal((await f.api('GET', `/12/accounts/${openedBody.account.id}`)).status, 200, 'the user reaches the new account')
})

t.test('the CLI dispatcher names only its own groups', async (t) => {
  // `cli constructor` once loaded Object's constructor as a command group and crashed.
  for (const group of ['constructor', '__proto__', 'toString']) {
    const res = spawnSync(process.execPath, ['--import=tsx', path.join(projectRoot(), 'services/cli.ts'), group], { encoding: 'utf8', timeout: 60_000 })
    t.equal(res.status, 2, `${group}: usage exit (${res.stderr.slice(0, 200)})`)
    t.match(res.stderr, /^usage: cli <.*\baccount\b.*>/, `${group}: the usage lists the groups`)
  }
})

t.test('concurrent account PUTs and grants: no change is lost, the account changes chain', async (t) => {
  // On Redis: requests really interleave there (the memory store answers in microtasks).
  const store = await redisStore(t, await startRedis(t))
  const f = await adsFixture(t, { rt: await startTestRuntime(t, { env: { OPERATOR_TOKEN }, store }) })
  const changes = await collectChanges(t, f.rt.ctx.bus, 'account-concurrent')
  const helpers: TestIdentity[] = []
  for (let i = 0; i < 3; i++) helpers.push(await createIdentity(f.rt.ctx.store))
  const industries = ['RETAIL', 'TRAVEL', 'MEDIA', 'FINANCIAL']
  for (const [round, industry] of industries.entries()) {
    const [named, typed] = await Promise.all([
      f.call('PUT', '', { query: { name: `Brand ${round}` } }),
      f.call('PUT', '', { query: { industry_type: industry } }),
      // A grant rewrites the same record (its internal user list).
      ...(round < helpers.length ? [grantAccountAccess(f.rt.ctx, f.account.id, (helpers[round] as TestIdentity).user.id)] : [])
    ])
    t.equal((named as TestResponse).status, 200)
    t.equal((typed as TestResponse).status, 200)
    t.match((await f.call('GET', '')).json<{ data: unknown }>().data, { name: `Brand ${round}`, industry_type: industry }, `round ${round}: both PUTs landed`)
  }
  for (const helper of helpers) t.equal((await oauth1Request('GET', `${f.rt.baseUrl}/12/accounts/${f.account.id}`, helper)).status, 200, 'every grant landed')
  await eventually(() => changes.filter((c) => c.entity_id === f.account.id).length >= 2 * industries.length)
  const mine = changes.filter((c) => c.entity_id === f.account.id)
  t.equal(mine.length, 2 * industries.length, 'one change per PUT (grants change nothing public)')
  checkChain(t, mine.slice(1))
  t.same(mine[mine.length - 1]?.entity_data, (await f.call('GET', '')).json<{ data: unknown }>().data, 'the last change is the account as read')
})
