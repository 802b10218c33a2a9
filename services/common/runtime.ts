import type { FastifyInstance } from 'fastify'
import { baseUrl as configuredBase, type Config } from './config'
import type { ServiceContext } from './context'
import { busLagRoutes } from './admin-bus'
import { markSandboxHost } from './ads/world'
import { buildServer } from './server'
import { startPresence } from './console/presence'
import type { ServiceDefinition, Worker } from './service'
import { stopTracing } from './tracing'

/**
 * Starts services on a context: routes on the main server (PORT), sandbox
 * routes on the sandbox server (SANDBOX_PORT) when any service has them,
 * then workers. `close()` is the graceful shutdown of the whole runtime.
 */
export interface Runtime {
  readonly ctx: ServiceContext
  readonly app: FastifyInstance
  readonly sandbox: FastifyInstance | undefined
  /** URLs actually bound (port 0 resolved). */
  readonly baseUrl: string
  readonly sandboxUrl: string | undefined
  readonly workers: Worker[]
  close(): Promise<void>
}

export interface RuntimeOptions {
  services: ServiceDefinition[]
  ctx: ServiceContext
  /** Serve the sandbox host too (embedded and gateway processes). Default: when a service has sandbox routes. */
  sandbox?: boolean
}

function listeningUrl(app: FastifyInstance, config: Config): string {
  const address = app.server.address()
  const port = typeof address === 'object' && address ? address.port : config.port
  const scheme = config.tlsCert !== '' ? 'https' : 'http'
  return `${scheme}://127.0.0.1:${port}`
}

/**
 * The part of SHUTDOWN_GRACE the HTTP servers may take (stream goodbyes
 * included); the rest is left to the workers, the bus and the store, so a
 * signalled shutdown ends cleanly before the grace timer exits the process.
 */
const HTTP_SHARE_OF_GRACE = 0.8

/**
 * Stops accepting requests and waits for those in flight, until `deadline`.
 * Idle keep-alive connections are closed at once (fastify); a connection
 * still busy at the deadline (a client that never finishes its body, or
 * never reads its answer, a stream that did not go) is destroyed then, so
 * closing never waits on a client's timeouts.
 */
async function closeServers(servers: FastifyInstance[], deadline: number, ctx: ServiceContext): Promise<void> {
  const closed = Promise.allSettled(servers.map((s) => s.close()))
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(true), Math.max(0, deadline - Date.now()))
  })
  const overdue = await Promise.race([closed.then(() => false), late])
  clearTimeout(timer)
  if (!overdue) return
  ctx.log.warn('shutdown grace is over for HTTP: closing the connections still open')
  for (const s of servers) s.server.closeAllConnections()
  await closed
}

export async function startRuntime(options: RuntimeOptions): Promise<Runtime> {
  const { ctx, services } = options
  const { config } = ctx
  // Ready means the store answers and every consumer of this process is in its group.
  const ready = async (): Promise<void> => {
    await ctx.bus.health?.()
  }
  const app = await buildServer(ctx, { publicUrl: config.publicUrl, ready })
  for (const s of services) if (s.routes) await app.register(async (instance) => s.routes?.(instance, ctx))
  await app.register(async (instance) => busLagRoutes(instance, ctx))

  const wantsSandbox = options.sandbox ?? services.some((s) => s.sandboxRoutes)
  let sandbox: FastifyInstance | undefined
  if (wantsSandbox) {
    sandbox = await buildServer(ctx, { publicUrl: config.sandboxPublicUrl, ready })
    markSandboxHost(sandbox)
    for (const s of services) if (s.sandboxRoutes) await sandbox.register(async (instance) => s.sandboxRoutes?.(instance, ctx))
  }

  await app.listen({ port: config.port, host: config.host })
  if (sandbox) await sandbox.listen({ port: config.sandboxPort, host: config.host })

  const workers: Worker[] = []
  try {
    // Beating before the consumers join: a member this process gets is noted for the survivors at once.
    await ctx.liveness.start()
    for (const s of services) if (s.start) workers.push(...(await s.start(ctx)))
    // After the consumers joined: the first report already names this process's groups.
    workers.push(startPresence(ctx, services.map((s) => s.name), listeningUrl(app, config), ready))
  } catch (err) {
    await Promise.allSettled(workers.map((w) => w.close()))
    await ctx.liveness.close()
    await app.close()
    await sandbox?.close()
    throw err
  }

  let closing: Promise<void> | undefined
  const close = (): Promise<void> => {
    closing ??= (async () => {
      const httpDeadline = Date.now() + Math.floor(config.shutdownGraceMs * HTTP_SHARE_OF_GRACE)
      for (const s of services) if (s.beforeClose) await s.beforeClose(ctx).catch((err) => ctx.log.warn({ err, service: s.name }, 'beforeClose failed'))
      await closeServers(sandbox ? [app, sandbox] : [app], httpDeadline, ctx)
      // Workers finish in-flight messages and commit before the bus goes away.
      await Promise.allSettled(workers.map((w) => w.close()))
      await ctx.bus.close().catch((err) => ctx.log.warn({ err }, 'bus close failed'))
      // After the bus: the survivors reap this process once its key is gone, and its consumers have left by then.
      await ctx.liveness.close()
      await ctx.store.close().catch((err) => ctx.log.warn({ err }, 'store close failed'))
    })()
    return closing
  }

  return {
    ctx,
    app,
    sandbox,
    baseUrl: listeningUrl(app, config),
    sandboxUrl: sandbox ? listeningUrl(sandbox, config) : undefined,
    workers,
    close
  }
}

/** Installs SIGTERM/SIGINT handlers that shut the runtime down gracefully, bounded by SHUTDOWN_GRACE. */
export function closeOnSignals(runtime: Runtime): void {
  let signalled = false
  const onSignal = (signal: NodeJS.Signals): void => {
    if (signalled) return
    signalled = true
    runtime.ctx.log.info({ signal }, 'shutting down')
    const timer = setTimeout(() => {
      runtime.ctx.log.error('graceful shutdown timed out; exiting')
      process.exit(1)
    }, runtime.ctx.config.shutdownGraceMs)
    timer.unref()
    runtime.close().then(
      // The spans of the last requests and batches are exported before the process ends.
      () => stopTracing().then(() => process.exit(0)),
      (err) => {
        runtime.ctx.log.error({ err }, 'shutdown failed')
        process.exit(1)
      }
    )
  }
  process.on('SIGTERM', onSignal)
  process.on('SIGINT', onSignal)
}

export { configuredBase }
