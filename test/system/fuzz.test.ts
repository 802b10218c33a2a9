import { randomBytes } from 'node:crypto'
import net from 'node:net'
import t, { type Test } from 'tap'
import { Agent, request as undiciRequest } from 'undici'
import { formPairs, percentEncode, sign, type ParamPair } from '../../services/common/auth/oauth1'
import type { RouteEntry } from '../../services/common/server'
import type { Runtime } from '../../services/common/runtime'
import { createAccount } from '../../services/gateway/ads/accounts'
import { createIdentity, startTestRuntime, type TestIdentity } from '../support/runtime'
import { redisStore, startRedis } from '../support/infra'

/**
 * Hostile input across every route: at least 10,000 generated
 * malformed requests — bad JSON, wrong types, huge bodies, JSON nested
 * thousands of levels deep, invalid UTF-8, header abuse, path traversal,
 * oversized query strings — most of them properly authenticated (each
 * route's scheme is discovered first) so validation behind authentication
 * runs too, and at most half may stop at authentication. A second stream of
 * requests is written byte by byte on raw sockets, as no client library
 * would send them: raw %FF / %C0%AF / overlong UTF-8 in path and query,
 * un-encoded and encoded traversal (/../, %2e%2e/), control characters,
 * duplicate Content-Length, Transfer-Encoding with Content-Length, huge
 * headers, bad Host headers. Every answer must be below 500 and, for errors,
 * in the documented shape of the interface the path belongs to (checked
 * strictly: a v2 Problem's type under the problem base or about:blank, its
 * title, its status equal to the HTTP status; classic errors with integer
 * codes; the ads envelope with request.params). The whole run goes against
 * the embedded runtime, and a smaller one against the Redis store. The
 * generator is seeded: a failure names the seed and request number to
 * reproduce it.
 *
 * Only loopback is ever contacted: no generated value is a reachable URL
 * other than 127.0.0.1 on a closed port.
 */

const SEED = Number(process.env.FUZZ_SEED ?? 20261122)
const TOTAL = Number(process.env.FUZZ_REQUESTS ?? 10_500)
/** Raw-socket requests on top of TOTAL. */
const RAW_TOTAL = Number(process.env.FUZZ_RAW_REQUESTS ?? 2000)
/** The Redis store runtime gets this share of both. */
const REDIS_SHARE = 0.2
const CONCURRENCY = 16
const PROBLEM_BASE = 'https://api.twitter.com/2/problems'
const OPERATOR = 'fuzz-operator-token-0123456789abcdef'

/** mulberry32: small, fast, seedable. */
function prng(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let x = a
    x = Math.imul(x ^ (x >>> 15), x | 1)
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61)
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
}

type Rand = () => number
const pick = <T>(r: Rand, xs: readonly T[]): T => xs[Math.floor(r() * xs.length)] as T

const NASTY_STRINGS = [
  '', ' ', '0', '-1', '1e309', 'NaN', 'null', 'true', '[]', '{}', '9'.repeat(40), '1.5', '0x10',
  '../../../../etc/passwd', '..%2f..%2f..%2fetc%2fpasswd', '%00', '\u0000', '\uFEFF', '\u202E', 'é', '🙂'.repeat(50),
  '<script>alert(1)</script>', "' OR 1=1 --", '${7*7}', '{{7*7}}', '%s%s%s%n', 'A'.repeat(1000),
  'http://127.0.0.1:1/hook', 'https://127.0.0.1:1/', 'javascript:alert(1)', 'file:///etc/passwd', 'card://', 'sha256=',
  'ACTIVE', 'PAUSED', 'MAX', 'post.create', 'dm.sent', 'Update', 'Delete', 'IMAGE', 'TWEET_IMAGE', 'in stock', '10.00 USD',
  '2026-01-01T00:00:00Z', '202601010000', 'not-a-date', '1234567890123456789', '12345678901234567890'
]

function nastyValue(r: Rand): unknown {
  const roll = r()
  if (roll < 0.55) return pick(r, NASTY_STRINGS)
  if (roll < 0.65) return Math.floor(r() * 2 ** 53) * (r() < 0.5 ? -1 : 1)
  if (roll < 0.7) return r() < 0.5
  if (roll < 0.75) return null
  if (roll < 0.85) return [nastyValue(r), pick(r, NASTY_STRINGS)]
  if (roll < 0.99) return { [pick(r, PARAM_NAMES)]: nastyValue(r), nested: { deep: [1, { x: pick(r, NASTY_STRINGS) }] } }
  return 'x'.repeat(Math.floor(r() * 70_000))
}

const PARAM_NAMES = [
  'url', 'webhook_id', 'event_type', 'filter', 'user_id', 'keyword', 'direction', 'tag', 'count', 'cursor', 'sort_by',
  'with_deleted', 'with_total_count', 'name', 'products', 'product_keys', 'type', 'filters', 'granularity', 'keywords',
  'start_time', 'end_time', 'media_key', 'components', 'slides', 'duration_in_minutes', 'first_choice', 'bid_strategy',
  'bid_amount_local_micro', 'objective', 'entity_status', 'feature_keys', 'from_date', 'to_date', 'max_results',
  'pagination_token', 'ids', 'backfill_minutes', 'oauth_callback', 'oauth_verifier', 'grant_type', 'access_token',
  'as_user_id', 'text', 'nullcast', 'operation_type', 'params', 'users', 'entity_type', 'entity_id', 'code', 'code_verifier'
]

function fillPath(r: Rand, url: string, ids: { accountId: string; userId: string }): string {
  return url.replace(/:([A-Za-z_]+)/g, (_m, name: string) => {
    const roll = r()
    if (name === 'account_id' && roll < 0.6) return ids.accountId
    if (name === 'user_id' && roll < 0.5) return ids.userId
    if (roll < 0.25) return String(Math.floor(r() * 1e15))
    return encodeURIComponent(String(pick(r, NASTY_STRINGS))).slice(0, 400) || 'x'
  })
}

function randomQuery(r: Rand): Record<string, string> {
  const q: Record<string, string> = {}
  const n = Math.floor(r() * 6)
  for (let i = 0; i < n; i++) {
    const v = nastyValue(r)
    q[r() < 0.85 ? pick(r, PARAM_NAMES) : `k${Math.floor(r() * 1e6)}`] = typeof v === 'string' ? v.slice(0, 3000) : JSON.stringify(v) ?? 'null'
  }
  if (r() < 0.02) q.huge = 'q'.repeat(20_000) // beyond Node's header limit: 431 from the parser
  return q
}

interface Body {
  contentType?: string
  payload?: Buffer | string
}

/** JSON nested `depth` levels deep: arrays, objects, or both, closed or not. */
function deepJson(r: Rand): string {
  const depth = pick(r, [100, 1000, 5000, 20_000, 100_000])
  const kind = r()
  if (kind < 0.4) return `${'['.repeat(depth)}${']'.repeat(depth)}`
  if (kind < 0.8) return `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`
  if (kind < 0.9) return `{"${pick(r, PARAM_NAMES)}":${'[{"x":'.repeat(depth)}0${'}]'.repeat(depth)}}`
  return '['.repeat(depth)
}

function randomBody(r: Rand): Body {
  if (r() < 0.06) return { contentType: 'application/json', payload: deepJson(r) }
  const roll = r()
  if (roll < 0.15) return {}
  if (roll < 0.35) return { contentType: 'application/json', payload: JSON.stringify(Object.fromEntries(PARAM_NAMES.filter(() => r() < 0.15).map((k) => [k, nastyValue(r)]))) }
  if (roll < 0.45) return { contentType: 'application/json', payload: pick(r, ['{', '{"a":', '[1,2', 'nul', '"\\uZZZZ"', '{"a":1}}', '\u0000', '']) }
  if (roll < 0.5) return { contentType: 'application/json', payload: JSON.stringify(nastyValue(r)) }
  if (roll < 0.55) return { contentType: 'application/json', payload: Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0xc3, 0x28, 0x22, 0x7d]) }
  if (roll < 0.6) return r() < 0.1 ? { contentType: 'application/json', payload: `[${'1,'.repeat(2_700_000)}1]` } /* ~5.4 MB: over the body limit */ : { contentType: 'application/json', payload: JSON.stringify({ [pick(r, PARAM_NAMES)]: 'v'.repeat(50_000) }) }
  if (roll < 0.72) return { contentType: 'application/x-www-form-urlencoded', payload: PARAM_NAMES.filter(() => r() < 0.2).map((k) => `${k}=${encodeURIComponent(String(nastyValue(r)).slice(0, 500))}`).join('&') + (r() < 0.2 ? '&%zz=%' : '') }
  if (roll < 0.78) return { contentType: 'multipart/form-data; boundary=xyz', payload: `--xyz\r\nContent-Disposition: form-data; name="media"; filename="a.png"\r\nContent-Type: image/png\r\n\r\n${'\x89PNG garbage'.repeat(Math.floor(r() * 50))}\r\n--xyz--\r\n` }
  if (roll < 0.82) return { contentType: 'multipart/form-data', payload: 'no boundary at all' }
  if (roll < 0.9) return { contentType: pick(r, ['text/plain', 'application/xml', 'image/png', 'application/octet-stream', 'x/y; charset=nope']), payload: 'plain body' }
  return { contentType: 'application/json', payload: JSON.stringify({ nested: Array.from({ length: 200 }, () => ({ a: [[[[[1]]]]] })) }) }
}

function abusiveHeaders(r: Rand): Record<string, string> {
  const h: Record<string, string> = {}
  const roll = r()
  if (roll < 0.05) h['x-long'] = 'h'.repeat(12_000)
  else if (roll < 0.1) h.authorization = pick(r, ['OAuth', 'OAuth x', 'OAuth oauth_consumer_key="%ZZ"', 'Bearer', 'Bearer ' + 'a'.repeat(3000), 'Basic !!!', 'Digest x', 'OAuth oauth_consumer_key="a", oauth_consumer_key="b"'])
  else if (roll < 0.13) h['content-length'] = '5'
  else if (roll < 0.16) h['x-request-id'] = '../../' + 'i'.repeat(300)
  else if (roll < 0.19) h.cookie = 'csrf=' + 'c'.repeat(2000)
  return h
}

type Shape = 'ads' | 'classic' | 'v2'

function shapeOf(path: string): Shape {
  if (/^\/(12|5)\//.test(path)) return 'ads'
  if (/^\/(oauth|oauth2|1\.1)\//.test(path)) return 'classic'
  return 'v2'
}

/** Whether an error body is in the interface's documented shape (undefined when it is). */
function wellShaped(shape: Shape, path: string, status: number, contentType: string, text: string): string | undefined {
  // The OAuth 1.0a endpoints answer form-encoded / text bodies, as the platform's do.
  if (contentType.startsWith('text/plain') && shape === 'classic') return text.length > 0 ? undefined : 'empty text error'
  // Browser-facing pages (authorization, connected apps, the console's sign-in) answer a person, in HTML (RFC 6749 §4.1.2.1: never redirect on a bad client or redirect_uri).
  if (contentType.startsWith('text/html') && /^\/(oauth\/(authorize|authenticate|apps)|(i|2)\/oauth2\/authorize|console\/(login|link)(\/|$))/.test(path)) return undefined
  let body: unknown
  try {
    body = JSON.parse(text)
  } catch {
    return `not JSON (${contentType}): ${text.slice(0, 120)}`
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return `not a JSON object: ${text.slice(0, 120)}`
  const b = body as Record<string, unknown>
  const errors = Array.isArray(b.errors) && b.errors.length > 0 ? (b.errors as unknown[]) : undefined
  const entries = (errors ?? []).map((e) => (typeof e === 'object' && e !== null ? (e as Record<string, unknown>) : {}))
  if (shape === 'ads') {
    const ok = errors && entries.every((e) => typeof e.code === 'string' && e.code !== '' && typeof e.message === 'string') && typeof b.request === 'object' && b.request !== null && typeof (b.request as Record<string, unknown>).params === 'object'
    return ok ? undefined : `not the ads envelope {errors:[{code,message}],request:{params}}: ${text.slice(0, 200)}`
  }
  // RFC 6749 §5.2 token endpoint errors.
  if (/^\/(2\/)?oauth2\//.test(path) && typeof b.error === 'string') return undefined
  if (shape === 'classic' || (errors && b.type === undefined)) {
    return errors && entries.every((e) => Number.isInteger(e.code) && typeof e.message === 'string') ? undefined : `not a classic error {errors:[{code:int,message}]}: ${text.slice(0, 200)}`
  }
  const type = b.type
  if (typeof type !== 'string' || !(type === 'about:blank' || type.startsWith(`${PROBLEM_BASE}/`))) return `Problem type outside ${PROBLEM_BASE} and not about:blank: ${text.slice(0, 200)}`
  if (typeof b.title !== 'string' || b.title === '') return `Problem without title: ${text.slice(0, 200)}`
  if (b.status !== undefined && b.status !== status) return `Problem status ${String(b.status)} but HTTP ${status}: ${text.slice(0, 200)}`
  if (type === 'about:blank' && b.status === undefined) return `about:blank Problem without status: ${text.slice(0, 200)}`
  return undefined
}

type AuthKind = 'oauth1' | 'bearer' | 'operator' | 'none'

interface Target extends RouteEntry {
  base: string
  /** The scheme the route accepts (discovered): used for most requests so they reach validation. */
  scheme: AuthKind
}

/** Routes that revoke the caller's own credentials: fuzzed with a spare identity, or they would lock the run out. */
const REVOKING = /invalidate_token|\/oauth2\/revoke/

interface Fuzzing {
  label: string
  rt: Runtime
  id: TestIdentity
  spare: TestIdentity
  accountId: string
  spareAccountId: string
  targets: Target[]
  failures: string[]
  statuses: Map<number, number>
  /** Answers that stopped at authentication (401, or a 403 naming the credentials). */
  authRefused: number
  sent: number
}

/**
 * An OAuth 1.0a user-context header over the query and (form) body exactly
 * as the server reads them (RFC 5849 §3.4.1.3: both parsed as form
 * encoding, `+` a space), so a nasty parameter value does not turn a
 * well-signed request into an authentication failure.
 */
function oauth1Header(id: TestIdentity, method: string, url: URL, form: string): string {
  const params: Record<string, string> = {
    oauth_consumer_key: id.app.consumer_key,
    oauth_nonce: randomBytes(16).toString('hex'),
    oauth_signature_method: 'HMAC-SHA1',
    oauth_timestamp: String(Math.floor(Date.now() / 1000)),
    oauth_token: id.token.token,
    oauth_version: '1.0'
  }
  let pairs: ParamPair[]
  try {
    pairs = [...Object.entries(params), ...formPairs(url.search.slice(1)), ...formPairs(form)]
  } catch {
    // A query or body the form parser refuses: the server refuses it too, before the signature matters.
    pairs = Object.entries(params)
  }
  params.oauth_signature = sign(method, url.toString(), pairs, id.app.consumer_secret, id.token.secret)
  return `OAuth ${Object.entries(params).map(([k, v]) => `${k}="${percentEncode(v)}"`).join(', ')}`
}

function authHeaders(f: Fuzzing, kind: AuthKind, method: string, url: URL, form: string): Record<string, string> {
  const id = REVOKING.test(url.pathname) ? f.spare : f.id
  if (kind === 'oauth1') return { authorization: oauth1Header(id, method, url, form) }
  if (kind === 'bearer') return { authorization: `Bearer ${id.bearer}` }
  if (kind === 'operator') return { authorization: `Bearer ${OPERATOR}` }
  return {}
}

/** DELETE /12/accounts/:account_id would delete the account every other request uses: it gets a spare one. */
function deletesAccount(method: string, url: string): boolean {
  return method === 'DELETE' && /^\/(12|5)\/accounts\/:account_id$/.test(url)
}

function fillIds(method: string, url: string, f: Pick<Fuzzing, 'accountId' | 'spareAccountId' | 'id'>): string {
  const account = deletesAccount(method, url) ? f.spareAccountId : f.accountId
  return url.replace(/:([A-Za-z_]+)/g, (_m, name: string) => (name === 'account_id' ? account : name === 'user_id' ? f.id.user.id : '1234567890123456789'))
}

/** The first scheme a route does not refuse as unauthenticated (oauth1 when all are refused). */
async function discoverScheme(f: Omit<Fuzzing, 'targets'>, route: RouteEntry & { base: string }): Promise<AuthKind> {
  if (!route.auth) return 'none'
  // The stream is app-only bearer (docs/contract.md "Activity stream"); opening one here would only hold a connection.
  if (route.url.startsWith('/2/activity/stream')) return 'bearer'
  const url = new URL(route.base + fillIds(route.method, route.url, f))
  const order: AuthKind[] = route.url.startsWith('/admin') ? ['operator', 'bearer', 'oauth1'] : ['oauth1', 'bearer', 'operator']
  for (const kind of order) {
    const ac = new AbortController()
    const timer = setTimeout(() => ac.abort(), 10_000)
    const res = await fetch(url, { method: route.method, headers: authHeaders(f as Fuzzing, kind, route.method, url, ''), signal: ac.signal }).finally(() => clearTimeout(timer))
    if (res.status < 400) {
      // Accepted. A stream stays open: abort it, or the server's shutdown waits for it.
      ac.abort()
      await res.body?.cancel().catch(() => undefined)
      return kind
    }
    const text = await res.text()
    if (res.status !== 401 && !(res.status === 403 && /token|credential|auth|scope|client-forbidden|unsupported-authentication/i.test(text))) return kind
  }
  return 'oauth1'
}

function stoppedAtAuth(status: number, text: string): boolean {
  return status === 401 || (status === 403 && /unsupported-authentication|client-forbidden|Unsupported Authentication|oauth|credential/i.test(text))
}

function record(f: Fuzzing, status: number, text: string): void {
  f.statuses.set(status, (f.statuses.get(status) ?? 0) + 1)
  if (stoppedAtAuth(status, text)) f.authRefused++
}

/** One request through undici: a route, a mangled path, query and body, credentials mostly right. */
async function oneRequest(f: Fuzzing, n: number, rand: Rand, agent: Agent, seed: number, show?: (line: string) => void): Promise<void> {
  const route = f.targets[n % f.targets.length] as Target
  const path = fillPath(rand, route.url, { accountId: deletesAccount(route.method, route.url) ? f.spareAccountId : f.accountId, userId: f.id.user.id })
  const query = randomQuery(rand)
  const body = route.method === 'GET' || route.method === 'DELETE' ? (rand() < 0.1 ? randomBody(rand) : {}) : randomBody(rand)
  const url = new URL(route.base + path)
  for (const [k, v] of Object.entries(query)) url.searchParams.append(k, v)
  const headers: Record<string, string> = { ...abusiveHeaders(rand) }
  if (body.contentType) headers['content-type'] = body.contentType
  if (!headers.authorization) {
    const roll = rand()
    // Mostly the route's own scheme, so the request gets past authentication to validation.
    const kind: AuthKind = roll < 0.8 ? route.scheme : roll < 0.9 ? pick(rand, ['oauth1', 'bearer', 'operator'] as const) : 'none'
    const form = body.contentType === 'application/x-www-form-urlencoded' && typeof body.payload === 'string' ? body.payload : ''
    Object.assign(headers, authHeaders(f, kind, route.method, url, form))
  }
  show?.(`#${n}: ${route.method} ${url.toString()}\n  headers ${JSON.stringify(headers).slice(0, 2000)}\n  body ${JSON.stringify(typeof body.payload === 'string' ? body.payload.slice(0, 2000) : body.payload?.toString('base64').slice(0, 2000))}`)
  const ac = new AbortController()
  const timer = setTimeout(() => ac.abort(), 20_000)
  const where = `${f.label} #${n} (seed ${seed}) ${route.method} ${url.pathname.slice(0, 120)}${url.search.slice(0, 80)}`
  try {
    const res = await undiciRequest(url, { method: route.method as 'GET', headers, body: body.payload, dispatcher: agent, signal: ac.signal })
    const contentType = String(res.headers['content-type'] ?? '')
    // A stream that was accepted is a success; do not wait for it to end.
    if (res.statusCode === 200 && path.startsWith('/2/activity/stream')) {
      record(f, 200, '')
      ac.abort()
      await res.body.text().catch(() => undefined)
      return
    }
    const text = await res.body.text()
    record(f, res.statusCode, text)
    if (res.statusCode >= 500) f.failures.push(`${where} -> ${res.statusCode}: ${text.slice(0, 300)}`)
    else if (res.statusCode >= 400) {
      const problem = wellShaped(shapeOf(path), path, res.statusCode, contentType, text)
      if (problem) f.failures.push(`${where} -> ${res.statusCode} ${problem}`)
    }
  } catch (err) {
    const e = err as Error & { code?: string }
    // The server may close the connection on a request it could not parse (431 / 400 from the parser path).
    if (e.name !== 'AbortError' && e.code !== 'UND_ERR_SOCKET' && e.code !== 'ECONNRESET' && e.code !== 'UND_ERR_REQ_CONTENT_LENGTH_MISMATCH') {
      f.failures.push(`${where} -> client error ${e.code ?? e.name}: ${e.message}`)
    }
  } finally {
    clearTimeout(timer)
  }
}

// ------------------------------------------------------------------ raw requests

const RAW_PATH_TRICKS: Array<(path: string) => string> = [
  (p) => `${p}/%FF`,
  (p) => `${p}%C0%AF`,
  (p) => `${p}/%C0%AF..%C0%AF..%C0%AFetc%C0%AFpasswd`,
  (p) => `${p}/%E0%80%AF`,
  (p) => `${p}/%F0%80%80%AF`,
  (p) => `${p}/%ED%A0%80`,
  (p) => `/..${p}`,
  (p) => `${p}/../../../../etc/passwd`,
  (p) => `/${p.split('/').slice(1, 2).join('/')}/../${p.split('/').slice(2).join('/')}`,
  (p) => `${p}/%2e%2e/%2e%2e/etc/passwd`,
  (p) => `/%2e%2e${p}`,
  (p) => `${p}/..%2f..%2fetc%2fpasswd`,
  (p) => `${p}/.%2e/`,
  (p) => `${p}%00`,
  (p) => `${p}/%00/x`,
  (p) => `${p}\\..\\..\\windows`,
  (p) => `${p}//`,
  (p) => `/${p}`,
  (p) => `${p}/%`,
  (p) => `${p}/%G0`,
  (p) => `${p}/\u00e9\u00ff`,
  (p) => `${p}/\x7f`,
  (p) => `http://127.0.0.1${p}`,
  (p) => `*${p}`
]

const RAW_QUERY_TRICKS = [
  'a=%FF', '%C0%AF=1', 'q=%E0%80%AF', 'x=%', 'x=%G1', 'ids=%F0%80%80%AF', 'next_token=%ED%A0%80', 'count=1%00',
  'a=\x7f', 'a=\u00ff', `${'a=1&'.repeat(3000)}b=2`, 'count=1&count=2&count=3', '=&=&', '&&&', `q=${'%25'.repeat(2000)}`, 'url=file:%2F%2F%2Fetc%2Fpasswd'
]

/** Header blocks a client library would refuse to send. */
const RAW_HEADER_TRICKS: Array<{ headers: string; body?: string }> = [
  { headers: 'Content-Length: 5\r\nContent-Length: 6', body: '{"a":' },
  { headers: 'Content-Length: 2\r\nContent-Length: 2', body: '{}' },
  { headers: 'Content-Length: 2, 3', body: '{}' },
  { headers: 'Content-Length: -1' },
  { headers: 'Content-Length: 99999999999999999999' },
  { headers: 'Content-Length: 0x10' },
  { headers: 'Transfer-Encoding: chunked\r\nContent-Length: 4', body: '2\r\n{}\r\n0\r\n\r\n' },
  { headers: 'Content-Length: 4\r\nTransfer-Encoding: chunked', body: '2\r\n{}\r\n0\r\n\r\n' },
  { headers: 'Transfer-Encoding: chunked, identity', body: '2\r\n{}\r\n0\r\n\r\n' },
  { headers: 'Transfer-Encoding: xchunked', body: '2\r\n{}\r\n0\r\n\r\n' },
  { headers: 'Transfer-Encoding: chunked', body: 'zz\r\n{}\r\n0\r\n\r\n' },
  { headers: 'Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked', body: '2\r\n{}\r\n0\r\n\r\n' },
  { headers: `X-Big: ${'a'.repeat(20_000)}` },
  { headers: Array.from({ length: 400 }, (_, i) => `X-H${i}: ${'v'.repeat(60)}`).join('\r\n') },
  { headers: `Cookie: ${'c=1; '.repeat(4000)}` },
  { headers: 'X-Ctl: a\x01b' },
  { headers: 'X-Fold: a\r\n  folded' },
  { headers: 'Bad Header: 1' },
  { headers: 'X-Null: a\x00b' },
  { headers: 'Content-Type: application/json\r\nContent-Type: text/plain\r\nContent-Length: 2', body: '{}' },
  { headers: 'Content-Type: application/json; charset=utf-7\r\nContent-Length: 2', body: '{}' },
  { headers: 'Expect: 100-continue\r\nContent-Length: 2', body: '{}' }
]

const BAD_HOSTS = ['', 'a b', '[::1', 'evil.example.com', '127.0.0.1:99999', 'localhost:-1', '..', '\u00ff.example', 'a\x01b', 'host/with/path']

interface RawAnswer {
  status: number
  contentType: string
  body: string
}

/** Writes `request` on a fresh connection and reads the first response (bounded). */
function rawExchange(port: number, request: Buffer, stream: boolean): Promise<RawAnswer | string> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1')
    const chunks: Buffer[] = []
    let settled = false
    const finish = (answer: RawAnswer | string): void => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      socket.destroy()
      resolve(answer)
    }
    const timer = setTimeout(() => finish('no complete answer within 15 s'), 15_000)
    const tryParse = (ended: boolean): void => {
      const data = Buffer.concat(chunks)
      const headEnd = data.indexOf('\r\n\r\n')
      if (headEnd < 0) {
        if (ended) finish(data.length === 0 ? 'connection closed without an answer' : `truncated head: ${data.toString('latin1', 0, 120)}`)
        return
      }
      const head = data.toString('latin1', 0, headEnd)
      const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(head)?.[1] ?? 0)
      const headers = new Map(head.split('\r\n').slice(1).map((l) => [l.slice(0, l.indexOf(':')).trim().toLowerCase(), l.slice(l.indexOf(':') + 1).trim()] as const))
      // An accepted stream stays open: its head is the whole answer.
      if (stream && status === 200) return finish({ status, contentType: headers.get('content-type') ?? '', body: '' })
      const rest = data.subarray(headEnd + 4)
      const length = headers.get('content-length')
      let body: Buffer | undefined
      if (length !== undefined) body = rest.length >= Number(length) ? rest.subarray(0, Number(length)) : undefined
      else if (/chunked/i.test(headers.get('transfer-encoding') ?? '')) body = dechunk(rest)
      else if (ended) body = rest
      if (body === undefined) {
        if (ended) finish(`truncated body (status ${status})`)
        return
      }
      finish({ status, contentType: headers.get('content-type') ?? '', body: body.toString('utf8') })
    }
    socket.on('data', (c: Buffer) => {
      chunks.push(c)
      tryParse(false)
    })
    socket.on('end', () => tryParse(true))
    socket.on('close', () => tryParse(true))
    socket.on('error', () => tryParse(true))
    socket.write(request)
  })
}

/** A complete chunked body, or undefined while chunks are missing. */
function dechunk(data: Buffer): Buffer | undefined {
  const out: Buffer[] = []
  let at = 0
  for (;;) {
    const lineEnd = data.indexOf('\r\n', at)
    if (lineEnd < 0) return undefined
    const size = Number.parseInt(data.toString('latin1', at, lineEnd), 16)
    if (!Number.isFinite(size)) return undefined
    if (size === 0) return Buffer.concat(out)
    if (data.length < lineEnd + 2 + size + 2) return undefined
    out.push(data.subarray(lineEnd + 2, lineEnd + 2 + size))
    at = lineEnd + 2 + size + 2
  }
}

/** One raw request: a route's path or query mangled below the URL parser, or a header block no client would send. */
async function oneRawRequest(f: Fuzzing, n: number, rand: Rand, seed: number): Promise<void> {
  const route = f.targets[n % f.targets.length] as Target
  const base = new URL(route.base)
  let target = fillIds(route.method, route.url, f)
  let query = ''
  let trick: { headers: string; body?: string } = { headers: '' }
  let host = `${base.hostname}:${base.port}`
  const roll = rand()
  if (roll < 0.35) target = pick(rand, RAW_PATH_TRICKS)(target)
  else if (roll < 0.55) query = `?${pick(rand, RAW_QUERY_TRICKS)}`
  else if (roll < 0.85) trick = pick(rand, RAW_HEADER_TRICKS)
  else host = pick(rand, BAD_HOSTS)
  if (rand() < 0.2) target = pick(rand, RAW_PATH_TRICKS)(target)
  const kind: AuthKind = rand() < 0.6 ? (route.scheme === 'oauth1' ? 'bearer' : route.scheme) : pick(rand, ['bearer', 'none', 'operator'] as const)
  const bearer = REVOKING.test(route.url) ? f.spare.bearer : f.id.bearer
  const auth = kind === 'bearer' ? `Authorization: Bearer ${bearer}\r\n` : kind === 'operator' ? `Authorization: Bearer ${OPERATOR}\r\n` : ''
  const body = trick.body ?? ''
  const length = /content-length|transfer-encoding/i.test(trick.headers) || body === '' ? '' : `Content-Length: ${Buffer.byteLength(body)}\r\n`
  const head = `${route.method} ${target}${query} HTTP/1.1\r\nHost: ${host}\r\n${auth}${trick.headers === '' ? '' : `${trick.headers}\r\n`}${length}Connection: close\r\n\r\n`
  // An absolute-form target (`GET http://host/2/activity/stream`) names the stream too: an accepted one stays open.
  const streamPath = (() => {
    try {
      return new URL(target, 'http://fuzz.invalid').pathname.startsWith('/2/activity/stream')
    } catch {
      return target.startsWith('/2/activity/stream')
    }
  })()
  const answer = await rawExchange(Number(base.port), Buffer.concat([Buffer.from(head, 'latin1'), Buffer.from(body, 'latin1')]), streamPath)
  const where = `${f.label} raw #${n} (seed ${seed}) ${JSON.stringify(`${route.method} ${target}${query}`.slice(0, 160))} host ${JSON.stringify(host.slice(0, 40))} ${JSON.stringify(trick.headers.slice(0, 60))}`
  if (typeof answer === 'string') {
    f.failures.push(`${where} -> ${answer}`)
    return
  }
  record(f, answer.status, answer.body)
  if (answer.status < 100 || answer.status >= 500) f.failures.push(`${where} -> ${answer.status}: ${answer.body.slice(0, 300)}`)
  else if (answer.status >= 400) {
    // An absolute-form target (RFC 9112 §3.2.2) names the same resource as its path, so the
    // same interface; anything else that is not a path (`*...`) belongs to no interface: v2.
    const pathOnly = target.replace(/^https?:\/\/[^/]+/, '')
    const problem = wellShaped(shapeOf(pathOnly), pathOnly, answer.status, answer.contentType, answer.body)
    if (problem) f.failures.push(`${where} -> ${answer.status} ${problem}`)
  }
}

// ------------------------------------------------------------------ runs

async function prepare(t: Test, label: string, rt: Runtime): Promise<Fuzzing> {
  const id = await createIdentity(rt.ctx.store)
  const spare = await createIdentity(rt.ctx.store)
  const account = await createAccount(rt.ctx, id.user.id, { name: 'fuzz' })
  const spareAccount = await createAccount(rt.ctx, id.user.id, { name: 'fuzz spare' })
  const routes: Array<RouteEntry & { base: string }> = [
    ...rt.app.routeTable.map((r) => ({ ...r, base: rt.baseUrl })),
    ...(rt.sandbox?.routeTable ?? []).map((r) => ({ ...r, base: rt.sandboxUrl as string }))
  ].filter((r) => !r.url.includes('*'))
  const partial = { label, rt, id, spare, accountId: account.id, spareAccountId: spareAccount.id, failures: [], statuses: new Map<number, number>(), authRefused: 0, sent: 0 }
  const targets: Target[] = []
  const started = Date.now()
  for (const r of routes) targets.push({ ...r, scheme: await discoverScheme(partial, r) })
  t.ok(targets.length >= 10, `${label}: ${targets.length} routes discovered (${targets.filter((x) => x.scheme !== 'none').length} authenticated) in ${Date.now() - started} ms`)
  return { ...partial, targets }
}

async function fuzz(t: Test, f: Fuzzing, total: number, rawTotal: number): Promise<void> {
  const agent = new Agent({ connections: CONCURRENCY, keepAliveTimeout: 10_000, bodyTimeout: 20_000, headersTimeout: 20_000 })
  t.teardown(() => agent.close())
  // FUZZ_ONLY=4956,3541 replays just those requests of the run and prints them.
  const only = (process.env.FUZZ_ONLY ?? '').split(',').filter((x) => x !== '').map(Number)
  if (only.length > 0) {
    for (const n of only) await oneRequest(f, n, prng(SEED * 7919 + n), agent, SEED, (line) => t.comment(line))
    t.same(f.failures, [], `${f.label}: requests ${only.join(', ')}`)
    return
  }
  let next = 0
  let nextRaw = 0
  const started = Date.now()
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async (_, lane) => {
      // Raw requests run in their own lanes alongside the others.
      if (lane < 2) {
        while (nextRaw < rawTotal && f.failures.length < 50) {
          const n = nextRaw++
          await oneRawRequest(f, n, prng(SEED * 104_729 + n), SEED)
        }
        return
      }
      while (next < total && f.failures.length < 50) {
        const n = next++
        // Each request has its own generator, so request n is the same whatever the scheduling.
        await oneRequest(f, n, prng(SEED * 7919 + n), agent, SEED)
      }
    })
  )
  f.sent = next + nextRaw
  const seconds = (Date.now() - started) / 1000
  t.comment(`${f.label}: ${next} requests and ${nextRaw} raw ones in ${seconds.toFixed(1)} s; statuses ${JSON.stringify(Object.fromEntries([...f.statuses].sort((a, b) => a[0] - b[0])))}; ${f.authRefused} stopped at authentication`)
  t.ok((next >= total && nextRaw >= rawTotal) || f.failures.length >= 50, `${f.label}: every planned request was sent`)
  t.same(f.failures, [], `${f.label}: no 5xx, no missing answer and no shapeless error`)
  t.ok(f.authRefused <= f.sent / 2, `${f.label}: at most half the requests stopped at authentication (${f.authRefused} of ${f.sent})`)
  // The server is still alive and well after the barrage.
  const health = await fetch(`${f.rt.baseUrl}/healthz`)
  t.equal(health.status, 200, `${f.label}: the server is alive`)
}

const RUNTIME_ENV = { OPERATOR_TOKEN: OPERATOR, WEBHOOK_TIMEOUT: '300ms', RATE_LIMIT_DEFAULT: '1000000', PROBLEM_BASE }

t.test(`${TOTAL} + ${RAW_TOTAL} raw malformed requests across every route: no 5xx, every error in its interface's shape`, async (t) => {
  const rt = await startTestRuntime(t, { env: RUNTIME_ENV })
  const f = await prepare(t, 'embedded', rt)
  await fuzz(t, f, TOTAL, RAW_TOTAL)
})

t.test('the same against the Redis store (a share of the requests)', async (t) => {
  const redis = await startRedis(t)
  const store = await redisStore(t, redis)
  const rt = await startTestRuntime(t, { env: RUNTIME_ENV, store })
  const f = await prepare(t, 'redis', rt)
  await fuzz(t, f, Math.round(TOTAL * REDIS_SHARE), Math.round(RAW_TOTAL * REDIS_SHARE))
})
