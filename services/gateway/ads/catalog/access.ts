import type { AdsWorld } from '../../../common/ads/world'
import type { ServiceContext } from '../../../common/context'
import { AdsError } from '../../../common/errors'
import { listAccountsForUser } from '../accounts'

/**
 * Whose catalog a caller may operate: their own, or that of a user who
 * granted them access to one of their ads accounts (the `user_id` parameter
 * of the catalog operations names "the user you are operating with").
 */
export async function mayActFor(ctx: ServiceContext, callerId: string, userId: string, world: AdsWorld): Promise<boolean> {
  if (callerId === userId) return true
  // Only accounts of the request's world count: a sandbox grant opens nothing in production.
  const accounts = await listAccountsForUser(ctx, callerId, world)
  return accounts.some((a) => !a.deleted && a.owner_user_id === userId)
}

/** The user a catalog call acts for: `user_id` when given (and allowed), else the caller. */
export async function actingUser(ctx: ServiceContext, callerId: string, userId: string | undefined, world: AdsWorld): Promise<string> {
  if (userId === undefined) return callerId
  const id = userId
  if (!(await mayActFor(ctx, callerId, id, world))) {
    throw new AdsError(403, { code: 'ACTION_NOT_ALLOWED', message: `The authenticated user cannot operate for user ${id}`, parameter: 'user_id' })
  }
  return id
}
