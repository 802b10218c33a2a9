import type { ServiceContext } from '../../../common/context'
import type { Actor } from '../conventions'
import { type AdsEntity, EntityRepo } from '../entities'

/**
 * Mobile apps associated with an advertising account (read through GET
 * account_apps). The public platform associates them outside the API; here
 * an operator registers them (POST /admin/ads/accounts/:id/account_apps).
 */

export const OS_TYPES = ['Android', 'iOS'] as const
export type OsType = (typeof OS_TYPES)[number]

export interface AccountApp extends AdsEntity {
  app_store_identifier: string
  os_type: OsType
  conversion_tracking_enabled: boolean
  deep_link_pattern: string | null
}

export function accountApps(ctx: ServiceContext): EntityRepo<AccountApp> {
  return new EntityRepo<AccountApp>(ctx, 'ACCOUNT_APP', 'account_app')
}

/** Android package names (`com.example.app`) or the numeric part of an App Store id. */
export function validAppStoreIdentifier(os: OsType, id: string): boolean {
  return os === 'Android' ? /^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)+$/.test(id) : /^\d{1,12}$/.test(id)
}

export async function addAccountApp(
  ctx: ServiceContext,
  accountId: string,
  input: { app_store_identifier: string; os_type: OsType; conversion_tracking_enabled?: boolean; deep_link_pattern?: string | null },
  actor: Actor
): Promise<AccountApp> {
  return accountApps(ctx).create(
    accountId,
    {
      app_store_identifier: input.app_store_identifier,
      os_type: input.os_type,
      conversion_tracking_enabled: input.conversion_tracking_enabled ?? false,
      deep_link_pattern: input.deep_link_pattern ?? null
    },
    actor
  )
}
