import type { FastifyInstance } from 'fastify'
import type { ServiceContext } from '../../../common/context'
import { Ads } from '../../../common/errors'
import {
  type Account,
  AccountKeys,
  accountFeatures,
  createAccount,
  grantFeatures,
  nowIso,
  publicAccount,
  requireAccount,
  revokeFeatures,
  withAccountLock
} from '../accounts'
import { actorOf, ADS_AUTH, Params, sendData, userIdOf } from '../conventions'
import { commitEntityChanges, type EntityChangeInput } from '../entities'
import { SANDBOX_GRANTABLE_FEATURES, sortedKeys } from '../../../common/ads/features'
import { createDefaultFundingInstrument, registerSandboxFundingInstrumentRoutes } from './funding-instruments'

/**
 * The sandbox-only operations of {ads_sandbox_url}: create and delete
 * accounts, add and remove account features, add and delete funding
 * instruments. They are registered on the sandbox server only, so the
 * production host answers them 404 ROUTE_NOT_FOUND.
 */

/** Method and path of every sandbox-only operation (funding instruments: funding-instruments.ts). */
const SANDBOX_ONLY: ReadonlyArray<readonly ['POST' | 'DELETE', string]> = [
  ['POST', '/12/accounts'],
  ['DELETE', '/12/accounts/:account_id'],
  ['POST', '/12/accounts/:account_id/features'],
  ['DELETE', '/12/accounts/:account_id/features'],
  ['POST', '/12/accounts/:account_id/funding_instruments'],
  ['DELETE', '/12/accounts/:account_id/funding_instruments/:funding_instrument_id']
]

/**
 * On the production host the sandbox-only operations do not exist: 404
 * ROUTE_NOT_FOUND, as on the public platform. They are answered explicitly
 * because their paths exist there under other methods (GET accounts,
 * features, funding instruments), which the server's fallback would
 * otherwise answer 405 METHOD_NOT_ALLOWED.
 */
export function registerSandboxOnlyRefusals(app: FastifyInstance): void {
  for (const [method, url] of SANDBOX_ONLY) {
    // Not an operation of this host: left out of its OpenAPI document.
    app.route({ method, url, schema: { hide: true }, handler: async () => { throw Ads.routeNotFound() } })
  }
}

export async function registerSandboxRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  app.post('/12/accounts', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const actor = actorOf(request)
    // The account and its CREATE change commit together (the outbox publishes the change).
    const account = await createAccount(ctx, userIdOf(request), { world: 'sandbox' }, (ops, created) => commitEntityChanges(ctx, ops, [accountChange(created, 'CREATE', actor)]))
    await createDefaultFundingInstrument(ctx, account.id, actor)
    return sendData(request, reply, publicAccount(account), 'account')
  })

  app.delete<{ Params: { account_id: string } }>('/12/accounts/:account_id', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const { id } = await requireAccount(ctx, request, request.params.account_id)
    const deleted = await withAccountLock(ctx, id, async () => {
      // Read again under the lease: a change committed meanwhile is kept, a delete meanwhile is 404.
      const account = await requireAccount(ctx, request, id)
      const after: Account = { ...account, deleted: true, updated_at: nowIso() }
      // The account and its change event commit together (the outbox publishes the event).
      await commitEntityChanges(ctx, [{ op: 'set', key: AccountKeys.account(after.id), value: JSON.stringify(after) }], [
        { ...accountChange(after, 'DELETE', actorOf(request)), changes: { deleted: { old: false, new: true } } }
      ])
      return after
    })
    return sendData(request, reply, publicAccount(deleted), 'account')
  })

  app.post<{ Params: { account_id: string } }>('/12/accounts/:account_id/features', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const keys = Params.query(request).list('feature_keys', { required: true, max: SANDBOX_GRANTABLE_FEATURES.length, values: SANDBOX_GRANTABLE_FEATURES }) as string[]
    const granted = await grantFeatures(ctx, account.id, [...new Set(keys)])
    return sendData(request, reply, sortedKeys(granted), 'feature')
  })

  app.delete<{ Params: { account_id: string } }>('/12/accounts/:account_id/features', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const keys = Params.query(request).list('feature_keys', { required: true, max: SANDBOX_GRANTABLE_FEATURES.length, values: SANDBOX_GRANTABLE_FEATURES }) as string[]
    // Removing a key the account does not have is not an error: the result is the same list.
    const current = await accountFeatures(ctx, account.id)
    const present = [...new Set(keys)].filter((k) => current.has(k))
    const remaining = present.length > 0 ? await revokeFeatures(ctx, account.id, present) : current
    return sendData(request, reply, sortedKeys(remaining), 'feature')
  })

  await registerSandboxFundingInstrumentRoutes(app, ctx)
}

function accountChange(account: Account, changeType: 'CREATE' | 'DELETE', actor: { user_id: string; platform: string }): EntityChangeInput {
  const data = publicAccount(account) as unknown as Record<string, unknown>
  const changes: Record<string, { old: unknown; new: unknown }> = {}
  if (changeType === 'CREATE') for (const [k, v] of Object.entries(data)) if (k !== 'updated_at') changes[k] = { old: null, new: v }
  return { account_id: account.id, entity_type: 'ACCOUNT', entity_id: account.id, change_type: changeType, changed_by: actor, changes, entity_data: data }
}
