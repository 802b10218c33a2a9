import path from 'node:path'
import t from 'tap'
import { MemoryStore } from '../../services/common/store/memory'
import { listAccountsForUser } from '../../services/gateway/ads/accounts'
import { TOPICS } from '../../services/common/bus/types'
import { adsFixture, expectError, OPERATOR_TOKEN } from '../support/fixtures/campaigns'
import { bearerRequest, oauth1Request } from '../support/http'
import { createIdentity, startTestRuntime } from '../support/runtime'
import { eventually, tempDir } from '../support/util'
import { collectChanges, outboxFailingStore } from '../support/fixtures/change'

/**
 * The sandbox host ({ads_sandbox_url}): account create/delete, feature
 * add/remove and funding instrument create/delete exist there only; the
 * production host answers them 404 ROUTE_NOT_FOUND. The ordinary ads
 * routes are served on both hosts, each on its own world: what is made on
 * one host is not seen on the other.
 */

t.test('sandbox-only operations are refused on the production host', async (t) => {
  const f = await adsFixture(t)
  const prod = (method: string, path: string, query?: Record<string, string>) => oauth1Request(method, `${f.rt.baseUrl}${path}`, f.id, query ? { query } : {})
  const cases: Array<[string, string, Record<string, string>?]> = [
    ['POST', '/12/accounts'],
    ['DELETE', `/12/accounts/${f.account.id}`],
    ['POST', `/12/accounts/${f.account.id}/features`, { feature_keys: 'AGE_TARGETING' }],
    ['DELETE', `/12/accounts/${f.account.id}/features`, { feature_keys: 'AGE_TARGETING' }],
    ['POST', `/12/accounts/${f.account.id}/funding_instruments`, { currency: 'USD', start_time: '2030-01-01T00:00:00Z', type: 'CREDIT_CARD' }],
    ['DELETE', `/12/accounts/${f.account.id}/funding_instruments/${f.fi.id}`]
  ]
  for (const [method, path, query] of cases) {
    const res = await prod(method, path, query)
    t.test(`${method} ${path.replace(f.account.id, ':account_id')}`, async (t) => expectError(t, res, 404, 'ROUTE_NOT_FOUND', undefined))
  }
  t.equal((await listAccountsForUser(f.rt.ctx, f.id.user.id, 'production')).length, 1, 'nothing was created')
  t.equal((await listAccountsForUser(f.rt.ctx, f.id.user.id, 'sandbox')).length, 0)
  t.same((await f.call('GET', '')).json<{ data: { deleted: boolean } }>().data.deleted, false, 'nothing was deleted')
})

t.test('sandbox: create an account with a default funding instrument, use it, delete it', async (t) => {
  const f = await adsFixture(t)
  const sandbox = f.rt.sandboxUrl as string
  const id = await createIdentity(f.rt.ctx.store)
  const created = await oauth1Request('POST', `${sandbox}/12/accounts`, id)
  t.equal(created.status, 200, created.text)
  const account = created.json<{ data: Record<string, unknown>; data_type: string }>()
  t.equal(account.data_type, 'account')
  t.match(account.data, { name: 'Sandbox account', approval_status: 'ACCEPTED', timezone: 'America/Los_Angeles', deleted: false, business_id: null })
  t.notOk('owner_user_id' in account.data)
  const accountId = account.data.id as string

  // The account is usable on the sandbox host, and has a funding instrument to create campaigns with.
  const fis = await oauth1Request('GET', `${sandbox}/12/accounts/${accountId}/funding_instruments`, id)
  t.equal(fis.status, 200)
  const fi = fis.json<{ data: Array<{ id: string; able_to_fund: boolean; currency: string }> }>().data
  t.equal(fi.length, 1)
  t.match(fi[0], { able_to_fund: true, currency: 'USD' })
  const campaign = await oauth1Request('POST', `${sandbox}/12/accounts/${accountId}/campaigns`, id, { query: { funding_instrument_id: fi[0]?.id as string, name: 'first' } })
  t.equal(campaign.status, 200, campaign.text)
  t.equal((await oauth1Request('GET', `${sandbox}/12/accounts`, id)).json<{ data: unknown[] }>().data.length, 1)

  // More funding instruments, and their deletion, on the sandbox.
  const more = await oauth1Request('POST', `${sandbox}/12/accounts/${accountId}/funding_instruments`, id, {
    query: { currency: 'EUR', start_time: '2030-07-10T00:00:00Z', type: 'INSERTION_ORDER', end_time: '2031-01-10T00:00:00Z', funded_amount_local_micro: '140000000000' }
  })
  t.equal(more.status, 200, more.text)
  t.match(more.json<{ data: unknown }>().data, { type: 'INSERTION_ORDER', currency: 'EUR', funded_amount_local_micro: 140000000000, credit_limit_local_micro: null, end_time: '2031-01-10T00:00:00Z' })
  const moreId = more.json<{ data: { id: string } }>().data.id
  expectError(t, await oauth1Request('POST', `${sandbox}/12/accounts/${accountId}/funding_instruments`, id, { query: { currency: 'usd', start_time: '2030-01-01T00:00:00Z', type: 'CREDIT_CARD' } }), 400, 'INVALID_PARAMETER', 'currency')
  expectError(t, await oauth1Request('POST', `${sandbox}/12/accounts/${accountId}/funding_instruments`, id, { query: { currency: 'USD', start_time: '2030-01-01T00:00:00Z' } }), 400, 'MISSING_PARAMETER', 'type')
  expectError(t, await oauth1Request('POST', `${sandbox}/12/accounts/${accountId}/funding_instruments`, id, { query: { currency: 'USD', type: 'CREDIT_CARD' } }), 400, 'MISSING_PARAMETER', 'start_time')
  expectError(t, await oauth1Request('POST', `${sandbox}/12/accounts/${accountId}/funding_instruments`, id, { query: { currency: 'USD', type: 'CREDIT_CARD', start_time: '2030-02-01T00:00:00Z', end_time: '2030-01-01T00:00:00Z' } }), 400, 'INVALID_PARAMETER', 'end_time')
  const fiDeleted = await oauth1Request('DELETE', `${sandbox}/12/accounts/${accountId}/funding_instruments/${moreId}`, id)
  t.match(fiDeleted.json<{ data: unknown }>().data, { deleted: true, able_to_fund: false, reasons_not_able_to_fund: ['DELETED'] })
  expectError(t, await oauth1Request('POST', `${sandbox}/12/accounts/${accountId}/campaigns`, id, { query: { funding_instrument_id: moreId, name: 'x' } }), 400, 'INVALID_PARAMETER', 'funding_instrument_id')

  // Someone else cannot delete it.
  expectError(t, await oauth1Request('DELETE', `${sandbox}/12/accounts/${accountId}`, f.id), 403, 'ACCOUNT_NOT_FOUND', 'account_id')
  const deleted = await oauth1Request('DELETE', `${sandbox}/12/accounts/${accountId}`, id)
  t.equal(deleted.status, 200)
  t.match(deleted.json<{ data: unknown }>().data, { id: accountId, deleted: true })
  expectError(t, await oauth1Request('DELETE', `${sandbox}/12/accounts/${accountId}`, id), 404, 'NOT_FOUND', 'account_id')
  expectError(t, await oauth1Request('GET', `${sandbox}/12/accounts/${accountId}`, id), 404, 'NOT_FOUND', 'account_id')
  t.match((await oauth1Request('GET', `${sandbox}/12/accounts/${accountId}`, id, { query: { with_deleted: 'true' } })).json<{ data: unknown }>().data, { deleted: true })
  t.same((await oauth1Request('GET', `${sandbox}/12/accounts`, id)).json<{ data: unknown[] }>().data, [], 'deleted accounts are listed only with with_deleted')
  t.equal((await oauth1Request('GET', `${sandbox}/12/accounts`, id, { query: { with_deleted: 'true' } })).json<{ data: unknown[] }>().data.length, 1)
})

t.test('sandbox: add and remove account features', async (t) => {
  const f = await adsFixture(t)
  const sandbox = f.rt.sandboxUrl as string
  const id = await createIdentity(f.rt.ctx.store)
  const account = (await oauth1Request('POST', `${sandbox}/12/accounts`, id)).json<{ data: { id: string } }>().data
  const features = (method: string, keys?: string) => oauth1Request(method, `${sandbox}/12/accounts/${account.id}/features`, id, keys === undefined ? {} : { query: { feature_keys: keys } })

  const added = await features('POST', 'VALIDATED_AGE_TARGETING,REACH_FREQUENCY_CAP,CPI_CHARGING')
  t.equal(added.status, 200, added.text)
  t.same(added.json<{ data: unknown }>().data, ['CPI_CHARGING', 'REACH_FREQUENCY_CAP', 'VALIDATED_AGE_TARGETING'])
  t.same(added.json<{ request: { params: Record<string, unknown> } }>().request.params.feature_keys, ['VALIDATED_AGE_TARGETING', 'REACH_FREQUENCY_CAP', 'CPI_CHARGING'])
  t.same((await features('POST', 'CPI_CHARGING')).json<{ data: unknown }>().data, ['CPI_CHARGING', 'REACH_FREQUENCY_CAP', 'VALIDATED_AGE_TARGETING'], 'adding twice is harmless')
  // GET features reports only the three beta keys, when granted.
  t.same((await features('GET')).json<{ data: unknown }>().data, ['REACH_FREQUENCY_CAP'])

  const removed = await features('DELETE', 'REACH_FREQUENCY_CAP,AGE_TARGETING')
  t.equal(removed.status, 200)
  t.same(removed.json<{ data: unknown }>().data, ['CPI_CHARGING', 'VALIDATED_AGE_TARGETING'], 'removing an absent key is a no-op')
  t.same((await features('GET')).json<{ data: unknown }>().data, [])

  expectError(t, await features('POST'), 400, 'MISSING_PARAMETER', 'feature_keys')
  expectError(t, await features('DELETE'), 400, 'MISSING_PARAMETER', 'feature_keys')
  expectError(t, await features('POST', 'MAKE_IT_FREE'), 400, 'INVALID_PARAMETER', 'feature_keys')
  // A blank item is an invalid list, not a missing parameter.
  expectError(t, await features('POST', 'AGE_TARGETING,,CPI_CHARGING'), 400, 'INVALID_PARAMETER', 'feature_keys')
  expectError(t, await features('DELETE', 'WEBSITE_CLICKS_CPM_BILLING'), 400, 'INVALID_PARAMETER', 'feature_keys')
  expectError(t, await oauth1Request('POST', `${sandbox}/12/accounts/${account.id}/features`, f.id, { query: { feature_keys: 'AGE_TARGETING' } }), 403, 'ACCOUNT_NOT_FOUND', 'account_id')
  // A production account does not exist on the sandbox host.
  expectError(t, await oauth1Request('POST', `${sandbox}/12/accounts/${f.account.id}/features`, f.id, { query: { feature_keys: 'AGE_TARGETING' } }), 404, 'NOT_FOUND', 'account_id')
})

t.test('sandbox: an account and its change event commit together; a failed commit leaves no account', async (t) => {
  const base = await MemoryStore.open(path.join(tempDir(t, 'sandbox-outbox-'), 'state'))
  t.teardown(() => base.close())
  const store = outboxFailingStore(base)
  store.failing = false
  const rt = await startTestRuntime(t, { store, env: { OPERATOR_TOKEN } })
  const changes = await collectChanges(t, rt.ctx.bus, 'sandbox-account-changes')
  const sandbox = rt.sandboxUrl as string
  const id = await createIdentity(rt.ctx.store)
  const accounts = async (): Promise<Array<{ id: string; deleted: boolean }>> => (await oauth1Request('GET', `${sandbox}/12/accounts`, id, { query: { with_deleted: 'true' } })).json<{ data: Array<{ id: string; deleted: boolean }> }>().data

  store.failing = true
  const refused = await oauth1Request('POST', `${sandbox}/12/accounts`, id)
  t.equal(refused.status, 500, `the create fails with its commit (${refused.text.slice(0, 120)})`)
  t.same(await accounts(), [], 'and leaves no account behind')

  store.failing = false
  const created = await oauth1Request('POST', `${sandbox}/12/accounts`, id)
  t.equal(created.status, 200, created.text)
  const accountId = created.json<{ data: { id: string } }>().data.id
  t.same((await accounts()).map((a) => a.id), [accountId])
  const create = await eventually(() => changes.find((c) => c.entity_type === 'ACCOUNT' && c.entity_id === accountId))
  t.match(create, { change_type: 'CREATE', account_id: accountId, changed_by: { user_id: id.user.id }, entity_data: { id: accountId, name: 'Sandbox account', deleted: false } })
  t.notOk('owner_user_id' in create.entity_data, 'the public rendering')

  store.failing = true
  t.equal((await oauth1Request('DELETE', `${sandbox}/12/accounts/${accountId}`, id)).status, 500, 'a delete whose commit fails')
  t.same((await accounts()).map((a) => a.deleted), [false], 'leaves the account in place')
  store.failing = false
  t.equal((await oauth1Request('DELETE', `${sandbox}/12/accounts/${accountId}`, id)).status, 200)
  await eventually(() => changes.filter((c) => c.entity_id === accountId).length >= 2)
  t.same(changes.filter((c) => c.entity_id === accountId).map((c) => c.change_type), ['CREATE', 'DELETE'], 'one change per commit that landed')
})

t.test('the sandbox is a world of its own: accounts, entities, features, history and catalogs stay on their host', async (t) => {
  const f = await adsFixture(t)
  const sandbox = f.rt.sandboxUrl as string
  const prod = f.rt.baseUrl
  const on = (host: string, method: string, path: string, query?: Record<string, string>) => oauth1Request(method, `${host}${path}`, f.id, query ? { query } : {})
  const activity: string[] = []
  const consumer = await f.rt.ctx.bus.subscribe({ groupId: 'sandbox-world-activity', topics: [TOPICS.activityEvents], handler: async (m) => void activity.push(JSON.stringify(m.value)) })
  t.teardown(() => consumer.close())

  // One user, one account in each world.
  const created = await on(sandbox, 'POST', '/12/accounts')
  t.equal(created.status, 200, created.text)
  const sbx = created.json<{ data: { id: string } }>().data.id
  const ids = async (host: string, query: Record<string, string> = {}): Promise<string[]> =>
    (await on(host, 'GET', '/12/accounts', query)).json<{ data: Array<{ id: string }> }>().data.map((a) => a.id)
  t.same(await ids(prod), [f.account.id], 'the production host lists only the production account')
  t.same(await ids(prod, { with_deleted: 'true', with_total_count: 'true' }), [f.account.id])
  t.same(await ids(sandbox), [sbx], 'the sandbox host lists only the sandbox account')
  t.same(await ids(prod, { account_ids: sbx }), [], 'not even when asked for by id')
  expectError(t, await on(prod, 'GET', `/12/accounts/${sbx}`), 404, 'NOT_FOUND', 'account_id')
  expectError(t, await on(sandbox, 'GET', `/12/accounts/${f.account.id}`), 404, 'NOT_FOUND', 'account_id')
  expectError(t, await on(prod, 'PUT', `/12/accounts/${sbx}`, { name: 'moved' }), 404, 'NOT_FOUND', 'account_id')

  // Entities: a campaign made in each world is seen only there.
  const sbxFi = (await on(sandbox, 'GET', `/12/accounts/${sbx}/funding_instruments`)).json<{ data: Array<{ id: string }> }>().data[0]?.id as string
  const sbxCampaign = await on(sandbox, 'POST', `/12/accounts/${sbx}/campaigns`, { funding_instrument_id: sbxFi, name: 'in the sandbox' })
  t.equal(sbxCampaign.status, 200, sbxCampaign.text)
  const prodCampaign = await on(prod, 'POST', `/12/accounts/${f.account.id}/campaigns`, { funding_instrument_id: f.fi.id, name: 'in production' })
  t.equal(prodCampaign.status, 200, prodCampaign.text)
  expectError(t, await on(prod, 'GET', `/12/accounts/${sbx}/campaigns`), 404, 'NOT_FOUND', 'account_id')
  expectError(t, await on(sandbox, 'GET', `/12/accounts/${f.account.id}/campaigns`), 404, 'NOT_FOUND', 'account_id')
  expectError(t, await on(sandbox, 'GET', `/12/accounts/${f.account.id}/funding_instruments`), 404, 'NOT_FOUND', 'account_id')

  // Features: added on the sandbox, granted by the operator in production; neither crosses.
  t.equal((await on(sandbox, 'POST', `/12/accounts/${sbx}/features`, { feature_keys: 'REACH_FREQUENCY_CAP,ACCOUNT_HISTORY_ACCESS' })).status, 200)
  expectError(t, await on(sandbox, 'POST', `/12/accounts/${f.account.id}/features`, { feature_keys: 'REACH_FREQUENCY_CAP' }), 404, 'NOT_FOUND', 'account_id')
  expectError(t, await on(prod, 'GET', `/12/accounts/${sbx}/features`), 404, 'NOT_FOUND', 'account_id')
  t.same((await on(prod, 'GET', `/12/accounts/${f.account.id}/features`)).json<{ data: unknown }>().data, [], 'production features untouched')
  t.same((await on(sandbox, 'GET', `/12/accounts/${sbx}/features`)).json<{ data: unknown }>().data, ['REACH_FREQUENCY_CAP'])
  await bearerRequest('POST', `${prod}/admin/ads/accounts/${f.account.id}/features`, OPERATOR_TOKEN, { json: { feature_keys: ['ACCOUNT_HISTORY_ACCESS'] } })

  // History: each host reads its own account's, never the other's.
  const hour = 3_600_000
  const start = Math.floor(Date.now() / hour) * hour - hour
  const window = { entity_type: 'CAMPAIGN', start_time: new Date(start).toISOString(), end_time: new Date(start + 3 * hour).toISOString() }
  const sbxCampaignId = sbxCampaign.json<{ data: { id: string } }>().data.id
  const prodCampaignId = prodCampaign.json<{ data: { id: string } }>().data.id
  const history = async (host: string, account: string, entity: string) => on(host, 'GET', `/12/accounts/${account}/account_history`, { ...window, entity_id: entity })
  await eventually(async () => (await history(sandbox, sbx, sbxCampaignId)).json<{ data: unknown[] }>().data.length === 1)
  await eventually(async () => (await history(prod, f.account.id, prodCampaignId)).json<{ data: unknown[] }>().data.length === 1)
  expectError(t, await history(prod, sbx, sbxCampaignId), 404, 'NOT_FOUND', 'account_id')
  expectError(t, await history(sandbox, f.account.id, prodCampaignId), 404, 'NOT_FOUND', 'account_id')

  // Catalogs: one per user in each world.
  const sbxCatalog = await on(sandbox, 'POST', '/12/product_catalogs', { name: 'Sandbox shop' })
  t.equal(sbxCatalog.status, 200, sbxCatalog.text)
  const sbxCatalogId = sbxCatalog.json<{ data: { id: string } }>().data.id
  t.same((await on(prod, 'GET', '/12/product_catalogs')).json<{ data: unknown[] }>().data, [], 'no catalog in production yet')
  const prodCatalog = await on(prod, 'POST', '/12/product_catalogs', { name: 'Real shop' })
  t.equal(prodCatalog.status, 200, `production gets its own catalog: ${prodCatalog.text}`)
  t.same((await on(sandbox, 'GET', '/12/product_catalogs')).json<{ data: Array<{ id: string }> }>().data.map((c) => c.id), [sbxCatalogId])
  expectError(t, await on(prod, 'GET', `/12/product_catalogs/${sbxCatalogId}/products`), 404, 'NOT_FOUND', 'product_catalog_id')
  expectError(t, await on(prod, 'DELETE', `/12/product_catalogs/${sbxCatalogId}`), 404, 'NOT_FOUND', 'product_catalog_id')
  t.equal((await on(sandbox, 'GET', `/12/product_catalogs/${sbxCatalogId}/products`)).status, 200, 'still there in the sandbox')

  // Audiences are shared only within a world.
  const audience = (await on(prod, 'POST', `/12/accounts/${f.account.id}/custom_audiences`, { name: 'Prod audience' })).json<{ data: { id: string } }>().data.id
  expectError(t, await on(prod, 'POST', `/5/accounts/${f.account.id}/tailored_audiences/${audience}/permissions`, { granted_account_id: sbx, permission_level: 'READ_ONLY' }), 400, 'INVALID_PARAMETER', 'granted_account_id')

  // An organic post of a sandbox account never reaches production's activity stream.
  const posted = await on(sandbox, 'POST', `/12/accounts/${sbx}/tweet`, { as_user_id: f.id.user.id, text: 'sandbox hello', nullcast: 'false' })
  t.equal(posted.status, 200, posted.text)
  const real = await on(prod, 'POST', `/12/accounts/${f.account.id}/tweet`, { as_user_id: f.id.user.id, text: 'real hello', nullcast: 'false' })
  t.equal(real.status, 200, real.text)
  const postId = (res: typeof real): string => res.json<{ data: { id_str: string } }>().data.id_str
  // Both went through the same outbox, the sandbox one first: once the production one is out, a leak would be too.
  await eventually(() => activity.some((v) => v.includes(postId(real))))
  t.notOk(activity.some((v) => v.includes(postId(posted))), 'the sandbox post was not published')

  // Deleting the sandbox account leaves production as it was.
  t.equal((await on(sandbox, 'DELETE', `/12/accounts/${sbx}`)).status, 200)
  t.same(await ids(prod), [f.account.id])
  t.same(await ids(sandbox, { with_deleted: 'true' }), [sbx])
})
