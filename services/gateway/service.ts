import type { ServiceDefinition } from '../common/service'
import { registerAdminRoutes } from './admin'
import { registerConsoleRoutes } from './console/routes'
import { registerAdsRoutes } from './ads/routes'
import { registerSandboxRoutes } from './ads/campaigns/sandbox'
import { registerOAuthRoutes } from './oauth/routes'
import { registerOAuth2UserRoutes } from './oauth2/routes'
import { registerMediaRoutes } from './media/routes'
import { startAudienceBackgroundWork } from './ads/audiences/background-work'
import { startOutboxRelay } from './outbox'
import { registerUsageRoutes } from './usage'

/**
 * The gateway: OAuth provider, operator API for apps and users, and the
 * advertising interface (docs/architecture.md). The sandbox host serves the
 * sandbox-only ads operations plus the same ads routes. Its workers: the
 * outbox relay (publishes every committed entity change and advertiser post,
 * retrying what a crash or a broker outage left), keyword insights ingest
 * (activity.events), the audience targeting index (ads.entity-changes) and
 * the evaluator of FILTERED product sets.
 */
export const gatewayService: ServiceDefinition = {
  name: 'gateway',
  routes: async (app, ctx) => {
    await registerOAuthRoutes(app, ctx)
    await registerOAuth2UserRoutes(app, ctx)
    await registerAdminRoutes(app, ctx)
    await registerAdsRoutes(app, ctx)
    await registerMediaRoutes(app, ctx)
    await registerConsoleRoutes(app, ctx)
    await registerUsageRoutes(app, ctx)
  },
  sandboxRoutes: async (app, ctx) => {
    await registerSandboxRoutes(app, ctx)
    await registerAdsRoutes(app, ctx)
  },
  start: async (ctx) => [...(await startAudienceBackgroundWork(ctx)), startOutboxRelay(ctx)]
}
