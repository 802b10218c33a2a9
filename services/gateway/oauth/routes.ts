import type { FastifyInstance } from 'fastify'
import type { ServiceContext } from '../../common/context'
import { registerAccountRoutes } from './account'
import { registerAuthorizePages } from './authorize'
import { registerConnectedAppsPage } from './connected-apps'
import { registerOAuth1Routes } from './oauth1'
import { registerOAuth2Routes } from './app-only-tokens'
import { RequestTokens } from './request-tokens'
import { SignInSessions } from './sessions'

/**
 * The gateway's OAuth provider (docs/contract.md "OAuth 1.0a"):
 * OAuth 1.0a three-legged flow with its sign-in page, revocation (by the
 * app, or by the user on the connected apps page), OAuth 2.0 app-only bearer
 * tokens, and 1.1/account/verify_credentials.
 */
export async function registerOAuthRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  const tokens = new RequestTokens(ctx.store, ctx.config.requestTokenTtlMs)
  const sessions = new SignInSessions(ctx.store, ctx.config.signInSessionTtlMs)
  registerOAuth1Routes(app, ctx, tokens)
  registerAuthorizePages(app, ctx, tokens, sessions)
  registerConnectedAppsPage(app, ctx, sessions)
  registerOAuth2Routes(app, ctx)
  registerAccountRoutes(app, ctx)
}
