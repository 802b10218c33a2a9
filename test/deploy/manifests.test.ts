import fs from 'node:fs'
import path from 'node:path'
import t, { type Test } from 'tap'
import YAML from 'yaml'
import { SETTINGS } from '../../services/common/config'
import type { RouteEntry } from '../../services/common/server'
import type { Runtime } from '../../services/common/runtime'
import type { ServiceDefinition } from '../../services/common/service'
import { accountHistoryService } from '../../services/account-history/service'
import { activityService } from '../../services/activity/service'
import { gatewayService } from '../../services/gateway/service'
import { streamService } from '../../services/stream/service'
import { webhooksService } from '../../services/webhooks/service'
import { loadRoutes, routeFor } from '../../scripts/nginx'
import { oauth1Request } from '../support/http'
import { createIdentity, startTestRuntime } from '../support/runtime'
import { DEPLOY } from '../support/fixtures/deploy'

/**
 * What can be checked of deploy/ without a container engine: the manifests
 * parse, every command they run exists, every variable they set is a real
 * setting, and the route table sends every path of the contract — and every route
 * each service registers — to the service that serves it.
 */

const ROOT = path.resolve(__dirname, '..', '..')
const SERVICES: ServiceDefinition[] = [gatewayService, webhooksService, activityService, streamService, accountHistoryService]

/** Every operation of docs/architecture.md's tables of operations and the v2 paths of the OpenAPI subset. */
const SPEC_OPERATIONS: Array<[string, string, 'api' | 'sandbox']> = [
  ['PUT', '/2/webhooks/:webhook_id', 'api'],
  ['POST', '/2/webhooks', 'api'],
  ['GET', '/2/webhooks', 'api'],
  ['DELETE', '/2/webhooks/:webhook_id', 'api'],
  ['POST', '/2/webhooks/replay', 'api'],
  ['GET', '/2/account_activity/subscriptions/count', 'api'],
  ['POST', '/2/account_activity/webhooks/:webhook_id/subscriptions/all', 'api'],
  ['GET', '/2/account_activity/webhooks/:webhook_id/subscriptions/all', 'api'],
  ['GET', '/2/account_activity/webhooks/:webhook_id/subscriptions/all/list', 'api'],
  ['DELETE', '/2/account_activity/webhooks/:webhook_id/subscriptions/:user_id/all', 'api'],
  ['GET', '/2/activity/stream', 'api'],
  ['POST', '/2/activity/subscriptions', 'api'],
  ['GET', '/2/activity/subscriptions', 'api'],
  ['DELETE', '/2/activity/subscriptions', 'api'],
  ['PUT', '/2/activity/subscriptions/:subscription_id', 'api'],
  ['DELETE', '/2/activity/subscriptions/:subscription_id', 'api'],
  ['POST', '/2/media/upload', 'api'],
  ['POST', '/oauth/request_token', 'api'],
  ['GET', '/oauth/authorize', 'api'],
  ['GET', '/oauth/authenticate', 'api'],
  ['POST', '/oauth/access_token', 'api'],
  ['POST', '/1.1/oauth/invalidate_token', 'api'],
  ['POST', '/oauth2/token', 'api'],
  ['POST', '/oauth2/invalidate_token', 'api'],
  ['GET', '/12/product_catalogs', 'api'],
  ['POST', '/12/product_catalogs', 'api'],
  ['PUT', '/12/product_catalogs/:product_catalog_id', 'api'],
  ['DELETE', '/12/product_catalogs/:product_catalog_id', 'api'],
  ['GET', '/12/product_catalogs/:product_catalog_id/products', 'api'],
  ['PUT', '/12/product_catalogs/:product_catalog_id/products', 'api'],
  ['DELETE', '/12/product_catalogs/:product_catalog_id/products', 'api'],
  ['GET', '/12/product_catalogs/:product_catalog_id/product_sets/:product_set_id', 'api'],
  ['POST', '/12/product_catalogs/:product_catalog_id/product_sets', 'api'],
  ['PUT', '/12/product_catalogs/:product_catalog_id/product_sets/:product_set_id', 'api'],
  ['GET', '/12/insights/keywords/search', 'api'],
  ['GET', '/5/accounts/:account_id/tailored_audiences/:tailored_audience_id/permissions', 'api'],
  ['POST', '/5/accounts/:account_id/tailored_audiences/:tailored_audience_id/permissions', 'api'],
  ['DELETE', '/5/accounts/:account_id/tailored_audiences/:tailored_audience_id/permissions/:tailored_audience_permission_id', 'api'],
  ['GET', '/12/accounts/:account_id/custom_audiences/:custom_audience_id/targeted', 'api'],
  ['POST', '/12/accounts/:account_id/custom_audiences/:custom_audience_id/users', 'api'],
  ['POST', '/12/batch/accounts/:account_id/do_not_reach_lists/:do_not_reach_list_id/users', 'api'],
  ['DELETE', '/12/accounts/:account_id/do_not_reach_lists/:do_not_reach_list_id', 'api'],
  ['GET', '/12/accounts/:account_id/account_media', 'api'],
  ['GET', '/12/accounts/:account_id/account_media/:account_media_id', 'api'],
  ['DELETE', '/12/accounts/:account_id/account_media/:account_media_id', 'api'],
  ['GET', '/12/accounts/:account_id/cards', 'api'],
  ['GET', '/12/accounts/:account_id/cards/:card_id', 'api'],
  ['POST', '/12/accounts/:account_id/cards', 'api'],
  ['PUT', '/12/accounts/:account_id/cards/:card_id', 'api'],
  ['DELETE', '/12/accounts/:account_id/cards/image_conversation/:card_id', 'api'],
  ['GET', '/12/accounts/:account_id/media_library', 'api'],
  ['GET', '/12/accounts/:account_id/media_library/:media_key', 'api'],
  ['POST', '/12/accounts/:account_id/media_library', 'api'],
  ['PUT', '/12/accounts/:account_id/media_library/:media_key', 'api'],
  ['DELETE', '/12/accounts/:account_id/media_library/:media_key', 'api'],
  ['GET', '/12/accounts/:account_id/cards/poll', 'api'],
  ['GET', '/12/accounts/:account_id/cards/poll/:card_id', 'api'],
  ['POST', '/12/accounts/:account_id/cards/poll', 'api'],
  ['POST', '/12/accounts/:account_id/tweet', 'api'],
  ['PUT', '/12/accounts/:account_id/tweets/:tweet_id/name', 'api'],
  ['GET', '/12/accounts/:account_id/cards/video_conversation', 'api'],
  ['GET', '/12/accounts/:account_id/cards/video_conversation/:card_id', 'api'],
  ['POST', '/12/accounts/:account_id/cards/video_conversation', 'api'],
  ['PUT', '/12/accounts/:account_id/cards/video_conversation/:card_id', 'api'],
  ['GET', '/12/accounts', 'api'],
  ['GET', '/12/accounts/:account_id', 'api'],
  ['PUT', '/12/accounts/:account_id', 'api'],
  ['POST', '/12/accounts', 'sandbox'],
  ['DELETE', '/12/accounts/:account_id', 'sandbox'],
  ['GET', '/12/accounts/:account_id/account_apps', 'api'],
  ['GET', '/12/accounts/:account_id/account_history', 'api'],
  ['GET', '/12/advertiser_business_categories', 'api'],
  ['POST', '/12/accounts/:account_id/audience_estimate', 'api'],
  ['GET', '/12/accounts/:account_id/curated_categories/:curated_category_id', 'api'],
  ['GET', '/12/accounts/:account_id/features', 'api'],
  ['POST', '/12/accounts/:account_id/features', 'sandbox'],
  ['DELETE', '/12/accounts/:account_id/features', 'sandbox'],
  ['PUT', '/12/accounts/:account_id/line_items/:line_item_id', 'api'],
  ['DELETE', '/12/accounts/:account_id/line_items/:line_item_id', 'api'],
  ['GET', '/12/accounts/:account_id/line_item_curated_categories', 'api'],
  ['GET', '/12/accounts/:account_id/line_item_curated_categories/:line_item_curated_category_id', 'api'],
  ['POST', '/12/accounts/:account_id/line_item_curated_categories', 'api'],
  ['PUT', '/12/accounts/:account_id/line_item_curated_categories/:line_item_curated_category_id', 'api'],
  ['DELETE', '/12/accounts/:account_id/line_item_curated_categories/:line_item_curated_category_id', 'api'],
  ['GET', '/12/line_items/placements', 'api']
]

/** Paths one character away from a route family: a regex that is too loose sends them astray. */
const NEAR_MISSES = ['/1x1/account/verify_credentials.json', '/1.10/x', '/oauthx/token', '/oauth2x', '/2/webhooksx', '/2/activity/streams', '/admin/activityx', '/12x/accounts', '/12/accounts/x1/account_historyx', '/12/accounts/x1/y/account_history', '/', '/2/tweets']

interface IngressPath {
  path: string
  pathType: string
  backend: { service: { name: string; port: { name: string } } }
}

interface IngressDoc {
  metadata: { name?: string; annotations?: Record<string, string> }
  spec: { rules: Array<{ host: string; http: { paths: IngressPath[] } }> }
}

/**
 * Where ingress-nginx with use-regex sends `path`: every path is a
 * case-insensitive regular expression anchored at the start, the longest
 * tried first. The sandbox port of the gateway is the route table's
 * `gateway-sandbox`.
 */
function ingressServiceFor(paths: IngressPath[], path: string): string | undefined {
  const ordered = [...paths].sort((a, b) => b.path.length - a.path.length)
  const hit = ordered.find((p) => new RegExp(`^${p.path}`, 'i').test(path))
  if (!hit) return undefined
  const { name, port } = hit.backend.service
  return name === 'gateway' && port.name === 'sandbox' ? 'gateway-sandbox' : name
}

/** Served by every service for itself (the proxy sends /openapi.json to the gateway). */
const PLUMBING = new Set(['/healthz', '/readyz', '/metrics', '/openapi.json', '/admin/bus/lag'])
/** Every server's own plumbing, or the API reference page of its document (/docs/, reached on the gateway behind the proxy). */
const isPlumbing = (url: string): boolean => PLUMBING.has(url) || url === '/docs' || url.startsWith('/docs/')

/** `/a/:x/b` and `/a/{x}/b` both become `/a/:/b`, so parameter names do not matter. */
const shape = (url: string): string => url.replace(/:[A-Za-z_]+|\{[A-Za-z_]+\}/g, ':')
const concrete = (url: string): string => url.replace(/:[A-Za-z_]+/g, 'x1')

interface ServedRoutes {
  api: RouteEntry[]
  sandbox: RouteEntry[]
}

const routeKey = (method: string, url: string): string => `${method} ${shape(url)}`

/**
 * Asks the production host, with a valid signed request, for every
 * sandbox-only operation of the contract: each must answer 404 ROUTE_NOT_FOUND.
 * Where the path exists on that host under other methods (GET accounts,
 * features), the gateway registers an explicit refusal route so that it does
 * not answer 405; such a route is in the route table but serves nothing.
 * Returns the operations refused that way, to leave out of what is served.
 */
async function productionRefusals(t: Test, gateway: Runtime): Promise<Set<string>> {
  const id = await createIdentity(gateway.ctx.store)
  const refused = new Set<string>()
  for (const [method, url, host] of SPEC_OPERATIONS) {
    if (host !== 'sandbox') continue
    const res = await oauth1Request(method, `${gateway.baseUrl}${concrete(url)}`, id)
    const code = res.status === 404 ? res.json<{ errors?: Array<{ code?: string }> }>().errors?.[0]?.code : undefined
    t.equal(`${res.status} ${code}`, '404 ROUTE_NOT_FOUND', `${method} ${url} on the production host: 404 ROUTE_NOT_FOUND`)
    if (code === 'ROUTE_NOT_FOUND') refused.add(routeKey(method, url))
  }
  return refused
}

t.test('the route table sends every route of every service to that service', async (t) => {
  const table = loadRoutes()
  const served = new Map<string, ServedRoutes>()
  for (const service of SERVICES) {
    const rt = await startTestRuntime(t, { services: [service], serviceName: service.name })
    // On the production host, a refusal route is not a served operation.
    const refused = service === gatewayService ? await productionRefusals(t, rt) : new Set<string>()
    const api = rt.app.routeTable.filter((r) => !refused.has(routeKey(r.method, r.url)))
    served.set(service.name, { api, sandbox: rt.sandbox?.routeTable ?? [] })
  }
  for (const [name, routes] of served) {
    for (const r of routes.api) {
      if (isPlumbing(r.url) || r.url.includes('*')) continue
      t.equal(routeFor(table, 'api', concrete(r.url)), name, `api ${r.method} ${r.url} -> ${name}`)
    }
    for (const r of routes.sandbox) {
      if (isPlumbing(r.url) || r.url.includes('*')) continue
      const target = routeFor(table, 'sandbox', concrete(r.url))
      t.equal(target.replace(/-sandbox$/, ''), name, `sandbox ${r.method} ${r.url} -> ${name}`)
    }
  }
  // Every operation of the contract is served, on the host the contract names, by the service the table picks.
  for (const [method, url, host] of SPEC_OPERATIONS) {
    const owner = routeFor(table, host, concrete(url)).replace(/-sandbox$/, '')
    const routes = served.get(owner)?.[host] ?? []
    t.ok(routes.some((r) => r.method === method && shape(r.url) === shape(url)), `${method} ${url} (${host}) served by ${owner}`)
  }
  // Sandbox-only operations are not served on the production host (productionRefusals checked the 404 over HTTP).
  for (const [method, url, host] of SPEC_OPERATIONS) {
    if (host !== 'sandbox') continue
    const gateway = served.get('gateway') as ServedRoutes
    t.notOk(gateway.api.some((r) => r.method === method && shape(r.url) === shape(url)), `${method} ${url} not served on the production host`)
  }
})

t.test('manifests parse and name only real commands and settings', async (t) => {
  const knownEnv = new Set<string>(Object.values(SETTINGS).map((s) => s.env))
  knownEnv.add('NODE_ENV')

  // merge: compose's `<<: *service` keys (without it every service of ours reads as image-less and goes unchecked).
  const compose = YAML.parse(fs.readFileSync(path.join(DEPLOY, 'compose.yaml'), 'utf8'), { merge: true }) as {
    services: Record<string, { image?: string; command?: string[]; environment?: Record<string, string>; restart?: string; healthcheck?: { test?: string[] } }>
  }
  // Whatever runs for good (not the one-shot topic creation) says when it is healthy: the proxy too.
  for (const [name, svc] of Object.entries(compose.services)) if (svc.restart === 'unless-stopped' || svc.restart === 'always') t.ok(svc.healthcheck?.test, `compose ${name} has a healthcheck`)
  t.ok(compose.services.proxy?.healthcheck?.test, 'the compose proxy has a healthcheck')
  t.ok(compose.services.kafka && compose.services.redis, 'Kafka and Redis are part of the stack')
  t.match(JSON.stringify(compose.services.kafka), /KAFKA_PROCESS_ROLES/, 'Kafka runs in KRaft mode')
  t.match(fs.readFileSync(path.join(DEPLOY, 'redis.conf'), 'utf8'), /^appendonly yes$/m, 'Redis has AOF on')
  for (const [name, svc] of Object.entries(compose.services)) {
    if (!svc.image?.startsWith('activity-gateway')) continue
    const script = svc.command?.find((c) => c.startsWith('dist/'))
    t.ok(script, `${name} runs a script of ours`)
    const source = path.join(ROOT, (script as string).replace(/^dist\//, '').replace(/\.js$/, '.ts'))
    t.ok(fs.existsSync(source), `${name}: ${script} is built from ${path.relative(ROOT, source)}`)
    for (const key of Object.keys(svc.environment ?? {})) t.ok(knownEnv.has(key), `${name}: ${key} is a setting`)
  }
  for (const service of SERVICES) t.ok(compose.services[service.name], `compose runs ${service.name}`)

  const k8sFiles = fs.readdirSync(path.join(DEPLOY, 'k8s')).filter((f) => f.endsWith('.yaml'))
  const docs = k8sFiles.flatMap((f) => YAML.parseAllDocuments(fs.readFileSync(path.join(DEPLOY, 'k8s', f), 'utf8')).map((d) => {
    t.same(d.errors, [], `${f} parses`)
    return d.toJS() as { kind: string; metadata: { name: string }; data?: Record<string, string>; spec?: unknown }
  }))
  const deployments = docs.filter((d) => d.kind === 'Deployment')
  for (const service of SERVICES) t.ok(deployments.some((d) => d.metadata.name === service.name), `a Deployment for ${service.name}`)
  for (const d of deployments) {
    const container = (d.spec as { template: { spec: { containers: Array<{ command: string[]; env?: Array<{ name: string }> }> } } }).template.spec.containers[0]
    const script = container?.command.find((c) => c.startsWith('dist/')) ?? ''
    t.ok(fs.existsSync(path.join(ROOT, script.replace(/^dist\//, '').replace(/\.js$/, '.ts'))), `${d.metadata.name} runs an existing entry`)
    for (const e of container?.env ?? []) t.ok(knownEnv.has(e.name), `${d.metadata.name}: ${e.name} is a setting`)
  }
  // No usable operator token ships: every pod needs the operator-created Secret, which the runbook creates.
  for (const d of docs.filter((x) => x.kind === 'ConfigMap' || x.kind === 'Secret')) {
    const data = { ...(d.data ?? {}), ...((d as unknown as { stringData?: Record<string, string> }).stringData ?? {}) }
    t.notOk('OPERATOR_TOKEN' in data, `${d.kind} ${d.metadata.name} ships no OPERATOR_TOKEN`)
  }
  for (const d of deployments) {
    const container = (d.spec as { template: { spec: { containers: Array<{ envFrom?: Array<{ secretRef?: { name: string; optional?: boolean } }> }> } } }).template.spec.containers[0]
    const secret = container?.envFrom?.find((e) => e.secretRef?.name === 'gateway-secrets')?.secretRef
    t.ok(secret && secret.optional !== true, `${d.metadata.name} requires the Secret gateway-secrets (OPERATOR_TOKEN)`)
  }
  t.match(fs.readFileSync(path.join(ROOT, 'docs', 'operations.md'), 'utf8'), /create secret generic gateway-secrets[^\n]*\n?[^\n]*OPERATOR_TOKEN/, 'the runbook creates the Secret')
  // The ConfigMaps and Secrets the services read as their environment (not, say, redis-cluster's files).
  const envSources = new Set(deployments.flatMap((d) => (d.spec as { template: { spec: { containers: Array<{ envFrom?: Array<{ configMapRef?: { name: string }; secretRef?: { name: string } }> }> } } }).template.spec.containers.flatMap((c) => (c.envFrom ?? []).map((e) => e.configMapRef?.name ?? e.secretRef?.name))))
  t.ok(envSources.has('gateway-config'), 'the services read gateway-config')
  for (const cm of docs.filter((d) => (d.kind === 'ConfigMap' || d.kind === 'Secret') && envSources.has(d.metadata.name))) {
    const data = cm.data ?? (cm as unknown as { stringData?: Record<string, string> }).stringData ?? {}
    for (const key of Object.keys(data)) t.ok(knownEnv.has(key), `${cm.metadata.name}: ${key} is a setting`)
  }
  // The Ingress mirrors the route table on both hosts: the same path reaches the same service
  // through it as through the proxy, for every spec path and for near misses.
  // ingress-nginx merges every Ingress of a host: the idempotent routes have their own (their retry annotation differs).
  const ingresses = docs.filter((d) => d.kind === 'Ingress') as unknown as IngressDoc[]
  const table = loadRoutes()
  for (const kind of ['api', 'sandbox'] as const) {
    const paths = ingresses.flatMap((i) => i.spec.rules.filter((r) => (kind === 'sandbox') === /sandbox/.test(r.host)).flatMap((r) => r.http.paths))
    if (paths.length === 0) {
      t.fail(`the Ingress has a rule for the ${kind} host`)
      continue
    }
    const samples = [...SPEC_OPERATIONS.filter(([, , host]) => host === kind || kind === 'sandbox').map(([, url]) => concrete(url)), ...NEAR_MISSES, '/admin/activity/events']
    for (const sample of samples) t.equal(ingressServiceFor(paths, sample), routeFor(table, kind, sample), `ingress ${kind} ${sample} -> ${routeFor(table, kind, sample)}`)
  }
  // POSTs are replayed on another pod exactly where the route table says the handler is idempotent.
  const idempotent = table.hosts.api.routes.filter((r) => r.idempotent)
  t.ok(idempotent.length > 0, 'event ingest is marked idempotent')
  for (const i of ingresses) {
    const retries = i.metadata.annotations?.['nginx.ingress.kubernetes.io/proxy-next-upstream'] ?? ''
    const paths = i.spec.rules.flatMap((r) => r.http.paths.map((p) => p.path))
    const onlyIdempotent = paths.every((p) => idempotent.some((r) => p === `${r.prefix ?? ''}(/|$)`))
    // Ingest's 503 is the shared backlog's backpressure: passed to the publisher, not failed over.
    t.match(retries, onlyIdempotent ? /^error timeout http_502 http_504 non_idempotent$/ : /error timeout http_502 http_503 http_504/, `${i.metadata.name ?? 'Ingress'} fails over to the next pod`)
    t.equal(/non_idempotent/.test(retries), onlyIdempotent, `${paths.join(' ')}: POSTs replayed ${onlyIdempotent ? '(idempotent)' : 'never'}`)
  }

  const topics = JSON.parse(fs.readFileSync(path.join(DEPLOY, 'topics.json'), 'utf8')) as unknown
  t.ok(topics, 'topics.json parses')
})

// ------------------------------------------------------------------ Redis Cluster
