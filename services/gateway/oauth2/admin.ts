import type { FastifyInstance } from 'fastify'
import type { ServiceContext } from '../../common/context'
import { Problems } from '../../common/errors'
import { operatorGuard, resolveOperatorToken } from '../../common/operator'
import { getApp, IdentityError } from '../identity'
import { clientView, configureClient, removeClient, rotateClientSecret } from './clients'

/**
 * Operator API for OAuth 2.0 clients (driven by `cli oauth2 ...`):
 *
 *   GET    /admin/apps/:app_id/oauth2                show the client
 *   PUT    /admin/apps/:app_id/oauth2                turn OAuth 2.0 on / change type and redirect URIs
 *   POST   /admin/apps/:app_id/oauth2/rotate-secret  new client secret (confidential clients)
 *   DELETE /admin/apps/:app_id/oauth2                turn OAuth 2.0 off, revoking every token issued
 */

interface AppParams {
  app_id: string
}

interface ClientBody {
  client_type?: 'confidential' | 'public'
  redirect_uris?: string[]
}

const params = {
  type: 'object',
  required: ['app_id'],
  properties: { app_id: { type: 'string', pattern: '^[0-9]{1,19}$' } }
} as const

const body = {
  type: 'object',
  additionalProperties: false,
  properties: {
    client_type: { type: 'string', enum: ['confidential', 'public'] },
    redirect_uris: { type: 'array', maxItems: 10, items: { type: 'string', minLength: 1, maxLength: 2000 } }
  }
} as const

function asProblem(err: unknown, appId: string): unknown {
  if (!(err instanceof IdentityError)) return err
  if (/^no application/.test(err.message)) return Problems.resourceNotFound('app_id', appId, 'application')
  return Problems.invalidParameter(err.parameter ?? 'redirect_uris', '', err.message)
}

export async function registerOAuth2AdminRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  const guard = operatorGuard(resolveOperatorToken(ctx.config, ctx.serviceName === 'embedded'))
  const { store } = ctx

  app.get<{ Params: AppParams }>('/admin/apps/:app_id/oauth2', { onRequest: guard, schema: { params } }, async (request) => {
    const found = await getApp(store, request.params.app_id)
    if (!found) throw Problems.resourceNotFound('app_id', request.params.app_id, 'application')
    return { data: clientView(found) }
  })

  app.put<{ Params: AppParams; Body: ClientBody }>('/admin/apps/:app_id/oauth2', { onRequest: guard, schema: { params, body } }, async (request) => {
    const b = request.body ?? {}
    try {
      const settings: { confidential?: boolean; redirect_uris?: string[] } = {}
      if (b.client_type !== undefined) settings.confidential = b.client_type === 'confidential'
      if (b.redirect_uris !== undefined) settings.redirect_uris = b.redirect_uris
      return { data: clientView(await configureClient(store, request.params.app_id, settings)) }
    } catch (err) {
      throw asProblem(err, request.params.app_id)
    }
  })

  app.post<{ Params: AppParams }>('/admin/apps/:app_id/oauth2/rotate-secret', { onRequest: guard, schema: { params } }, async (request) => {
    try {
      return { data: clientView(await rotateClientSecret(store, request.params.app_id)) }
    } catch (err) {
      if (err instanceof IdentityError && !/^no application/.test(err.message)) throw Problems.conflict(err.message)
      throw asProblem(err, request.params.app_id)
    }
  })

  app.delete<{ Params: AppParams }>('/admin/apps/:app_id/oauth2', { onRequest: guard, schema: { params } }, async (request) => {
    try {
      return { data: clientView(await removeClient(store, request.params.app_id)) }
    } catch (err) {
      throw asProblem(err, request.params.app_id)
    }
  })
}
