import t from 'tap'
import type { Test } from 'tap'
import { grantFeatures } from '../../services/gateway/ads/accounts'
import { audienceMemberKeys, audienceMembers, canTarget } from '../../services/gateway/ads/audiences/audiences'
import { indexEntityChange } from '../../services/gateway/ads/audiences/targeted'
import { publishEntityChange } from '../../services/gateway/ads/entities'
import { MemoryStore } from '../../services/common/store/memory'
import type { Store, StoreOp } from '../../services/common/store/types'
import { caller, collectChanges, gatewayWithWorkers, type Json, sha256 } from '../support/fixtures/audiences'
import type { TestResponse } from '../support/http'
import { adsErrorOf } from '../support/problems'
import { createIdentity, startTestRuntime } from '../support/runtime'
import { eventually } from '../support/util'
import { createAdsIdentity } from '../support/fixtures/ads'

/**
 * Custom audiences, their sharing permissions (/5/ and /12/), targeted
 * campaigns, user uploads with real membership, and do-not-reach lists, over
 * HTTP with OAuth 1.0a against the embedded runtime.
 */

async function setup(t: Test, env: Record<string, string> = {}) {
  const rt = await startTestRuntime(t, { services: [gatewayWithWorkers], env })
  const owner = await createAdsIdentity(rt.ctx, { businessId: 'biz-1' })
  const call = caller(rt, owner.id)
  const changes = await collectChanges(t, rt)
  const acct = owner.account.id
  return { rt, owner, call, changes, acct }
}

const emails = (n: number, prefix = 'user'): string[] => Array.from({ length: n }, (_, i) => sha256(`${prefix}${i}@example.com`))

async function createAudience(call: ReturnType<typeof caller>, acct: string, name: string): Promise<Json> {
  const res = await call('POST', `12/accounts/${acct}/custom_audiences`, { query: { name } })
  if (res.status !== 200) throw new Error(`audience create failed: ${res.text}`)
  return res.json<{ data: Json }>().data
}

t.test('custom audiences: shape, list parameters, update, delete, ownership, entity changes', async (t) => {
  const { rt, owner, call, changes, acct } = await setup(t)
  let res = await call('POST', `12/accounts/${acct}/custom_audiences`, { query: { name: 'Developers', description: 'People who build' } })
  t.equal(res.status, 200)
  const a = res.json<{ data: Json; request: { params: Json } }>()
  t.same(a.request.params, { account_id: acct, name: 'Developers', description: 'People who build' })
  t.match(a.data, {
    id: /^[0-9a-z]+$/,
    name: 'Developers',
    description: 'People who build',
    audience_type: 'CRM',
    targetable: false,
    targetable_types: ['CRM', 'EXCLUDED_CRM'],
    reasons_not_targetable: ['PROCESSING', 'TOO_SMALL'],
    audience_size: null,
    permission_level: 'READ_WRITE',
    owner_account_id: acct,
    is_owner: true,
    partner_source: 'OTHER',
    deleted: false,
    created_at: String,
    updated_at: String
  })
  res = await call('POST', `12/accounts/${acct}/custom_audiences`, { query: { name: 'Developers' } })
  t.equal(res.status, 409, 'names are unique in an account')
  t.match(adsErrorOf(res), { code: 'DUPLICATE', parameter: 'name' })
  res = await call('POST', `12/accounts/${acct}/custom_audiences`)
  t.match(adsErrorOf(res), { code: 'MISSING_PARAMETER', parameter: 'name' })
  res = await call('POST', `12/accounts/${acct}/custom_audiences`, { query: { name: 'x'.repeat(256) } })
  t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER', parameter: 'name' })

  for (const name of ['Designers', 'Dentists', 'Writers', 'Welders']) await createAudience(call, acct, name)

  // Lists: count bounds, pages, filters.
  for (const count of ['0', '1001', 'ten']) {
    res = await call('GET', `12/accounts/${acct}/custom_audiences`, { query: { count } })
    t.equal(res.status, 400, `count=${count}`)
    t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER', parameter: 'count' })
  }
  res = await call('GET', `12/accounts/${acct}/custom_audiences`, { query: { count: '1000' } })
  t.equal(res.json<{ data: unknown[] }>().data.length, 5)
  const names: string[] = []
  const sizes: number[] = []
  let cursor: string | null = null
  do {
    const page: TestResponse = await call('GET', `12/accounts/${acct}/custom_audiences`, { query: { count: '2', ...(cursor ? { cursor } : {}) } })
    const body = page.json<{ data: Json[]; next_cursor: string | null }>()
    sizes.push(body.data.length)
    names.push(...body.data.map((x) => x.name as string))
    cursor = body.next_cursor
  } while (cursor && sizes.length < 10)
  t.same(sizes, [2, 2, 1])
  t.same(names, ['Developers', 'Designers', 'Dentists', 'Writers', 'Welders'])
  res = await call('GET', `12/accounts/${acct}/custom_audiences`, { query: { with_total_count: 'true', cursor: 'abc' } })
  t.match(adsErrorOf(res), { code: 'EXCLUSIVE_PARAMETERS' })
  res = await call('GET', `12/accounts/${acct}/custom_audiences`, { query: { with_total_count: 'true', count: '1' } })
  t.equal(res.json<{ total_count: number }>().total_count, 5)
  res = await call('GET', `12/accounts/${acct}/custom_audiences`, { query: { q: 'de' } })
  t.same(res.json<{ data: Json[] }>().data.map((x) => x.name), ['Developers', 'Designers', 'Dentists'], 'q is a case-insensitive name prefix')
  res = await call('GET', `12/accounts/${acct}/custom_audiences`, { query: { sort_by: 'name-asc' } })
  t.same(res.json<{ data: Json[] }>().data.map((x) => x.name), ['Dentists', 'Designers', 'Developers', 'Welders', 'Writers'])
  res = await call('GET', `12/accounts/${acct}/custom_audiences`, { query: { sort_by: 'size-asc' } })
  t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER', parameter: 'sort_by' })
  res = await call('GET', `12/accounts/${acct}/custom_audiences`, { query: { custom_audience_ids: a.data.id as string } })
  t.same(res.json<{ data: Json[] }>().data.map((x) => x.id), [a.data.id])
  res = await call('GET', `12/accounts/${acct}/custom_audiences`, { query: { custom_audience_ids: Array.from({ length: 201 }, (_, i) => `a${i}`).join(',') } })
  t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER', parameter: 'custom_audience_ids' })

  res = await call('PUT', `12/accounts/${acct}/custom_audiences/${a.data.id}`, { query: { name: 'Developers changed', description: '' } })
  t.match(res.json<{ data: Json }>().data, { name: 'Developers changed', description: null })
  res = await call('PUT', `12/accounts/${acct}/custom_audiences/${a.data.id}`, { query: { name: 'Designers' } })
  t.equal(res.status, 409)
  res = await call('PUT', `12/accounts/${acct}/custom_audiences/${a.data.id}`)
  t.match(adsErrorOf(res), { code: 'MISSING_PARAMETER' })

  res = await call('DELETE', `12/accounts/${acct}/custom_audiences/${a.data.id}`)
  t.match(res.json<{ data: Json }>().data, { id: a.data.id, deleted: true })
  res = await call('GET', `12/accounts/${acct}/custom_audiences/${a.data.id}`)
  t.equal(res.status, 404)
  t.match(adsErrorOf(res), { code: 'CUSTOM_AUDIENCE_NOT_FOUND' })
  res = await call('GET', `12/accounts/${acct}/custom_audiences/${a.data.id}`, { query: { with_deleted: 'true' } })
  t.match(res.json<{ data: Json }>().data, { deleted: true })
  res = await call('GET', `12/accounts/${acct}/custom_audiences`)
  t.equal(res.json<{ data: unknown[] }>().data.length, 4, 'deleted ones are left out')
  res = await call('GET', `12/accounts/${acct}/custom_audiences`, { query: { with_deleted: 'true' } })
  t.equal(res.json<{ data: unknown[] }>().data.length, 5)
  res = await call('DELETE', `12/accounts/${acct}/custom_audiences/${a.data.id}`)
  t.equal(res.status, 404, 'a second delete is 404')

  const stranger = await createAdsIdentity(rt.ctx)
  res = await call('GET', `12/accounts/${acct}/custom_audiences`, { as: stranger.id })
  t.equal(res.status, 403)
  t.match(adsErrorOf(res), { code: 'ACCOUNT_NOT_FOUND' })
  res = await call('POST', `12/accounts/${acct}/custom_audiences`, { query: { name: 'Intruders' }, as: stranger.id })
  t.equal(res.status, 403)
  t.ok(owner)

  const mine = await eventually(() => {
    const l = changes.filter((c) => c.entity_type === 'CUSTOM_AUDIENCE' && c.entity_id === a.data.id)
    return l.length >= 3 ? l : undefined
  })
  t.same(mine.map((c) => c.change_type), ['CREATE', 'UPDATE', 'DELETE'])
  t.equal(mine[0]?.account_id, acct)
  t.match(mine[1]?.changes, { name: { old: 'Developers', new: 'Developers changed' }, description: { old: 'People who build', new: null } })
})

t.test('custom audience user uploads: batch semantics, validation by index, real membership', async (t) => {
  const { rt, call, acct, changes } = await setup(t)
  const audience = await createAudience(call, acct, 'Crm list')
  const path = `12/accounts/${acct}/custom_audiences/${audience.id}/users`
  const read = async (): Promise<Json> => (await call('GET', `12/accounts/${acct}/custom_audiences/${audience.id}`)).json<{ data: Json }>().data

  const many = emails(150)
  let res = await call('POST', path, {
    json: [
      { operation_type: 'Update', params: { users: many.slice(0, 100).map((e) => ({ email: [e] })) } },
      { operation_type: 'Update', params: { effective_at: '2020-01-01T00:00:00Z', expires_at: '2099-01-01T00:00:00Z', users: many.slice(100).map((e, i) => ({ email: [e], partner_user_id: [`crm-${i}`] })) } }
    ]
  })
  t.equal(res.status, 200, 'upload accepted')
  const ok = res.json<{ data: Json; request: { params: Json } }>()
  t.same(ok.data, { success_count: 150, total_count: 150 }, 'success_count == total_count == records sent')
  t.same(ok.request.params, { account_id: acct, custom_audience_id: audience.id })
  t.equal(res.headers.get('x-rate-limit-limit'), '1500')
  t.match(await read(), { audience_size: 150, targetable: true, reasons_not_targetable: [] })

  // The same people again (one with a second identifier) do not grow the audience.
  res = await call('POST', path, { json: [{ operation_type: 'Update', params: { users: [{ email: [many[0]], handle: [sha256('dev0')] }] } }] })
  t.same(res.json<{ data: Json }>().data, { success_count: 1, total_count: 1 })
  t.equal((await read()).audience_size, 150)
  // Deleting by the other identifier removes that person.
  res = await call('POST', path, { json: [{ operation_type: 'Delete', params: { users: [{ handle: [sha256('dev0')] }] } }] })
  t.same(res.json<{ data: Json }>().data, { success_count: 1, total_count: 1 })
  t.equal((await read()).audience_size, 149)
  res = await call('POST', path, { json: [{ operation_type: 'Delete', params: { users: many.slice(1, 60).map((e) => ({ email: [e] })) } }] })
  t.same(res.json<{ data: Json }>().data, { success_count: 59, total_count: 59 })
  t.match(await read(), { audience_size: 90, targetable: false, reasons_not_targetable: ['TOO_SMALL'] })
  // partner_user_id is plain text and identifies the person too.
  await call('POST', path, { json: [{ operation_type: 'Delete', params: { users: [{ partner_user_id: ['crm-0'] }] } }] })
  t.equal((await read()).audience_size, 89)

  // Item-level errors: indexed like the input, nothing applied.
  const bad = [
    { operation_type: 'Update', params: { users: [{ email: [sha256('fine@example.com')] }] } },
    { params: { users: [{ email: [sha256('x')] }] } },
    { operation_type: 'Upsert', params: { users: [{ email: [sha256('x')] }] } },
    { operation_type: 'Update' },
    { operation_type: 'Update', params: {} },
    { operation_type: 'Update', params: { users: [] } },
    { operation_type: 'Update', params: { users: [{ email: ['not-hashed@example.com'] }] } },
    { operation_type: 'Update', params: { users: [{ email: [sha256('x').toUpperCase()] }] } },
    { operation_type: 'Update', params: { users: [{ fax: [sha256('x')] }] } },
    { operation_type: 'Update', params: { effective_at: 'yesterday', users: [{ email: [sha256('x')] }] } },
    { operation_type: 'Update', params: { effective_at: '2030-01-02T00:00:00Z', expires_at: '2030-01-01T00:00:00Z', users: [{ email: [sha256('x')] }] } },
    { operation_type: 'Update', params: { effective_at: '2030-01-01T00:00:00Z', expires_at: '2030-01-01T00:00:00Z', users: [{ email: [sha256('x')] }] } },
    { operation_type: 'Update', params: { users: [{ email: 'single' }] } },
    'not an object',
    // Inherited member names are not identifier types (the accepted keys are looked up as own entries only).
    { operation_type: 'Update', params: { users: [{ constructor: [sha256('x')] }] } },
    { operation_type: 'Update', params: { users: [{ toString: [sha256('x')] }] } },
    { operation_type: 'Update', params: { users: [{ hasOwnProperty: [sha256('x')] }] } },
    // Dates that do not exist are refused, not rolled over (2030-02-31 would be March 3).
    { operation_type: 'Update', params: { expires_at: '2030-02-31T00:00:00Z', users: [{ email: [sha256('x')] }] } },
    { operation_type: 'Update', params: { effective_at: '2030-02-30', users: [{ email: [sha256('x')] }] } },
    { operation_type: 'Update', params: { effective_at: '2030-01-01T24:00:00Z', users: [{ email: [sha256('x')] }] } }
  ]
  const expected: Array<[string, string] | null> = [
    null,
    ['operation_type', 'MISSING_PARAMETER'],
    ['operation_type', 'INVALID_PARAMETER'],
    ['params', 'MISSING_PARAMETER'],
    ['params.users', 'MISSING_PARAMETER'],
    ['params.users', 'INVALID_PARAMETER'],
    ['params.users[0].email[0]', 'INVALID_PARAMETER'],
    ['params.users[0].email[0]', 'INVALID_PARAMETER'],
    ['params.users[0].fax', 'INVALID_PARAMETER'],
    ['params.effective_at', 'INVALID_PARAMETER'],
    ['params.expires_at', 'INVALID_PARAMETER'],
    ['params.expires_at', 'INVALID_PARAMETER'],
    ['params.users[0].email', 'INVALID_PARAMETER'],
    ['operation', 'INVALID_PARAMETER'],
    ['params.users[0].constructor', 'INVALID_PARAMETER'],
    ['params.users[0].toString', 'INVALID_PARAMETER'],
    ['params.users[0].hasOwnProperty', 'INVALID_PARAMETER'],
    ['params.expires_at', 'INVALID_PARAMETER'],
    ['params.effective_at', 'INVALID_PARAMETER'],
    ['params.effective_at', 'INVALID_PARAMETER']
  ]
  res = await call('POST', path, { json: bad })
  t.equal(res.status, 400)
  const errBody = res.json<{ operation_errors: Array<Array<{ code: string; parameter: string; message: string }>>; request: Json }>()
  t.equal(errBody.operation_errors.length, bad.length, 'one entry per input operation')
  for (const [i, e] of expected.entries()) {
    const got = errBody.operation_errors[i] ?? []
    if (e === null) t.same(got, [], `operation ${i} is fine`)
    else t.ok(got.some((x) => x.parameter === e[0] && x.code === e[1]), `operation ${i}: ${e[0]} ${e[1]} in ${JSON.stringify(got)}`)
  }
  t.equal((await read()).audience_size, 89, 'all or nothing: the valid operation was not applied')

  // A "__proto__" identifier never reaches the validator: the JSON parser refuses the body (400, not 500).
  res = await call('POST', path, { body: `[{"operation_type":"Update","params":{"users":[{"__proto__":["${sha256('x')}"]}]}}]` })
  t.equal(res.status, 400)
  t.equal((await read()).audience_size, 89, 'nothing stored under an inherited name')

  // Request-level errors under `errors`.
  res = await call('POST', path, { json: Array.from({ length: 2501 }, () => ({ operation_type: 'Update', params: { users: [{ email: [many[0]] }] } })) })
  t.equal(res.status, 400)
  t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER', message: /at most 2500/ })
  res = await call('POST', path, { json: Array.from({ length: 2500 }, (_, i) => ({ operation_type: 'Update', params: { users: [{ email: [sha256(`batch${i}`)] }] } })) })
  t.same(res.json<{ data: Json }>().data, { success_count: 2500, total_count: 2500 }, '2500 operations are accepted')
  res = await call('POST', path, { json: { operation_type: 'Update' } })
  t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER', parameter: 'body' })
  res = await call('POST', path, { json: [] })
  t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER' })
  res = await call('POST', path, { body: `[${' '.repeat(5_000_001)}]` })
  t.equal(res.status, 413, 'a body over 5,000,000 bytes')
  t.match(adsErrorOf(res), { code: 'PAYLOAD_TOO_LARGE' })
  res = await call('POST', path, { body: 'operation_type=Update', contentType: 'application/x-www-form-urlencoded' })
  t.equal(res.status, 400)
  t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER' })
  const sizeBefore = (await read()).audience_size
  const stranger = await createAdsIdentity(rt.ctx)
  res = await call('POST', path, { json: [{ operation_type: 'Update', params: { users: [{ email: [sha256('in@example.com')] }] } }], as: stranger.id })
  t.equal(res.status, 403, "another user's account is refused")
  t.match(adsErrorOf(res), { code: 'ACCOUNT_NOT_FOUND' })
  res = await caller(rt, stranger.id)('POST', `12/accounts/${stranger.account.id}/custom_audiences/${audience.id}/users`, { json: [{ operation_type: 'Update', params: { users: [{ email: [sha256('in@example.com')] }] } }] })
  t.equal(res.status, 404, "another account's audience is not found from the caller's own account")
  t.equal((await read()).audience_size, sizeBefore, 'neither call changed the audience')

  // Effective windows, with the clock injected (Membership.summary(now)) rather than waited for:
  // a future member does not count yet; an expiring one stops counting.
  const fresh = await createAudience(call, acct, 'Windows')
  const later = Date.now() + 3_600_000
  res = await call('POST', `12/accounts/${acct}/custom_audiences/${fresh.id}/users`, {
    json: [
      { operation_type: 'Update', params: { effective_at: new Date(later).toISOString(), users: [{ email: [sha256('later@example.com')] }] } },
      { operation_type: 'Update', params: { expires_at: new Date(later).toISOString(), users: [{ email: [sha256('brief@example.com')] }, { email: [sha256('brief2@example.com')] }] } }
    ]
  })
  t.same(res.json<{ data: Json }>().data, { success_count: 3, total_count: 3 })
  t.equal((await call('GET', `12/accounts/${acct}/custom_audiences/${fresh.id}`)).json<{ data: Json }>().data.audience_size, 2, 'only the members in effect')
  const windows = audienceMembers(rt.ctx, fresh.id as string)
  t.same(await windows.summary(later - 1), { size: 2, uploads: 1 }, 'just before `later`: still the two brief members')
  t.same(await windows.summary(later), { size: 1, uploads: 1 }, 'at `later`: the future member counts, the expired ones are gone')

  // The audience estimate's view of the members: registered users are recognised by their svc_id hash.
  const estimate = await createAudience(call, acct, 'Estimate')
  const person = await createIdentity(rt.ctx.store)
  await call('POST', `12/accounts/${acct}/custom_audiences/${estimate.id}/users`, { json: [{ operation_type: 'Update', params: { users: [{ svc_id: [sha256(person.user.id)] }, { email: [sha256('someone@example.com')] }] } }] })
  const keys = await audienceMemberKeys(rt.ctx, acct, estimate.id as string)
  t.ok(keys?.has(person.user.id))
  t.equal(keys?.size, 2)

  const sizeChange = await eventually(() => changes.find((c) => c.entity_type === 'CUSTOM_AUDIENCE' && c.entity_id === audience.id && c.changes.audience_size !== undefined))
  t.same(sizeChange.changes.audience_size, { old: null, new: 150 })
})

t.test('user uploads are rate limited (custom-audience-users family)', async (t) => {
  const { call, acct } = await setup(t, { RATE_LIMITS: 'custom-audience-users=2/1m' })
  const audience = await createAudience(call, acct, 'Limited')
  const body = [{ operation_type: 'Update', params: { users: [{ email: [sha256('a')] }] } }]
  const path = `12/accounts/${acct}/custom_audiences/${audience.id}/users`
  t.equal((await call('POST', path, { json: body })).status, 200)
  const second = await call('POST', path, { json: body })
  t.equal(second.headers.get('x-rate-limit-remaining'), '0')
  const third = await call('POST', path, { json: body })
  t.equal(third.status, 429)
  t.match(adsErrorOf(third), { code: 'TOO_MANY_REQUESTS' })
  t.match(third.headers.get('x-rate-limit-reset'), /^[0-9]+$/)
})

t.test('permissions: owner-only, business rule, filters, revocation blocks new targeting', async (t) => {
  const { rt, owner, call, acct, changes } = await setup(t)
  const audience = await createAudience(call, acct, 'Shared list')
  const id = audience.id as string
  const partner = await createAdsIdentity(rt.ctx, { businessId: 'biz-1' })
  const outsider = await createAdsIdentity(rt.ctx, { businessId: 'biz-2' })
  const third = await createAdsIdentity(rt.ctx, { businessId: 'biz-1' })
  const base = `5/accounts/${acct}/tailored_audiences/${id}/permissions`

  t.notOk(await canTarget(rt.ctx, partner.account.id, id), 'no grant yet')
  let res = await call('POST', base, { query: { granted_account_id: partner.account.id, permission_level: 'READ_ONLY' } })
  t.equal(res.status, 200)
  const grant = res.json<{ data: Json; request: { params: Json } }>()
  t.match(grant.data, { id: /^[0-9a-z]+$/, tailored_audience_id: id, granted_account_id: partner.account.id, permission_level: 'READ_ONLY', deleted: false, created_at: String, updated_at: String })
  t.same(grant.request.params, { account_id: acct, tailored_audience_id: id, granted_account_id: partner.account.id, permission_level: 'READ_ONLY' })
  t.ok(await canTarget(rt.ctx, partner.account.id, id))
  t.ok(await canTarget(rt.ctx, acct, id), 'the owner can target its own audience')

  res = await call('POST', base, { query: { granted_account_id: partner.account.id, permission_level: 'READ_WRITE' } })
  t.equal(res.status, 409, 'one live grant per account')
  res = await call('POST', base, { query: { permission_level: 'READ_ONLY' } })
  t.match(adsErrorOf(res), { code: 'MISSING_PARAMETER', parameter: 'granted_account_id' })
  res = await call('POST', base, { query: { granted_account_id: third.account.id } })
  t.match(adsErrorOf(res), { code: 'MISSING_PARAMETER', parameter: 'permission_level' })
  res = await call('POST', base, { query: { granted_account_id: third.account.id, permission_level: 'OWNER' } })
  t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER', parameter: 'permission_level' })
  res = await call('POST', base, { query: { granted_account_id: 'nosuchacct', permission_level: 'READ_ONLY' } })
  t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER', parameter: 'granted_account_id' })
  res = await call('POST', base, { query: { granted_account_id: acct, permission_level: 'READ_ONLY' } })
  t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER', parameter: 'granted_account_id' })
  res = await call('POST', base, { query: { granted_account_id: outsider.account.id, permission_level: 'READ_ONLY' } })
  t.equal(res.status, 403, 'outside the business without the feature')
  t.match(adsErrorOf(res), { code: 'ACTION_NOT_ALLOWED', parameter: 'granted_account_id' })
  await grantFeatures(rt.ctx, acct, ['SHARE_AUDIENCE_OUTSIDE_BUSINESS'])
  res = await call('POST', base, { query: { granted_account_id: outsider.account.id, permission_level: 'READ_WRITE' } })
  t.equal(res.status, 200, 'allowed with SHARE_AUDIENCE_OUTSIDE_BUSINESS')
  const outsiderGrant = res.json<{ data: Json }>().data

  // The grantee sees the audience, but is not its owner.
  const partnerCall = caller(rt, partner.id)
  res = await partnerCall('GET', `12/accounts/${partner.account.id}/custom_audiences/${id}`)
  t.match(res.json<{ data: Json }>().data, { id, is_owner: false, permission_level: 'READ_ONLY', owner_account_id: acct })
  res = await partnerCall('GET', `12/accounts/${partner.account.id}/custom_audiences`, { query: { permission_scope: 'SHARED' } })
  t.same(res.json<{ data: Json[] }>().data.map((x) => x.id), [id])
  res = await partnerCall('GET', `12/accounts/${partner.account.id}/custom_audiences`)
  t.same(res.json<{ data: Json[] }>().data, [], 'OWNER scope by default')
  res = await partnerCall('POST', `5/accounts/${partner.account.id}/tailored_audiences/${id}/permissions`, { query: { granted_account_id: third.account.id, permission_level: 'READ_ONLY' } })
  t.equal(res.status, 403, 'only the owner manages permissions')
  t.match(adsErrorOf(res), { code: 'ACTION_NOT_ALLOWED' })
  res = await partnerCall('POST', `12/accounts/${partner.account.id}/custom_audiences/${id}/users`, { json: [{ operation_type: 'Update', params: { users: [{ email: [sha256('p')] }] } }] })
  t.equal(res.status, 403, 'READ_ONLY cannot upload')
  res = await partnerCall('DELETE', `12/accounts/${partner.account.id}/custom_audiences/${id}`)
  t.equal(res.status, 403, 'a grantee cannot delete the audience')
  const outsiderCall = caller(rt, outsider.id)
  res = await outsiderCall('POST', `12/accounts/${outsider.account.id}/custom_audiences/${id}/users`, { json: [{ operation_type: 'Update', params: { users: [{ email: [sha256('o')] }] } }] })
  t.equal(res.status, 200, 'READ_WRITE can upload')

  // Lists and their filters.
  res = await call('GET', base)
  t.equal(res.json<{ data: unknown[] }>().data.length, 2)
  res = await call('GET', base, { query: { count: '1' } })
  const firstPage = res.json<{ data: Json[]; next_cursor: string }>()
  t.equal(firstPage.data.length, 1)
  res = await call('GET', base, { query: { count: '1', cursor: firstPage.next_cursor } })
  t.equal(res.json<{ data: Json[]; next_cursor: unknown }>().next_cursor, null)
  for (const count of ['0', '1001']) t.match(adsErrorOf(await call('GET', base, { query: { count } })), { code: 'INVALID_PARAMETER', parameter: 'count' })
  res = await call('GET', base, { query: { granted_account_ids: outsider.account.id } })
  t.same(res.json<{ data: Json[] }>().data.map((x) => x.id), [outsiderGrant.id])
  res = await call('GET', base, { query: { tailored_audience_permission_ids: grant.data.id as string } })
  t.same(res.json<{ data: Json[] }>().data.map((x) => x.granted_account_id), [partner.account.id])
  res = await call('GET', base, { query: { granted_account_ids: Array.from({ length: 201 }, (_, i) => `a${i}`).join(',') } })
  t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER', parameter: 'granted_account_ids' })
  res = await call('GET', base, { query: { tailored_audience_permission_ids: Array.from({ length: 201 }, (_, i) => `a${i}`).join(',') } })
  t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER', parameter: 'tailored_audience_permission_ids' })
  res = await call('GET', base, { query: { granted_account_ids: Array.from({ length: 200 }, (_, i) => `a${i}`).join(',') } })
  t.equal(res.status, 200, '200 ids are accepted')
  res = await call('GET', base, { query: { with_total_count: 'true' } })
  t.equal(res.json<{ total_count: number }>().total_count, 2)
  res = await partnerCall('GET', `5/accounts/${partner.account.id}/tailored_audiences/${id}/permissions`)
  t.equal(res.status, 403, 'a grantee cannot list the permissions')
  res = await call('GET', `5/accounts/${acct}/tailored_audiences/zzzzzz/permissions`)
  t.equal(res.status, 404)
  t.match(adsErrorOf(res), { code: 'TAILORED_AUDIENCE_NOT_FOUND' })

  // The /12/ spelling of the same resource.
  res = await call('GET', `12/accounts/${acct}/custom_audiences/${id}/permissions`)
  t.ok(res.json<{ data: Json[] }>().data.every((x) => x.custom_audience_id === id && !('tailored_audience_id' in x)))

  // Revocation.
  res = await call('DELETE', `${base}/${grant.data.id}`)
  t.match(res.json<{ data: Json }>().data, { id: grant.data.id, deleted: true })
  t.notOk(await canTarget(rt.ctx, partner.account.id, id), 'a revoked grant blocks new targeting')
  res = await partnerCall('GET', `12/accounts/${partner.account.id}/custom_audiences/${id}`)
  t.equal(res.status, 404)
  res = await call('DELETE', `${base}/${grant.data.id}`)
  t.equal(res.status, 404, 'deleting twice')
  res = await call('GET', base)
  t.equal(res.json<{ data: unknown[] }>().data.length, 1)
  res = await call('GET', base, { query: { with_deleted: 'true' } })
  t.equal(res.json<{ data: unknown[] }>().data.length, 2)
  // Re-sharing after a revocation is a new grant.
  res = await call('POST', base, { query: { granted_account_id: partner.account.id, permission_level: 'READ_WRITE' } })
  t.equal(res.status, 200)
  t.ok(await canTarget(rt.ctx, partner.account.id, id))

  const stranger = await createAdsIdentity(rt.ctx)
  res = await call('GET', base, { as: stranger.id })
  t.match(adsErrorOf(res), { code: 'ACCOUNT_NOT_FOUND' })
  t.ok(owner)

  const permChanges = await eventually(() => {
    const l = changes.filter((c) => c.entity_type === 'TAILORED_AUDIENCE_PERMISSION' && c.entity_id === grant.data.id)
    return l.length === 2 ? l : undefined
  })
  t.same(permChanges.map((c) => c.change_type), ['CREATE', 'DELETE'])
})

t.test('targeted: campaigns and line items targeting an audience, from entity changes', async (t) => {
  const { rt, owner, call, acct } = await setup(t)
  const audience = await createAudience(call, acct, 'Targeted list')
  const id = audience.id as string
  const actor = { user_id: owner.id.user.id, platform: 'API' }
  const change = (entity_type: string, entity_id: string, data: Json, change_type: 'CREATE' | 'UPDATE' | 'DELETE' = 'CREATE', account = acct) =>
    publishEntityChange(rt.ctx, { account_id: account, entity_type, entity_id, change_type, changed_by: actor, changes: {}, entity_data: { id: entity_id, ...data } })
  await change('CAMPAIGN', 'camp1', { name: 'Spring', entity_status: 'ACTIVE' })
  await change('CAMPAIGN', 'camp2', { name: 'Summer', entity_status: 'PAUSED' })
  await change('LINE_ITEM', 'li1', { name: 'Main', campaign_id: 'camp1', entity_status: 'ACTIVE' })
  await change('LINE_ITEM', 'li2', { name: null, campaign_id: 'camp1', entity_status: 'PAUSED' })
  await change('LINE_ITEM', 'li3', { name: 'Summer li', campaign_id: 'camp2', entity_status: 'ACTIVE' })
  await change('LINE_ITEM', 'li4', { name: 'Untargeted', campaign_id: 'camp1', entity_status: 'ACTIVE' })
  await change('TARGETING_CRITERIA', 'tc1', { line_item_id: 'li1', targeting_type: 'CUSTOM_AUDIENCE', targeting_value: id })
  await change('TARGETING_CRITERIA', 'tc2', { line_item_id: 'li2', targeting_type: 'CUSTOM_AUDIENCE_EXPANDED', targeting_value: id })
  await change('TARGETING_CRITERIA', 'tc3', { line_item_id: 'li3', targeting_type: 'EXCLUDED_CUSTOM_AUDIENCE', targeting_value: id })
  await change('TARGETING_CRITERIA', 'tc4', { line_item_id: 'li4', targeting_type: 'LOCATION', targeting_value: id })
  // Another account's line item naming the same audience is not this account's business.
  await change('LINE_ITEM', 'li9', { name: 'Theirs', campaign_id: 'camp9', entity_status: 'ACTIVE' }, 'CREATE', 'otheracct')
  await change('TARGETING_CRITERIA', 'tc9', { line_item_id: 'li9', targeting_type: 'CUSTOM_AUDIENCE', targeting_value: id }, 'CREATE', 'otheracct')

  const path = `12/accounts/${acct}/custom_audiences/${id}/targeted`
  const active = await eventually(async () => {
    const res = await call('GET', path)
    const data = res.json<{ data: Json[] }>().data
    return data.length === 1 ? res.json<{ data: Json[]; next_cursor: unknown; request: { params: Json } }>() : undefined
  })
  t.same(active.data, [{ campaign_id: 'camp1', campaign_name: 'Spring', line_items: [{ id: 'li1', name: 'Main', servable: true }] }])
  t.equal(active.next_cursor, null)
  t.same(active.request.params, { account_id: acct, custom_audience_id: id })

  const all = await eventually(async () => {
    const data = (await call('GET', path, { query: { with_active: 'false' } })).json<{ data: Json[] }>().data
    return data.length === 2 ? data : undefined
  })
  t.same(all, [
    { campaign_id: 'camp1', campaign_name: 'Spring', line_items: [{ id: 'li1', name: 'Main', servable: true }, { id: 'li2', name: null, servable: false }] },
    { campaign_id: 'camp2', campaign_name: 'Summer', line_items: [{ id: 'li3', name: 'Summer li', servable: false }] }
  ])

  // Removing the criterion removes the line item; pausing the campaign makes it unservable.
  await change('TARGETING_CRITERIA', 'tc1', { line_item_id: 'li1', targeting_type: 'CUSTOM_AUDIENCE', targeting_value: id, deleted: true }, 'DELETE')
  await eventually(async () => (await call('GET', path)).json<{ data: Json[] }>().data.length === 0)
  t.pass('a deleted targeting criterion no longer counts')

  let res = await call('GET', path, { query: { with_active: 'maybe' } })
  t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER', parameter: 'with_active' })
  res = await call('GET', path, { query: { cursor: 'bogus' } })
  t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER', parameter: 'cursor' })
  res = await call('GET', `12/accounts/${acct}/custom_audiences/nosuch/targeted`)
  t.equal(res.status, 404)
  const stranger = await createAdsIdentity(rt.ctx)
  res = await call('GET', path, { as: stranger.id })
  t.equal(res.status, 403, "another user's account is refused")
  t.match(adsErrorOf(res), { code: 'ACCOUNT_NOT_FOUND' })
  res = await call('GET', `12/accounts/${stranger.account.id}/custom_audiences/${id}/targeted`, { as: stranger.id })
  t.equal(res.status, 404, "another account's audience is not found")
})

t.test('targeted: pages of 200 campaigns resume by campaign id, whatever was removed in between', async (t) => {
  const { rt, owner, call, acct } = await setup(t)
  const audience = await createAudience(call, acct, 'Many campaigns')
  const id = audience.id as string
  const actor = { user_id: owner.id.user.id, platform: 'API' }
  const index = (entity_type: string, entity_id: string, data: Json, change_type: 'CREATE' | 'DELETE' = 'CREATE') =>
    indexEntityChange(rt.ctx, { change_id: entity_id, changed_at: new Date().toISOString(), account_id: acct, entity_type, entity_id, change_type, changed_by: actor, changes: {}, entity_data: { id: entity_id, ...data } })
  const campaignIds = Array.from({ length: 203 }, (_, i) => `c${String(i).padStart(3, '0')}`)
  for (const c of campaignIds) {
    await index('CAMPAIGN', c, { name: c, entity_status: 'ACTIVE' })
    await index('LINE_ITEM', `l${c}`, { name: c, campaign_id: c, entity_status: 'ACTIVE' })
    await index('TARGETING_CRITERIA', `t${c}`, { line_item_id: `l${c}`, targeting_type: 'CUSTOM_AUDIENCE', targeting_value: id })
  }
  const path = `12/accounts/${acct}/custom_audiences/${id}/targeted`
  type Body = { data: Array<{ campaign_id: string }>; next_cursor: string | null }
  const first = (await call('GET', path)).json<Body>()
  t.equal(first.data.length, 200, 'a page holds 200 campaigns')
  t.same(first.data.map((e) => e.campaign_id), campaignIds.slice(0, 200))
  t.type(first.next_cursor, 'string')
  // Two campaigns of the first page stop targeting the audience before the next page is read.
  await index('TARGETING_CRITERIA', 'tc000', { line_item_id: 'lc000', targeting_type: 'CUSTOM_AUDIENCE', targeting_value: id }, 'DELETE')
  await index('TARGETING_CRITERIA', 'tc199', { line_item_id: 'lc199', targeting_type: 'CUSTOM_AUDIENCE', targeting_value: id }, 'DELETE')
  const second = (await call('GET', path, { query: { cursor: first.next_cursor as string } })).json<Body>()
  t.same(second.data.map((e) => e.campaign_id), campaignIds.slice(200), 'nothing skipped, nothing repeated')
  t.equal(second.next_cursor, null)
  for (const forged of [Buffer.from('c200').toString('base64url'), Buffer.from('c:no such/id').toString('base64url'), '!!']) {
    t.match(adsErrorOf(await call('GET', path, { query: { cursor: forged } })), { code: 'INVALID_PARAMETER', parameter: 'cursor' })
  }
})

t.test('lists resume by keyset: a deletion between pages skips and repeats nothing', async (t) => {
  const { rt, call, acct } = await setup(t)
  const audiences: Json[] = []
  for (const name of ['k1', 'k2', 'k3', 'k4']) audiences.push(await createAudience(call, acct, name))
  const names = (res: TestResponse): unknown[] => res.json<{ data: Json[] }>().data.map((x) => x.name)
  let res = await call('GET', `12/accounts/${acct}/custom_audiences`, { query: { count: '2' } })
  t.same(names(res), ['k1', 'k2'])
  const cursor = res.json<{ next_cursor: string }>().next_cursor
  await call('DELETE', `12/accounts/${acct}/custom_audiences/${audiences[1]?.id}`)
  res = await call('GET', `12/accounts/${acct}/custom_audiences`, { query: { count: '2', cursor } })
  t.same(names(res), ['k3', 'k4'], 'custom audiences')

  // Shared audiences: the grantee's page anchor is revoked, the next page still starts after it.
  const partner = await createAdsIdentity(rt.ctx, { businessId: 'biz-1' })
  const grants: string[] = []
  for (const a of [audiences[0], audiences[2], audiences[3]]) {
    res = await call('POST', `12/accounts/${acct}/custom_audiences/${a?.id}/permissions`, { query: { granted_account_id: partner.account.id, permission_level: 'READ_ONLY' } })
    t.equal(res.status, 200)
    grants.push(res.json<{ data: Json }>().data.id as string)
  }
  const partnerCall = caller(rt, partner.id)
  res = await partnerCall('GET', `12/accounts/${partner.account.id}/custom_audiences`, { query: { permission_scope: 'SHARED', count: '1' } })
  const shared = res.json<{ data: Json[]; next_cursor: string }>()
  t.equal(shared.data.length, 1)
  const firstShared = shared.data[0]?.id
  const grantOfFirst = grants[[audiences[0], audiences[2], audiences[3]].findIndex((a) => a?.id === firstShared)]
  await call('DELETE', `12/accounts/${acct}/custom_audiences/${firstShared}/permissions/${grantOfFirst}`)
  res = await partnerCall('GET', `12/accounts/${partner.account.id}/custom_audiences`, { query: { permission_scope: 'SHARED', count: '5', cursor: shared.next_cursor } })
  const rest = res.json<{ data: Json[] }>().data.map((x) => x.id)
  t.equal(rest.length, 2, 'the two other shared audiences, none skipped')
  t.notOk(rest.includes(firstShared))

  // Permissions of one audience.
  const target = (await createAudience(call, acct, 'k5')).id as string
  const base = `5/accounts/${acct}/tailored_audiences/${target}/permissions`
  const more = [await createAdsIdentity(rt.ctx, { businessId: 'biz-1' }), await createAdsIdentity(rt.ctx, { businessId: 'biz-1' })]
  for (const m of [partner, ...more]) t.equal((await call('POST', base, { query: { granted_account_id: m.account.id, permission_level: 'READ_WRITE' } })).status, 200)
  res = await call('GET', base, { query: { count: '1' } })
  const p1 = res.json<{ data: Json[]; next_cursor: string }>()
  t.equal(p1.data[0]?.granted_account_id, partner.account.id)
  await call('DELETE', `${base}/${p1.data[0]?.id}`)
  res = await call('GET', base, { query: { count: '1', cursor: p1.next_cursor } })
  t.same(res.json<{ data: Json[] }>().data.map((x) => x.granted_account_id), [more[0]?.account.id], 'permissions')
})

t.test('an upload the store did not fully take is an error to retry, never a silent success', async (t) => {
  // A real memory store whose batch loses the identifier writes of one person: what a failed-over
  // Redis losing acknowledged writes would look like to the upload path.
  const lost = sha256('lost@example.com')
  let losing = true
  const real = await MemoryStore.open()
  const store = new Proxy(real, {
    get(target, prop) {
      if (prop === 'batch') {
        return (ops: StoreOp[]) => target.batch(losing ? ops.filter((op) => !(op.op === 'set' && op.key.endsWith(`:ident:email:${lost}`))) : ops)
      }
      const value = Reflect.get(target, prop, target) as unknown
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value
    }
  }) as Store
  const rt = await startTestRuntime(t, { services: [gatewayWithWorkers], store })
  const owner = await createAdsIdentity(rt.ctx)
  const call = caller(rt, owner.id)
  const acct = owner.account.id
  const audience = await createAudience(call, acct, 'Lossy')
  const upload = [{ operation_type: 'Update', params: { users: [{ email: [sha256('kept@example.com')] }, { email: [lost] }] } }]
  let res = await call('POST', `12/accounts/${acct}/custom_audiences/${audience.id}/users`, { json: upload })
  t.equal(res.status, 500, 'success_count would differ from total_count: an error')
  t.match(adsErrorOf(res), { code: 'INTERNAL_ERROR', message: /1 of 2 records.*retry/ })
  t.notOk('data' in res.json<Json>())

  res = await call('POST', `12/accounts/${acct}/do_not_reach_lists`)
  const dnr = res.json<{ data: Json }>().data
  res = await call('POST', `12/batch/accounts/${acct}/do_not_reach_lists/${dnr.id}/users`, { json: upload })
  t.equal(res.status, 500)
  t.match(adsErrorOf(res), { code: 'INTERNAL_ERROR', message: /1 of 2 records/ })

  // The retry the client is told to make converges once the store takes every write.
  losing = false
  res = await call('POST', `12/accounts/${acct}/custom_audiences/${audience.id}/users`, { json: upload })
  t.same(res.json<{ data: Json }>().data, { success_count: 2, total_count: 2 })
  res = await call('POST', `12/batch/accounts/${acct}/do_not_reach_lists/${dnr.id}/users`, { json: upload })
  t.same(res.json<{ data: Json[] }>().data, [{ success_count: 2, total_count: 2 }])
  t.ok(await audienceMembers(rt.ctx, audience.id as string).contains(`email:${lost}`), 'after the retry the person is a member')
})

t.test('do-not-reach lists: one per account, uploads, delete', async (t) => {
  const { rt, call, acct, changes } = await setup(t)
  let res = await call('POST', `12/accounts/${acct}/do_not_reach_lists`, { query: { description: 'A list of users to exclude' } })
  t.equal(res.status, 200)
  const list = res.json<{ data: Json }>().data
  t.match(list, {
    id: /^[0-9a-z]+$/,
    name: 'Do Not Reach List',
    description: 'A list of users to exclude',
    targetable: false,
    reasons_not_targetable: ['PROCESSING', 'TOO_SMALL'],
    list_size: null,
    deleted: false
  })
  res = await call('POST', `12/accounts/${acct}/do_not_reach_lists`)
  t.equal(res.status, 409, 'at most one list per account')
  t.match(adsErrorOf(res), { code: 'DUPLICATE' })
  res = await call('GET', `12/accounts/${acct}/do_not_reach_lists`)
  t.same(res.json<{ data: Json[] }>().data.map((x) => x.id), [list.id])
  res = await call('GET', `12/accounts/${acct}/do_not_reach_lists/${list.id}`)
  t.match(res.json<{ data: Json }>().data, { id: list.id })

  const path = `12/batch/accounts/${acct}/do_not_reach_lists/${list.id}/users`
  const expires = new Date(Date.now() + 30 * 86_400_000).toISOString().replace(/\.\d{3}Z$/, 'Z')
  res = await call('POST', path, {
    json: [
      { operation_type: 'Update', params: { expires_at: expires, users: emails(120, 'dnr').map((e, i) => ({ email: [e], phone_number: [sha256(`+1555000${i}`)] })) } },
      { operation_type: 'Delete', params: { users: [{ email: [sha256('dnr0@example.com')] }] } }
    ]
  })
  t.equal(res.status, 200)
  const body = res.json<{ data: Json[]; request: Json[] }>()
  t.equal(res.headers.get('x-rate-limit-limit'), '1500', '1500 uploads per minute')
  t.same(body.data, [{ success_count: 120, total_count: 120 }, { success_count: 1, total_count: 1 }])
  t.match(body.request[0], { params: { account_id: acct, do_not_reach_list_id: list.id, expires_at: expires }, operation_type: 'Update' })
  t.match(body.request[1], { operation_type: 'Delete' })
  res = await call('GET', `12/accounts/${acct}/do_not_reach_lists/${list.id}`)
  t.match(res.json<{ data: Json }>().data, { list_size: 119, targetable: true, reasons_not_targetable: [] })

  const tooLate = new Date(Date.now() + 400 * 86_400_000).toISOString()
  res = await call('POST', path, {
    json: [
      { operation_type: 'Update', params: { effective_at: '2030-01-01T00:00:00Z', users: [{ email: [sha256('a')] }] } },
      { operation_type: 'Update', params: { expires_at: tooLate, users: [{ email: [sha256('a')] }] } },
      { operation_type: 'Update', params: { users: [{ handle: [sha256('a')] }] } },
      { operation_type: 'Update', params: { expires_at: '2001-01-01T00:00:00Z', users: [{ email: [sha256('a')] }] } },
      { operation_type: 'Update', params: { users: [{ email: [sha256('fine')] }] } },
      { operation_type: 'Update', params: { users: [{ constructor: [sha256('a')] }] } },
      { operation_type: 'Update', params: { expires_at: `${new Date().getUTCFullYear() + 1}-02-30T00:00:00Z`, users: [{ email: [sha256('a')] }] } }
    ]
  })
  t.equal(res.status, 400)
  const errs = res.json<{ operation_errors: Array<Array<{ parameter: string }>>; request: Json[] }>()
  t.same(errs.operation_errors.map((e) => e.map((x) => x.parameter)), [['params.effective_at'], ['params.expires_at'], ['params.users[0].handle'], ['params.expires_at'], [], ['params.users[0].constructor'], ['params.expires_at']])
  t.equal(errs.request.length, 7, 'the request echo keeps the input order')
  const intruder = await createAdsIdentity(rt.ctx)
  res = await call('POST', path, { json: [{ operation_type: 'Update', params: { users: [{ email: [sha256('a')] }] } }], as: intruder.id })
  t.equal(res.status, 403, "another user's account is refused for uploads")
  t.match(adsErrorOf(res), { code: 'ACCOUNT_NOT_FOUND' })
  res = await call('POST', path, { json: Array.from({ length: 2501 }, () => ({ operation_type: 'Delete', params: { users: [{ email: [sha256('a')] }] } })) })
  t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER', message: /at most 2500/ })
  t.equal((await call('GET', `12/accounts/${acct}/do_not_reach_lists/${list.id}`)).json<{ data: Json }>().data.list_size, 119, 'nothing applied')

  res = await call('DELETE', `12/accounts/${acct}/do_not_reach_lists/${list.id}`)
  t.match(res.json<{ data: Json }>().data, { id: list.id, deleted: true })
  res = await call('GET', `12/accounts/${acct}/do_not_reach_lists/${list.id}`)
  t.equal(res.status, 404)
  t.match(adsErrorOf(res), { code: 'DO_NOT_REACH_LIST_NOT_FOUND' })
  res = await call('GET', `12/accounts/${acct}/do_not_reach_lists/${list.id}`, { query: { with_deleted: 'true' } })
  t.match(res.json<{ data: Json }>().data, { deleted: true })
  res = await call('GET', `12/accounts/${acct}/do_not_reach_lists`)
  t.same(res.json<{ data: unknown[] }>().data, [])
  res = await call('GET', `12/accounts/${acct}/do_not_reach_lists`, { query: { with_deleted: 'true' } })
  t.equal(res.json<{ data: unknown[] }>().data.length, 1)
  res = await call('POST', path, { json: [{ operation_type: 'Update', params: { users: [{ email: [sha256('a')] }] } }] })
  t.equal(res.status, 404, 'no uploads to a deleted list')
  res = await call('POST', `12/accounts/${acct}/do_not_reach_lists`)
  t.equal(res.status, 200, 'a new list once the old one is deleted')

  const stranger = await createAdsIdentity(rt.ctx)
  res = await call('GET', `12/accounts/${acct}/do_not_reach_lists`, { as: stranger.id })
  t.equal(res.status, 403)

  // count bounds, and pages of one across the deleted list and the new one.
  for (const count of ['0', '1001', 'x']) {
    res = await call('GET', `12/accounts/${acct}/do_not_reach_lists`, { query: { count } })
    t.equal(res.status, 400, `count=${count}`)
    t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER', parameter: 'count' })
  }
  res = await call('GET', `12/accounts/${acct}/do_not_reach_lists`, { query: { count: '1000', with_deleted: 'true' } })
  t.equal(res.json<{ data: unknown[] }>().data.length, 2, 'count=1000 is accepted')
  res = await call('GET', `12/accounts/${acct}/do_not_reach_lists`, { query: { count: '1', with_deleted: 'true' } })
  const dnrPage = res.json<{ data: Json[]; next_cursor: string }>()
  t.same(dnrPage.data.map((x) => x.id), [list.id])
  res = await call('GET', `12/accounts/${acct}/do_not_reach_lists`, { query: { count: '1', with_deleted: 'true', cursor: dnrPage.next_cursor } })
  const dnrPage2 = res.json<{ data: Json[]; next_cursor: string | null }>()
  t.equal(dnrPage2.data.length, 1)
  t.not(dnrPage2.data[0]?.id, list.id)
  t.equal(dnrPage2.next_cursor, null)

  const dnrChanges = await eventually(() => {
    const l = changes.filter((c) => c.entity_type === 'DO_NOT_REACH_LIST' && c.entity_id === list.id)
    return l.length >= 3 ? l : undefined
  })
  t.same(dnrChanges.map((c) => c.change_type), ['CREATE', 'UPDATE', 'DELETE'])
  t.same(dnrChanges[1]?.changes, { list_size: { old: null, new: 119 } })
})
