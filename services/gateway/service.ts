import type { ServiceDefinition } from '../common/service'

/**
 * The gateway: OAuth provider, operator API and the advertising interface
 * (design.md). Route modules are registered here in the order external,
 * application, routes.
 */
export const gatewayService: ServiceDefinition = {
  name: 'gateway',
  routes: async (_app, _ctx) => {},
  sandboxRoutes: async (_app, _ctx) => {}
}
