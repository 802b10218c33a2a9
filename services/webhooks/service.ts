import type { ServiceDefinition } from '../common/service'
import { registerAdminRoutes } from './admin'
import { registerConsoleRoutes } from './console-routes'
import { partsFor } from './parts'
import { registerWebhookRoutes } from './routes'
import { startBackgroundWork } from './background-work'

/**
 * The webhooks service (docs/architecture.md): `/2/webhooks*` and Account Activity
 * subscriptions; consumes `activity.deliveries` (and, for Account Activity,
 * `activity.events`); produces `webhook.dead-letter`; keeps webhook configs,
 * CRC state, the retry schedule and the delivery log in `webhooks:`.
 */
export const webhooksService: ServiceDefinition = {
  name: 'webhooks',
  routes: async (app, ctx) => {
    const core = partsFor(ctx)
    await registerWebhookRoutes(app, core)
    await registerAdminRoutes(app, core)
    await registerConsoleRoutes(app, core)
  },
  start: async (ctx) => startBackgroundWork(partsFor(ctx))
}
