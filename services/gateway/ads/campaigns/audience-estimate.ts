import type { FastifyInstance } from 'fastify'
import { AuthKeys } from '../../../common/auth/records'
import type { ServiceContext } from '../../../common/context'
import { Ads, AdsError } from '../../../common/errors'
import { requireAccount } from '../accounts'
import { ADS_AUTH, Params, requireJsonBody, sendData } from '../conventions'
import { audienceMemberKeys } from '../audiences/audiences'

/**
 * POST accounts/:account_id/audience_estimate: the approximate size of the
 * audience a set of targeting criteria reaches. Deterministic (the same
 * data and criteria always give the same answer; nothing is random) and
 * bounded: the cost grows with the criteria and with the members of the
 * custom audiences named, never with the number of registered users.
 * docs/ads-campaigns.md describes the algorithm for operators.
 *
 * What is real and what is modelled:
 *  - the population is real: the registered users (counted, not loaded)
 *    plus the members of the named custom audiences who are not users;
 *  - CUSTOM_AUDIENCE membership is real (the stored member lists);
 *  - every other type is a model: users carry no stored attributes
 *    (location, language, interests, follow graph ...), so a criterion of
 *    such a type reaches a fixed, documented share of the people
 *    (SHARES: a keyword reaches fewer people than a language), each
 *    distinct (type, value) an independent event; the lookalike part of
 *    CUSTOM_AUDIENCE_EXPANDED reaches EXPANDED_SHARE of the non-members.
 *
 * Combination (as line item targeting works on the platform): primary
 * criteria with EQ are unioned (followers OR keywords OR interests ...);
 * every other type present with EQ narrows to the people matching at least
 * one of its values (location AND gender ...); every NE criterion removes
 * the people it matches. People are grouped by which named audiences they
 * belong to; for each group the probability of matching follows exactly
 * from the shares (see matchProbability), and the estimate is the sum of
 * group size times probability, rounded. The size N is returned as a
 * range: `{min: floor(0.9 N), max: ceil(1.1 N)}`.
 */

const PRIMARY_TYPES = [
  'FOLLOWERS_OF_USER', 'SIMILAR_TO_FOLLOWERS_OF_USER', 'INTEREST', 'BROAD_KEYWORD', 'EXACT_KEYWORD', 'PHRASE_KEYWORD',
  'UNORDERED_KEYWORD', 'CUSTOM_AUDIENCE', 'CUSTOM_AUDIENCE_EXPANDED', 'CONVERSATION', 'EVENT', 'TV_SHOW', 'LIVE_TV_EVENT',
  'CAMPAIGN_ENGAGEMENT', 'CAMPAIGN_ENGAGEMENT_LOOKALIKE', 'USER_ENGAGEMENT', 'USER_ENGAGEMENT_LOOKALIKE',
  'APP_STORE_CATEGORY', 'APP_STORE_CATEGORY_LOOKALIKE'
] as const

const SECONDARY_TYPES = [
  'AGE', 'DEVICE', 'ENGAGEMENT_TYPE', 'GENDER', 'LANGUAGE', 'LOCATION', 'NETWORK_ACTIVATION_DURATION', 'NETWORK_OPERATOR',
  'PLATFORM', 'PLATFORM_VERSION', 'WIFI_ONLY', 'APP_LIST'
] as const

export const TARGETING_TYPES: readonly string[] = [...PRIMARY_TYPES, ...SECONDARY_TYPES]
const PRIMARY = new Set<string>(PRIMARY_TYPES)
export const OPERATOR_TYPES = ['EQ', 'NE'] as const
type Operator = (typeof OPERATOR_TYPES)[number]

/** Share of people a single value of each modelled type reaches (a Map: types are client strings). */
const SHARES: ReadonlyMap<string, number> = new Map(Object.entries({
  FOLLOWERS_OF_USER: 0.05, SIMILAR_TO_FOLLOWERS_OF_USER: 0.12, INTEREST: 0.15, BROAD_KEYWORD: 0.08, EXACT_KEYWORD: 0.03,
  PHRASE_KEYWORD: 0.04, UNORDERED_KEYWORD: 0.05, CONVERSATION: 0.1, EVENT: 0.06, TV_SHOW: 0.05, LIVE_TV_EVENT: 0.04,
  CAMPAIGN_ENGAGEMENT: 0.02, CAMPAIGN_ENGAGEMENT_LOOKALIKE: 0.08, USER_ENGAGEMENT: 0.03, USER_ENGAGEMENT_LOOKALIKE: 0.1,
  APP_STORE_CATEGORY: 0.1, APP_STORE_CATEGORY_LOOKALIKE: 0.2, AGE: 0.25, DEVICE: 0.2, ENGAGEMENT_TYPE: 0.5, GENDER: 0.5,
  LANGUAGE: 0.35, LOCATION: 0.2, NETWORK_ACTIVATION_DURATION: 0.3, NETWORK_OPERATOR: 0.25, PLATFORM: 0.5,
  PLATFORM_VERSION: 0.3, WIFI_ONLY: 0.6, APP_LIST: 0.1
}))
const DEFAULT_SHARE = 0.1
export const EXPANDED_SHARE = 0.1

const VALUE_RULES: ReadonlyMap<string, RegExp> = new Map(Object.entries({
  FOLLOWERS_OF_USER: /^\d{1,19}$/,
  SIMILAR_TO_FOLLOWERS_OF_USER: /^\d{1,19}$/,
  GENDER: /^[12]$/,
  AGE: /^AGE_(\d{2}_TO_\d{2}|OVER_\d{2})$/,
  LANGUAGE: /^[a-z]{2}$/,
  WIFI_ONLY: /^(true|false)$/
}))

const MAX_CRITERIA = 500
const VALUE_MAX = 255

export interface Criterion {
  targeting_type: string
  targeting_value: string
  operator_type: Operator
}

/** Validates the body's targeting_criteria; errors name the item (`targeting_criteria[2].targeting_type`). */
export function readCriteria(body: unknown, defaultOperator: Operator): Criterion[] {
  const raw = (body as Record<string, unknown>).targeting_criteria
  if (raw === undefined || raw === null) throw Ads.missing('targeting_criteria')
  if (!Array.isArray(raw)) throw Ads.invalid('targeting_criteria', 'targeting_criteria must be an array of targeting criteria objects')
  if (raw.length === 0) throw Ads.invalid('targeting_criteria', 'targeting_criteria must contain at least one criterion')
  if (raw.length > MAX_CRITERIA) throw Ads.invalid('targeting_criteria', `targeting_criteria accepts at most ${MAX_CRITERIA} criteria, got ${raw.length}`)
  const out = raw.map((item, i) => {
    const at = `targeting_criteria[${i}]`
    if (item === null || typeof item !== 'object' || Array.isArray(item)) throw Ads.invalid(at, `${at} must be an object`)
    const fields = item as Record<string, unknown>
    const type = fields.targeting_type
    if (type === undefined || type === null || type === '') throw Ads.missing(`${at}.targeting_type`)
    if (typeof type !== 'string' || !TARGETING_TYPES.includes(type)) {
      throw Ads.invalid(`${at}.targeting_type`, `Unknown targeting_type ${JSON.stringify(type).slice(0, 100)}; expected one of ${TARGETING_TYPES.join(', ')}`)
    }
    const rawValue = fields.targeting_value
    if (rawValue === undefined || rawValue === null || rawValue === '') throw Ads.missing(`${at}.targeting_value`)
    if (typeof rawValue !== 'string' && typeof rawValue !== 'number' && typeof rawValue !== 'boolean') {
      throw Ads.invalid(`${at}.targeting_value`, `${at}.targeting_value must be a string`)
    }
    const value = String(rawValue).trim()
    const rule = VALUE_RULES.get(type)
    if (value === '' || [...value].length > VALUE_MAX || (rule !== undefined && !rule.test(value))) {
      throw Ads.invalid(`${at}.targeting_value`, `Invalid targeting_value ${JSON.stringify(String(rawValue).slice(0, 100))} for targeting_type ${type}`)
    }
    const op = fields.operator_type
    if (op !== undefined && op !== null && !(OPERATOR_TYPES as readonly unknown[]).includes(op)) {
      throw Ads.invalid(`${at}.operator_type`, `Expected one of EQ, NE, got ${JSON.stringify(op).slice(0, 40)} for ${at}.operator_type`)
    }
    const operator = (op as Operator | undefined | null) ?? defaultOperator
    if (type === 'APP_LIST' && operator !== 'NE') throw Ads.invalid(`${at}.operator_type`, 'APP_LIST can only exclude (operator_type NE)')
    return { targeting_type: type, targeting_value: value, operator_type: operator }
  })
  if (!out.some((c) => PRIMARY.has(c.targeting_type))) {
    throw Ads.invalid('targeting_criteria', `At least one primary targeting criterion is required (one of ${PRIMARY_TYPES.join(', ')})`)
  }
  return out
}

const AUDIENCE_TYPES: ReadonlySet<string> = new Set(['CUSTOM_AUDIENCE', 'CUSTOM_AUDIENCE_EXPANDED'])

/** Criteria on the same (type, value) are one event: excluding what was included leaves nobody. */
function eventKey(c: Criterion): string {
  return `${c.targeting_type}|${c.targeting_value.toLowerCase()}`
}

/** The probability that criterion `c` holds for a person belonging to the audiences `memberOf`. */
function criterionProbability(c: Criterion, memberOf: ReadonlySet<string>): number {
  if (c.targeting_type === 'CUSTOM_AUDIENCE') return memberOf.has(c.targeting_value) ? 1 : 0
  if (c.targeting_type === 'CUSTOM_AUDIENCE_EXPANDED') return memberOf.has(c.targeting_value) ? 1 : EXPANDED_SHARE
  return SHARES.get(c.targeting_type) ?? DEFAULT_SHARE
}

/**
 * The probability that a person belonging to the audiences `memberOf`
 * matches all the criteria, the events being independent: no NE event
 * happens (product of 1 - p), and, given that, every EQ group (the
 * primaries; each other type) has at least one event (1 - product of
 * 1 - p, an event also excluded counting as impossible). Groups never
 * share events (the type is part of the event), so they multiply.
 */
export function matchProbability(criteria: readonly Criterion[], memberOf: ReadonlySet<string>): number {
  const excluded = new Map<string, number>()
  for (const c of criteria) if (c.operator_type === 'NE') excluded.set(eventKey(c), criterionProbability(c, memberOf))
  let p = 1
  for (const q of excluded.values()) p *= 1 - q
  const groups = new Map<string, Map<string, number>>()
  for (const c of criteria) {
    if (c.operator_type !== 'EQ') continue
    const group = PRIMARY.has(c.targeting_type) ? 'PRIMARY' : c.targeting_type
    const events = groups.get(group) ?? new Map<string, number>()
    const key = eventKey(c)
    events.set(key, excluded.has(key) ? 0 : criterionProbability(c, memberOf))
    groups.set(group, events)
  }
  for (const events of groups.values()) {
    let none = 1
    for (const q of events.values()) none *= 1 - q
    p *= 1 - none
  }
  return p
}

export interface EstimateInput {
  /** How many users are registered (counted, never listed). */
  registeredUsers: number
  /** Members of each named custom audience: a user id for a registered user, another stable key otherwise. */
  audiences: ReadonlyMap<string, ReadonlySet<string>>
  /** Whether a member key is a registered user (those are already in registeredUsers). */
  isRegistered: (memberKey: string) => boolean
}

/** Members handled between two yields to the event loop, so a large audience never blocks it. */
const MEMBERS_PER_SLICE = 5000

/** Sizes of the groups of people with the same audience memberships ('' = in none), and how many of them are registered. */
async function membershipGroups(input: EstimateInput): Promise<{ groups: Map<string, number>; registeredMembers: number }> {
  const audiencesOf = new Map<string, string[]>()
  let handled = 0
  for (const [audienceId, members] of input.audiences) {
    for (const member of members) {
      const list = audiencesOf.get(member)
      if (list) list.push(audienceId)
      else audiencesOf.set(member, [audienceId])
      if (++handled % MEMBERS_PER_SLICE === 0) await new Promise((resolve) => setImmediate(resolve))
    }
  }
  const groups = new Map<string, number>()
  let registeredMembers = 0
  for (const [member, ids] of audiencesOf) {
    const signature = JSON.stringify(ids.sort())
    groups.set(signature, (groups.get(signature) ?? 0) + 1)
    if (input.isRegistered(member)) registeredMembers++
  }
  return { groups, registeredMembers }
}

/** The number of people the criteria reach (see the module comment for the rules). */
export async function estimateAudience(criteria: readonly Criterion[], input: EstimateInput): Promise<number> {
  const { groups, registeredMembers } = await membershipGroups(input)
  // Registered users in none of the named audiences.
  let expected = Math.max(0, input.registeredUsers - registeredMembers) * matchProbability(criteria, new Set())
  let handled = 0
  for (const [signature, count] of groups) {
    expected += count * matchProbability(criteria, new Set(JSON.parse(signature) as string[]))
    if (++handled % MEMBERS_PER_SLICE === 0) await new Promise((resolve) => setImmediate(resolve))
  }
  return Math.round(expected)
}

export function sizeRange(n: number): { min: number; max: number } {
  return { min: Math.floor(n * 0.9), max: Math.ceil(n * 1.1) }
}

/** audienceMemberKeys names a member that is no registered user with this prefix; any other key is a user id. */
function isRegisteredMemberKey(key: string): boolean {
  return !key.startsWith('custom-audience-member:')
}

export async function registerAudienceEstimateRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  app.post<{ Params: { account_id: string } }>('/12/accounts/:account_id/audience_estimate', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const body = requireJsonBody(request)
    if (body === null || typeof body !== 'object' || Array.isArray(body)) throw Ads.invalid('body', 'Expected a JSON object with targeting_criteria')
    const defaultOperator = Params.query(request).enumOf('operator_type', OPERATOR_TYPES) ?? 'EQ'
    const criteria = readCriteria(body, defaultOperator)
    const audiences = new Map<string, Set<string>>()
    for (const c of criteria) {
      if (!AUDIENCE_TYPES.has(c.targeting_type) || audiences.has(c.targeting_value)) continue
      const members = await audienceMemberKeys(ctx, account.id, c.targeting_value)
      if (members === undefined) {
        const index = criteria.indexOf(c)
        throw new AdsError(400, { code: 'INVALID_PARAMETER', message: `Custom audience ${c.targeting_value.slice(0, 64)} was not found in account ${account.id}`, parameter: `targeting_criteria[${index}].targeting_value` })
      }
      audiences.set(c.targeting_value, members)
    }
    const registeredUsers = await ctx.store.zcard(AuthKeys.users())
    const n = await estimateAudience(criteria, { registeredUsers, audiences, isRegistered: isRegisteredMemberKey })
    return sendData(request, reply, { audience_size: sizeRange(n) }, 'audience_estimate')
  })
}
