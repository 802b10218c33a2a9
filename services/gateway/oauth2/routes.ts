import type { FastifyInstance } from 'fastify'
import type { ServiceContext } from '../../common/context'
import { registerOAuth2AdminRoutes } from './admin'
import { registerAuthorizeRoutes } from './authorize'
import { registerTokenRoutes } from './token'

/**
 * OAuth 2.0 user context (authorization code with PKCE): the authorize page,
 * the token and revocation endpoints, and the operator routes of clients.
 * The tokens it issues are BearerRecords of kind 'user', which the shared
 * authenticator accepts on every route listing 'oauth2-user'.
 */
export async function registerOAuth2UserRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  registerAuthorizeRoutes(app, ctx)
  await registerTokenRoutes(app, ctx)
  await registerOAuth2AdminRoutes(app, ctx)
}
