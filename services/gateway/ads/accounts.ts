import type { FastifyRequest } from 'fastify'
import type { ServiceContext } from '../../common/context'
import { AdsError, Ads } from '../../common/errors'
import { newShortId } from '../../common/ids'
import type { StoreOp } from '../../common/store/types'
import { withLock } from './catalog/lock'
import { userIdOf } from './conventions'

/**
 * Advertising accounts and who may use them. Shared keys (read by the
 * account-history service too):
 *
 *   ads:account:{id}                 Account record (JSON, internal fields included)
 *   ads:user-accounts:{user_id}      sorted set of account ids the user owns or was granted
 *   ads:account-features:{id}        set of granted feature keys
 *   ads:account-lock:{id}            lease of a change of the account record
 *
 * Every read-modify-write of an account record runs under the account's
 * lease (withAccountLock), so concurrent changes (a PUT, a grant, a delete)
 * each start from the latest committed record and none is lost.
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
  /** The lease that serializes the changes of one account record (withAccountLock). */
  lock: (id: string) => `ads:account-lock:${id}`,
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

/**
 * Commits the writes that create or change an account. The default writes
 * them alone; a route that announces the change passes one that commits
 * them with the entity change event (commitEntityChanges), in one batch.
 */
export type AccountCommit = (ops: StoreOp[], account: Account) => Promise<void>

/** Runs `fn` holding the account's lease: changes of one account record, one at a time. */
export function withAccountLock<T>(ctx: Pick<ServiceContext, 'store'>, accountId: string, fn: () => Promise<T>): Promise<T> {
  return withLock(ctx.store, AccountKeys.lock(accountId), fn)
}

export async function createAccount(
  ctx: Pick<ServiceContext, 'store'>,
  ownerUserId: string,
  input: { name?: string; business_id?: string | null; business_name?: string | null } = {},
  commit?: AccountCommit
): Promise<Account> {
  for (;;) {
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
    // Under the id's lease, "the id is free" still holds when the batch commits.
    const created = await withAccountLock(ctx, account.id, async () => {
      if (await ctx.store.exists(AccountKeys.account(account.id))) return false
      const ops: StoreOp[] = [
        { op: 'set', key: AccountKeys.account(account.id), value: JSON.stringify(account) },
        { op: 'zadd', key: AccountKeys.userAccounts(ownerUserId), score: Date.now(), member: account.id }
      ]
      await (commit ? commit(ops, account) : ctx.store.batch(ops))
      return true
    })
    if (created) return account
    // A short-id collision is astronomically rare; another id keeps ids unique anyway.
  }
}

export async function getAccount(ctx: ServiceContext, id: string): Promise<Account | undefined> {
  return ctx.store.getJson<Account>(AccountKeys.account(id))
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

/**
 * Gives `userId` access to the account (the advertiser granting the caller
 * access). `user_ids` is internal: no entity change is announced.
 */
export async function grantAccountAccess(ctx: ServiceContext, accountId: string, userId: string): Promise<Account> {
  return withAccountLock(ctx, accountId, async () => {
    const account = await getAccount(ctx, accountId)
    if (!account) throw Ads.notFound('NOT_FOUND', `Account ${accountId} not found`)
    if (userMayUse(account, userId)) return account
    const granted: Account = { ...account, user_ids: [...account.user_ids, userId] }
    await ctx.store.batch([
      { op: 'set', key: AccountKeys.account(accountId), value: JSON.stringify(granted) },
      { op: 'zadd', key: AccountKeys.userAccounts(userId), score: Date.now(), member: accountId }
    ])
    return granted
  })
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
