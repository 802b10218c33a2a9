import t from 'tap'
import { TARGETING_TYPES } from '../../services/gateway/ads/campaigns/audience-estimate'
import { TARGETING_TYPE_NAMES } from '../../services/gateway/ads/targeting/criteria'
import { adsError, adsFixture, createCampaign, createLineItem, expectError } from '../support/fixtures/campaigns'
import { oauth1Request, type TestResponse } from '../support/http'
import { createIdentity } from '../support/runtime'
import { createAdsIdentity } from '../support/fixtures/ads'

/**
 * Targeting criteria over HTTP (OAuth 1.0a, embedded runtime): the
 * single-criterion operations with every validation rule, the list
 * parameters, delete and with_deleted, ownership, and the batch endpoint's
 * all-or-nothing semantics. The custom-audience permission flow, the
 * `targeted` listing and account history are in targeting-audiences.test.ts.
 */

type Json = Record<string, unknown>
const data = <T = Json>(res: TestResponse): T => res.json<{ data: T }>().data

t.test('every targeting type the audience estimate understands can be stored', async (t) => {
  const known = new Set(TARGETING_TYPE_NAMES)
  t.same(TARGETING_TYPES.filter((type) => !known.has(type)), [], 'no estimate type is missing from the targeting table')
})

t.test('single criteria: create, read, list, delete, and every validation rule', async (t) => {
  const f = await adsFixture(t)
  const campaign = await createCampaign(f, { name: 'Targeting campaign' })
  const li = (await createLineItem(f, campaign.id as string)).id as string
  const other = (await createLineItem(f, campaign.id as string)).id as string
  const post = (query: Record<string, string>): Promise<TestResponse> => f.call('POST', '/targeting_criteria', { query })
  const create = async (query: Record<string, string>): Promise<Json> => {
    const res = await post(query)
    t.equal(res.status, 200, `create ${JSON.stringify(query)}: ${res.text.slice(0, 300)}`)
    return data(res)
  }

  // The public platform's shape, with the request echoed.
  let res = await post({ line_item_id: li, targeting_type: 'BROAD_KEYWORD', targeting_value: 'technology' })
  t.equal(res.status, 200, res.text)
  t.equal(res.headers.get('x-current-api-version'), '12')
  const body = res.json<{ data: Json; data_type: string; request: { params: Json } }>()
  t.equal(body.data_type, 'targeting_criterion')
  t.same(body.request.params, { account_id: f.account.id, line_item_id: li, targeting_type: 'BROAD_KEYWORD', targeting_value: 'technology' })
  t.match(body.data, { id: /^[0-9a-z]+$/, line_item_id: li, name: 'technology', targeting_type: 'BROAD_KEYWORD', targeting_value: 'technology', operator_type: 'EQ', deleted: false, created_at: /Z$/, updated_at: /Z$/ })
  const keyword = body.data

  // Names of values that refer to something.
  t.match(await create({ line_item_id: li, targeting_type: 'LANGUAGE', targeting_value: 'fr' }), { name: 'French' })
  t.match(await create({ line_item_id: li, targeting_type: 'GENDER', targeting_value: '1' }), { name: 'Male' })
  t.match(await create({ line_item_id: li, targeting_type: 'FOLLOWERS_OF_USER', targeting_value: f.id.user.id }), { name: `@${f.id.user.screen_name}` })
  t.match(await create({ line_item_id: li, targeting_type: 'CAMPAIGN_ENGAGEMENT', targeting_value: campaign.id as string }), { name: 'Targeting campaign' })
  t.match(await create({ line_item_id: li, targeting_type: 'PHRASE_KEYWORD', targeting_value: 'machine learning', operator_type: 'NE' }), { operator_type: 'NE', name: 'machine learning' })
  t.match(await create({ line_item_id: li, targeting_type: 'NETWORK_ACTIVATION_DURATION', targeting_value: '6', operator_type: 'GTE' }), { operator_type: 'GTE' })
  t.match(await create({ line_item_id: li, targeting_type: 'APP_LIST', targeting_value: 'list1' }), { operator_type: 'NE' }, 'APP_LIST takes NE without being told')
  const age = await create({ line_item_id: li, targeting_type: 'AGE', targeting_value: 'AGE_18_TO_34' })

  // Every rule names its parameter.
  const cases: Array<[string, Record<string, string>, number, string, string]> = [
    ['no line_item_id', { targeting_type: 'GENDER', targeting_value: '1' }, 400, 'MISSING_PARAMETER', 'line_item_id'],
    ['no targeting_type', { line_item_id: li, targeting_value: '1' }, 400, 'MISSING_PARAMETER', 'targeting_type'],
    ['no targeting_value', { line_item_id: li, targeting_type: 'GENDER' }, 400, 'MISSING_PARAMETER', 'targeting_value'],
    ['blank targeting_value', { line_item_id: li, targeting_type: 'BROAD_KEYWORD', targeting_value: '   ' }, 400, 'MISSING_PARAMETER', 'targeting_value'],
    ['unknown targeting_type', { line_item_id: li, targeting_type: 'HOROSCOPE', targeting_value: 'leo' }, 400, 'INVALID_PARAMETER', 'targeting_type'],
    ['unknown operator_type', { line_item_id: li, targeting_type: 'GENDER', targeting_value: '2', operator_type: 'LIKE' }, 400, 'INVALID_PARAMETER', 'operator_type'],
    ['GTE only for durations', { line_item_id: li, targeting_type: 'GENDER', targeting_value: '2', operator_type: 'GTE' }, 400, 'INVALID_PARAMETER', 'operator_type'],
    ['APP_LIST only excludes', { line_item_id: li, targeting_type: 'APP_LIST', targeting_value: 'list2', operator_type: 'EQ' }, 400, 'INVALID_PARAMETER', 'operator_type'],
    ['durations are compared', { line_item_id: li, targeting_type: 'NETWORK_ACTIVATION_DURATION', targeting_value: '3', operator_type: 'EQ' }, 400, 'INVALID_PARAMETER', 'operator_type'],
    ['durations need GTE or LT', { line_item_id: li, targeting_type: 'NETWORK_ACTIVATION_DURATION', targeting_value: '3' }, 400, 'MISSING_PARAMETER', 'operator_type'],
    ['gender is 1 or 2', { line_item_id: li, targeting_type: 'GENDER', targeting_value: '3' }, 400, 'INVALID_PARAMETER', 'targeting_value'],
    ['age bucket format', { line_item_id: other, targeting_type: 'AGE', targeting_value: '18-34' }, 400, 'INVALID_PARAMETER', 'targeting_value'],
    ['age bucket order', { line_item_id: other, targeting_type: 'AGE', targeting_value: 'AGE_34_TO_18' }, 400, 'INVALID_PARAMETER', 'targeting_value'],
    ['age bucket floor', { line_item_id: other, targeting_type: 'AGE', targeting_value: 'AGE_05_TO_10' }, 400, 'INVALID_PARAMETER', 'targeting_value'],
    ['language code format', { line_item_id: li, targeting_type: 'LANGUAGE', targeting_value: 'french' }, 400, 'INVALID_PARAMETER', 'targeting_value'],
    ['language must exist', { line_item_id: li, targeting_type: 'LANGUAGE', targeting_value: 'zz' }, 400, 'INVALID_PARAMETER', 'targeting_value'],
    ['interest ids are numeric', { line_item_id: li, targeting_type: 'INTEREST', targeting_value: 'books' }, 400, 'INVALID_PARAMETER', 'targeting_value'],
    ['location ids are identifiers', { line_item_id: li, targeting_type: 'LOCATION', targeting_value: 'San Francisco' }, 400, 'INVALID_PARAMETER', 'targeting_value'],
    ['keyword at most 255', { line_item_id: li, targeting_type: 'BROAD_KEYWORD', targeting_value: 'k'.repeat(256) }, 400, 'INVALID_PARAMETER', 'targeting_value'],
    ['unknown user', { line_item_id: li, targeting_type: 'FOLLOWERS_OF_USER', targeting_value: '123' }, 400, 'INVALID_PARAMETER', 'targeting_value'],
    ['user ids are numeric', { line_item_id: li, targeting_type: 'FOLLOWERS_OF_USER', targeting_value: 'jack' }, 400, 'INVALID_PARAMETER', 'targeting_value'],
    ['unknown campaign', { line_item_id: li, targeting_type: 'CAMPAIGN_ENGAGEMENT', targeting_value: 'nosuch' }, 400, 'INVALID_PARAMETER', 'targeting_value'],
    ['unknown custom audience', { line_item_id: li, targeting_type: 'CUSTOM_AUDIENCE', targeting_value: 'nosuch' }, 400, 'INVALID_PARAMETER', 'targeting_value'],
    ['expansion only for audiences', { line_item_id: li, targeting_type: 'BROAD_KEYWORD', targeting_value: 'x', tailored_audience_expansion: 'true' }, 400, 'INVALID_PARAMETER', 'tailored_audience_expansion'],
    ['expansion is a boolean', { line_item_id: li, targeting_type: 'CUSTOM_AUDIENCE', targeting_value: 'abc', tailored_audience_expansion: 'maybe' }, 400, 'INVALID_PARAMETER', 'tailored_audience_expansion'],
    ['excluded alias is NE', { line_item_id: li, targeting_type: 'EXCLUDED_CUSTOM_AUDIENCE', targeting_value: 'abc', operator_type: 'EQ' }, 400, 'INVALID_PARAMETER', 'operator_type'],
    ['unknown line item', { line_item_id: 'nosuch', targeting_type: 'GENDER', targeting_value: '2' }, 400, 'INVALID_PARAMETER', 'line_item_id'],
    ['duplicate', { line_item_id: li, targeting_type: 'BROAD_KEYWORD', targeting_value: 'Technology' }, 400, 'DUPLICATE', 'targeting_value'],
    ['one age bucket per line item', { line_item_id: li, targeting_type: 'AGE', targeting_value: 'AGE_25_TO_49' }, 400, 'INVALID_PARAMETER', 'targeting_type'],
    ['TV_SHOW needs a LOCATION', { line_item_id: li, targeting_type: 'TV_SHOW', targeting_value: 'show1' }, 400, 'INVALID_PARAMETER', 'targeting_type']
  ]
  for (const [name, query, status, code, parameter] of cases) {
    await t.test(name, async (t) => expectError(t, await post(query), status, code, parameter))
  }
  // The same keyword with the other operator is a different criterion.
  t.match(await create({ line_item_id: li, targeting_type: 'BROAD_KEYWORD', targeting_value: 'technology', operator_type: 'NE' }), { operator_type: 'NE' })
  await create({ line_item_id: li, targeting_type: 'LOCATION', targeting_value: '5122804691e5fecc' })
  t.match(await create({ line_item_id: li, targeting_type: 'TV_SHOW', targeting_value: 'show1' }), { targeting_type: 'TV_SHOW' }, 'TV_SHOW once a LOCATION is there')
  await create({ line_item_id: li, targeting_type: 'EVENT', targeting_value: '1ex' })
  expectError(t, await post({ line_item_id: li, targeting_type: 'EVENT', targeting_value: '1ey' }), 400, 'INVALID_PARAMETER', 'targeting_type')

  // Read, with a localized name where one exists.
  const french = (await f.call('GET', '/targeting_criteria', { query: { line_item_ids: li, lang: 'de' } })).json<{ data: Json[] }>().data
  t.match(french.find((c) => c.targeting_type === 'LANGUAGE'), { name: 'French', localized_name: 'Französisch' })
  t.notOk('localized_name' in (french.find((c) => c.targeting_type === 'GENDER') ?? {}), 'no localized name where none exists')
  res = await f.call('GET', `/targeting_criteria/${keyword.id}`)
  t.same(data(res), keyword)
  t.same(res.json<{ request: { params: Json } }>().request.params, { account_id: f.account.id, targeting_criterion_id: keyword.id })
  expectError(t, await f.call('GET', `/targeting_criteria/${keyword.id}`, { query: { lang: 'xx' } }), 400, 'INVALID_PARAMETER', 'lang')
  expectError(t, await f.call('GET', '/targeting_criteria/nosuch'), 404, 'TARGETING_CRITERION_NOT_FOUND', undefined)

  // Delete: soft, 404 afterwards unless with_deleted, a second delete is 404, a freed AGE slot can be reused.
  res = await f.call('DELETE', `/targeting_criteria/${age.id}`)
  t.match(data(res), { id: age.id, deleted: true, targeting_type: 'AGE' })
  expectError(t, await f.call('GET', `/targeting_criteria/${age.id}`), 404, 'TARGETING_CRITERION_NOT_FOUND', undefined)
  t.match(data(await f.call('GET', `/targeting_criteria/${age.id}`, { query: { with_deleted: 'true' } })), { deleted: true })
  expectError(t, await f.call('DELETE', `/targeting_criteria/${age.id}`), 404, 'TARGETING_CRITERION_NOT_FOUND', 'targeting_criterion_id')
  t.match(await create({ line_item_id: li, targeting_type: 'AGE', targeting_value: 'AGE_OVER_21' }), { targeting_value: 'AGE_OVER_21' })

  // A deleted line item takes no new criteria.
  const doomed = (await createLineItem(f, campaign.id as string)).id as string
  t.equal((await f.call('DELETE', `/line_items/${doomed}`)).status, 200)
  expectError(t, await post({ line_item_id: doomed, targeting_type: 'GENDER', targeting_value: '1' }), 400, 'INVALID_PARAMETER', 'line_item_id')

  // Another user's account is refused on every operation.
  const stranger = await createIdentity(f.rt.ctx.store)
  const as = (method: string, path: string, query?: Record<string, string>): Promise<TestResponse> =>
    oauth1Request(method, `${f.rt.baseUrl}/12/accounts/${f.account.id}${path}`, stranger, query ? { query } : {})
  expectError(t, await as('GET', '/targeting_criteria', { line_item_ids: li }), 403, 'ACCOUNT_NOT_FOUND', 'account_id')
  expectError(t, await as('GET', `/targeting_criteria/${keyword.id}`), 403, 'ACCOUNT_NOT_FOUND', 'account_id')
  expectError(t, await as('POST', '/targeting_criteria', { line_item_id: li, targeting_type: 'GENDER', targeting_value: '2' }), 403, 'ACCOUNT_NOT_FOUND', 'account_id')
  expectError(t, await as('DELETE', `/targeting_criteria/${keyword.id}`), 403, 'ACCOUNT_NOT_FOUND', 'account_id')
  // Nor can a line item of another account be targeted from one's own.
  const elsewhere = await createAdsIdentity(f.rt.ctx)
  const theirs = await oauth1Request('POST', `${f.rt.baseUrl}/12/accounts/${elsewhere.account.id}/targeting_criteria`, elsewhere.id, { query: { line_item_id: li, targeting_type: 'GENDER', targeting_value: '2' } })
  expectError(t, theirs, 400, 'INVALID_PARAMETER', 'line_item_id')
  t.match(data(await f.call('GET', `/targeting_criteria/${keyword.id}`)), { deleted: false }, 'nothing changed for the owner')
})

t.test('every targeting type with a typical value, and the list parameters', async (t) => {
  const f = await adsFixture(t)
  const campaign = await createCampaign(f)
  const li = (await createLineItem(f, campaign.id as string)).id as string
  const other = (await createLineItem(f, campaign.id as string)).id as string
  const user = f.id.user.id
  const values: Array<[string, string, string?]> = [
    ['BROAD_KEYWORD', 'coffee'], ['EXACT_KEYWORD', 'espresso'], ['PHRASE_KEYWORD', 'flat white'], ['UNORDERED_KEYWORD', 'cold brew'],
    ['FOLLOWERS_OF_USER', user], ['SIMILAR_TO_FOLLOWERS_OF_USER', user], ['USER_ENGAGEMENT', user], ['USER_ENGAGEMENT_LOOKALIKE', user],
    ['CAMPAIGN_ENGAGEMENT', campaign.id as string], ['CAMPAIGN_ENGAGEMENT_LOOKALIKE', campaign.id as string],
    ['INTEREST', '1001'], ['CONVERSATION', 'a1'], ['EVENT', '1ex'], ['LOCATION', '96683cc9126741d1'], ['TV_SHOW', '10026'], ['LIVE_TV_EVENT', 'lt1'],
    ['DEVICE', '1q'], ['PLATFORM', '0'], ['PLATFORM_VERSION', '2b'], ['NETWORK_OPERATOR', 'op1'], ['APP_STORE_CATEGORY', 'qouq'],
    ['APP_STORE_CATEGORY_LOOKALIKE', 'qov2'], ['APP_LIST', 'apps1', 'NE'], ['AGE', 'AGE_21_TO_34'], ['GENDER', '2'], ['LANGUAGE', 'en'],
    ['ENGAGEMENT_TYPE', 'ENGAGEMENT'], ['WIFI_ONLY', 'true'], ['NETWORK_ACTIVATION_DURATION', '12', 'LT']
  ]
  const ids: string[] = []
  for (const [type, value, operator] of values) {
    const res = await f.call('POST', '/targeting_criteria', { query: { line_item_id: li, targeting_type: type, targeting_value: value, ...(operator ? { operator_type: operator } : {}) } })
    t.equal(res.status, 200, `${type}=${value}: ${res.text.slice(0, 200)}`)
    ids.push(data(res).id as string)
  }
  const covered = new Set(values.map(([type]) => type))
  t.same(TARGETING_TYPE_NAMES.filter((type) => !covered.has(type) && !type.startsWith('CUSTOM_AUDIENCE')), [], 'every type but custom audiences (targeting-audiences.test.ts) was exercised')
  const onOther = data((await f.call('POST', '/targeting_criteria', { query: { line_item_id: other, targeting_type: 'GENDER', targeting_value: '1' } })))

  const list = (query: Record<string, string>): Promise<TestResponse> => f.call('GET', '/targeting_criteria', { query })
  expectError(t, await list({}), 400, 'MISSING_PARAMETER', 'line_item_ids')
  expectError(t, await list({ line_item_ids: Array.from({ length: 201 }, (_, i) => `l${i}`).join(',') }), 400, 'INVALID_PARAMETER', 'line_item_ids')
  expectError(t, await list({ line_item_ids: li, targeting_criterion_ids: 'ok,NOT OK' }), 400, 'INVALID_PARAMETER', 'targeting_criterion_ids')
  for (const count of ['0', '1001', 'many']) expectError(t, await list({ line_item_ids: li, count }), 400, 'INVALID_PARAMETER', 'count')
  expectError(t, await list({ line_item_ids: li, with_total_count: 'true', cursor: 'abc' }), 400, 'EXCLUSIVE_PARAMETERS', 'with_total_count')
  expectError(t, await list({ line_item_ids: li, cursor: 'not-a-cursor' }), 400, 'INVALID_PARAMETER', 'cursor')
  expectError(t, await list({ line_item_ids: li, sort_by: 'color-asc' }), 400, 'INVALID_PARAMETER', 'sort_by')

  let res = await list({ line_item_ids: li })
  // Creation order; entities created within one millisecond tie and come in id order (EntityRepo's index).
  const order = res.json<{ data: Json[] }>().data.map((c) => c.id as string)
  t.same([...order].sort(), [...ids].sort(), 'every criterion of the line item, none of the other')
  t.same(res.json<{ request: { params: Json } }>().request.params.line_item_ids, [li], 'a list parameter is echoed as an array, even with one item')
  res = await list({ line_item_ids: `${li},${other}`, with_total_count: 'true', count: '1' })
  t.equal(res.json<{ total_count: number }>().total_count, ids.length + 1)
  res = await list({ line_item_ids: `${li},${other}`, targeting_criterion_ids: `${ids[3]},${onOther.id}` })
  t.same(res.json<{ data: Json[] }>().data.map((c) => c.id), [ids[3], onOther.id])
  res = await list({ line_item_ids: li, sort_by: 'targeting_type-asc', count: '1000' })
  const types = res.json<{ data: Json[] }>().data.map((c) => c.targeting_type as string)
  t.same(types, [...types].sort(), 'sorted by targeting_type')

  // Pages of 7 walk every criterion once, in order; count=1000 is the largest page.
  const seen: string[] = []
  const sizes: number[] = []
  let cursor: string | null = null
  for (let i = 0; i < 20; i++) {
    const page = await list({ line_item_ids: li, count: '7', ...(cursor ? { cursor } : {}) })
    t.equal(page.status, 200)
    const b = page.json<{ data: Json[]; next_cursor: string | null }>()
    seen.push(...b.data.map((c) => c.id as string))
    sizes.push(b.data.length)
    cursor = b.next_cursor
    if (!cursor) break
  }
  t.same(seen, order, 'pages follow the list order')
  t.same(sizes, [7, 7, 7, 7, 1])

  // with_deleted brings deleted ones back.
  await f.call('DELETE', `/targeting_criteria/${ids[0]}`)
  t.equal((await list({ line_item_ids: li })).json<{ data: Json[] }>().data.length, ids.length - 1)
  const all = (await list({ line_item_ids: li, with_deleted: 'true' })).json<{ data: Json[] }>().data
  t.equal(all.length, ids.length)
  t.match(all.find((c) => c.id === ids[0]), { deleted: true })
})

t.test('batch endpoint: order, all or nothing, request and operation errors', async (t) => {
  const f = await adsFixture(t)
  const campaign = await createCampaign(f)
  const li = (await createLineItem(f, campaign.id as string)).id as string
  const url = `${f.rt.baseUrl}/12/batch/accounts/${f.account.id}/targeting_criteria`
  const batch = (json: unknown): Promise<TestResponse> => oauth1Request('POST', url, f.id, { json })
  const listed = async (): Promise<Json[]> => (await f.call('GET', '/targeting_criteria', { query: { line_item_ids: li, count: '1000' } })).json<{ data: Json[] }>().data
  const existing = data((await f.call('POST', '/targeting_criteria', { query: { line_item_id: li, targeting_type: 'BROAD_KEYWORD', targeting_value: 'old' } })))

  // Creates and a delete in one go, answered in order; a LOCATION earlier in the batch enables a TV_SHOW.
  let res = await batch([
    { operation_type: 'Create', params: { line_item_id: li, targeting_type: 'LOCATION', targeting_value: '5122804691e5fecc' } },
    { operation_type: 'Create', params: { line_item_id: li, targeting_type: 'TV_SHOW', targeting_value: '10026' } },
    { operation_type: 'Create', params: { line_item_id: li, targeting_type: 'GENDER', targeting_value: 1 } },
    { operation_type: 'Delete', params: { targeting_criterion_id: existing.id } }
  ])
  t.equal(res.status, 200, res.text.slice(0, 300))
  t.equal(res.headers.get('x-current-api-version'), '12')
  const ok = res.json<{ data: Json[]; data_type: string; request: Array<{ params: Json; operation_type: string }> }>()
  t.equal(ok.data_type, 'targeting_criterion')
  t.match(ok.data, [{ targeting_type: 'LOCATION', deleted: false }, { targeting_type: 'TV_SHOW' }, { targeting_type: 'GENDER', targeting_value: '1', name: 'Male' }, { id: existing.id, deleted: true }])
  t.same(ok.request[3], { params: { targeting_criterion_id: existing.id, account_id: f.account.id }, operation_type: 'Delete' })
  const types = async (): Promise<string[]> => (await listed()).map((c) => c.targeting_type as string).sort()
  t.same(await types(), ['GENDER', 'LOCATION', 'TV_SHOW'])

  // One bad operation fails the batch: nothing is written, errors are indexed like the input.
  res = await batch([
    { operation_type: 'Create', params: { line_item_id: li, targeting_type: 'BROAD_KEYWORD', targeting_value: 'fine' } },
    { operation_type: 'Create', params: { line_item_id: li, targeting_type: 'HOROSCOPE', targeting_value: 'leo' } },
    { operation_type: 'Create', params: { line_item_id: li, targeting_type: 'BROAD_KEYWORD', targeting_value: 'twice' } },
    { operation_type: 'Create', params: { line_item_id: li, targeting_type: 'BROAD_KEYWORD', targeting_value: 'TWICE' } },
    { operation_type: 'Delete', params: { targeting_criterion_id: existing.id } },
    { operation_type: 'Update', params: {} },
    { params: { line_item_id: li } },
    { operation_type: 'Create' },
    { operation_type: 'Create', params: { line_item_id: li, targeting_type: 'GENDER', targeting_value: '2', name: 'x' } },
    { operation_type: 'Create', params: { line_item_id: li, targeting_value: '2' } },
    { operation_type: 'Delete', params: {} },
    { operation_type: 'Create', params: [], extra: 1 },
    'Create'
  ])
  t.equal(res.status, 400)
  const failed = res.json<{ operation_errors: Array<Array<{ code: string; parameter?: string }>>; request: unknown[] }>()
  t.equal(failed.operation_errors.length, 13, 'one entry per operation')
  t.equal(failed.request.length, 13)
  const first = failed.operation_errors.map((errs) => errs.map((e) => `${e.code}:${e.parameter ?? ''}`))
  t.same(first, [
    [],
    ['INVALID_PARAMETER:params.targeting_type'],
    [],
    ['DUPLICATE:params.targeting_value'],
    ['TARGETING_CRITERION_NOT_FOUND:params.targeting_criterion_id'],
    ['INVALID_PARAMETER:operation_type'],
    ['MISSING_PARAMETER:operation_type'],
    ['MISSING_PARAMETER:params'],
    ['INVALID_PARAMETER:params.name'],
    ['MISSING_PARAMETER:params.targeting_type'],
    ['MISSING_PARAMETER:params.targeting_criterion_id'],
    ['INVALID_PARAMETER:extra', 'INVALID_PARAMETER:params'],
    ['INVALID_PARAMETER:operation']
  ])
  t.same(await types(), ['GENDER', 'LOCATION', 'TV_SHOW'], 'nothing was written')

  // Request-level errors answer under `errors`.
  const requestError = async (json: unknown, what: string): Promise<void> => {
    const r = await batch(json)
    t.equal(r.status, 400, what)
    t.match(adsError(r), { code: 'INVALID_PARAMETER', parameter: 'body' }, what)
    t.notOk('operation_errors' in r.json<Json>(), what)
  }
  await requestError({ operation_type: 'Create' }, 'not an array')
  await requestError([], 'empty')
  await requestError(Array.from({ length: 501 }, () => ({ operation_type: 'Create', params: { line_item_id: li, targeting_type: 'GENDER', targeting_value: '1' } })), '501 operations')
  res = await oauth1Request('POST', url, f.id, { form: { operation_type: 'Create' } })
  t.match(adsError(res), { status: 400, code: 'INVALID_PARAMETER', parameter: 'content-type' }, 'JSON only')

  // 500 operations is the largest batch.
  const many = Array.from({ length: 500 }, (_, i) => ({ operation_type: 'Create', params: { line_item_id: li, targeting_type: 'BROAD_KEYWORD', targeting_value: `kw${i}` } }))
  res = await batch(many)
  t.equal(res.status, 200)
  t.equal(res.json<{ data: Json[] }>().data.length, 500)
  t.equal((await listed()).length, 503)

  // Another user's account is refused before anything is looked at.
  const stranger = await createIdentity(f.rt.ctx.store)
  res = await oauth1Request('POST', url, stranger, { json: [{ operation_type: 'Delete', params: { targeting_criterion_id: existing.id } }] })
  expectError(t, res, 403, 'ACCOUNT_NOT_FOUND', 'account_id')
})
