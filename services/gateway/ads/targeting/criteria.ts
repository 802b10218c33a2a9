import type { ServiceContext } from '../../../common/context'
import { Ads, AdsError } from '../../../common/errors'
import type { Params } from '../conventions'
import { type AdsEntity, EntityRepo } from '../entities'

/**
 * Targeting criteria: who a line item reaches, one (type, value, operator)
 * per criterion, as the public platform shapes them (`line_item_id`,
 * `name`, `targeting_type`, `targeting_value`, `operator_type`...).
 *
 * This module holds the entity, its repository (entity type
 * TARGETING_CRITERIA for account history and the audience targeting index)
 * and the checks that need no store: the type table with each type's value
 * format and accepted operators, the aliases of the custom-audience types,
 * and reading one criterion's parameters. Checks against stored state
 * (the line item, the audience, the line item's other criteria) live in
 * plan.ts.
 */

export const OPERATORS = ['EQ', 'NE', 'GTE', 'LT'] as const
export type Operator = (typeof OPERATORS)[number]

export interface TargetingCriterion extends AdsEntity {
  line_item_id: string
  name: string
  targeting_type: string
  targeting_value: string
  operator_type: Operator
}

export function targetingCriteria(ctx: ServiceContext): EntityRepo<TargetingCriterion> {
  return new EntityRepo<TargetingCriterion>(ctx, 'TARGETING_CRITERIA', 'targeting_criterion')
}

export const NOT_FOUND_CODE = 'TARGETING_CRITERION_NOT_FOUND'

/** What a value of a targeting type refers to, for the checks plan.ts makes against the store. */
export type Reference = 'user' | 'campaign' | 'audience' | 'language' | 'none'

interface TypeRule {
  /** Format of targeting_value. */
  value: RegExp
  /** What a valid value looks like, for error messages. */
  expect: string
  operators: readonly Operator[]
  references: Reference
  /** At most one live criterion of this type per line item. */
  single?: boolean
}

const EQ_NE: readonly Operator[] = ['EQ', 'NE']
const KEYWORD: TypeRule = { value: /^[^\p{Cc}]+$/u, expect: 'a keyword or phrase without control characters', operators: EQ_NE, references: 'none' }
const USER: TypeRule = { value: /^[0-9]{1,19}$/, expect: 'the numeric id of a user', operators: EQ_NE, references: 'user' }
const CAMPAIGN: TypeRule = { value: /^[0-9a-z]{1,32}$/, expect: 'the id of a campaign of this account', operators: EQ_NE, references: 'campaign' }
const OPAQUE: TypeRule = { value: /^[0-9A-Za-z_-]{1,64}$/, expect: 'an identifier from the targeting options (letters, digits, _ and -)', operators: EQ_NE, references: 'none' }
const AUDIENCE: TypeRule = { value: /^[0-9a-z]{1,32}$/, expect: 'the id of a custom audience this account owns or was granted', operators: EQ_NE, references: 'audience' }

/**
 * Every targeting type accepted, with its value format. The set covers
 * every type the audience estimate understands (campaigns/audience-estimate.ts)
 * so a criterion that can be estimated can also be stored.
 */
export const TYPE_RULES: Readonly<Record<string, TypeRule>> = {
  BROAD_KEYWORD: KEYWORD,
  EXACT_KEYWORD: KEYWORD,
  PHRASE_KEYWORD: KEYWORD,
  UNORDERED_KEYWORD: KEYWORD,
  FOLLOWERS_OF_USER: USER,
  SIMILAR_TO_FOLLOWERS_OF_USER: USER,
  USER_ENGAGEMENT: USER,
  USER_ENGAGEMENT_LOOKALIKE: USER,
  CAMPAIGN_ENGAGEMENT: CAMPAIGN,
  CAMPAIGN_ENGAGEMENT_LOOKALIKE: CAMPAIGN,
  CUSTOM_AUDIENCE: AUDIENCE,
  CUSTOM_AUDIENCE_EXPANDED: { ...AUDIENCE, operators: ['EQ'] },
  INTEREST: { value: /^[0-9]{1,10}$/, expect: 'a numeric interest id', operators: EQ_NE, references: 'none' },
  CONVERSATION: OPAQUE,
  EVENT: { ...OPAQUE, single: true },
  TV_SHOW: OPAQUE,
  LIVE_TV_EVENT: OPAQUE,
  LOCATION: OPAQUE,
  DEVICE: OPAQUE,
  PLATFORM: { value: /^[0-9]{1,3}$/, expect: 'a numeric platform id (0 iOS, 1 Android, 3 mobile web, 4 desktop)', operators: EQ_NE, references: 'none' },
  PLATFORM_VERSION: OPAQUE,
  NETWORK_OPERATOR: OPAQUE,
  APP_STORE_CATEGORY: OPAQUE,
  APP_STORE_CATEGORY_LOOKALIKE: OPAQUE,
  // App exclusion on the audience platform: exclusion only.
  APP_LIST: { ...OPAQUE, operators: ['NE'] },
  AGE: { value: /^AGE_(\d{2}_TO_\d{2}|OVER_\d{2})$/, expect: 'an age bucket such as AGE_18_TO_34 or AGE_OVER_21', operators: EQ_NE, references: 'none', single: true },
  GENDER: { value: /^[12]$/, expect: '1 (male) or 2 (female)', operators: EQ_NE, references: 'none' },
  LANGUAGE: { value: /^[a-z]{2}$/, expect: 'an ISO 639-1 language code such as en', operators: EQ_NE, references: 'language' },
  ENGAGEMENT_TYPE: { value: /^(IMPRESSION|ENGAGEMENT)$/, expect: 'IMPRESSION or ENGAGEMENT', operators: EQ_NE, references: 'none' },
  WIFI_ONLY: { value: /^(true|false)$/, expect: 'true or false', operators: ['EQ'], references: 'none' },
  // Months since the device joined its network: compared, not matched.
  NETWORK_ACTIVATION_DURATION: { value: /^[0-9]{1,3}$/, expect: 'a number of months', operators: ['GTE', 'LT'], references: 'none' }
}

export const TARGETING_TYPE_NAMES: readonly string[] = Object.keys(TYPE_RULES)

export const AUDIENCE_TYPES: readonly string[] = ['CUSTOM_AUDIENCE', 'CUSTOM_AUDIENCE_EXPANDED']

/**
 * Older and alternative names of the custom-audience types: tailored
 * audiences are what custom audiences used to be called, and the
 * EXCLUDED_ forms are an exclusion (operator NE).
 */
const ALIASES: Readonly<Record<string, { type: string; operator?: Operator }>> = {
  TAILORED_AUDIENCE: { type: 'CUSTOM_AUDIENCE' },
  TAILORED_AUDIENCE_EXPANDED: { type: 'CUSTOM_AUDIENCE_EXPANDED' },
  EXCLUDED_CUSTOM_AUDIENCE: { type: 'CUSTOM_AUDIENCE', operator: 'NE' },
  EXCLUDED_TAILORED_AUDIENCE: { type: 'CUSTOM_AUDIENCE', operator: 'NE' }
}

export const TARGETING_TYPE_ALIASES: readonly string[] = Object.keys(ALIASES)

export const VALUE_MAX = 255

/** One criterion as a client asked for it, formats checked, names canonical. */
export interface CriterionInput {
  line_item_id: string
  targeting_type: string
  targeting_value: string
  operator_type: Operator
}

function readValue(p: Params): string {
  const raw = p.raw('targeting_value')
  if (raw === undefined || raw === null || raw === '') throw Ads.missing('targeting_value')
  // Batch bodies may carry numbers (GENDER 1) or booleans (WIFI_ONLY true); the value is stored as text.
  if (typeof raw !== 'string' && typeof raw !== 'number' && typeof raw !== 'boolean') {
    throw Ads.invalid('targeting_value', 'targeting_value must be a string')
  }
  const value = String(raw).trim()
  if (value === '') throw Ads.missing('targeting_value')
  if ([...value].length > VALUE_MAX) throw Ads.invalid('targeting_value', `targeting_value must be at most ${VALUE_MAX} characters, got ${[...value].length}`)
  return value
}

function checkAge(value: string): void {
  const range = /^AGE_(\d{2})_TO_(\d{2})$/.exec(value)
  if (range && Number(range[1]) >= Number(range[2])) {
    throw Ads.invalid('targeting_value', `Invalid age bucket ${value}: the lower bound must be below the upper bound`)
  }
  const floor = Number((/(\d{2})/.exec(value) ?? ['', '0'])[1])
  if (floor < 13) throw Ads.invalid('targeting_value', `Invalid age bucket ${value}: no bucket starts below 13`)
}

/** EQ when the type takes it, the type's only operator otherwise (APP_LIST: NE); a choice between two is the client's to make. */
function defaultOperator(type: string, rule: TypeRule): Operator {
  if (rule.operators.includes('EQ')) return 'EQ'
  if (rule.operators.length === 1) return rule.operators[0] as Operator
  throw new AdsError(400, { code: 'MISSING_PARAMETER', message: `"operator_type" is missing: ${type} takes ${rule.operators.join(' or ')}`, parameter: 'operator_type' })
}

/**
 * Reads and checks the parameters of one new criterion (query of
 * POST targeting_criteria, or `params` of a batch Create): presence,
 * the type and its aliases, the value format of the type, the operator the
 * type accepts, and `tailored_audience_expansion` (custom audiences only:
 * true targets CUSTOM_AUDIENCE_EXPANDED).
 */
export function readCriterionInput(p: Params): CriterionInput {
  const lineItemId = p.string('line_item_id', { required: true, max: 64 }) as string
  const asked = p.string('targeting_type', { required: true, max: 64 }) as string
  const value = readValue(p)
  const requestedOperator = p.enumOf('operator_type', OPERATORS)
  const expansion = p.bool('tailored_audience_expansion')

  const alias = ALIASES[asked]
  let type = alias?.type ?? asked
  const rule = TYPE_RULES[type]
  if (!rule) {
    throw Ads.invalid('targeting_type', `Unknown targeting_type "${asked.slice(0, 64)}"; expected one of ${[...TARGETING_TYPE_NAMES, ...TARGETING_TYPE_ALIASES].join(', ')}`)
  }
  if (alias?.operator && requestedOperator !== undefined && requestedOperator !== alias.operator) {
    throw Ads.invalid('operator_type', `targeting_type ${asked} is an exclusion: operator_type must be ${alias.operator} or omitted`)
  }
  const operator: Operator = alias?.operator ?? requestedOperator ?? defaultOperator(type, rule)

  if (expansion !== undefined) {
    if (!AUDIENCE_TYPES.includes(type)) throw Ads.invalid('tailored_audience_expansion', `tailored_audience_expansion applies to custom audience targeting only, not to ${type}`)
    if (expansion) type = 'CUSTOM_AUDIENCE_EXPANDED'
    else if (type === 'CUSTOM_AUDIENCE_EXPANDED') throw Ads.invalid('tailored_audience_expansion', 'tailored_audience_expansion=false contradicts targeting_type CUSTOM_AUDIENCE_EXPANDED')
  }
  const effective = TYPE_RULES[type] as TypeRule
  if (!effective.operators.includes(operator)) {
    throw Ads.invalid('operator_type', `targeting_type ${type} accepts operator_type ${effective.operators.join(' or ')}, got ${operator}`)
  }
  if (!effective.value.test(value)) {
    throw Ads.invalid('targeting_value', `Invalid targeting_value "${value.slice(0, 100)}" for targeting_type ${type}: expected ${effective.expect}`)
  }
  if (type === 'AGE') checkAge(value)
  return { line_item_id: lineItemId, targeting_type: type, targeting_value: value, operator_type: operator }
}

export function ruleOf(type: string): TypeRule {
  const rule = TYPE_RULES[type]
  if (!rule) throw new Error(`no rule for targeting type ${type}`)
  return rule
}

/** Keyword values compare case-insensitively (the platform matches keywords without case). */
export function sameTarget(a: Pick<CriterionInput, 'targeting_type' | 'targeting_value' | 'operator_type'>, b: Pick<CriterionInput, 'targeting_type' | 'targeting_value' | 'operator_type'>): boolean {
  if (a.targeting_type !== b.targeting_type || a.operator_type !== b.operator_type) return false
  return a.targeting_type.endsWith('_KEYWORD') ? a.targeting_value.toLowerCase() === b.targeting_value.toLowerCase() : a.targeting_value === b.targeting_value
}
