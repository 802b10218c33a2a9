/**
 * Account feature keys (service-spec "Campaign management": features).
 *
 *  - GET features reports only the beta features the public platform
 *    exposes there, and only when granted to the account.
 *  - The sandbox host can add and remove any key of the longer list.
 *  - ACCOUNT_HISTORY_ACCESS is this service's allowlist for the account
 *    history beta: only an operator grants it (POST /admin/ads/accounts/:id/features).
 */

export const REPORTED_FEATURES = ['REACH_AND_FREQUENCY_ANALYTICS', 'REACH_FREQUENCY_CAP', 'WEBSITE_CLICKS_CPM_BILLING'] as const

export const SANDBOX_FEATURES = [
  'AGE_TARGETING', 'ALLOW_SKIPPABLE_VIDEOS_FOR_PREROLL_VIEWS_OBJECTIVE', 'AWARENESS_OBJECTIVE', 'BRAND_TPN', 'CHARGE_FOR_GOOD_CLICK',
  'CONVERSATION_CARD', 'CONVERSATION_CARD_FOUR_OPTIONS', 'CONVERSATION_CARD_UNLOCK', 'CPI_CHARGING', 'DIRECT_MESSAGE_CARD', 'DR_TAP',
  'ENGAGER_RETARGETING', 'EVENT_TARGETING', 'INSTALLED_APP_CATEGORY_TARGETING', 'MOBILE_CONVERSION_TRANSACTION_VALUE',
  'OPTIMIZED_ACTION_BIDDING', 'REACH_AND_FREQUENCY_ANALYTICS', 'REACH_FREQUENCY_CAP', 'VALIDATED_AGE_TARGETING',
  'VIDEO_VIEWS_MIDROLL_OBJECTIVE', 'PREROLL_VIEWS_OBJECTIVE', 'VIDEO_APP_DOWNLOAD_CARD'
] as const

/** The allowlist feature of the account history beta. */
export const ACCOUNT_HISTORY_FEATURE = 'ACCOUNT_HISTORY_ACCESS'

/** Every key an operator may grant: the sandbox list, the reported ones and the allowlists. */
export const OPERATOR_FEATURES: readonly string[] = [...new Set<string>([...SANDBOX_FEATURES, ...REPORTED_FEATURES, ACCOUNT_HISTORY_FEATURE])].sort()

export function sortedKeys(keys: Iterable<string>): string[] {
  return [...keys].sort()
}
