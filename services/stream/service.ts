import type { ServiceContext } from '../common/context'
import type { ServiceDefinition } from '../common/service'
import { StreamHub } from './hub'
import { registerStreamRoute } from './routes'
import { attachWebSocketStream } from './websocket'

/**
 * The stream service (design.md): `/2/activity/stream` over chunked HTTP and
 * WebSocket, fed by this node's own consumer of `activity.deliveries`. The
 * node's state lives in a StreamHub per context, so several runtimes (tests,
 * embedded and distributed) can share this definition.
 */

const hubs = new WeakMap<ServiceContext, StreamHub>()

export function streamHub(ctx: ServiceContext): StreamHub {
  let hub = hubs.get(ctx)
  if (!hub) {
    hub = new StreamHub(ctx)
    hubs.set(ctx, hub)
  }
  return hub
}

export const streamService: ServiceDefinition = {
  name: 'stream',
  routes: async (app, ctx) => {
    const hub = streamHub(ctx)
    await registerStreamRoute(app, hub)
    attachWebSocketStream(app, ctx, hub)
  },
  start: async (ctx) => [await streamHub(ctx).start()],
  // Every open stream gets ForceDisconnect before the HTTP server stops.
  beforeClose: async (ctx) => streamHub(ctx).forceDisconnectAll()
}
