import type { FastifyInstance } from 'fastify'
import { AuthKeys } from '../../../common/auth/records'
import type { ServiceContext } from '../../../common/context'
import { Ads, AdsError } from '../../../common/errors'
import { requireAccount } from '../accounts'
import { ADS_AUTH, Params, requireJsonBody, sendData } from '../conventions'
import { audienceMemberKeys } from '../audiences/audiences'

/**
 * POST accounts/:account_id/audience_estimate: the approximate size of the
 * audience a set of targeting criteria reaches, computed from the people
 * this system knows, deterministically (the same data and criteria always
 * give the same answer; nothing is random).
 *
 * People: every registered user (the `auth:users` index), plus the members
 * of any custom audience a criterion names that are not registered users.
 *
 * Who matches a criterion:
 *  - CUSTOM_AUDIENCE / CUSTOM_AUDIENCE_EXPANDED: the audience's members
 *    (EXPANDED adds the people similar to them: a 1-in-10 hashed share of
 *    everyone else);
 *  - every other type: a stable, hashed share of the people, the same
 *    person always matching the same (type, value):
 *    fnv1a(type|value|person) / 2^32 < share(type). Shares model how broad
 *    a type is (a keyword reaches fewer people than a language).
 *
 * Combination (as line item targeting works on the platform): primary
 * criteria with EQ are unioned (followers OR keywords OR interests ...);
 * every other type present with EQ narrows the result to people matching
 * at least one of its values (location AND gender ...); every NE
 * criterion removes the people it matches. With no EQ primary criterion
 * the start is everyone. The size N is returned as a range:
 * `{min: floor(0.9 N), max: ceil(1.1 N)}`.
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

/** Share of people a single value of each type reaches. */
const SHARE: Record<string, number> = {
  FOLLOWERS_OF_USER: 0.05, SIMILAR_TO_FOLLOWERS_OF_USER: 0.12, INTEREST: 0.15, BROAD_KEYWORD: 0.08, EXACT_KEYWORD: 0.03,
  PHRASE_KEYWORD: 0.04, UNORDERED_KEYWORD: 0.05, CONVERSATION: 0.1, EVENT: 0.06, TV_SHOW: 0.05, LIVE_TV_EVENT: 0.04,
  CAMPAIGN_ENGAGEMENT: 0.02, CAMPAIGN_ENGAGEMENT_LOOKALIKE: 0.08, USER_ENGAGEMENT: 0.03, USER_ENGAGEMENT_LOOKALIKE: 0.1,
  APP_STORE_CATEGORY: 0.1, APP_STORE_CATEGORY_LOOKALIKE: 0.2, AGE: 0.25, DEVICE: 0.2, ENGAGEMENT_TYPE: 0.5, GENDER: 0.5,
  LANGUAGE: 0.35, LOCATION: 0.2, NETWORK_ACTIVATION_DURATION: 0.3, NETWORK_OPERATOR: 0.25, PLATFORM: 0.5,
  PLATFORM_VERSION: 0.3, WIFI_ONLY: 0.6, APP_LIST: 0.1
}
const EXPANDED_SHARE = 0.1

const VALUE_RULES: Record<string, RegExp> = {
  FOLLOWERS_OF_USER: /^\d{1,19}$/,
  SIMILAR_TO_FOLLOWERS_OF_USER: /^\d{1,19}$/,
  GENDER: /^[12]$/,
  AGE: /^AGE_(\d{2}_TO_\d{2}|OVER_\d{2})$/,
  LANGUAGE: /^[a-z]{2}$/,
  WIFI_ONLY: /^(true|false)$/
}

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
    const rule = VALUE_RULES[type]
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

/** 32-bit FNV-1a: a fast, stable hash (the estimate must not change between runs or processes). */
export function fnv1a(text: string): number {
  let h = 0x811c9dc5
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i)
    h = Math.imul(h, 0x01000193)
  }
  return h >>> 0
}

function hashedMatch(type: string, value: string, person: string, share: number): boolean {
  return fnv1a(`${type}|${value.toLowerCase()}|${person}`) / 0x1_0000_0000 < share
}

export interface EstimateInput {
  /** Registered user ids. */
  users: string[]
  /** Members of each named custom audience (user ids, or other identifiers for people not registered). */
  audiences: Map<string, Set<string>>
}

/** The number of people the criteria reach (see the module comment for the rules). */
export function estimateAudience(criteria: Criterion[], input: EstimateInput): number {
  const people = new Set(input.users)
  for (const members of input.audiences.values()) for (const m of members) people.add(m)

  const matches = (c: Criterion, person: string): boolean => {
    if (c.targeting_type === 'CUSTOM_AUDIENCE' || c.targeting_type === 'CUSTOM_AUDIENCE_EXPANDED') {
      const members = input.audiences.get(c.targeting_value)
      if (members?.has(person)) return true
      return c.targeting_type === 'CUSTOM_AUDIENCE_EXPANDED' && hashedMatch(c.targeting_type, c.targeting_value, person, EXPANDED_SHARE)
    }
    return hashedMatch(c.targeting_type, c.targeting_value, person, SHARE[c.targeting_type] ?? 0.1)
  }

  const primaries = criteria.filter((c) => c.operator_type === 'EQ' && PRIMARY.has(c.targeting_type))
  const narrowing = new Map<string, Criterion[]>()
  for (const c of criteria) {
    if (c.operator_type === 'EQ' && !PRIMARY.has(c.targeting_type)) narrowing.set(c.targeting_type, [...(narrowing.get(c.targeting_type) ?? []), c])
  }
  const exclusions = criteria.filter((c) => c.operator_type === 'NE')

  let n = 0
  for (const person of people) {
    if (primaries.length > 0 && !primaries.some((c) => matches(c, person))) continue
    let inAll = true
    for (const group of narrowing.values()) {
      if (!group.some((c) => matches(c, person))) {
        inAll = false
        break
      }
    }
    if (!inAll || exclusions.some((c) => matches(c, person))) continue
    n++
  }
  return n
}

export function sizeRange(n: number): { min: number; max: number } {
  return { min: Math.floor(n * 0.9), max: Math.ceil(n * 1.1) }
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
      if ((c.targeting_type !== 'CUSTOM_AUDIENCE' && c.targeting_type !== 'CUSTOM_AUDIENCE_EXPANDED') || audiences.has(c.targeting_value)) continue
      const members = await audienceMemberKeys(ctx, account.id, c.targeting_value)
      if (members === undefined) {
        const index = criteria.indexOf(c)
        throw new AdsError(400, { code: 'INVALID_PARAMETER', message: `Custom audience ${c.targeting_value.slice(0, 64)} was not found in account ${account.id}`, parameter: `targeting_criteria[${index}].targeting_value` })
      }
      audiences.set(c.targeting_value, members)
    }
    const users = (await ctx.store.zrange(AuthKeys.users(), 0, -1)).map((m) => m.member)
    const n = estimateAudience(criteria, { users, audiences })
    return sendData(request, reply, { audience_size: sizeRange(n) }, 'audience_estimate')
  })
}
