import t, { type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import type { ServiceDefinition, ServiceName } from '../../services/common/service'
import { oauth1Request } from '../support/http'
import { createIdentity, startTestRuntime } from '../support/runtime'
import { type Answer, converse, get } from '../support/raw-http'

/**
 * What a hostile storm found on keep-alive connections, over raw sockets:
 * valid requests pipelined ahead of a request that leaves HTTP (CONNECT, an
 * upgrade no route takes) or ahead of the client's half-close are answered
 * before anything else happens to the connection; a malformed request whose
 * method the parser refuses, or that lacks Host, is answered in the shape of
 * its path's interface (the ads envelope on `/12/` and on unserved ads
 * versions); error bodies never outgrow the request.
 */

const DELAY_MS = 100

async function probeRoutes(app: FastifyInstance): Promise<void> {
  const slow = async (): Promise<{ ok: true }> => {
    await new Promise((resolve) => setTimeout(resolve, DELAY_MS))
    return { ok: true }
  }
  for (const path of ['/2/slow', '/12/slow', '/1.1/slow.json']) app.get(path, slow)
}

const probe = { name: 'hostile-connections-probe' as ServiceName, routes: probeRoutes } satisfies ServiceDefinition

type Shape = 'v2' | 'ads' | 'classic'

function shapeOf(answer: Answer | undefined): Shape | 'none' {
  if (!answer) return 'none'
  const body = JSON.parse(answer.body) as Record<string, unknown>
  if (/^application\/problem\+json/.test(answer.headers['content-type'] ?? '') && typeof body.type === 'string') return 'v2'
  const first = (body.errors as Array<Record<string, unknown>> | undefined)?.[0]
  if (answer.headers['x-current-api-version'] === '12' && typeof first?.code === 'string' && typeof body.request === 'object') return 'ads'
  if (typeof first?.code === 'number') return 'classic'
  return 'none'
}

const statuses = (answers: Answer[]): number[] => answers.map((a) => a.status)

t.test('valid requests ahead of a request that leaves HTTP, or of a half-close, are answered first', async (t) => {
  const rt = await startTestRuntime(t, { services: [probe] })
  const port = Number(new URL(rt.baseUrl).port)
  const upgrade = (path: string): string => `GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`

  const connect = await converse(port, [`${get('/2/slow')}${get('/12/slow')}CONNECT /12/slow HTTP/1.1\r\nHost: x\r\n\r\n`], 0, 5000)
  t.same(statuses(connect), [200, 200, 405], 'CONNECT: the two valid answers, then 405')
  t.equal(shapeOf(connect[2]), 'ads', 'in the ads envelope of its path')

  for (const [path, shape] of [['/12/slow', 'ads'], ['/2/slow', 'v2'], ['/1.1/slow.json', 'classic']] as const) {
    const answers = await converse(port, [`${get('/2/slow')}${upgrade(path)}`], 0, 5000)
    t.same(statuses(answers), [200, 404], `an upgrade of ${path} no listener takes: the valid answer, then 404 (not a hanging connection)`)
    t.equal(shapeOf(answers[1]), shape, `${path}: in its interface's shape`)
  }

  const halfClosed = await converse(port, [`${get('/2/slow')}${get('/12/slow')}${get('/1.1/slow.json')}`], 0, 5000, true)
  t.same(statuses(halfClosed), [200, 200, 200], 'three valid requests, then the client half-closes: three answers')
  const halfClosedMalformed = await converse(port, [`${get('/2/slow')}${get('/2/slow')}GET /12/slow HTTP/1.1\r\nX-Null: a\u0000b\r\n\r\n`], 0, 5000, true)
  t.same(statuses(halfClosedMalformed), [200, 200, 400], `two valid and a malformed one, then a half-close: every answer (${halfClosedMalformed.map((a) => a.body.slice(0, 80)).join(' | ')})`)
  t.equal(shapeOf(halfClosedMalformed[2]), 'ads')
  t.equal((await fetch(`${rt.baseUrl}/healthz`)).status, 200, 'the server answers afterwards')
})

t.test('an upgrade of the stream path pipelined after a valid request waits for its answer', async (t) => {
  const rt = await startTestRuntime(t)
  const port = Number(new URL(rt.baseUrl).port)
  const handshake = `GET /2/activity/stream HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`
  const answers = await converse(port, [`${get('/2/webhooks', 'Authorization: Bearer nope\r\n')}${handshake}`], 0, 5000)
  t.same(statuses(answers), [401, 401], 'the earlier request is answered, then the refused handshake')
})

t.test('malformed requests on ads paths get the ads envelope', async (t) => {
  const rt = await startTestRuntime(t, { services: [probe] })
  const port = Number(new URL(rt.baseUrl).port)
  const cases: Array<[string, string, Shape]> = [
    ['an unknown method', 'FOO /12/slow HTTP/1.1\r\nHost: x\r\n\r\n', 'ads'],
    ['a lowercase method', 'get /12/accounts HTTP/1.1\r\nHost: x\r\n\r\n', 'ads'],
    ['a method with a digit', 'G3T /12/slow HTTP/1.1\r\nHost: x\r\n\r\n', 'ads'],
    ['a tab after the method', 'GET\t/12/slow HTTP/1.1\r\nHost: x\r\n\r\n', 'ads'],
    ['no Host', 'GET /12/slow HTTP/1.1\r\n\r\n', 'ads'],
    ['an unknown method on v1.1', 'FOO /1.1/slow.json HTTP/1.1\r\nHost: x\r\n\r\n', 'classic'],
    ['no Host on v1.1', 'GET /1.1/slow.json HTTP/1.1\r\n\r\n', 'classic'],
    ['no Host on v2', 'GET /2/slow HTTP/1.1\r\n\r\n', 'v2'],
    ['an unserved ads version, malformed', 'GET /11/accounts HTTP/1.1\r\nX-Null: a\u0000b\r\n\r\n', 'ads']
  ]
  for (const [label, request, shape] of cases) {
    for (const before of ['', get('/2/slow')]) {
      const answers = await converse(port, [`${before}${request}`], 0, 5000)
      const last = answers[answers.length - 1]
      t.equal(answers.length, before ? 2 : 1, `${label}${before ? ' after a valid request' : ''}: every request answered`)
      t.equal(last?.status, 400, `${label}: 400`)
      t.equal(shapeOf(last), shape, `${label}${before ? ' after a valid request' : ''}: ${shape} shape`)
    }
  }
  // HTTP/1.0 needs no Host.
  const old = await converse(port, ['GET /12/slow HTTP/1.0\r\n\r\n'], 0, 5000)
  t.same(statuses(old), [200], 'HTTP/1.0 without Host is served')
})

t.test('an ads path with an unserved version: the ads envelope with x-current-api-version', async (t) => {
  const rt = await startTestRuntime(t)
  const id = await createIdentity(rt.ctx.store)
  for (const path of ['/11/accounts', '/13/accounts/abc/campaigns', '/4/accounts']) {
    const res = await oauth1Request('GET', `${rt.baseUrl}${path}`, id)
    t.equal(res.status, 404, `${path}: 404`)
    t.equal(res.headers.get('x-current-api-version'), '12', `${path}: x-current-api-version`)
    t.match(res.headers.get('content-type'), /^application\/json/)
    t.match(res.json(), { errors: [{ code: 'ROUTE_NOT_FOUND', message: /not served; the current version is 12/ }], request: { params: {} } }, `${path}: the ads envelope`)
  }
  const v2 = await fetch(`${rt.baseUrl}/2/no-such-route`)
  t.match(v2.headers.get('content-type'), /^application\/problem\+json/, '/2/ stays v2')
})

/** A request and its answer's size: the answer never outgrows the request by more than this. */
const SLACK_BYTES = 4096

function bounded(t: Test, label: string, requestBytes: number, answer: { status: number; text: string }): void {
  const size = Buffer.byteLength(answer.text)
  t.ok(answer.status >= 400 && answer.status < 500, `${label}: ${answer.status}`)
  t.ok(size <= Math.min(requestBytes + SLACK_BYTES, 16 * 1024), `${label}: a ${size}-byte answer to a ${requestBytes}-byte request`)
}

t.test('error bodies never outgrow the request', async (t) => {
  const rt = await startTestRuntime(t)
  const id = await createIdentity(rt.ctx.store)
  // A 180 KB field name (quotes, so its JSON doubles in the answer as in the request) of an invalid type.
  const key = '"'.repeat(90_000)
  const json = JSON.stringify({ [key]: {} })
  bounded(t, 'v1.1 media upload, a 180 KB field name', json.length, await oauth1Request('POST', `${rt.baseUrl}/1.1/media/upload.json`, id, { json: { [key]: {} } }))
  // Control characters cost 3 bytes in a form and 6 as JSON escapes: echoes show them as '?'.
  const controls = '\u0001'.repeat(1000)
  const form = { command: 'INIT', total_bytes: '10', media_type: controls }
  bounded(t, 'v1.1 media upload, control characters in a value', new URLSearchParams(form).toString().length, await oauth1Request('POST', `${rt.baseUrl}/1.1/media/upload.json`, id, { form }))
  const v2 = { url: 5, extra: controls }
  const v2res = await oauth1Request('POST', `${rt.baseUrl}/2/webhooks`, id, { json: v2 })
  bounded(t, 'v2, control characters echoed', JSON.stringify(v2).length, v2res)
  t.notMatch(v2res.text, /\\u0001/, 'no six-byte escapes in the echo')
  // The ads envelope echoes the query in request.params.
  const query = Array.from({ length: 4 }, (_, i) => `p${i}=${'%01'.repeat(1000)}`).join('&')
  const adsUrl = `${rt.baseUrl}/12/accounts?${query}`
  const ads = await fetch(adsUrl)
  bounded(t, 'ads, control characters in the query', adsUrl.length, { status: ads.status, text: await ads.text() })
  const verifier = 'a'.repeat(100_000)
  const token = await fetch(`${rt.baseUrl}/2/oauth2/token`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: `grant_type=authorization_code&code=x&redirect_uri=x&client_id=${verifier}` })
  bounded(t, 'OAuth 2.0 token endpoint, a 100 KB client_id', 100_060, { status: token.status, text: await token.text() })
})
