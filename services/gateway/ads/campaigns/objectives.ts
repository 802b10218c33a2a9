/**
 * What each line item objective allows: its optimization goals, bid
 * strategies, the unit it is charged by, and the defaults the service picks
 * when a request leaves them out (docs/contract.md "Bid strategy rules";
 * the public platform's line item reference for the per-objective goals).
 *
 *  - `MAX` is unavailable for REACH and FOLLOWERS; `TARGET` is available for
 *    REACH and WEBSITE_CLICKS only; `AUTO` everywhere (and it ignores a bid).
 *  - `pay_by` can be chosen only where the goal has more than one billing
 *    unit: goal APP_INSTALLS (APP_CLICK or IMPRESSION, default IMPRESSION)
 *    and goal LINK_CLICKS (LINK_CLICK or IMPRESSION, default IMPRESSION,
 *    IMPRESSION not with TARGET). Everywhere else it is fixed by the goal.
 */

export const OBJECTIVES = ['APP_ENGAGEMENTS', 'APP_INSTALLS', 'REACH', 'FOLLOWERS', 'ENGAGEMENTS', 'VIDEO_VIEWS', 'PREROLL_VIEWS', 'WEBSITE_CLICKS'] as const
export type Objective = (typeof OBJECTIVES)[number]

export const GOALS = [
  'APP_CLICKS', 'APP_INSTALLS', 'APP_PURCHASES', 'ENGAGEMENT', 'FOLLOWERS', 'LINK_CLICKS', 'MAX_REACH', 'PREROLL',
  'PREROLL_STARTS', 'REACH_WITH_ENGAGEMENT', 'VIDEO_VIEW', 'VIEW_3S_100PCT', 'VIEW_6S', 'VIEW_15S', 'WEBSITE_CONVERSIONS'
] as const
export type Goal = (typeof GOALS)[number]

export const BID_STRATEGIES = ['AUTO', 'MAX', 'TARGET'] as const
export type BidStrategy = (typeof BID_STRATEGIES)[number]

/** The values a client may choose for pay_by. */
export const PAY_BY_CHOICES = ['APP_CLICK', 'IMPRESSION', 'LINK_CLICK'] as const
/** Every billing unit a line item can report (the fixed ones included). */
export type PayBy = (typeof PAY_BY_CHOICES)[number] | 'ENGAGEMENT' | 'FOLLOW' | 'VIEW'

/** Objectives whose line items may carry a frequency cap. */
export const FREQUENCY_CAP_OBJECTIVES: readonly Objective[] = ['REACH', 'ENGAGEMENTS', 'VIDEO_VIEWS', 'PREROLL_VIEWS']

/** Objectives that promote a mobile app and need an app store identifier. */
export const APP_OBJECTIVES: readonly Objective[] = ['APP_INSTALLS', 'APP_ENGAGEMENTS']

interface ObjectiveRules {
  /** Accepted goals; the first is the default. */
  goals: readonly Goal[]
  bidStrategies: readonly BidStrategy[]
  /** The strategy used when none is given but a bid amount is. */
  bidStrategyWithAmount: BidStrategy
}

const RULES: Record<Objective, ObjectiveRules> = {
  APP_ENGAGEMENTS: { goals: ['APP_CLICKS', 'APP_INSTALLS'], bidStrategies: ['AUTO', 'MAX'], bidStrategyWithAmount: 'MAX' },
  APP_INSTALLS: { goals: ['APP_INSTALLS', 'APP_CLICKS', 'APP_PURCHASES'], bidStrategies: ['AUTO', 'MAX'], bidStrategyWithAmount: 'MAX' },
  REACH: { goals: ['MAX_REACH', 'REACH_WITH_ENGAGEMENT'], bidStrategies: ['AUTO', 'TARGET'], bidStrategyWithAmount: 'TARGET' },
  FOLLOWERS: { goals: ['FOLLOWERS'], bidStrategies: ['AUTO'], bidStrategyWithAmount: 'AUTO' },
  ENGAGEMENTS: { goals: ['ENGAGEMENT'], bidStrategies: ['AUTO', 'MAX'], bidStrategyWithAmount: 'MAX' },
  VIDEO_VIEWS: { goals: ['VIDEO_VIEW', 'VIEW_3S_100PCT', 'VIEW_6S', 'VIEW_15S'], bidStrategies: ['AUTO', 'MAX'], bidStrategyWithAmount: 'MAX' },
  PREROLL_VIEWS: { goals: ['PREROLL', 'PREROLL_STARTS', 'VIEW_3S_100PCT', 'VIEW_6S', 'VIEW_15S'], bidStrategies: ['AUTO', 'MAX'], bidStrategyWithAmount: 'MAX' },
  WEBSITE_CLICKS: { goals: ['LINK_CLICKS', 'WEBSITE_CONVERSIONS'], bidStrategies: ['AUTO', 'MAX', 'TARGET'], bidStrategyWithAmount: 'MAX' }
}

export function goalsFor(objective: Objective): readonly Goal[] {
  return RULES[objective].goals
}

export function defaultGoal(objective: Objective): Goal {
  return RULES[objective].goals[0] as Goal
}

export function bidStrategiesFor(objective: Objective): readonly BidStrategy[] {
  return RULES[objective].bidStrategies
}

/** AUTO unless the request carries a bid amount, then the objective's bidding strategy. */
export function defaultBidStrategy(objective: Objective, hasBidAmount: boolean): BidStrategy {
  return hasBidAmount ? RULES[objective].bidStrategyWithAmount : 'AUTO'
}

export interface PayByRule {
  /** Values accepted; the first is the default. */
  accepted: readonly PayBy[]
  /** Whether a client may choose among them. */
  choosable: boolean
}

/** The billing units of a goal under a bid strategy. */
export function payByFor(objective: Objective, goal: Goal, bidStrategy: BidStrategy): PayByRule {
  if (goal === 'APP_INSTALLS' && objective === 'APP_INSTALLS') return { accepted: ['IMPRESSION', 'APP_CLICK'], choosable: true }
  if (goal === 'LINK_CLICKS') {
    return bidStrategy === 'TARGET' ? { accepted: ['LINK_CLICK'], choosable: true } : { accepted: ['IMPRESSION', 'LINK_CLICK'], choosable: true }
  }
  return { accepted: [fixedPayBy(objective, goal)], choosable: false }
}

function fixedPayBy(objective: Objective, goal: Goal): PayBy {
  switch (objective) {
    case 'APP_ENGAGEMENTS': return 'APP_CLICK'
    case 'APP_INSTALLS': return goal === 'APP_CLICKS' ? 'APP_CLICK' : 'IMPRESSION'
    case 'REACH': return 'IMPRESSION'
    case 'FOLLOWERS': return 'FOLLOW'
    case 'ENGAGEMENTS': return 'ENGAGEMENT'
    case 'VIDEO_VIEWS':
    case 'PREROLL_VIEWS': return 'VIEW'
    case 'WEBSITE_CLICKS': return 'IMPRESSION'
  }
}
