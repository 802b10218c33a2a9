import type { ServiceDefinition } from '../common/service'
import { registerHistoryConsoleRoutes } from './console-routes'
import { registerHistoryRoutes } from './routes'
import { startHistoryConsumer } from './history-consumer'

/**
 * The account-history service (docs/architecture.md): consumes `ads.entity-changes`
 * with its own consumer group, keeps the entries in the `history:`
 * keyspace, and serves GET /12/accounts/:account_id/account_history on
 * the ads host and (like every ads read) on the sandbox host.
 */
export const accountHistoryService: ServiceDefinition = {
  name: 'account-history',
  routes: async (app, ctx) => {
    await registerHistoryRoutes(app, ctx)
    await registerHistoryConsoleRoutes(app, ctx)
  },
  sandboxRoutes: async (app, ctx) => {
    await registerHistoryRoutes(app, ctx)
  },
  start: async (ctx) => [await startHistoryConsumer(ctx)]
}
