import type { FastifyInstance } from 'fastify'
import { worldOf } from '../../../common/ads/world'
import type { ServiceContext } from '../../../common/context'
import { Ads } from '../../../common/errors'
import { type Account, AccountKeys, accountFeatures, INDUSTRY_TYPES, listAccountsForUser, nowIso, publicAccount, requireAccount, withAccountLock } from '../accounts'
import { type Actor, actorOf, ADS_AUTH, listOptions, paginate, Params, sendData, userIdOf } from '../conventions'
import { commitEntityChanges, diffFields } from '../entities'
import { accountApps } from './account-apps'
import { REPORTED_FEATURES, sortedKeys } from '../../../common/ads/features'
import { filterByIds, matchesNamePrefix, pageExtras } from './lists'
import { advertiserBusinessCategories } from './reference-data'

/**
 * Accounts (list, read, update), their reported features, their apps and
 * the advertiser business categories: the account-level reads of
 * campaign management, served on the production and the sandbox host.
 */

const ACCOUNT_NAME_MAX = 255

/**
 * Applies `patch` to the account as just read under its lease
 * (withAccountLock): the record and its UPDATE change commit in one batch
 * (the outbox publishes the change); nothing is written when nothing
 * public changes.
 */
async function updateAccount(ctx: ServiceContext, before: Account, patch: Partial<Account>, actor: Actor): Promise<Account> {
  const after: Account = { ...before, ...patch }
  const changes = diffFields(publicAccount(before), publicAccount(after))
  if (Object.keys(changes).length === 0) return before
  after.updated_at = nowIso()
  await commitEntityChanges(ctx, [{ op: 'set', key: AccountKeys.account(after.id), value: JSON.stringify(after) }], [
    {
      account_id: after.id,
      entity_type: 'ACCOUNT',
      entity_id: after.id,
      change_type: 'UPDATE',
      changed_by: actor,
      changes,
      entity_data: publicAccount(after) as unknown as Record<string, unknown>
    }
  ])
  return after
}

export async function registerAccountRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  app.get('/12/accounts', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const p = Params.query(request)
    const ids = p.list('account_ids', { max: 200 })
    const q = p.string('q', { max: 255 })
    const opts = listOptions(p, { countDefault: 200, countMax: 1000, sortable: ['name', 'created_at', 'updated_at', 'id'] })
    const accounts = (await listAccountsForUser(ctx, userIdOf(request), worldOf(request))).filter((a) => matchesNamePrefix(a.name, q))
    const page = filterByIds(accounts, ids, opts)
    return sendData(request, reply, page.data.map(publicAccount), 'account', pageExtras(page))
  })

  app.get<{ Params: { account_id: string } }>('/12/accounts/:account_id', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const withDeleted = Params.query(request).bool('with_deleted', { default: false })
    const account = await requireAccount(ctx, request, request.params.account_id, { withDeleted })
    return sendData(request, reply, publicAccount(account), 'account')
  })

  app.put<{ Params: { account_id: string } }>('/12/accounts/:account_id', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const { id } = await requireAccount(ctx, request, request.params.account_id)
    const p = Params.query(request)
    if (p.isEmpty('name')) throw Ads.invalid('name', 'name cannot be empty')
    const name = p.string('name', { max: ACCOUNT_NAME_MAX })
    const industry = p.isEmpty('industry_type') ? null : p.enumOf('industry_type', INDUSTRY_TYPES)
    const patch: Partial<Account> = { ...(name !== undefined ? { name } : {}), ...(industry !== undefined ? { industry_type: industry } : {}) }
    const after = await withAccountLock(ctx, id, async () => updateAccount(ctx, await requireAccount(ctx, request, id), patch, actorOf(request)))
    return sendData(request, reply, publicAccount(after), 'account')
  })

  app.get<{ Params: { account_id: string } }>('/12/accounts/:account_id/features', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const asked = Params.query(request).list('feature_keys', { values: REPORTED_FEATURES })
    const granted = await accountFeatures(ctx, account.id)
    const visible = (asked ?? REPORTED_FEATURES).filter((k) => granted.has(k))
    return sendData(request, reply, sortedKeys(new Set(visible)), 'feature')
  })

  app.get<{ Params: { account_id: string } }>('/12/accounts/:account_id/account_apps', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const opts = listOptions(Params.query(request), { countDefault: 200, countMax: 1000, sortable: ['created_at', 'updated_at', 'id', 'app_store_identifier', 'os_type'] })
    const page = paginate(await accountApps(ctx).list(account.id), opts)
    return sendData(request, reply, page.data, 'account_app', pageExtras(page))
  })

  app.get('/12/advertiser_business_categories', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    return sendData(request, reply, advertiserBusinessCategories(), 'advertiser_business_category', { next_cursor: null })
  })
}
