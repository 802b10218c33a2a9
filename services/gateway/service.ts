import type { ServiceDefinition } from '../common/service'
import { registerAdminRoutes } from './admin'
import { registerAdsRoutes } from './ads/routes'
import { registerSandboxRoutes } from './ads/campaigns/sandbox'
import { registerOAuthRoutes } from './oauth/routes'

/**
 * The gateway: OAuth provider, operator API for apps and users, and the
 * advertising interface (design.md). The sandbox host serves the
 * sandbox-only ads operations plus the same ads routes.
 */
export const gatewayService: ServiceDefinition = {
  name: 'gateway',
  routes: async (app, ctx) => {
    await registerOAuthRoutes(app, ctx)
    await registerAdminRoutes(app, ctx)
    await registerAdsRoutes(app, ctx)
  },
  sandboxRoutes: async (app, ctx) => {
    await registerSandboxRoutes(app, ctx)
    await registerAdsRoutes(app, ctx)
  }
}
