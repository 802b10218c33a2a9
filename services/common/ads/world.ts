import type { FastifyInstance, FastifyRequest } from 'fastify'

/**
 * The two worlds of the advertising interface. `{ads_sandbox_url}` is a
 * world of its own: accounts opened there, and everything scoped by them
 * (entities, features, history) and the product catalogs of its users, are
 * seen only there; the production host ({ads_url}) never lists or serves
 * them, and the sandbox never serves production's. The runtime marks the
 * server it builds for the sandbox host; a request's world is its server's.
 */
export type AdsWorld = 'production' | 'sandbox'

const sandboxServers = new WeakSet<object>()

/** Called by the runtime on the server of {ads_sandbox_url}, before any route is registered. */
export function markSandboxHost(app: FastifyInstance): void {
  sandboxServers.add(app.server)
}

export function isSandboxHost(app: FastifyInstance): boolean {
  return sandboxServers.has(app.server)
}

export function worldOf(request: FastifyRequest): AdsWorld {
  return sandboxServers.has(request.server.server) ? 'sandbox' : 'production'
}
