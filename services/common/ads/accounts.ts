import type { FastifyRequest } from 'fastify'
import type { ServiceContext } from '../context'
import { AdsError, Ads } from '../errors'
import { userIdOf } from './conventions'
import { type AdsWorld, worldOf } from './world'

/**
 * Advertising account records and their features, as every service serving
 * ads routes reads them (the gateway writes them: services/gateway/ads/accounts.ts;
 * account history reads them). Keys:
 *
 *   ads:account:{id}                 Account record (JSON, internal fields included)
 *   ads:user-accounts:{user_id}      sorted set of production account ids the user owns or was granted
 *   ads:sandbox:user-accounts:{user_id}  the same for the accounts of the sandbox world
 *   ads:account-features:{id}        set of granted feature keys (./features)
 *   ads:account-lock:{id}            lease of a change of the account record
 *
 * An account lives in one world (./world.ts): accounts opened on the
 * sandbox host are `world: 'sandbox'`, every other one (also records written
 * before worlds existed) production. A request only ever sees the accounts
 * of its host's world; another world's account is answered like one that
 * does not exist, and everything scoped by the account follows.
 */

export const INDUSTRY_TYPES = [
  'AGENCY', 'BUSINESS_TO_BUSINESS', 'ONLINE_SERVICES', 'EDUCATION', 'FINANCIAL', 'HEALTH', 'GOVERNMENT',
  'MEDIA', 'MOBILE', 'RESTAURANT', 'RETAIL', 'TECHNOLOGY', 'TRAVEL', 'OTHER'
] as const
export type IndustryType = (typeof INDUSTRY_TYPES)[number]

export interface Account {
  id: string
  name: string
  business_name: string | null
  business_id: string | null
  timezone: string
  timezone_switch_at: string | null
  approval_status: string
  industry_type: IndustryType | null
  created_at: string
  updated_at: string
  deleted: boolean
  /** Internal: the user who created the account. */
  owner_user_id: string
  /** Internal: other users the owner granted access to (advertisers / managers). */
  user_ids: string[]
  /** Internal: the world of the account; absent means production. */
  world?: AdsWorld
}

export const AccountKeys = {
  account: (id: string) => `ads:account:${id}`,
  /** The lease that serializes the changes of one account record (withAccountLock). */
  lock: (id: string) => `ads:account-lock:${id}`,
  userAccounts: (userId: string, world: AdsWorld) => (world === 'sandbox' ? `ads:sandbox:user-accounts:${userId}` : `ads:user-accounts:${userId}`),
  features: (id: string) => `ads:account-features:${id}`
}

export async function getAccount(ctx: ServiceContext, id: string): Promise<Account | undefined> {
  return ctx.store.getJson<Account>(AccountKeys.account(id))
}

export function accountWorld(a: Pick<Account, 'world'>): AdsWorld {
  return a.world ?? 'production'
}

/** The account when it exists in `world`; another world's account is not there. */
export async function getAccountIn(ctx: ServiceContext, id: string, world: AdsWorld): Promise<Account | undefined> {
  const account = await getAccount(ctx, id)
  return account && accountWorld(account) === world ? account : undefined
}

export function userMayUse(account: Account, userId: string): boolean {
  return account.owner_user_id === userId || account.user_ids.includes(userId)
}

/**
 * The account of the path, checked against the authenticated user: it must
 * exist in the request's world (404 NOT_FOUND) and be theirs (403
 * ACCOUNT_NOT_FOUND); a deleted account is 404 unless `withDeleted`.
 */
export async function requireAccount(ctx: ServiceContext, request: FastifyRequest, accountId: string, options: { withDeleted?: boolean } = {}): Promise<Account> {
  const userId = userIdOf(request)
  if (!/^[0-9a-z]{1,32}$/.test(accountId)) throw Ads.invalid('account_id', `Invalid account_id "${accountId.slice(0, 40)}"`)
  const account = await getAccountIn(ctx, accountId, worldOf(request))
  if (!account) throw new AdsError(404, { code: 'NOT_FOUND', message: `Account ${accountId} was not found`, parameter: 'account_id' })
  if (!userMayUse(account, userId)) throw Ads.accountNotFound(accountId)
  if (account.deleted && !options.withDeleted) throw new AdsError(404, { code: 'NOT_FOUND', message: `Account ${accountId} was deleted`, parameter: 'account_id' })
  return account
}

export async function accountFeatures(ctx: ServiceContext, accountId: string): Promise<Set<string>> {
  return new Set(await ctx.store.smembers(AccountKeys.features(accountId)))
}
