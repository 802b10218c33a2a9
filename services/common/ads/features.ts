/**
 * Account feature keys (docs/contract.md "Account features").
 *
 *  - GET features reports only the beta features the public platform
 *    exposes there, and only when granted to the account.
 *  - GATED_FEATURES are the features the contract makes behaviour depend on:
 *    PROMOTED_MEDIA_POLLS (polls with an image or a video),
 *    SHARE_AUDIENCE_OUTSIDE_BUSINESS (audience permissions granted to an
 *    account of another business) and ACCOUNT_HISTORY_ACCESS (this
 *    service's allowlist of the account history beta).
 *  - The operator grants any known key (POST /admin/ads/accounts/:id/features,
 *    `make account ARGS="feature grant ..."`).
 *  - The sandbox host adds and removes the sandbox's keys plus the gated
 *    features: the sandbox is a world of its own (its accounts are not
 *    seen on the production host), so a key granted there unlocks nothing
 *    in production, and a client can try every gated operation there.
 */

export const REPORTED_FEATURES = ['REACH_AND_FREQUENCY_ANALYTICS', 'REACH_FREQUENCY_CAP', 'WEBSITE_CLICKS_CPM_BILLING'] as const

export const SANDBOX_FEATURES = [
  'AGE_TARGETING', 'ALLOW_SKIPPABLE_VIDEOS_FOR_PREROLL_VIEWS_OBJECTIVE', 'AWARENESS_OBJECTIVE', 'BRAND_TPN', 'CHARGE_FOR_GOOD_CLICK',
  'CONVERSATION_CARD', 'CONVERSATION_CARD_FOUR_OPTIONS', 'CONVERSATION_CARD_UNLOCK', 'CPI_CHARGING', 'DIRECT_MESSAGE_CARD', 'DR_TAP',
  'ENGAGER_RETARGETING', 'EVENT_TARGETING', 'INSTALLED_APP_CATEGORY_TARGETING', 'MOBILE_CONVERSION_TRANSACTION_VALUE',
  'OPTIMIZED_ACTION_BIDDING', 'REACH_AND_FREQUENCY_ANALYTICS', 'REACH_FREQUENCY_CAP', 'VALIDATED_AGE_TARGETING',
  'VIDEO_VIEWS_MIDROLL_OBJECTIVE', 'PREROLL_VIEWS_OBJECTIVE', 'VIDEO_APP_DOWNLOAD_CARD'
] as const

/** Polls with media (image or video) need it (beta). */
export const MEDIA_POLLS_FEATURE = 'PROMOTED_MEDIA_POLLS'
/** Sharing an audience with an account of another business needs it on the owning account. */
export const SHARE_OUTSIDE_BUSINESS_FEATURE = 'SHARE_AUDIENCE_OUTSIDE_BUSINESS'
/** The allowlist feature of the account history beta. */
export const ACCOUNT_HISTORY_FEATURE = 'ACCOUNT_HISTORY_ACCESS'

/** Every feature some operation checks before it runs. */
export const GATED_FEATURES = [MEDIA_POLLS_FEATURE, SHARE_OUTSIDE_BUSINESS_FEATURE, ACCOUNT_HISTORY_FEATURE] as const

/** What the sandbox host's feature routes add and remove. */
export const SANDBOX_GRANTABLE_FEATURES: readonly string[] = [...new Set<string>([...SANDBOX_FEATURES, ...GATED_FEATURES])]

/** Every key an operator may grant: the sandbox list, the reported ones and the gated ones. */
export const OPERATOR_FEATURES: readonly string[] = [...new Set<string>([...SANDBOX_FEATURES, ...REPORTED_FEATURES, ...GATED_FEATURES])].sort()

export function sortedKeys(keys: Iterable<string>): string[] {
  return [...keys].sort()
}
