import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { ServiceContext } from '../../../common/context'
import { Problems } from '../../../common/errors'
import { operatorGuard, resolveOperatorToken } from '../../../common/operator'
import { AuthKeys, type User } from '../../../common/auth/records'
import { accountFeatures, createAccount, getAccount, grantFeatures, publicAccount, revokeFeatures } from '../accounts'
import type { Actor } from '../conventions'
import { addAccountApp, OS_TYPES, type OsType, validAppStoreIdentifier } from './account-apps'
import { OPERATOR_FEATURES, sortedKeys } from '../../../common/ads/features'
import { createDefaultFundingInstrument } from './funding-instruments'

/**
 * Operator routes of campaign management (`/admin/ads/...`, operator
 * bearer token): grant and revoke account features, including the
 * allowlist of the account history beta, register account apps, and open
 * an advertising account for a user on the production host (the sandbox
 * host lets users do that themselves). Errors use the v2 Problem shape like
 * the rest of the operator API.
 *
 *   POST   /admin/ads/accounts                     {"user_id", "name"?}: account + default funding instrument
 *   GET    /admin/ads/accounts/:id/features
 *   POST   /admin/ads/accounts/:id/features        {"feature_keys": ["ACCOUNT_HISTORY_ACCESS"]}
 *   DELETE /admin/ads/accounts/:id/features?feature_keys=A,B
 *   POST   /admin/ads/accounts/:id/account_apps    {"app_store_identifier", "os_type", "conversion_tracking_enabled"?, "deep_link_pattern"?}
 */

const OPERATOR: Actor = { user_id: '0', platform: 'OPERATOR' }

async function accountOr404(ctx: ServiceContext, id: string): Promise<void> {
  const account = /^[0-9a-z]{1,32}$/.test(id) ? await getAccount(ctx, id) : undefined
  if (!account) throw Problems.resourceNotFound('id', id.slice(0, 64), 'account')
}

function featureKeys(raw: unknown): string[] {
  const list = typeof raw === 'string' ? raw.split(',').map((s) => s.trim()) : raw
  if (!Array.isArray(list) || list.length === 0 || !list.every((k) => typeof k === 'string' && k !== '')) {
    throw Problems.invalidParameter('feature_keys', String(raw ?? ''), 'feature_keys must be a non-empty list of feature keys')
  }
  const unknown = list.filter((k) => !OPERATOR_FEATURES.includes(k as string))
  if (unknown.length > 0) throw Problems.invalidParameter('feature_keys', unknown.join(','), `Unknown feature keys: ${unknown.join(', ')}. Known: ${OPERATOR_FEATURES.join(', ')}`)
  return [...new Set(list as string[])]
}

function bodyOf(request: FastifyRequest): Record<string, unknown> {
  const b = request.body
  if (b === null || typeof b !== 'object' || Array.isArray(b)) throw Problems.invalidParameter('body', '', 'Expected a JSON object body')
  return b as Record<string, unknown>
}

export async function registerCampaignAdminRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  const guard = operatorGuard(resolveOperatorToken(ctx.config, ctx.store.kind === 'memory'))

  app.post('/admin/ads/accounts', { preHandler: guard }, async (request, reply) => {
    const body = bodyOf(request)
    const userId = body.user_id
    if (typeof userId !== 'string' || !/^\d{1,19}$/.test(userId)) throw Problems.invalidParameter('user_id', String(userId ?? ''), 'user_id must be the id of a registered user')
    if (!(await ctx.store.getJson<User>(AuthKeys.user(userId)))) throw Problems.resourceNotFound('user_id', userId, 'user')
    const name = body.name
    if (name !== undefined && (typeof name !== 'string' || name.trim() === '' || name.length > 255)) {
      throw Problems.invalidParameter('name', String(name).slice(0, 100), 'name must be a non-empty string of at most 255 characters')
    }
    const account = await createAccount(ctx, userId, name === undefined ? {} : { name: name as string })
    const fi = await createDefaultFundingInstrument(ctx, account.id, OPERATOR)
    request.log.info({ account_id: account.id, user_id: userId }, 'operator opened an advertising account')
    return reply.code(201).send({ data: { account: publicAccount(account), funding_instrument_id: fi.id } })
  })

  app.get<{ Params: { id: string } }>('/admin/ads/accounts/:id/features', { preHandler: guard }, async (request) => {
    await accountOr404(ctx, request.params.id)
    return { data: { account_id: request.params.id, feature_keys: sortedKeys(await accountFeatures(ctx, request.params.id)) } }
  })

  app.post<{ Params: { id: string } }>('/admin/ads/accounts/:id/features', { preHandler: guard }, async (request) => {
    await accountOr404(ctx, request.params.id)
    const keys = featureKeys(bodyOf(request).feature_keys)
    const granted = await grantFeatures(ctx, request.params.id, keys)
    request.log.info({ account_id: request.params.id, granted: keys }, 'operator granted account features')
    return { data: { account_id: request.params.id, feature_keys: sortedKeys(granted) } }
  })

  app.delete<{ Params: { id: string }; Querystring: { feature_keys?: string } }>('/admin/ads/accounts/:id/features', { preHandler: guard }, async (request) => {
    await accountOr404(ctx, request.params.id)
    const keys = featureKeys(request.query.feature_keys)
    const remaining = await revokeFeatures(ctx, request.params.id, keys)
    request.log.info({ account_id: request.params.id, revoked: keys }, 'operator revoked account features')
    return { data: { account_id: request.params.id, feature_keys: sortedKeys(remaining) } }
  })

  app.post<{ Params: { id: string } }>('/admin/ads/accounts/:id/account_apps', { preHandler: guard }, async (request, reply) => {
    await accountOr404(ctx, request.params.id)
    const body = bodyOf(request)
    const os = body.os_type
    if (typeof os !== 'string' || !(OS_TYPES as readonly string[]).includes(os)) {
      throw Problems.invalidParameter('os_type', String(os ?? ''), `os_type must be one of ${OS_TYPES.join(', ')}`)
    }
    const id = body.app_store_identifier
    if (typeof id !== 'string' || !validAppStoreIdentifier(os as OsType, id)) {
      throw Problems.invalidParameter('app_store_identifier', String(id ?? ''), 'app_store_identifier must be an Android package name (com.example.app) or the numeric App Store id')
    }
    const tracking = body.conversion_tracking_enabled
    if (tracking !== undefined && typeof tracking !== 'boolean') throw Problems.invalidParameter('conversion_tracking_enabled', String(tracking), 'conversion_tracking_enabled must be a boolean')
    const deepLink = body.deep_link_pattern
    if (deepLink !== undefined && deepLink !== null && (typeof deepLink !== 'string' || deepLink.length > 255)) {
      throw Problems.invalidParameter('deep_link_pattern', String(deepLink).slice(0, 100), 'deep_link_pattern must be a string of at most 255 characters')
    }
    const accountApp = await addAccountApp(
      ctx,
      request.params.id,
      { app_store_identifier: id, os_type: os as OsType, conversion_tracking_enabled: tracking ?? false, deep_link_pattern: (deepLink as string | null | undefined) ?? null },
      OPERATOR
    )
    return reply.code(201).send({ data: accountApp })
  })
}
