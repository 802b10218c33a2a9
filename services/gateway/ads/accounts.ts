import type { ServiceContext } from '../../common/context'
import { Ads } from '../../common/errors'
import { newShortId } from '../../common/ids'
import type { StoreOp } from '../../common/store/types'
import { withLock } from './catalog/lock'
import { type Account, AccountKeys, accountFeatures, accountWorld, getAccount, userMayUse } from '../../common/ads/accounts'
import type { AdsWorld } from '../../common/ads/world'

export {
  INDUSTRY_TYPES, type IndustryType, type Account, AccountKeys, getAccount, getAccountIn, accountWorld, userMayUse, requireAccount, accountFeatures
} from '../../common/ads/accounts'

/**
 * Advertising accounts: creating them, granting access and features. The
 * records, their keys and the checks every ads route makes are shared with
 * the account-history service (services/common/ads/accounts.ts, re-exported
 * here).
 *
 * Every read-modify-write of an account record runs under the account's
 * lease (withAccountLock), so concurrent changes (a PUT, a grant, a delete)
 * each start from the latest committed record and none is lost.
 */

export type PublicAccount = Omit<Account, 'owner_user_id' | 'user_ids' | 'world'>

export function publicAccount(a: Account): PublicAccount {
  const { owner_user_id: _owner, user_ids: _users, world: _world, ...rest } = a
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
  input: { name?: string; business_id?: string | null; business_name?: string | null; world?: AdsWorld } = {},
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
      user_ids: [],
      ...(input.world === 'sandbox' ? { world: 'sandbox' as const } : {})
    }
    // Under the id's lease, "the id is free" still holds when the batch commits.
    const created = await withAccountLock(ctx, account.id, async () => {
      if (await ctx.store.exists(AccountKeys.account(account.id))) return false
      const ops: StoreOp[] = [
        { op: 'set', key: AccountKeys.account(account.id), value: JSON.stringify(account) },
        { op: 'zadd', key: AccountKeys.userAccounts(ownerUserId, accountWorld(account)), score: Date.now(), member: account.id }
      ]
      await (commit ? commit(ops, account) : ctx.store.batch(ops))
      return true
    })
    if (created) return account
    // A short-id collision is astronomically rare; another id keeps ids unique anyway.
  }
}

/** Accounts of `world` the user owns or was granted, in creation order (deleted ones included). */
export async function listAccountsForUser(ctx: ServiceContext, userId: string, world: AdsWorld): Promise<Account[]> {
  const ids = await ctx.store.zrange(AccountKeys.userAccounts(userId, world), 0, -1)
  const accounts = await ctx.store.mgetJson<Account>(ids.map((m) => AccountKeys.account(m.member)))
  return accounts.filter((a): a is Account => a !== undefined && accountWorld(a) === world)
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
      { op: 'zadd', key: AccountKeys.userAccounts(userId, accountWorld(account)), score: Date.now(), member: accountId }
    ])
    return granted
  })
}

export async function grantFeatures(ctx: ServiceContext, accountId: string, keys: string[]): Promise<Set<string>> {
  await ctx.store.sadd(AccountKeys.features(accountId), ...keys)
  return accountFeatures(ctx, accountId)
}

export async function revokeFeatures(ctx: ServiceContext, accountId: string, keys: string[]): Promise<Set<string>> {
  await ctx.store.srem(AccountKeys.features(accountId), ...keys)
  return accountFeatures(ctx, accountId)
}
