import { createHmac } from 'node:crypto'
import OAuth from 'oauth-1.0a'
import t from 'tap'
import { Agent, request as undiciRequest } from 'undici'
import type { RouteEntry } from '../../services/common/http'
import { createAccount } from '../../services/gateway/ads/accounts'
import { createIdentity, startTestRuntime, type TestIdentity } from '../helper'

/**
 * Hostile input across every route (issue 9): at least 10,000 generated
 * malformed requests — bad JSON, wrong types, huge bodies, invalid UTF-8,
 * header abuse, path traversal, oversized query strings — half of them
 * properly authenticated so validation code behind authentication runs too.
 * Every answer must be below 500 and, for errors, in the shape of the
 * interface the path belongs to. The generator is seeded: a failure names
 * the seed and request number to reproduce it.
 *
 * Only loopback is ever contacted: no generated value is a reachable URL
 * other than 127.0.0.1 on a closed port.
 */

const SEED = Number(process.env.FUZZ_SEED ?? 20261122)
const TOTAL = Number(process.env.FUZZ_REQUESTS ?? 10_500)
const CONCURRENCY = 16

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

function randomBody(r: Rand): Body {
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

/** Whether an error body is in the interface's documented shape. */
function wellShaped(shape: Shape, path: string, contentType: string, text: string): string | undefined {
  if (contentType.startsWith('text/plain') && shape === 'classic') return text.length > 0 ? undefined : 'empty text error'
  // Browser-facing authorization pages answer a person, in HTML (RFC 6749 §4.1.2.1: never redirect on a bad client or redirect_uri).
  if (contentType.startsWith('text/html') && /^\/(oauth\/(authorize|authenticate)|(i|2)\/oauth2\/authorize)/.test(path)) return undefined
  let body: unknown
  try {
    body = JSON.parse(text)
  } catch {
    return `not JSON (${contentType}): ${text.slice(0, 120)}`
  }
  const b = body as Record<string, unknown>
  const errorsOk = (code: 'string' | 'number'): boolean =>
    Array.isArray(b.errors) && b.errors.length > 0 && (b.errors as Array<Record<string, unknown>>).every((e) => typeof e.message === 'string' && typeof e.code === code)
  if (shape === 'ads') return errorsOk('string') && typeof b.request === 'object' ? undefined : `not the ads envelope: ${text.slice(0, 200)}`
  // RFC 6749 token endpoint errors.
  if (/\/oauth2\//.test(path) && typeof b.error === 'string') return undefined
  if (errorsOk('number')) return undefined
  if (typeof b.type === 'string' && typeof b.title === 'string') return undefined
  return `not an Error or Problem: ${text.slice(0, 200)}`
}

function signer(id: TestIdentity): OAuth {
  return new OAuth({
    consumer: { key: id.app.consumer_key, secret: id.app.consumer_secret },
    signature_method: 'HMAC-SHA1',
    hash_function: (base, key) => createHmac('sha1', key).update(base).digest('base64')
  })
}

t.test(`${TOTAL} malformed requests across every route: no 5xx, every error in its interface's shape`, async (t) => {
  const rt = await startTestRuntime(t, { env: { OPERATOR_TOKEN: 'fuzz-operator-token', WEBHOOK_TIMEOUT: '300ms', RATE_LIMIT_DEFAULT: '1000000' } })
  const id = await createIdentity(rt.ctx.store)
  const account = await createAccount(rt.ctx, id.user.id, { name: 'fuzz' })
  const oauth = signer(id)
  const routes: Array<RouteEntry & { base: string }> = [
    ...rt.app.routeTable.map((r) => ({ ...r, base: rt.baseUrl })),
    ...(rt.sandbox?.routeTable ?? []).map((r) => ({ ...r, base: rt.sandboxUrl as string }))
  ].filter((r) => !r.url.includes('*'))
  t.ok(routes.length >= 10, `${routes.length} routes discovered`)

  const agent = new Agent({ connections: CONCURRENCY, keepAliveTimeout: 10_000, bodyTimeout: 15_000, headersTimeout: 15_000 })
  t.teardown(() => agent.close())
  const failures: string[] = []
  const statusCounts = new Map<number, number>()
  const slowest = new Map<string, number>()
  let next = 0

  async function one(n: number, rand: Rand): Promise<void> {
    const route = routes[n % routes.length] as RouteEntry & { base: string }
    const path = fillPath(rand, route.url, { accountId: account.id, userId: id.user.id })
    const query = randomQuery(rand)
    const body = route.method === 'GET' || route.method === 'DELETE' ? (rand() < 0.1 ? randomBody(rand) : {}) : randomBody(rand)
    const url = new URL(route.base + path)
    for (const [k, v] of Object.entries(query)) url.searchParams.append(k, v)
    const headers: Record<string, string> = { ...abusiveHeaders(rand) }
    if (body.contentType) headers['content-type'] = body.contentType
    const authRoll = rand()
    if (!headers.authorization) {
      if (authRoll < 0.45) {
        const form = body.contentType === 'application/x-www-form-urlencoded' && typeof body.payload === 'string' ? Object.fromEntries(new URLSearchParams(body.payload)) : {}
        Object.assign(headers, oauth.toHeader(oauth.authorize({ url: url.toString(), method: route.method, data: form }, { key: id.token.token, secret: id.token.secret })))
      } else if (authRoll < 0.7) headers.authorization = `Bearer ${id.bearer}`
      else if (authRoll < 0.78 && path.startsWith('/admin')) headers.authorization = 'Bearer fuzz-operator-token'
    }
    const t0 = Date.now()
    const ac = new AbortController()
    const timer = setTimeout(() => ac.abort(), 20_000)
    try {
      const res = await undiciRequest(url, { method: route.method as 'GET', headers, body: body.payload, dispatcher: agent, signal: ac.signal })
      const contentType = String(res.headers['content-type'] ?? '')
      statusCounts.set(res.statusCode, (statusCounts.get(res.statusCode) ?? 0) + 1)
      // A stream that was accepted is a success; do not wait for it to end.
      if (res.statusCode === 200 && path.startsWith('/2/activity/stream')) {
        ac.abort()
        await res.body.text().catch(() => undefined)
        return
      }
      const text = await res.body.text()
      const where = `#${n} (seed ${SEED}) ${route.method} ${path.slice(0, 120)}`
      if (res.statusCode >= 500) failures.push(`${where} -> ${res.statusCode}: ${text.slice(0, 300)}`)
      else if (res.statusCode >= 400) {
        const problem = wellShaped(shapeOf(path), path, contentType, text)
        if (problem) failures.push(`${where} -> ${res.statusCode} ${problem}`)
      }
    } catch (err) {
      const e = err as Error & { code?: string }
      // The server may close the connection on a request it could not parse (431 / 400 from the parser path).
      if (e.name !== 'AbortError' && e.code !== 'UND_ERR_SOCKET' && e.code !== 'ECONNRESET' && e.code !== 'UND_ERR_REQ_CONTENT_LENGTH_MISMATCH') {
        failures.push(`#${n} ${route.method} ${path.slice(0, 120)} -> client error ${e.code ?? e.name}: ${e.message}`)
      }
    } finally {
      clearTimeout(timer)
      const key = `${route.method} ${route.url}`
      slowest.set(key, (slowest.get(key) ?? 0) + Date.now() - t0)
    }
  }

  const started = Date.now()
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < TOTAL && failures.length < 50) {
        const n = next++
        // Each request has its own generator, so request n is the same whatever the scheduling.
        await one(n, prng(SEED * 7919 + n))
      }
    })
  )
  const seconds = (Date.now() - started) / 1000
  t.comment(`${next} requests in ${seconds.toFixed(1)} s; statuses ${JSON.stringify(Object.fromEntries([...statusCounts].sort((a, b) => a[0] - b[0])))}`)
  t.comment(`slowest routes (total ms): ${JSON.stringify([...slowest].sort((a, b) => b[1] - a[1]).slice(0, 8))}`)
  t.ok(next >= TOTAL || failures.length >= 50, 'every planned request was sent')
  t.same(failures, [], 'no 5xx and no shapeless error')
  // The server is still alive and well after the barrage.
  const health = await fetch(`${rt.baseUrl}/healthz`)
  t.equal(health.status, 200)
})
