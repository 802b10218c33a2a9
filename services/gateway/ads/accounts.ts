import type { FastifyRequest } from 'fastify'
import type { ServiceContext } from '../../common/context'
import { AdsError, Ads } from '../../common/errors'
import { newShortId } from '../../common/ids'
import { userIdOf } from './conventions'

/**
 * Advertising accounts and who may use them. Shared keys (read by the
 * account-history service too):
 *
 *   ads:account:{id}                 Account record (JSON, internal fields included)
 *   ads:user-accounts:{user_id}      sorted set of account ids the user owns or was granted
 *   ads:account-features:{id}        set of granted feature keys
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
}

export type PublicAccount = Omit<Account, 'owner_user_id' | 'user_ids'>

export const AccountKeys = {
  account: (id: string) => `ads:account:${id}`,
  userAccounts: (userId: string) => `ads:user-accounts:${userId}`,
  features: (id: string) => `ads:account-features:${id}`
}

export function publicAccount(a: Account): PublicAccount {
  const { owner_user_id: _owner, user_ids: _users, ...rest } = a
  return rest
}

export function nowIso(): string {
  return new Date().toISOString().replace(/\.\d{3}Z$/, 'Z')
}

export async function createAccount(ctx: ServiceContext, ownerUserId: string, input: { name?: string; business_id?: string | null; business_name?: string | null } = {}): Promise<Account> {
  const now = nowIso()
  const account: Account = {
    id: newShortId(5),
    name: input.name ?? 'Sandbox account',
    business_name: input.business_name ?? null,
    business_id: input.business_id ?? null,
    timezone: 'America/Los_Angeles',
    timezone_switch_at: now,
    approval_status: 'ACCEPTED',
    industry_type: null,
    created_at: now,
    updated_at: now,
    deleted: false,
    owner_user_id: ownerUserId,
    user_ids: []
  }
  const created = await ctx.store.setJsonIfAbsent(AccountKeys.account(account.id), account)
  // A short-id collision is astronomically rare; retrying keeps ids unique anyway.
  if (!created) return createAccount(ctx, ownerUserId, input)
  await ctx.store.zadd(AccountKeys.userAccounts(ownerUserId), Date.now(), account.id)
  return account
}

export async function getAccount(ctx: ServiceContext, id: string): Promise<Account | undefined> {
  return ctx.store.getJson<Account>(AccountKeys.account(id))
}

export async function saveAccount(ctx: ServiceContext, account: Account): Promise<void> {
  await ctx.store.setJson(AccountKeys.account(account.id), account)
}

/** Accounts the user owns or was granted, in creation order (deleted ones included). */
export async function listAccountsForUser(ctx: ServiceContext, userId: string): Promise<Account[]> {
  const ids = await ctx.store.zrange(AccountKeys.userAccounts(userId), 0, -1)
  const accounts = await ctx.store.mgetJson<Account>(ids.map((m) => AccountKeys.account(m.member)))
  return accounts.filter((a): a is Account => a !== undefined)
}

export function userMayUse(account: Account, userId: string): boolean {
  return account.owner_user_id === userId || account.user_ids.includes(userId)
}

/** Gives `userId` access to the account (the advertiser granting the caller access). */
export async function grantAccountAccess(ctx: ServiceContext, accountId: string, userId: string): Promise<Account> {
  const account = await getAccount(ctx, accountId)
  if (!account) throw Ads.notFound('NOT_FOUND', `Account ${accountId} not found`)
  if (!userMayUse(account, userId)) {
    account.user_ids = [...account.user_ids, userId]
    await saveAccount(ctx, account)
    await ctx.store.zadd(AccountKeys.userAccounts(userId), Date.now(), account.id)
  }
  return account
}

/**
 * The account of the path, checked against the authenticated user: it must
 * exist (404 NOT_FOUND) and be theirs (403 ACCOUNT_NOT_FOUND); a deleted
 * account is 404 unless `withDeleted`.
 */
export async function requireAccount(ctx: ServiceContext, request: FastifyRequest, accountId: string, options: { withDeleted?: boolean } = {}): Promise<Account> {
  const userId = userIdOf(request)
  if (!/^[0-9a-z]{1,32}$/.test(accountId)) throw Ads.invalid('account_id', `Invalid account_id "${accountId.slice(0, 40)}"`)
  const account = await getAccount(ctx, accountId)
  if (!account) throw new AdsError(404, { code: 'NOT_FOUND', message: `Account ${accountId} was not found`, parameter: 'account_id' })
  if (!userMayUse(account, userId)) throw Ads.accountNotFound(accountId)
  if (account.deleted && !options.withDeleted) throw new AdsError(404, { code: 'NOT_FOUND', message: `Account ${accountId} was deleted`, parameter: 'account_id' })
  return account
}

export async function accountFeatures(ctx: ServiceContext, accountId: string): Promise<Set<string>> {
  return new Set(await ctx.store.smembers(AccountKeys.features(accountId)))
}

export async function grantFeatures(ctx: ServiceContext, accountId: string, keys: string[]): Promise<Set<string>> {
  await ctx.store.sadd(AccountKeys.features(accountId), ...keys)
  return accountFeatures(ctx, accountId)
}

export async function revokeFeatures(ctx: ServiceContext, accountId: string, keys: string[]): Promise<Set<string>> {
  await ctx.store.srem(AccountKeys.features(accountId), ...keys)
  return accountFeatures(ctx, accountId)
}
