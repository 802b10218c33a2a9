import { createHash } from 'node:crypto'
import t from 'tap'
import { AuthKeys } from '../../services/common/auth/records'
import { audienceMembers, audienceRepo } from '../../services/gateway/ads/audiences/audiences'
import { type Criterion, estimateAudience, EXPANDED_SHARE, matchProbability, sizeRange } from '../../services/gateway/ads/campaigns/audience-estimate'
import { type AdsFixture, adsFixture, expectError } from '../support/fixtures/campaigns'
import type { TestResponse } from '../support/http'

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
  const registered = await f.rt.ctx.store.zcard(AuthKeys.users())
  t.same(one, sizeRange(Math.round(registered * 0.08)), 'a keyword reaches its documented share (8%) of the registered users')
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
  const eq = (targeting_type: string, targeting_value: string): Criterion => ({ targeting_type, targeting_value, operator_type: 'EQ' })
  const ne = (targeting_type: string, targeting_value: string): Criterion => ({ targeting_type, targeting_value, operator_type: 'NE' })
  const none = new Set<string>()
  const near = (a: number, b: number): boolean => Math.abs(a - b) < 1e-12
  // Modelled types: each distinct (type, value) an independent event with its documented share.
  t.ok(near(matchProbability([eq('BROAD_KEYWORD', 'nba')], none), 0.08), 'one keyword: its share')
  t.ok(near(matchProbability([eq('BROAD_KEYWORD', 'nba'), eq('INTEREST', '10012')], none), 1 - 0.92 * 0.85), 'primaries are unioned')
  t.ok(near(matchProbability([eq('BROAD_KEYWORD', 'nba'), eq('LOCATION', 'a'), eq('LOCATION', 'b')], none), 0.08 * (1 - 0.8 * 0.8)), 'a narrowing type: any of its values')
  t.ok(near(matchProbability([eq('BROAD_KEYWORD', 'nba'), ne('BROAD_KEYWORD', 'tech')], none), 0.08 * 0.92), 'NE removes its share')
  t.equal(matchProbability([eq('BROAD_KEYWORD', 'nba'), ne('BROAD_KEYWORD', 'NBA')], none), 0, 'excluding what is included leaves nobody')
  t.ok(near(matchProbability([eq('BROAD_KEYWORD', 'nba'), eq('BROAD_KEYWORD', 'NBA')], none), 0.08), 'the same event twice counts once')
  // Audiences: membership is data, not a share.
  t.equal(matchProbability([eq('CUSTOM_AUDIENCE', 'a')], new Set(['a'])), 1)
  t.equal(matchProbability([eq('CUSTOM_AUDIENCE', 'a')], none), 0)
  t.ok(near(matchProbability([eq('CUSTOM_AUDIENCE_EXPANDED', 'a')], none), EXPANDED_SHARE), 'lookalikes of non-members: the expanded share')
  t.equal(matchProbability([eq('BROAD_KEYWORD', 'nba'), ne('CUSTOM_AUDIENCE', 'a')], new Set(['a'])), 0, 'members of an excluded audience are out')
  // Names of Object's members are plain unknown values (validation refuses them first; the model never reads a prototype).
  t.ok(near(matchProbability([eq('constructor', 'x')], none), 0.1))

  const registered = (k: string): boolean => k.startsWith('u')
  t.equal(await estimateAudience([eq('INTEREST', '10012')], { registeredUsers: 500, audiences: new Map(), isRegistered: registered }), 75, '15% of 500')
  t.equal(await estimateAudience([eq('INTEREST', '10012')], { registeredUsers: 0, audiences: new Map(), isRegistered: registered }), 0)
  const audiences = new Map([['a', new Set(['u1', 'u2', 'crm:1'])], ['b', new Set(['u2', 'crm:2'])]])
  t.equal(await estimateAudience([eq('CUSTOM_AUDIENCE', 'a')], { registeredUsers: 10, audiences, isRegistered: registered }), 3, 'members, registered or not')
  t.equal(await estimateAudience([eq('CUSTOM_AUDIENCE', 'a'), eq('CUSTOM_AUDIENCE', 'b')], { registeredUsers: 10, audiences, isRegistered: registered }), 4, 'a person in two audiences counts once')
  // 3 members, and 10% of the other 10 - 2 registered users + crm:2: 3 + 0.9 → 4.
  t.equal(await estimateAudience([eq('CUSTOM_AUDIENCE_EXPANDED', 'a')], { registeredUsers: 10, audiences, isRegistered: registered }), 4)
  t.same(sizeRange(0), { min: 0, max: 0 })
  t.same(sizeRange(10), { min: 9, max: 11 })

  // A large audience is handled in slices: other work runs before the estimate is done.
  const big = new Map([['big', new Set(Array.from({ length: 20_000 }, (_, i) => `crm:${i}`))]])
  let finished = false
  const pending = estimateAudience([eq('CUSTOM_AUDIENCE', 'big')], { registeredUsers: 0, audiences: big, isRegistered: registered }).then((n) => {
    finished = true
    return n
  })
  const interleaved = await new Promise<boolean>((resolve) => setImmediate(() => resolve(!finished)))
  t.ok(interleaved, 'the event loop ran while the estimate was under way')
  t.equal(await pending, 20_000)
})
