import type { ServiceContext } from '../common/context'
import type { ServiceDefinition } from '../common/service'
import { StreamHub } from './hub'
import type { StreamNodeSettings } from './settings'
import { registerStreamRoute } from './routes'
import { registerTicketRoute, StreamTickets } from './tickets'
import { attachWebSocketStream } from './websocket'

/**
 * The stream service (docs/architecture.md): `/2/activity/stream` over chunked HTTP and
 * WebSocket (with a bearer token, or a ticket from `POST /2/activity/stream/ticket`), fed by this node's own consumer of `activity.deliveries`. The
 * node's state lives in a StreamHub per context, so several runtimes (tests,
 * embedded and distributed) can share this definition.
 */

const hubs = new WeakMap<ServiceContext, StreamHub>()

export function streamHub(ctx: ServiceContext, overrides: Partial<StreamNodeSettings> = {}): StreamHub {
  let hub = hubs.get(ctx)
  if (!hub) {
    hub = new StreamHub(ctx, overrides)
    hubs.set(ctx, hub)
  }
  return hub
}

/**
 * The stream service with node settings given in code rather than the
 * environment: several stream nodes in one process (tests, benches) each
 * need their own stable node id.
 */
export function streamServiceWith(overrides: Partial<StreamNodeSettings>): ServiceDefinition {
  return {
    name: 'stream',
    routes: async (app, ctx) => {
      const hub = streamHub(ctx, overrides)
      const tickets = new StreamTickets(ctx.store)
      await registerStreamRoute(app, hub)
      await registerTicketRoute(app, tickets)
      attachWebSocketStream(app, ctx, hub, tickets)
    },
    start: async (ctx) => [await streamHub(ctx, overrides).start()],
    // Every open stream gets ForceDisconnect before the HTTP server stops.
    beforeClose: async (ctx) => streamHub(ctx, overrides).forceDisconnectAll()
  }
}

export const streamService: ServiceDefinition = streamServiceWith({})
