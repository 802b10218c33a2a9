import type { ServiceDefinition } from '../common/service'
import { registerActivityConsoleRoutes } from './console-routes'
import { registerIngestRoute } from './ingest'
import { activityMetrics } from './metrics'
import { registerSubscriptionRoutes } from './routes'
import { startMatcher } from './matcher'

/**
 * The activity service (docs/architecture.md): subscriptions and their match index,
 * the ingest route for upstream producers, and the matcher that turns
 * `activity.events` into `activity.deliveries`.
 */
export const activityService: ServiceDefinition = {
  name: 'activity',
  routes: async (app, ctx) => {
    activityMetrics(ctx)
    await registerSubscriptionRoutes(app, ctx)
    await registerIngestRoute(app, ctx)
    await registerActivityConsoleRoutes(app, ctx)
  },
  start: async (ctx) => [await startMatcher(ctx)]
}
