import http from 'node:http'
import net from 'node:net'
import t from 'tap'
import type { FastifyInstance } from 'fastify'
import { MemoryBus } from '../../services/common/bus/memory'
import { createContext } from '../../services/common/context'
import { createLogger } from '../../services/common/logger'
import { startRuntime } from '../../services/common/runtime'
import type { ServiceDefinition, ServiceName } from '../../services/common/service'
import { MAX_JSON_DEPTH } from '../../services/common/json-depth'
import { ALL_SERVICES } from '../../services/embedded/services'
import { bearerRequest, oauth1Request, plainRequest, type TestResponse } from '../support/http'
import { createIdentity, startTestRuntime, testConfig } from '../support/runtime'
import { eventually } from '../support/util'
import { redisStore, startRedis } from '../support/infra'

/**
 * What the shared HTTP layer (services/common/server.ts) does for every route,
 * checked on probe routes of each interface so the cases do not depend on
 * any one service's routes: malformed and over-deep bodies, body types
 * without coercion, 405 on a known path, and the X-Request-Id rule.
 */

const probeBody = {
  type: 'object',
  required: ['url'],
  additionalProperties: false,
  properties: {
    url: { type: 'string' },
    n: { type: 'integer' },
    flag: { type: 'boolean' },
    filter: { type: 'object', additionalProperties: false, properties: { user_id: { type: 'string' } } }
  }
}

async function probeRoutes(app: FastifyInstance): Promise<void> {
  app.post('/2/probe', { schema: { body: probeBody, querystring: { type: 'object', properties: { max_results: { type: 'integer' }, ids: { type: 'array', items: { type: 'string' } } } } } }, async (request) => ({
    body: request.body,
    query: request.query
  }))
  for (const path of ['/12/probe', '/1.1/probe.json', '/oauth/probe', '/2/echo']) app.post(path, async (request) => ({ body: request.body }))
  app.post('/1.1/probe-validated.json', { schema: { body: probeBody } }, async (request) => ({ body: request.body }))
  app.get('/2/gone', async (_request, reply) => reply.callNotFound())
  for (const path of ['/2/probe-get', '/12/probe-get', '/1.1/probe-get.json']) app.get(path, async () => ({ ok: true }))
  await app.register(async (scope) => {
    scope.addContentTypeParser('application/x-ndjson', { parseAs: 'string' }, (_request, body, done) => done(null, { lines: (body as string).split('\n').filter(Boolean).length }))
    scope.post('/2/probe-ndjson', async (request) => request.body)
  })
}

const probe = { name: 'probe' as ServiceName, routes: probeRoutes } satisfies ServiceDefinition

/** Routes of each interface that read the store and nothing else. */
const storeProbe = {
  name: 'store-probe' as ServiceName,
  routes: async (app: FastifyInstance, ctx) => {
    for (const path of ['/2/probe-store', '/12/probe-store', '/1.1/probe-store.json']) app.get(path, async () => ({ value: (await ctx.store.get('probe')) ?? null }))
  }
} satisfies ServiceDefinition

const nested = (depth: number): string => `${'['.repeat(depth)}${']'.repeat(depth)}`

async function rawPost(url: string, body: string, contentType = 'application/json'): Promise<{ status: number; type: string; json: () => Record<string, unknown> }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': contentType }, body })
  const text = await res.text()
  return { status: res.status, type: res.headers.get('content-type') ?? '', json: () => JSON.parse(text) as Record<string, unknown> }
}

t.test('deeply nested JSON is a 400 in each interface\'s shape, before any handler sees it', async (t) => {
  const rt = await startTestRuntime(t, { services: [probe] })
  const base = rt.baseUrl
  const problemBase = rt.ctx.config.problemBase

  const v2 = await rawPost(`${base}/2/echo`, nested(5000))
  t.equal(v2.status, 400)
  t.equal(v2.type, 'application/problem+json; charset=utf-8')
  t.match(v2.json(), { type: `${problemBase}/invalid-request`, status: 400, errors: [{ message: /deeper than 64/, parameters: { body: [] } }] })

  const ads = await rawPost(`${base}/12/probe`, nested(5000))
  t.equal(ads.status, 400)
  t.match(ads.json(), { errors: [{ code: 'INVALID_PARAMETER', message: /deeper than 64/ }], request: { params: {} } })

  for (const path of ['/1.1/probe.json', '/oauth/probe']) {
    const classic = await rawPost(`${base}${path}`, nested(5000))
    t.equal(classic.status, 400, path)
    t.match(classic.json(), { errors: [{ code: 214, message: /deeper than 64/ }] }, `${path}: the classic error`)
  }

  const objects = `${'{"a":'.repeat(200)}1${'}'.repeat(200)}`
  t.equal((await rawPost(`${base}/2/echo`, objects)).status, 400, 'nested objects count too')

  const atBound = await rawPost(`${base}/2/echo`, nested(MAX_JSON_DEPTH))
  t.equal(atBound.status, 200, `${MAX_JSON_DEPTH} levels are accepted`)
  t.equal((await rawPost(`${base}/2/echo`, nested(MAX_JSON_DEPTH + 1))).status, 400, `${MAX_JSON_DEPTH + 1} are not`)
  const inString = await rawPost(`${base}/2/echo`, JSON.stringify({ text: `"\\${'['.repeat(5000)}` }))
  t.equal(inString.status, 200, 'brackets inside strings (even after escaped quotes) are text, not nesting')
  t.equal((inString.json().body as { text: string }).text.length, 5002)

  const deepLine = `{"ok":1}\n${nested(5000)}\n`
  const ndjson = await rawPost(`${base}/2/probe-ndjson`, deepLine, 'application/x-ndjson')
  t.equal(ndjson.status, 400, 'an NDJSON line nesting too deep refuses the body')
  t.match(ndjson.json(), { type: `${problemBase}/invalid-request` })
  const manyLines = Array.from({ length: 200 }, () => nested(MAX_JSON_DEPTH)).join('\n')
  const ok = await rawPost(`${base}/2/probe-ndjson`, manyLines, 'application/x-ndjson')
  t.equal(ok.status, 200, 'NDJSON depth is per line, not summed over lines')
  t.same(ok.json(), { lines: 200 })
})

interface Exchange {
  status: number
  type: string
  body: string
  /** The client-side port: the same one twice means the same connection served both requests. */
  localPort: number | undefined
}

/** One request over `agent` with whatever method and body (fetch refuses a GET with a body). */
function exchange(agent: http.Agent, url: string, method: string, body?: string | Buffer, headers: Record<string, string> = {}): Promise<Exchange> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, agent, headers: body === undefined ? headers : { 'content-length': String(Buffer.byteLength(body)), ...headers } }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, type: String(res.headers['content-type'] ?? ''), body: Buffer.concat(chunks).toString('utf8'), localPort: req.socket?.localPort }))
      res.on('error', reject)
    })
    req.setTimeout(10_000, () => req.destroy(new Error(`${method} ${url}: no answer within 10 s`)))
    req.on('error', reject)
    req.end(body)
  })
}

t.test('a too-deep body never takes the server down, whatever the method: a 400 in the shape, then the next request is answered', async (t) => {
  const rt = await startTestRuntime(t, { services: [probe] })
  const problemBase = rt.ctx.config.problemBase
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  t.teardown(() => agent.destroy())
  const shapes = {
    v2: (b: string) => t.match(JSON.parse(b), { type: `${problemBase}/invalid-request`, status: 400, errors: [{ message: /deeper than 64/, parameters: { body: [] } }] }),
    ads: (b: string) => t.match(JSON.parse(b), { errors: [{ code: 'INVALID_PARAMETER', message: /deeper than 64/ }], request: { params: {} } }),
    classic: (b: string) => t.match(JSON.parse(b), { errors: [{ code: 214, message: /deeper than 64/ }] })
  }
  const cases = [
    ['GET', '/2/probe-get', 'v2'], ['GET', '/12/probe-get', 'ads'], ['GET', '/1.1/probe-get.json', 'classic'],
    ['POST', '/2/echo', 'v2'], ['POST', '/12/probe', 'ads'], ['POST', '/1.1/probe.json', 'classic']
  ] as const
  for (const [method, path, shape] of cases) {
    for (const body of ['['.repeat(1000), `${'{"a":'.repeat(5000)}1${'}'.repeat(5000)}`]) {
      const res = await exchange(agent, `${rt.baseUrl}${path}`, method, body, { 'content-type': 'application/json' })
      t.equal(res.status, 400, `${method} ${path}`)
      shapes[shape](res.body)
      const next = await exchange(agent, `${rt.baseUrl}/healthz`, 'GET')
      t.equal(next.status, 200, `${method} ${path}: the next request is answered`)
    }
  }

  const shallow = await exchange(agent, `${rt.baseUrl}/2/probe-get`, 'GET', nested(MAX_JSON_DEPTH), { 'content-type': 'application/json' })
  t.equal(shallow.status, 200, 'a GET body within the bound is ignored, as before')
  const after = await exchange(agent, `${rt.baseUrl}/2/probe-get`, 'GET')
  t.equal(after.localPort, shallow.localPort, 'and its connection serves the next request: the body was drained')

  // No parser reads the guard here (413 decided by Content-Length, 415 by the type): it fails with nobody reading it.
  const huge = Buffer.alloc(rt.ctx.config.bodyLimit + 1, '[')
  const tooLarge = await exchange(agent, `${rt.baseUrl}/2/echo`, 'POST', huge, { 'content-type': 'application/json' })
  t.equal(tooLarge.status, 413, 'too large by Content-Length, a deep body')
  const unknownType = await exchange(agent, `${rt.baseUrl}/2/echo`, 'POST', '['.repeat(200_000), { 'content-type': 'application/vnd.probe+json' })
  t.equal(unknownType.status, 415, 'a +json type no parser takes, a deep body')
  const unknownThenNext = await exchange(agent, `${rt.baseUrl}/healthz`, 'GET')
  t.equal(unknownThenNext.status, 200, 'the server is alive after both')
  const unreadBody = await exchange(agent, `${rt.baseUrl}/2/echo`, 'POST', `"${'x'.repeat(500_000)}"`, { 'content-type': 'application/vnd.probe+json' })
  t.equal(unreadBody.status, 415, 'a large body of a type nobody parses')
  const afterUnread = await exchange(agent, `${rt.baseUrl}/healthz`, 'GET')
  t.equal(afterUnread.status, 200, 'is drained: its connection answers the next request')
})

t.test('malformed bodies on v2 paths are the invalid-request Problem', async (t) => {
  const rt = await startTestRuntime(t, { services: [probe] })
  const problemBase = rt.ctx.config.problemBase
  for (const [label, body] of [['truncated JSON', '{"url":'], ['a proto-poisoning key', '{"__proto__":{"x":1},"url":"a"}'], ['empty', '']] as const) {
    const res = await rawPost(`${rt.baseUrl}/2/probe`, body)
    t.equal(res.status, 400, label)
    t.equal(res.type, 'application/problem+json; charset=utf-8')
    t.match(res.json(), { type: `${problemBase}/invalid-request`, title: 'Invalid Request', status: 400, errors: [{ message: String, parameters: { body: [] } }] }, label)
  }
  const form = await rawPost(`${rt.baseUrl}/2/echo`, 'a=%E0%A4%A', 'application/x-www-form-urlencoded')
  t.equal(form.status, 400)
  t.match(form.json(), { type: `${problemBase}/invalid-request` }, 'a form body that cannot be decoded too')
  const tooLarge = await rawPost(`${rt.baseUrl}/2/echo`, JSON.stringify({ pad: 'x'.repeat(rt.ctx.config.bodyLimit) }))
  t.equal(tooLarge.status, 413, 'too large keeps its own status')
  const ads = await rawPost(`${rt.baseUrl}/12/probe`, '{"url":')
  t.match(ads.json(), { errors: [{ code: 'INVALID_PARAMETER' }], request: { params: {} } }, 'ads paths keep the envelope')
})

t.test('request bodies are validated without type coercion; query strings are coerced', async (t) => {
  const rt = await startTestRuntime(t, { services: [probe] })
  const url = `${rt.baseUrl}/2/probe`
  const problemBase = rt.ctx.config.problemBase

  const good = await plainRequest('POST', url, { json: { url: 'https://a.example', n: 3, flag: true, filter: { user_id: '123' } }, query: { max_results: '10', ids: '7' } })
  t.equal(good.status, 200)
  t.same(good.json(), { body: { url: 'https://a.example', n: 3, flag: true, filter: { user_id: '123' } }, query: { max_results: 10, ids: ['7'] } }, 'query values are coerced to the schema\'s types')

  for (const [label, body, field] of [
    ['a number for a string', { url: 5 }, 'url'],
    ['a nested number for a string', { url: 'x', filter: { user_id: 123 } }, 'filter.user_id'],
    ['a string for an integer', { url: 'x', n: '3' }, 'n'],
    ['a string for a boolean', { url: 'x', flag: 'true' }, 'flag'],
    ['an array for a string', { url: ['x'] }, 'url']
  ] as const) {
    const res = await plainRequest('POST', url, { json: body })
    t.equal(res.status, 400, label)
    t.match(res.json(), { type: `${problemBase}/invalid-request`, errors: [{ message: new RegExp(`\`${field.replace('.', '\\.')}\` field must be`), parameters: { [field]: [] } }] }, label)
  }
  const badQuery = await plainRequest('POST', url, { json: { url: 'x' }, query: { max_results: 'ten' } })
  t.equal(badQuery.status, 400, 'a query value that cannot be coerced is still refused')
})

t.test('an unknown method on a known path is 405 with Allow; unknown paths stay 404', async (t) => {
  const rt = await startTestRuntime(t, { services: [probe] })
  const base = rt.baseUrl
  const v2 = await plainRequest('DELETE', `${base}/2/probe?x=1`)
  t.equal(v2.status, 405)
  t.equal(v2.headers.get('allow'), 'POST')
  t.equal(v2.headers.get('content-type'), 'application/problem+json; charset=utf-8')
  t.match(v2.json(), { type: 'about:blank', title: 'Method Not Allowed', status: 405, detail: /DELETE \/2\/probe .*supports POST/ })

  const ads = await plainRequest('GET', `${base}/12/probe`, { query: { count: '3' } })
  t.equal(ads.status, 405)
  t.equal(ads.headers.get('allow'), 'POST')
  t.match(ads.json(), { errors: [{ code: 'METHOD_NOT_ALLOWED', message: /supports POST/ }], request: { params: { count: '3' } } })

  const getOnly = await plainRequest('POST', `${base}/healthz`)
  t.equal(getOnly.status, 405)
  t.equal(getOnly.headers.get('allow'), 'GET, HEAD', 'GET routes answer HEAD too')

  t.equal((await plainRequest('GET', `${base}/2/nowhere`)).status, 404, 'an unknown path is still 404')
  t.equal((await plainRequest('GET', `${base}/12/nowhere`)).json<{ errors: Array<{ code: string }> }>().errors[0]?.code, 'ROUTE_NOT_FOUND')
  const gone = await plainRequest('GET', `${base}/2/gone`)
  t.equal(gone.status, 404, 'a handler calling callNotFound() is a 404, not a 405 listing its own method')
  const classic = await plainRequest('GET', `${base}/oauth/probe`)
  t.equal(classic.status, 404, 'the classic interface answers code 34 for any unknown request')
  t.same(classic.json(), { errors: [{ code: 34, message: 'Sorry, that page does not exist.' }] })
})

/** Writes a request head byte for byte (no client sends the absolute form to an origin server) and reads the answer to its close. */
function rawHead(baseUrl: string, head: string): Promise<{ status: number; headers: string; body: string }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(new URL(baseUrl).port), '127.0.0.1')
    const chunks: Buffer[] = []
    const timer = setTimeout(() => socket.destroy(new Error(`no answer within 10 s to ${head.slice(0, 80)}`)), 10_000)
    socket.on('data', (c: Buffer) => chunks.push(c))
    socket.on('error', reject)
    socket.on('close', () => {
      clearTimeout(timer)
      const text = Buffer.concat(chunks).toString('utf8')
      const end = text.indexOf('\r\n\r\n')
      resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0), headers: text.slice(0, end), body: text.slice(end + 4) })
    })
    socket.write(head)
  })
}

t.test('an absolute-form request target is answered in the shape of its path\'s interface', async (t) => {
  const rt = await startTestRuntime(t, { services: [probe] })
  const origin = rt.baseUrl
  const ask = (method: string, target: string, extra = ''): Promise<{ status: number; headers: string; body: string }> =>
    rawHead(rt.baseUrl, `${method} ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\n${extra}Connection: close\r\n\r\n`)

  const adsMissing = await ask('GET', `${origin}/12/nowhere?count=2`)
  t.equal(adsMissing.status, 404)
  t.match(JSON.parse(adsMissing.body), { errors: [{ code: 'ROUTE_NOT_FOUND' }], request: { params: { count: '2' } } }, 'ads: the envelope')
  const adsBadPath = await ask('GET', 'http://127.0.0.1/12/probe-get/%FF')
  t.equal(adsBadPath.status, 400)
  t.match(JSON.parse(adsBadPath.body), { errors: [{ code: 'INVALID_PARAMETER' }], request: { params: {} } }, 'ads: a path fastify cannot decode')
  const classic = await ask('GET', 'http://127.0.0.1/1.1/nowhere.json')
  t.equal(classic.status, 404)
  t.same(JSON.parse(classic.body), { errors: [{ code: 34, message: 'Sorry, that page does not exist.' }] }, 'classic: code 34')
  const wrongMethod = await ask('DELETE', `${origin}/2/probe`)
  t.equal(wrongMethod.status, 405, 'v2: the path is known under another method')
  t.match(wrongMethod.headers, /\r\nallow: POST/i)
  t.match(JSON.parse(wrongMethod.body), { type: 'about:blank', status: 405, detail: 'The route DELETE /2/probe does not exist; it supports POST.' })
  const served = await ask('GET', `${origin}/12/probe-get`)
  t.equal(served.status, 200, 'a served path is served')

  // Refused by Node's HTTP parser (a NUL in a header value): the shape comes from the request line alone.
  const malformedAds = await ask('GET', 'http://127.0.0.1/12/probe-get', 'X-Null: a\u0000b\r\n')
  t.equal(malformedAds.status, 400)
  t.match(JSON.parse(malformedAds.body), { errors: [{ code: 'INVALID_PARAMETER', message: 'Malformed HTTP request.' }], request: { params: {} } }, 'ads, before routing')
  const malformedClassic = await ask('GET', 'https://api.example/oauth/probe', 'X-Null: a\u0000b\r\n')
  t.match(JSON.parse(malformedClassic.body), { errors: [{ code: 214, message: 'Malformed HTTP request.' }] }, 'classic, before routing')
})

t.test('a Redis outage is 503 with Retry-After in each interface\'s shape, warned about once, never an unhandled error', async (t) => {
  const redis = await startRedis(t)
  const store = await redisStore(t, redis)
  const lines: Array<{ level: number; msg: string }> = []
  const log = createLogger('warn', 'outage', { write: (line: string) => void lines.push(JSON.parse(line) as { level: number; msg: string }) })
  const config = testConfig(t)
  const ctx = await createContext({ serviceName: 'outage', config, store, log, bus: new MemoryBus(config.busPartitions, log) })
  const rt = await startRuntime({ services: [storeProbe, ...ALL_SERVICES], ctx })
  t.teardown(() => rt.close())
  const id = await createIdentity(store)
  const base = rt.baseUrl
  const all = (): Promise<[TestResponse, TestResponse, TestResponse, TestResponse, TestResponse]> => Promise.all([
    plainRequest('GET', `${base}/2/probe-store`),
    plainRequest('GET', `${base}/12/probe-store?count=1`),
    plainRequest('GET', `${base}/1.1/probe-store.json`),
    // Real routes: authentication reads the store first.
    bearerRequest('GET', `${base}/2/webhooks`, id.bearer),
    oauth1Request('GET', `${base}/12/accounts`, id)
  ])
  t.same((await all()).map((r) => r.status), [200, 200, 200, 200, 200], 'all answer while Redis is up')

  await redis.stop()
  const [v2, ads, classic, webhooks, accounts] = await all()
  for (const res of [v2, ads, classic, webhooks, accounts]) {
    t.equal(res.status, 503, res.text.slice(0, 200))
    t.equal(res.headers.get('retry-after'), '5', 'Retry-After')
  }
  t.equal(v2.headers.get('content-type'), 'application/problem+json; charset=utf-8')
  t.match(v2.json(), { type: 'about:blank', title: 'Service Unavailable', status: 503, detail: /temporarily unavailable/ }, 'v2: a Problem')
  t.match(webhooks.json(), { type: 'about:blank', status: 503 }, 'v2, behind authentication')
  t.same(ads.json(), { errors: [{ code: 'SERVICE_UNAVAILABLE', message: 'The service is temporarily unavailable. Retry later.' }], request: { params: { count: '1' } } }, 'ads: the envelope')
  t.match(accounts.json(), { errors: [{ code: 'SERVICE_UNAVAILABLE' }], request: { params: {} } }, 'ads, behind authentication')
  t.same(classic.json(), { errors: [{ code: 130, message: 'Over capacity' }] }, 'classic: 130 Over capacity')

  const warnings = lines.filter((l) => l.msg === 'store unavailable; answering 503')
  t.equal(warnings.length, 1, 'five refusals, one warning')
  t.equal(warnings[0]?.level, 40, 'at warning level')
  t.same(lines.filter((l) => l.msg === 'unhandled error'), [], 'no unhandled error logged')
  t.same(lines.filter((l) => l.msg === 'request' && l.level >= 50), [], 'no request line at error level')

  // Out of rotation: /readyz says why, and the log says it once, not once per probe.
  for (let i = 0; i < 3; i++) t.equal((await plainRequest('GET', `${base}/readyz`)).status, 503, 'not ready while Redis is down')
  const unready = lines.filter((l) => l.msg === 'not ready') as Array<{ level: number; msg: string; reason?: string }>
  t.equal(unready.length, 1, 'three failed probes, one line saying why')
  t.match(unready[0], { level: 40, reason: /redis/i }, 'the reason names the store')

  await redis.start()
  await eventually(async () => (await plainRequest('GET', `${base}/2/probe-store`)).status === 200, 20_000)
  t.same((await all()).map((r) => r.status), [200, 200, 200, 200, 200], 'all answer again once Redis is back')
})

t.test('X-Request-Id: a safe client id is kept, anything else replaced by a generated one', async (t) => {
  const rt = await startTestRuntime(t, { services: [probe] })
  const idOf = async (header?: string): Promise<string | null> =>
    (await plainRequest('GET', `${rt.baseUrl}/healthz`, header === undefined ? {} : { headers: { 'x-request-id': header } })).headers.get('x-request-id')
  t.equal(await idOf('trace-1.2:abc_DEF'), 'trace-1.2:abc_DEF')
  const long = 'a'.repeat(128)
  t.equal(await idOf(long), long, '128 characters are kept')
  const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
  for (const bad of ['a'.repeat(129), 'has space', '<script>', 'a,b', 'quote"', 'ünïcode', '']) t.match(await idOf(bad), uuid, `${JSON.stringify(bad.slice(0, 20))} is replaced`)
  t.match(await idOf(), uuid, 'generated when absent')
})

t.test('a validation error on an OAuth or v1.1 path is a classic error, never a v2 Problem, and never echoes a secret', async (t) => {
  const rt = await startTestRuntime(t, { services: [probe] })
  const res = await rawPost(`${rt.baseUrl}/1.1/probe-validated.json`, JSON.stringify({ url: 7, password: 'hunter2hunter2' }))
  t.equal(res.status, 400)
  t.equal(res.type, 'application/json; charset=utf-8')
  const body = res.json() as { errors: Array<{ code: number; message: string }> }
  t.ok(body.errors.length >= 1 && body.errors.every((e) => e.code === 214 && typeof e.message === 'string'), JSON.stringify(body))
  t.notOk('type' in body, 'not a Problem')
  t.ok(body.errors.some((e) => /url/.test(e.message)), 'the message names the refused field')
  t.notOk(JSON.stringify(body).includes('hunter2'), 'the secret is not echoed')
})
