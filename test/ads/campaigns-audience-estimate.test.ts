import { createHash } from 'node:crypto'
import t from 'tap'
import { AuthKeys } from '../../services/common/auth/records'
import { audienceMembers, audienceRepo } from '../../services/gateway/ads/audiences/audiences'
import { estimateAudience, fnv1a, sizeRange } from '../../services/gateway/ads/campaigns/audience-estimate'
import type { TestResponse } from '../helper'
import { type AdsFixture, adsFixture, expectError } from './campaigns-fixtures'

/**
 * POST accounts/:account_id/audience_estimate: validated targeting criteria
 * and an estimate computed from the people the system holds (registered
 * users, custom audience members), deterministic and consistent with the
 * targeting semantics (primary criteria unioned, other types narrowing, NE
 * excluding).
 */

const sha = (s: string): string => createHash('sha256').update(s).digest('hex')

/** Registers `n` more people in the users index the estimate counts. */
async function addUsers(f: AdsFixture, n: number, prefix: string): Promise<string[]> {
  const ids = Array.from({ length: n }, (_, i) => `${prefix}${String(i).padStart(6, '0')}`)
  await f.rt.ctx.store.batch(ids.map((id, i) => ({ op: 'zadd' as const, key: AuthKeys.users(), score: i, member: id })))
  return ids
}

async function audienceWith(f: AdsFixture, userIds: string[], emails: string[]): Promise<string> {
  const audience = await audienceRepo(f.rt.ctx).create(
    f.account.id,
    { name: 'crm list', description: null, audience_type: 'CRM', partner_source: 'OTHER', targetable_types: ['WEB'], owner_account_id: f.account.id },
    { user_id: f.id.user.id, platform: 'API' }
  )
  const now = Date.now()
  await audienceMembers(f.rt.ctx, audience.id).apply([
    { type: 'Update', users: [...userIds.map((u) => [`svc_id:${sha(u)}`]), ...emails.map((e) => [`email:${sha(e)}`])], effectiveAt: now - 1000, expiresAt: now + 3_600_000 }
  ])
  return audience.id
}

function size(res: TestResponse): { min: number; max: number } {
  return res.json<{ data: { audience_size: { min: number; max: number } } }>().data.audience_size
}

t.test('targeting criteria are validated with the item they concern', async (t) => {
  const f = await adsFixture(t)
  const post = (json: unknown, query?: Record<string, string>) => f.call('POST', '/audience_estimate', { json, ...(query ? { query } : {}) })
  const kw = { targeting_type: 'BROAD_KEYWORD', targeting_value: 'nba' }
  expectError(t, await post({}), 400, 'MISSING_PARAMETER', 'targeting_criteria')
  expectError(t, await post({ targeting_criteria: 'nba' }), 400, 'INVALID_PARAMETER', 'targeting_criteria')
  expectError(t, await post({ targeting_criteria: [] }), 400, 'INVALID_PARAMETER', 'targeting_criteria')
  expectError(t, await post([kw]), 400, 'INVALID_PARAMETER', 'body')
  expectError(t, await post({ targeting_criteria: [kw, 7] }), 400, 'INVALID_PARAMETER', 'targeting_criteria[1]')
  expectError(t, await post({ targeting_criteria: [{ targeting_value: 'nba' }] }), 400, 'MISSING_PARAMETER', 'targeting_criteria[0].targeting_type')
  expectError(t, await post({ targeting_criteria: [{ targeting_type: 'MIND_READING', targeting_value: 'x' }] }), 400, 'INVALID_PARAMETER', 'targeting_criteria[0].targeting_type')
  expectError(t, await post({ targeting_criteria: [kw, { targeting_type: 'LOCATION' }] }), 400, 'MISSING_PARAMETER', 'targeting_criteria[1].targeting_value')
  expectError(t, await post({ targeting_criteria: [kw, { targeting_type: 'AGE', targeting_value: 'old' }] }), 400, 'INVALID_PARAMETER', 'targeting_criteria[1].targeting_value')
  expectError(t, await post({ targeting_criteria: [{ targeting_type: 'FOLLOWERS_OF_USER', targeting_value: '@someone' }] }), 400, 'INVALID_PARAMETER', 'targeting_criteria[0].targeting_value')
  expectError(t, await post({ targeting_criteria: [{ ...kw, operator_type: 'GTE' }] }), 400, 'INVALID_PARAMETER', 'targeting_criteria[0].operator_type')
  expectError(t, await post({ targeting_criteria: [kw, { targeting_type: 'APP_LIST', targeting_value: 'x1', operator_type: 'EQ' }] }), 400, 'INVALID_PARAMETER', 'targeting_criteria[1].operator_type')
  expectError(t, await post({ targeting_criteria: [{ targeting_type: 'LOCATION', targeting_value: '96683cc9126741d1' }] }), 400, 'INVALID_PARAMETER', 'targeting_criteria')
  expectError(t, await post({ targeting_criteria: [kw] }, { operator_type: 'LT' }), 400, 'INVALID_PARAMETER', 'operator_type')
  expectError(t, await post({ targeting_criteria: [{ targeting_type: 'CUSTOM_AUDIENCE', targeting_value: 'nosuch' }] }), 400, 'INVALID_PARAMETER', 'targeting_criteria[0].targeting_value')
  const notJson = await f.call('POST', '/audience_estimate', { form: { targeting_criteria: 'x' } })
  t.equal(notJson.status, 400)
  t.equal(notJson.json<{ errors: Array<{ code: string }> }>().errors[0]?.code, 'INVALID_PARAMETER')

  // Another account's audience is not usable unless shared.
  const other = await adsFixture(t, { rt: f.rt })
  const foreign = await audienceWith(other, [], ['a@example.com'])
  expectError(t, await post({ targeting_criteria: [{ targeting_type: 'CUSTOM_AUDIENCE', targeting_value: foreign }] }), 400, 'INVALID_PARAMETER', 'targeting_criteria[0].targeting_value')
})

t.test('the estimate follows the data and the targeting semantics, deterministically', async (t) => {
  const f = await adsFixture(t)
  const users = await addUsers(f, 3000, '9100')
  const estimate = async (criteria: unknown[], query?: Record<string, string>): Promise<{ min: number; max: number }> => {
    const res = await f.call('POST', '/audience_estimate', { json: { targeting_criteria: criteria }, ...(query ? { query } : {}) })
    t.equal(res.status, 200, res.text)
    return size(res)
  }
  const nba = { targeting_type: 'BROAD_KEYWORD', targeting_value: 'nba' }
  const tech = { targeting_type: 'BROAD_KEYWORD', targeting_value: 'tech' }
  const sf = { targeting_type: 'LOCATION', targeting_value: '5122804691e5fecc' }

  const res = await f.call('POST', '/audience_estimate', { json: { targeting_criteria: [nba] } })
  t.same(Object.keys(res.json<{ data: object }>().data), ['audience_size'])
  t.equal(res.json<{ data_type: string }>().data_type, 'audience_estimate')
  const one = size(res)
  t.ok(one.min > 0 && one.min <= one.max, `a keyword reaches some of the ${users.length} people: ${JSON.stringify(one)}`)
  t.ok(one.max < users.length / 2, 'but not most of them')
  t.same(await estimate([nba]), one, 'the same question gets the same answer')
  t.same(await estimate([{ ...nba, targeting_value: 'NBA' }]), one, 'keyword matching ignores case')

  const union = await estimate([nba, tech])
  t.ok(union.min > one.min, 'a second primary criterion widens the audience')
  const narrowed = await estimate([nba, sf])
  t.ok(narrowed.max < one.max, 'a location narrows it')
  const excluded = await estimate([nba, { ...tech, operator_type: 'NE' }])
  t.ok(excluded.max < one.max, 'an NE criterion excludes people')
  t.same(await estimate([nba, { ...nba, operator_type: 'NE' }]), { min: 0, max: 0 }, 'excluding the same criterion leaves nobody')
  t.same(await estimate([{ ...nba, operator_type: 'EQ' }, tech], { operator_type: 'NE' }), excluded, 'operator_type in the query is the default of the items')

  await addUsers(f, 3000, '9200')
  const grown = await estimate([nba])
  t.ok(grown.min > one.max, 'more people in the system, larger estimate')
})

t.test('custom audiences count their members, registered or not', async (t) => {
  const f = await adsFixture(t)
  const users = await addUsers(f, 2000, '9300')
  const audience = await audienceWith(f, users.slice(0, 30), Array.from({ length: 20 }, (_, i) => `person${i}@example.com`))
  const small = await audienceWith(f, users.slice(0, 10), [])
  const estimate = async (criteria: unknown[]) => size(await f.call('POST', '/audience_estimate', { json: { targeting_criteria: criteria } }))

  t.same(await estimate([{ targeting_type: 'CUSTOM_AUDIENCE', targeting_value: audience }]), sizeRange(50))
  t.same(await estimate([{ targeting_type: 'CUSTOM_AUDIENCE', targeting_value: audience }, { targeting_type: 'CUSTOM_AUDIENCE', targeting_value: small, operator_type: 'NE' }]), sizeRange(40))
  const expanded = await estimate([{ targeting_type: 'CUSTOM_AUDIENCE_EXPANDED', targeting_value: audience }])
  t.ok(expanded.min > sizeRange(50).max, 'the expanded audience adds similar people')
})

t.test('the estimate function itself', async (t) => {
  t.equal(fnv1a(''), 0x811c9dc5)
  t.equal(fnv1a('a'), 0xe40c292c, 'FNV-1a reference value')
  const people = Array.from({ length: 500 }, (_, i) => `u${i}`)
  const criteria = [{ targeting_type: 'INTEREST', targeting_value: '10012', operator_type: 'EQ' as const }]
  const n = estimateAudience(criteria, { users: people, audiences: new Map() })
  t.ok(n > 30 && n < 130, `an interest reaches about 15%: ${n}`)
  t.equal(estimateAudience(criteria, { users: [...people].reverse(), audiences: new Map() }), n, 'order of the people does not matter')
  t.equal(estimateAudience(criteria, { users: [], audiences: new Map() }), 0)
  t.same(sizeRange(0), { min: 0, max: 0 })
  t.same(sizeRange(10), { min: 9, max: 11 })
})
