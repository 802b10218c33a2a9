import http from 'node:http'
import net from 'node:net'
import v8 from 'node:v8'
import vm from 'node:vm'
import t, { type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { ClientErrorAnswers, failingTarget } from '../../services/common/client-errors'
import type { ServiceDefinition, ServiceName } from '../../services/common/service'
import { startTestRuntime } from '../support/runtime'
import { type Answer, converse, get, post } from '../support/raw-http'

/**
 * The HTTP layer under hostile input over raw sockets: a client
 * error on a keep-alive connection is answered only after every earlier
 * request on it, in the shape of the request it belongs to; error bodies stay
 * small whatever the input; and the memory a hostile burst takes comes back.
 */

const DELAY_MS = 150

const strict = {
  type: 'object',
  required: ['url'],
  additionalProperties: false,
  properties: { url: { type: 'string' }, n: { type: 'integer' } }
}

async function probeRoutes(app: FastifyInstance): Promise<void> {
  const slow = async (): Promise<{ ok: true }> => {
    await new Promise((resolve) => setTimeout(resolve, DELAY_MS))
    return { ok: true }
  }
  for (const path of ['/2/slow', '/12/slow', '/1.1/slow.json', '/oauth/slow']) app.get(path, slow)
  for (const path of ['/2/strict', '/12/strict', '/1.1/strict.json']) app.post(path, { schema: { body: strict } }, async (request) => ({ body: request.body }))
  app.post('/12/strict-query', { schema: { querystring: { type: 'object', properties: { count: { type: 'integer' } } } } }, async () => ({ ok: true }))
  app.post('/2/echo', async (request) => ({ size: JSON.stringify(request.body).length }))
}

const probe = { name: 'hostile-probe' as ServiceName, routes: probeRoutes } satisfies ServiceDefinition

type Shape = 'v2' | 'ads' | 'classic'

function checkShape(t: Test, answer: Answer | undefined, shape: Shape, status: number, label: string): void {
  t.ok(answer, `${label}: answered`)
  if (!answer) return
  t.equal(answer.status, status, `${label}: ${status}`)
  t.equal(answer.headers.connection, 'close', `${label}: the connection closes`)
  const body = JSON.parse(answer.body) as Record<string, unknown>
  if (shape === 'ads') {
    t.equal(answer.headers['x-current-api-version'], '12', `${label}: the ads version header`)
    t.match(answer.headers['content-type'], /^application\/json/)
    t.match(body, { errors: [{ code: String, message: String }], request: { params: {} } }, `${label}: the ads envelope`)
  } else if (shape === 'classic') {
    t.match(answer.headers['content-type'], /^application\/json/)
    t.match(body, { errors: [{ code: 214, message: String }] }, `${label}: the classic error`)
  } else {
    t.equal(answer.headers['content-type'], 'application/problem+json', `${label}: a Problem`)
    t.match(body, { type: 'about:blank', status }, `${label}: a Problem`)
  }
}

t.test('the request a client error belongs to is found in the failing packet, not in the last chunk', async (t) => {
  const packet = (s: string): Buffer => Buffer.from(s, 'latin1')
  const at = (s: string, marker: string): number => s.indexOf(marker)
  const complete = { complete: true } as http.IncomingMessage
  const pipelined = `${get('/2/a')}${post('/2/b', 'abc')}GET /12/c\u0000d HTTP/1.1\r\n\r\n`
  t.equal(failingTarget({ rawPacket: packet(pipelined), bytesParsed: at(pipelined, '\u0000') } as never, { last: complete }), '/12/c', 'the last head before the failure, after a body with no line end')
  const badHeader = `${get('/12/a')}GET /1.1/b.json HTTP/1.1\r\nX: GET /12/fake HTTP/1.1\r\nBad Header: 1\r\n\r\n`
  t.equal(failingTarget({ rawPacket: packet(badHeader), bytesParsed: at(badHeader, 'Bad Header') + 3 } as never, { last: complete }), '/1.1/b.json', 'a request line quoted in a header value is not a head')
  const garbage = `${get('/12/a')}\u0001\u0002 junk`
  t.equal(failingTarget({ rawPacket: packet(garbage), bytesParsed: at(garbage, '\u0001') } as never, { last: complete }), null, 'a head with no request line after a complete one: no path')
  t.equal(failingTarget({ rawPacket: packet('aaaaaaaa'), bytesParsed: 4 } as never, { last: complete, headTarget: '/oauth/x' }), '/oauth/x', 'a head begun in an earlier packet')
  const inBody = { complete: false, url: 'http://h/12/accounts?x=1' } as http.IncomingMessage
  t.equal(failingTarget({ rawPacket: packet('zz\r\n'), bytesParsed: 0 } as never, { last: inBody }), 'http://h/12/accounts?x=1', 'a body that fails: its own request')
  t.equal(failingTarget({ code: 'ERR_HTTP_REQUEST_TIMEOUT' } as never, undefined), null, 'nothing known')
})

t.test('pipelined valid and malformed requests: every earlier request is answered first, in order, then the error in its own shape', async (t) => {
  const rt = await startTestRuntime(t, { services: [probe] })
  const port = Number(new URL(rt.baseUrl).port)
  const cases: Array<[string, Shape]> = [['/12/slow', 'ads'], ['/2/slow', 'v2'], ['/1.1/slow.json', 'classic'], ['/oauth/slow', 'classic']]
  for (const [path, shape] of cases) {
    // One packet: two slow valid requests of another interface, then a malformed one (a NUL in a header value).
    const other = shape === 'v2' ? '/12/slow' : '/2/slow'
    const answers = await converse(port, [`${get(other)}${get(other)}${get(path, 'X-Null: a\u0000b\r\n')}`])
    t.equal(answers.length, 3, `${path}: three answers`)
    t.same(answers.slice(0, 2).map((a) => [a.status, JSON.parse(a.body)]), [[200, { ok: true }], [200, { ok: true }]], `${path}: the valid requests first`)
    checkShape(t, answers[2], shape, 400, `${path} after two valid requests`)

    // The same over several packets, the malformed request line arriving while the first two are in progress.
    const split = await converse(port, [get(other), get(path), `GET ${path}?a=\u0001 HTTP/1.1\r\n\r\n`], 20)
    t.same(split.slice(0, 2).map((a) => a.status), [200, 200], `${path}: in separate packets too`)
    checkShape(t, split[2], shape, 400, `${path}: a bad request target`)
    t.equal(split.length, 3)
  }

  // A body that fails framing (a bad chunk size) is its own request's error, after the earlier answers.
  const chunked = await converse(port, [`${get('/2/slow')}POST /12/strict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"url\r\nZZ\r\n`])
  t.equal(chunked.length, 2)
  t.equal(chunked[0]?.status, 200)
  checkShape(t, chunked[1], 'ads', 400, 'a broken chunked body of an ads request')

  // Oversized headers arriving over several packets: the request line was in the first one.
  const big = 'a'.repeat(4096)
  const overflow = await converse(port, [`${get('/2/slow')}GET /12/slow HTTP/1.1\r\nHost: x\r\n`, ...Array.from({ length: 6 }, (_, i) => `X-Big-${i}: ${big}\r\n`), '\r\n'], 15)
  t.equal(overflow[0]?.status, 200)
  checkShape(t, overflow[1], 'ads', 431, 'oversized headers of an ads request')
  t.equal(overflow.length, 2)

  t.equal((await fetch(`${rt.baseUrl}/healthz`)).status, 200, 'the server answers afterwards')
})

t.test('a handler that never answers does not keep a connection with a client error open past the bound', async (t) => {
  const server = http.createServer(() => {
    // Never answers.
  })
  const answers = new ClientErrorAnswers('https://problems.example', 300)
  server.on('clientError', (err, socket) => answers.answer(err, socket as net.Socket))
  answers.watch(server, false)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    server.closeAllConnections()
    server.close()
  })
  const started = Date.now()
  const got = await converse((server.address() as net.AddressInfo).port, [`${get('/2/hang')}GET /2/x\u0000 HTTP/1.1\r\n\r\n`])
  const took = Date.now() - started
  t.same(got, [], 'no answer is written into the middle of one that never came')
  t.ok(took >= 250 && took < 5000, `closed after the bound (${took} ms)`)
})

t.test('error bodies stay small whatever the input: a huge string, 100k fields, a huge query', async (t) => {
  const rt = await startTestRuntime(t, { services: [probe] })
  const huge = JSON.stringify({ url: 5, n: 'x'.repeat(700_000) })
  const fields = JSON.stringify(Object.fromEntries([['url', 'u'], ...Array.from({ length: 100_000 }, (_, i) => [`f${i}`, i])]))
  t.ok(fields.length > 700_000, `100k fields: ${fields.length} bytes`)
  const hugeKey = JSON.stringify({ url: 'u', [`k${'y'.repeat(600_000)}`]: 1 })
  const bodies: Array<[string, string]> = [['a huge string', huge], ['100k fields', fields], ['a huge field name', hugeKey], ['a huge string at the root', JSON.stringify('z'.repeat(700_000))]]
  for (const path of ['/2/strict', '/12/strict', '/1.1/strict.json']) {
    for (const [label, body] of bodies) {
      const started = Date.now()
      const res = await fetch(`${rt.baseUrl}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
      const text = await res.text()
      t.equal(res.status, 400, `${path} ${label}`)
      t.ok(Buffer.byteLength(text) < 16 * 1024, `${path} ${label}: a ${Buffer.byteLength(text)}-byte error body`)
      t.ok(Date.now() - started < 10_000, `${path} ${label}: answered in ${Date.now() - started} ms`)
      if (path === '/2/strict' && label === '100k fields') t.match(JSON.parse(text), { detail: /99990 more not listed/, errors: Array }, 'the Problem lists 10 and counts the rest')
    }
  }
  // The ads envelope echoes the query in request.params: bounded too (a query fills the request line).
  const manyParams = Array.from({ length: 600 }, (_, i) => `p${i}=${'%00'.repeat(3)}`).join('&')
  const query = await fetch(`${rt.baseUrl}/12/strict-query?count=x&${manyParams}&long=${'%01'.repeat(1500)}`, { method: 'POST' })
  const queryText = await query.text()
  t.equal(query.status, 400)
  t.ok(Buffer.byteLength(queryText) < 16 * 1024, `ads: a ${Buffer.byteLength(queryText)}-byte error echoing a ${manyParams.length}-byte query`)
  t.match(JSON.parse(queryText), { errors: [{ code: 'INVALID_PARAMETER' }], request: { params: { count: 'x' } } })
  const contentType = await fetch(`${rt.baseUrl}/1.1/strict.json`, { method: 'POST', headers: { 'content-type': `application/x-${'q'.repeat(12_000)}` }, body: 'x' })
  const typeText = await contentType.text()
  t.equal(contentType.status, 415)
  t.ok(Buffer.byteLength(typeText) < 2048, `classic: a ${Buffer.byteLength(typeText)}-byte error for a 12 kB Content-Type`)
})

/** In-process: the runtime runs in this process, so a forced collection shows what the burst left behind. */
function collector(): () => void {
  v8.setFlagsFromString('--expose-gc')
  return vm.runInNewContext('gc') as () => void
}

async function settle(gc: () => void): Promise<NodeJS.MemoryUsage> {
  for (let i = 0; i < 4; i++) {
    gc()
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  return process.memoryUsage()
}

const mb = (n: number): number => Math.round(n / 1024 / 102.4) / 10

t.test('a hostile burst over raw sockets: answered, in order, in shape, and the memory it took comes back', async (t) => {
  const rt = await startTestRuntime(t, { services: [probe] })
  const port = Number(new URL(rt.baseUrl).port)
  const gc = collector()
  // Warm up: the first requests compile routes and schemas.
  for (let i = 0; i < 20; i++) await converse(port, [`${get('/2/slow')}${get('/12/slow', 'X-Null: \u0000\r\n')}`])
  const before = await settle(gc)

  const bigString = post('/2/strict', JSON.stringify({ url: 5, n: 'x'.repeat(700_000) }))
  const manyFields = post('/12/strict', JSON.stringify(Object.fromEntries(Array.from({ length: 100_000 }, (_, i) => [`f${i}`, i]))))
  const overBody = `POST /2/echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${6 * 1024 * 1024}\r\n\r\n${'['.repeat(64 * 1024)}`
  const kinds: Array<{ parts: Array<string | Buffer>; check: (answers: Answer[]) => boolean }> = [
    // Valid then malformed, in each interface.
    { parts: [`${get('/2/slow')}${get('/12/slow')}GET /12/slow HTTP/1.1\r\nBad Header: x\r\n\r\n`], check: (a) => a.length === 3 && a[0]?.status === 200 && a[1]?.status === 200 && a[2]?.status === 400 && a[2].headers['x-current-api-version'] === '12' },
    { parts: [`${get('/12/slow')}GET /2/slow\u0001 HTTP/1.1\r\n\r\n`], check: (a) => a.length === 2 && a[0]?.status === 200 && a[1]?.status === 400 && a[1].headers['content-type'] === 'application/problem+json' },
    { parts: [`${get('/2/slow')}${get('/1.1/slow.json', 'X-Null: \u0000\r\n')}`], check: (a) => a.length === 2 && a[0]?.status === 200 && a[1]?.status === 400 && /"code":214/.test(a[1].body) },
    // Big bodies that fail validation: small answers.
    { parts: [bigString], check: (a) => a.length === 1 && a[0]?.status === 400 && a[0].body.length < 16 * 1024 },
    { parts: [manyFields], check: (a) => a.length === 1 && a[0]?.status === 400 && a[0].body.length < 16 * 1024 },
    // Over the body limit by Content-Length, the body still arriving.
    { parts: [overBody], check: (a) => a.length === 1 && a[0]?.status === 413 },
    // Oversized headers, a garbage request line.
    { parts: [`GET /oauth/slow HTTP/1.1\r\nX-Big: ${'b'.repeat(20_000)}\r\n\r\n`], check: (a) => a.length === 1 && a[0]?.status === 431 && /"code":214/.test(a[0].body) },
    { parts: [Buffer.from([0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00, 0x00, 0xa1, 0x03, 0x03, 0x0d, 0x0a, 0x0d, 0x0a])], check: (a) => a.length === 1 && a[0]?.status === 400 }
  ]
  const ROUNDS = 10
  const CONCURRENCY = 8
  const failures: string[] = []
  let sent = 0
  /** Every kind of connection `rounds` times, CONCURRENCY at once; returns how long it took. */
  const burst = async (rounds: number): Promise<number> => {
    const queue = Array.from({ length: rounds * kinds.length }, (_, i) => i % kinds.length)
    const started = Date.now()
    await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
      for (let k = queue.shift(); k !== undefined; k = queue.shift()) {
        const kind = kinds[k] as (typeof kinds)[number]
        sent++
        try {
          const answers = await converse(port, kind.parts)
          if (answers.some((a) => a.status >= 500) || !kind.check(answers)) failures.push(`kind ${k}: ${answers.map((a) => `${a.status} ${a.body.slice(0, 120)}`).join(' | ')}`)
        } catch (err) {
          failures.push(`kind ${k}: ${(err as Error).message}`)
        }
      }
    }))
    return Date.now() - started
  }
  const firstMs = await burst(ROUNDS)
  const after = process.memoryUsage()
  const settled = await settle(gc)
  const secondMs = await burst(ROUNDS)
  const again = await settle(gc)
  t.same(failures.slice(0, 5), [], `${sent} connections in ${firstMs} + ${secondMs} ms: each answered as expected`)
  t.equal((await fetch(`${rt.baseUrl}/healthz`)).status, 200, 'the server still answers')

  const report = `heap ${mb(before.heapUsed)} → ${mb(after.heapUsed)} → ${mb(settled.heapUsed)} → ${mb(again.heapUsed)} MB; rss ${mb(before.rss)} → ${mb(after.rss)} → ${mb(settled.rss)} → ${mb(again.rss)} MB; external ${mb(before.external)} → ${mb(settled.external)} → ${mb(again.external)} MB`
  t.comment(`memory before the burst → right after → after a collection → after a second burst and a collection: ${report}`)
  t.ok(settled.heapUsed - before.heapUsed < 32 * 1024 * 1024, `the heap comes back (${report})`)
  t.ok(again.heapUsed - settled.heapUsed < 8 * 1024 * 1024, 'a second burst leaves nothing more behind: no leak per connection')
  t.ok(again.external - before.external < 32 * 1024 * 1024, 'buffers come back')
  t.ok(again.rss - before.rss < 160 * 1024 * 1024, 'RSS stays within a generous bound')
})
