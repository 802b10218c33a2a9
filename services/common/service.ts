import type { FastifyInstance } from 'fastify'
import type { ServiceContext } from './context'

/** Something a service runs besides its routes: a topic consumer, a timer. */
export interface Worker {
  readonly name: string
  /** Stops taking work, finishes what is in flight (committing its offsets), leaves its group. */
  close(): Promise<void>
}

export type ServiceName = 'gateway' | 'webhooks' | 'activity' | 'stream' | 'account-history'

/**
 * A service as docs/architecture.md describes it: the routes it owns, the workers it
 * runs. The embedded runtime registers every definition on one server and
 * one context; a distributed process (services/<name>/main.ts) runs one.
 */
export interface ServiceDefinition {
  name: ServiceName
  /** Routes served on {base_url} / {ads_url}. */
  routes?: (app: FastifyInstance, ctx: ServiceContext) => Promise<void>
  /** Routes served on {ads_sandbox_url} (the gateway's sandbox-only ads operations). */
  sandboxRoutes?: (app: FastifyInstance, ctx: ServiceContext) => Promise<void>
  /** Starts consumers and timers once the routes are being served. */
  start?: (ctx: ServiceContext) => Promise<Worker[]>
  /** Runs first on shutdown, before the HTTP server stops (e.g. streams get ForceDisconnect). */
  beforeClose?: (ctx: ServiceContext) => Promise<void>
}
