import fs from 'node:fs'
import http from 'node:http'
import type { Duplex } from 'node:stream'
import path from 'node:path'
import type { Logger } from 'pino'
import { loadConfig } from '../services/common/config'
import { adsCodeForStatus, problemBody } from '../services/common/errors'
import { shapeOfPath } from '../services/common/http'
import { createLogger } from '../services/common/logger'
import { projectRoot } from '../services/common/bus/topics'

/**
 * The reverse proxy in front of the distributed services: each path family
 * goes to the service that owns it, per deploy/routes.json (the table the
 * k8s Ingress mirrors). Streams and WebSocket upgrades are piped through
 * untouched. A service may have several upstreams (two stream nodes): a new
 * connection goes to the next one in turn, skipping an upstream that just
 * refused a connection.
 *
 *   node dist/scripts/proxy.js [--routes deploy/routes.json]
 *
 * Listens on PORT (the api host; a request whose Host is the sandbox's public
 * host uses the sandbox table) and on SANDBOX_PORT (the sandbox table).
 * Upstreams: <SERVICE>_UPSTREAM, e.g. STREAM_UPSTREAM=http://127.0.0.1:9001,http://127.0.0.1:9002.
 */

export interface Route {
  prefix?: string
  pattern?: string
  service: string
}

export interface RouteTable {
  hosts: Record<'api' | 'sandbox', { default: string; routes: Route[] }>
}

export type HostKind = 'api' | 'sandbox'

export function routesFilePath(): string {
  return path.join(projectRoot(), 'deploy', 'routes.json')
}

export function loadRoutes(file: string = routesFilePath()): RouteTable {
  const table = JSON.parse(fs.readFileSync(file, 'utf8')) as RouteTable
  for (const kind of ['api', 'sandbox'] as const) {
    const host = table.hosts?.[kind]
    if (!host || typeof host.default !== 'string' || !Array.isArray(host.routes)) throw new Error(`${file}: hosts.${kind} needs "default" and "routes"`)
    for (const r of host.routes) {
      if (typeof r.service !== 'string' || (r.prefix === undefined) === (r.pattern === undefined)) {
        throw new Error(`${file}: every route needs a service and exactly one of prefix or pattern: ${JSON.stringify(r)}`)
      }
      if (r.pattern !== undefined) new RegExp(r.pattern)
    }
  }
  return table
}

/** Every service the table names (upstreams the proxy needs). */
export function servicesOf(table: RouteTable): string[] {
  const names = new Set<string>()
  for (const host of Object.values(table.hosts)) {
    names.add(host.default)
    for (const r of host.routes) names.add(r.service)
  }
  return [...names].sort()
}

export function upstreamEnvName(service: string): string {
  return `${service.toUpperCase().replace(/-/g, '_')}_UPSTREAM`
}

function segmentPrefix(path: string, prefix: string): boolean {
  return path === prefix || path.startsWith(prefix.endsWith('/') ? prefix : `${prefix}/`)
}

/** The service owning `path` on a host: a matching pattern first, then the longest segment prefix, then the default. */
export function routeFor(table: RouteTable, kind: HostKind, rawPath: string): string {
  const path = rawPath.split('?')[0] ?? '/'
  const host = table.hosts[kind]
  for (const r of host.routes) if (r.pattern !== undefined && new RegExp(r.pattern).test(path)) return r.service
  let best: Route | undefined
  for (const r of host.routes) {
    if (r.prefix !== undefined && segmentPrefix(path, r.prefix) && (best === undefined || r.prefix.length > (best.prefix ?? '').length)) best = r
  }
  return best?.service ?? host.default
}

class Upstreams {
  private next = 0
  private readonly downUntil = new Map<string, number>()
  constructor(readonly urls: URL[]) {}

  /** Upstreams in the order to try for one connection: round-robin, recently failed ones last. */
  order(): URL[] {
    const start = this.next++ % this.urls.length
    const rotated = [...this.urls.slice(start), ...this.urls.slice(0, start)]
    const now = Date.now()
    return [...rotated.filter((u) => (this.downUntil.get(u.href) ?? 0) <= now), ...rotated.filter((u) => (this.downUntil.get(u.href) ?? 0) > now)]
  }

  markDown(url: URL): void {
    this.downUntil.set(url.href, Date.now() + 2000)
  }
}

const HOP_BY_HOP = ['connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade']

function forwardHeaders(req: http.IncomingMessage, keepUpgrade: boolean): http.OutgoingHttpHeaders {
  const headers: http.OutgoingHttpHeaders = { ...req.headers }
  const listed = String(req.headers.connection ?? '')
    .split(',')
    .map((h) => h.trim().toLowerCase())
  for (const h of [...HOP_BY_HOP, ...listed]) if (!(keepUpgrade && (h === 'upgrade' || h === 'connection'))) delete headers[h]
  const remote = req.socket.remoteAddress ?? ''
  headers['x-forwarded-for'] = req.headers['x-forwarded-for'] ? `${String(req.headers['x-forwarded-for'])}, ${remote}` : remote
  headers['x-forwarded-host'] = req.headers.host ?? ''
  headers['x-forwarded-proto'] = 'http'
  return headers
}

export interface ProxyOptions {
  routes: RouteTable
  /** service name -> upstream base URLs */
  upstreams: Record<string, string[]>
  problemBase: string
  /** Host names (without port) whose requests use the sandbox table on the api listener. */
  sandboxHosts?: string[]
  log: Logger
}

/** The body of a proxy-generated error in the interface shape of the path. */
function errorResponse(path: string, status: number, message: string, problemBase: string): { type: string; body: string } {
  const shape = shapeOfPath(path)
  if (shape === 'ads') return { type: 'application/json; charset=utf-8', body: JSON.stringify({ errors: [{ code: adsCodeForStatus(status), message }], request: { params: {} } }) }
  if (shape === 'classic') return { type: 'application/json; charset=utf-8', body: JSON.stringify({ errors: [{ code: 130, message: 'Over capacity' }] }) }
  return { type: 'application/problem+json', body: JSON.stringify(problemBody(problemBase, 'about:blank', message, status)) }
}

export class ReverseProxy {
  private readonly pools = new Map<string, Upstreams>()

  constructor(private readonly options: ProxyOptions) {
    for (const service of servicesOf(options.routes)) {
      const urls = (options.upstreams[service] ?? []).map((u) => new URL(u))
      if (urls.length > 0) this.pools.set(service, new Upstreams(urls))
    }
  }

  private kindOf(req: http.IncomingMessage, listener: HostKind): HostKind {
    if (listener === 'sandbox') return 'sandbox'
    const host = (req.headers.host ?? '').replace(/:\d+$/, '').toLowerCase()
    return this.options.sandboxHosts?.includes(host) ? 'sandbox' : 'api'
  }

  /** The request listener of one port. */
  handler(listener: HostKind): (req: http.IncomingMessage, res: http.ServerResponse) => void {
    return (req, res) => {
      const url = req.url ?? '/'
      const service = routeFor(this.options.routes, this.kindOf(req, listener), url)
      const pool = this.pools.get(service)
      if (!pool) return this.fail(res, url, 503, `No upstream configured for service ${service}.`)
      // Only a request without a body can be replayed on another upstream.
      const replayable = req.headers['content-length'] === undefined && req.headers['transfer-encoding'] === undefined
      this.forward(req, res, url, service, replayable ? pool.order() : pool.order().slice(0, 1), pool)
    }
  }

  private forward(req: http.IncomingMessage, res: http.ServerResponse, url: string, service: string, candidates: URL[], pool: Upstreams): void {
    const target = candidates[0]
    if (!target) return this.fail(res, url, 502, `The ${service} service is unavailable.`)
    const upstream = http.request({
      host: target.hostname,
      port: target.port,
      method: req.method,
      path: url,
      headers: forwardHeaders(req, false)
    })
    upstream.on('response', (answer) => {
      const headers: http.OutgoingHttpHeaders = { ...answer.headers, 'x-served-by': service }
      for (const h of HOP_BY_HOP) if (h !== 'transfer-encoding') delete headers[h]
      res.writeHead(answer.statusCode ?? 502, answer.statusMessage, headers)
      // Long-lived streams: no buffering, flush each chunk as it arrives.
      answer.pipe(res)
      res.on('close', () => answer.destroy())
      // An upstream that dies mid-response (a killed stream node) fails the response, not the
      // request, and pipe() leaves the client waiting forever: cut the client off so it reconnects.
      answer.on('error', () => res.destroy())
      answer.on('close', () => {
        if (!answer.complete) res.destroy()
      })
    })
    upstream.on('error', (err: NodeJS.ErrnoException) => {
      if (res.headersSent) {
        res.destroy()
        return
      }
      if (err.code === 'ECONNREFUSED' || err.code === 'ECONNRESET') {
        pool.markDown(target)
        if (candidates.length > 1) return this.forward(req, res, url, service, candidates.slice(1), pool)
      }
      this.options.log.warn({ upstreamService: service, upstream: target.host, err: err.message }, 'upstream failed')
      this.fail(res, url, 502, `The ${service} service is unavailable.`)
    })
    req.on('aborted', () => upstream.destroy())
    res.on('close', () => {
      if (!res.writableFinished) upstream.destroy()
    })
    if (candidates.length > 1 || req.readableEnded) upstream.end()
    else req.pipe(upstream)
  }

  private fail(res: http.ServerResponse, url: string, status: number, message: string): void {
    if (res.headersSent) return void res.destroy()
    const { type, body } = errorResponse(url, status, message, this.options.problemBase)
    res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body), 'x-served-by': 'proxy' })
    res.end(body)
  }

  /** WebSocket (and any other) upgrades: the raw sockets are piped both ways after the upstream's 101. */
  upgradeHandler(listener: HostKind): (req: http.IncomingMessage, socket: Duplex, head: Buffer) => void {
    return (req, socket, head) => {
      const url = req.url ?? '/'
      const service = routeFor(this.options.routes, this.kindOf(req, listener), url)
      const target = this.pools.get(service)?.order()[0]
      if (!target) return void socket.end('HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n')
      const upstream = http.request({ host: target.hostname, port: target.port, method: req.method, path: url, headers: forwardHeaders(req, true) })
      upstream.on('upgrade', (answer, upstreamSocket, upstreamHead) => {
        const lines = [`HTTP/1.1 ${answer.statusCode ?? 101} ${answer.statusMessage ?? 'Switching Protocols'}`]
        for (let i = 0; i < answer.rawHeaders.length; i += 2) lines.push(`${answer.rawHeaders[i]}: ${answer.rawHeaders[i + 1]}`)
        socket.write(`${lines.join('\r\n')}\r\n\r\n`)
        if (upstreamHead.length > 0) socket.write(upstreamHead)
        if (head.length > 0) upstreamSocket.write(head)
        upstreamSocket.pipe(socket).pipe(upstreamSocket)
        upstreamSocket.on('error', () => socket.destroy())
        socket.on('error', () => upstreamSocket.destroy())
        upstreamSocket.on('close', () => socket.destroy())
        socket.on('close', () => upstreamSocket.destroy())
      })
      // The upstream refused the upgrade: relay its answer as is.
      upstream.on('response', (answer) => {
        const lines = [`HTTP/1.1 ${answer.statusCode ?? 502} ${answer.statusMessage ?? ''}`]
        for (let i = 0; i < answer.rawHeaders.length; i += 2) lines.push(`${answer.rawHeaders[i]}: ${answer.rawHeaders[i + 1]}`)
        socket.write(`${lines.join('\r\n')}\r\n\r\n`)
        answer.pipe(socket)
      })
      upstream.on('error', () => socket.end('HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n'))
      socket.on('error', () => upstream.destroy())
      upstream.end()
    }
  }
}

export interface RunningProxy {
  ports: { api: number; sandbox?: number }
  close(): Promise<void>
}

/** Binds the api listener (and the sandbox one when `sandboxPort` is given). */
export async function startProxy(options: ProxyOptions & { host: string; port: number; sandboxPort?: number }): Promise<RunningProxy> {
  const proxy = new ReverseProxy(options)
  const servers: http.Server[] = []
  const listen = async (kind: HostKind, port: number): Promise<number> => {
    const server = http.createServer(proxy.handler(kind))
    server.on('upgrade', proxy.upgradeHandler(kind))
    // Streams stay open for hours: no request or idle timeout at the proxy.
    server.requestTimeout = 0
    server.headersTimeout = 60_000
    server.keepAliveTimeout = 5_000
    servers.push(server)
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(port, options.host, () => resolve())
    })
    const address = server.address()
    return typeof address === 'object' && address ? address.port : port
  }
  const api = await listen('api', options.port)
  const sandbox = options.sandboxPort === undefined ? undefined : await listen('sandbox', options.sandboxPort)
  return {
    ports: sandbox === undefined ? { api } : { api, sandbox },
    async close() {
      await Promise.all(
        servers.map(
          (s) =>
            new Promise<void>((resolve) => {
              s.close(() => resolve())
              s.closeAllConnections()
            })
        )
      )
    }
  }
}

async function main(): Promise<void> {
  const args = process.argv.slice(2)
  const i = args.indexOf('--routes')
  const routesFile = i >= 0 && args[i + 1] ? path.resolve(args[i + 1] as string) : routesFilePath()
  const config = loadConfig()
  const log = createLogger(config.logLevel, 'proxy')
  const routes = loadRoutes(routesFile)
  const upstreams: Record<string, string[]> = {}
  for (const service of servicesOf(routes)) {
    const raw = process.env[upstreamEnvName(service)] ?? ''
    upstreams[service] = raw.split(',').map((u) => u.trim()).filter((u) => u !== '')
    if (upstreams[service].length === 0) log.warn({ upstreamService: service, env: upstreamEnvName(service) }, 'no upstream: requests for this service get 503')
  }
  const sandboxHosts = config.sandboxPublicUrl !== '' ? [new URL(config.sandboxPublicUrl).hostname.toLowerCase()] : []
  const running = await startProxy({ routes, upstreams, problemBase: config.problemBase, sandboxHosts, log, host: config.host, port: config.port, sandboxPort: config.sandboxPort })
  process.stdout.write(`proxy listening on ${config.host}:${running.ports.api} (api)${running.ports.sandbox ? ` and :${running.ports.sandbox} (sandbox)` : ''}\n`)
  const stop = (): void => {
    running.close().then(
      () => process.exit(0),
      () => process.exit(1)
    )
  }
  process.once('SIGTERM', stop)
  process.once('SIGINT', stop)
}

if (require.main === module) {
  main().catch((err: unknown) => {
    process.stderr.write(`proxy: ${(err as Error).message}\n`)
    process.exit(1)
  })
}
