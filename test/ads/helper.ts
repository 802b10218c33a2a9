import type { ServiceContext } from '../../services/common/context'
import { type Account, createAccount } from '../../services/gateway/ads/accounts'
import { createIdentity, type TestIdentity } from '../helper'

/** An identity (app, user, token) plus an advertising account owned by that user. */
export async function createAdsIdentity(ctx: ServiceContext, options: { name?: string; businessId?: string } = {}): Promise<{ id: TestIdentity; account: Account }> {
  const id = await createIdentity(ctx.store)
  const account = await createAccount(ctx, id.user.id, { name: options.name ?? 'Test account', business_id: options.businessId ?? null })
  return { id, account }
}
