import fs from 'node:fs'
import path from 'node:path'
import { loadConfig } from '../services/common/config'
import { adsCodeForStatus, problemBody } from '../services/common/errors'
import { shapeOfPath, type ErrorShape } from '../services/common/server'
import { projectRoot } from '../services/common/bus/topics'

/**
 * The front proxy is nginx (Debian's under `make up`, the official image in
 * deploy/compose.yaml); its configuration is generated here from
 * deploy/routes.json, the route table the Kubernetes Ingress mirrors.
 *
 *   node dist/scripts/nginx.js --compose   # rewrites deploy/nginx/nginx.conf
 *   node dist/scripts/nginx.js --check     # fails when that file is stale
 *
 * Each service is an nginx upstream of all its instances. A request whose
 * instance refuses the connection, resets it, times out or answers 502/503/504
 * (a service draining on SIGTERM answers 503) goes to the next instance.
 * nginx never replays a POST/PATCH that reached an instance, except on routes
 * marked `idempotent` in the table: event ingest, which deduplicates by
 * event_uuid, so a batch sent twice is stored once. Routes marked `stream`
 * (HTTP streams and their WebSocket upgrade) pass through unbuffered with read
 * and send timeouts longer than three stream keep-alive intervals.
 */

export interface Route {
  prefix?: string
  pattern?: string
  service: string
  /** POSTs may be replayed on another instance after they reached one (the handler is idempotent). */
  idempotent?: boolean
  /** Long-lived responses and WebSocket upgrades: unbuffered, long timeouts. */
  stream?: boolean
}

export interface RouteTable {
  hosts: Record<HostKind, { default: string; routes: Route[] }>
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
      if (/[\s;{}'"]/.test(r.prefix ?? r.pattern ?? '')) throw new Error(`${file}: a route may not contain spaces, quotes, braces or semicolons: ${JSON.stringify(r)}`)
    }
  }
  return table
}

/** Every service the table names (the upstreams nginx needs). */
export function servicesOf(table: RouteTable): string[] {
  const names = new Set<string>()
  for (const host of Object.values(table.hosts)) {
    names.add(host.default)
    for (const r of host.routes) names.add(r.service)
  }
  return [...names].sort()
}

function segmentPrefix(p: string, prefix: string): boolean {
  return p === prefix || p.startsWith(prefix.endsWith('/') ? prefix : `${prefix}/`)
}

/** The route owning `path` on a host, as nginx picks it: a matching pattern first, then the longest segment prefix. */
export function routeOf(table: RouteTable, kind: HostKind, rawPath: string): Route | undefined {
  const p = rawPath.split('?')[0] ?? '/'
  const host = table.hosts[kind]
  for (const r of host.routes) if (r.pattern !== undefined && new RegExp(r.pattern).test(p)) return r
  let best: Route | undefined
  for (const r of host.routes) {
    if (r.prefix !== undefined && segmentPrefix(p, r.prefix) && (best === undefined || r.prefix.length > (best.prefix ?? '').length)) best = r
  }
  return best
}

/** The service owning `path` on a host (the host's default when no route matches). */
export function routeFor(table: RouteTable, kind: HostKind, rawPath: string): string {
  return routeOf(table, kind, rawPath)?.service ?? table.hosts[kind].default
}

export interface NginxSite {
  /** nginx upstream name (a service of the table) -> its instances, `host:port` each. */
  upstreams: Record<string, string[]>
  /** `listen` arguments of the api and the sandbox listener: `127.0.0.1:8080`, `8080`. */
  listen: { api: string; sandbox?: string }
  /** Host names whose requests on the api listener use the sandbox table (SANDBOX_PUBLIC_URL's). */
  sandboxHosts: string[]
  problemBase: string
  /** The services' BODY_LIMIT_BYTES: a larger body is refused by nginx in the interface's error shape. */
  bodyLimitBytes: number
  /** STREAM_KEEPALIVE in ms: stream read/send timeouts are at least three of these (and at least an hour). */
  streamKeepAliveMs: number
  /**
   * `resolve` re-resolves service names while running (nginx >= 1.27.3, the
   * compose stack: a restarted container gets a new address); else they are
   * resolved once at start (loopback addresses under `make up`).
   */
  resolver?: string
}

/** Where a local nginx keeps its files (under `make up`: the run directory). */
export interface NginxFiles {
  pidFile: string
  errorLog: string
  accessLog: string
  tempDir: string
  /** Worker user when the master runs as root; omitted otherwise (nginx would only warn). */
  user?: string
}

const STATUSES = [413, 502, 504] as const

/**
 * Request headers every location sends. OAuth 1.0a signs the URL with its
 * host and port, so the services must see the Host the client sent. nginx
 * inherits proxy_set_header only into a block that sets none, so the stream
 * locations repeat these.
 */
const PROXY_HEADERS = [
  'proxy_set_header Host $http_host;',
  'proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;',
  'proxy_set_header X-Forwarded-Proto $scheme;',
  'proxy_set_header X-Forwarded-Host $http_host;'
]
const SHAPES: ErrorShape[] = ['v2', 'ads', 'classic']

/** The body nginx answers itself (no instance answered, body too large) in the shape of the path's interface. */
export function errorBody(shape: ErrorShape, status: number, problemBase: string): { type: string; body: string } {
  const message = status === 413 ? 'The request body is too large.' : 'The service behind this path is unavailable; retry shortly.'
  if (shape === 'ads') return { type: 'application/json', body: JSON.stringify({ errors: [{ code: adsCodeForStatus(status === 413 ? 413 : 503), message }], request: { params: {} } }) }
  if (shape === 'classic') return { type: 'application/json', body: JSON.stringify({ errors: [status === 413 ? { code: 38, message } : { code: 130, message: 'Over capacity' }] }) }
  return { type: 'application/problem+json', body: JSON.stringify(problemBody(problemBase, 'about:blank', message, status)) }
}

/** A sample path a route matches, to pick the error shape of its location. */
function sampleOf(route: Route): string {
  if (route.prefix !== undefined) return `${route.prefix}/x`
  return (route.pattern ?? '/').replace(/^\^/, '').replace(/\[\^\/\]\+/g, 'x').replace(/\(\?:\/\|\$\)|\(\/\|\$\)|\$$/g, '/')
}

function upstreamName(service: string): string {
  return `svc_${service.replace(/-/g, '_')}`
}

function locationLines(route: Route | undefined, service: string, site: NginxSite, defaultShape: ErrorShape): string[] {
  const shape = route ? shapeOfPath(sampleOf(route)) : defaultShape
  const timeoutS = Math.max(3600, Math.ceil((3 * site.streamKeepAliveMs) / 1000))
  const lines = [
    `proxy_pass http://${upstreamName(service)};`,
    ...STATUSES.map((s) => `error_page ${s} = @${shape}_${s};`)
  ]
  if (route?.idempotent) {
    lines.push(
      '# Idempotent (event ingest deduplicates by event_uuid): a POST that reached a dying instance is replayed on another.',
      "# Not on 503: that is the shared backlog's backpressure, the same from every instance; it goes to the publisher",
      '# with its Retry-After, and counted as a failure it took every instance out of the upstream (502s for fail_timeout).',
      'proxy_next_upstream error timeout http_502 http_504 non_idempotent;'
    )
  }
  if (route?.stream) {
    lines.push(
      '# A stream: every byte goes out as it comes, the WebSocket upgrade passes, and idle timeouts outlast the keep-alives.',
      'proxy_buffering off;',
      'proxy_request_buffering off;',
      'proxy_cache off;',
      ...PROXY_HEADERS,
      'proxy_set_header Upgrade $http_upgrade;',
      'proxy_set_header Connection $connection_upgrade;',
      `proxy_read_timeout ${timeoutS}s;`,
      `proxy_send_timeout ${timeoutS}s;`,
      `send_timeout ${timeoutS}s;`
    )
  }
  return lines
}

function locationsOf(table: RouteTable, kind: HostKind, site: NginxSite): string[] {
  const host = table.hosts[kind]
  const out: string[] = []
  const block = (head: string, body: string[]): void => {
    out.push(`location ${head} {`, ...body.map((l) => `  ${l}`), '}')
  }
  for (const r of host.routes) {
    // Prefixes match whole segments: `= /2/webhooks` and `/2/webhooks/`, never /2/webhooksfoo.
    if (r.prefix !== undefined) {
      block(`= ${r.prefix}`, locationLines(r, r.service, site, 'v2'))
      block(`${r.prefix.replace(/\/$/, '')}/`, locationLines(r, r.service, site, 'v2'))
    } else block(`~ ${r.pattern as string}`, locationLines(r, r.service, site, 'v2'))
  }
  block('/', locationLines(undefined, host.default, site, kind === 'sandbox' ? 'ads' : 'v2'))
  for (const shape of SHAPES) {
    for (const status of STATUSES) {
      const { type, body } = errorBody(shape, status, site.problemBase)
      // `$` would start a variable in nginx's text; none of these bodies has one.
      block(`@${shape}_${status}`, [`default_type ${type};`, `return ${status} '${body.replace(/'/g, "\\'")}';`])
    }
  }
  return out
}

function indent(lines: string[], by: string): string[] {
  return lines.map((l) => (l === '' ? l : `${by}${l}`))
}

/** The whole nginx.conf: one upstream per service, the api server (and the sandbox host), the sandbox server. */
export function nginxConfig(table: RouteTable, site: NginxSite, files?: NginxFiles): string {
  const top: string[] = ['# Generated by scripts/nginx.ts from deploy/routes.json: edit those, not this file.']
  if (files) {
    if (files.user) top.push(`user ${files.user};`)
    top.push('daemon off;', 'worker_processes 1;', `pid ${files.pidFile};`, `error_log ${files.errorLog} warn;`)
  } else top.push('worker_processes auto;', 'error_log /dev/stderr warn;')
  top.push('events {', '  worker_connections 4096;', '}', '')

  // Which instance answered (and each one tried, comma-separated, after a failover).
  const http: string[] = [`log_format upstreams '$remote_addr [$time_local] "$request" $status $body_bytes_sent $request_time upstream=$upstream_addr upstream_status=$upstream_status';`]
  if (files) {
    http.push(`access_log ${files.accessLog} upstreams;`)
    for (const t of ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']) http.push(`${t}_temp_path ${path.join(files.tempDir, t)};`)
  } else http.push('access_log /dev/stdout upstreams;')
  http.push(
    `client_max_body_size ${site.bodyLimitBytes + 65536};`,
    '# Bodies up to 1 MiB stay in memory (larger ones go to the temp path): a replayed request needs its whole body.',
    'client_body_buffer_size 1m;',
    'server_tokens off;',
    'proxy_http_version 1.1;',
    ...PROXY_HEADERS,
    'proxy_set_header Connection "";',
    'proxy_connect_timeout 2s;',
    '# Failover: the next instance after a refused or reset connection, a timeout, or a 502/503/504.',
    'proxy_next_upstream error timeout http_502 http_503 http_504;',
    'proxy_next_upstream_timeout 15s;',
    'map $http_upgrade $connection_upgrade {',
    '  default upgrade;',
    "  '' '';",
    '}',
    ''
  )
  if (site.resolver) http.push(`resolver ${site.resolver} valid=5s ipv6=off;`, '')
  for (const service of servicesOf(table)) {
    const servers = site.upstreams[service] ?? []
    http.push(`upstream ${upstreamName(service)} {`)
    if (site.resolver) http.push(`  zone ${upstreamName(service)} 64k;`)
    // No instance at all (a service left out): one address nothing listens on, so nginx answers 502 in the path's shape.
    for (const s of servers.length > 0 ? servers : ['127.0.0.1:9']) http.push(`  server ${s} max_fails=1 fail_timeout=2s${site.resolver ? ' resolve' : ''};`)
    // nginx drops an idle upstream connection (30 s) before the service would (fastify: 72 s), so a reused one is never half-closed.
    http.push('  keepalive 32;', '  keepalive_timeout 30s;', '}', '')
  }
  const server = (listen: string, names: string[], kind: HostKind): void => {
    http.push('server {', `  listen ${listen};`, `  server_name ${names.join(' ')};`, ...indent(locationsOf(table, kind, site), '  '), '}', '')
  }
  server(`${site.listen.api} default_server`, ['_'], 'api')
  if (site.sandboxHosts.length > 0) server(site.listen.api, site.sandboxHosts, 'sandbox')
  if (site.listen.sandbox) server(`${site.listen.sandbox} default_server`, ['_'], 'sandbox')
  return [...top, 'http {', ...indent(http, '  ').map((l) => l.replace(/\s+$/, '')), '}', ''].join('\n')
}

/** The config of deploy/compose.yaml's `proxy` (official nginx image): compose service names, Docker's DNS. */
export function composeNginxConfig(table: RouteTable = loadRoutes()): string {
  const config = loadConfig({})
  const upstreams: Record<string, string[]> = {}
  for (const service of servicesOf(table)) upstreams[service] = [service === 'gateway-sandbox' ? 'gateway:8081' : `${service}:8080`]
  return nginxConfig(table, {
    upstreams,
    listen: { api: '8080', sandbox: '8081' },
    sandboxHosts: ['ads-api-sandbox.example.com'],
    problemBase: config.problemBase,
    bodyLimitBytes: config.bodyLimit,
    streamKeepAliveMs: config.streamKeepAliveMs,
    resolver: '127.0.0.11'
  })
}

export function composeConfigPath(): string {
  return path.join(projectRoot(), 'deploy', 'nginx', 'nginx.conf')
}

function main(): number {
  const wanted = composeNginxConfig()
  const file = composeConfigPath()
  if (process.argv.includes('--check')) {
    const current = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : ''
    if (current === wanted) return 0
    process.stderr.write(`${path.relative(process.cwd(), file)} is stale: run \`make nginx-conf\`\n`)
    return 1
  }
  if (!process.argv.includes('--compose')) {
    process.stderr.write('usage: nginx.js --compose | --check\n')
    return 2
  }
  fs.mkdirSync(path.dirname(file), { recursive: true })
  fs.writeFileSync(file, wanted)
  process.stdout.write(`wrote ${path.relative(process.cwd(), file)}\n`)
  return 0
}

if (require.main === module) process.exit(main())
