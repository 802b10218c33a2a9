import http from 'node:http'
import net from 'node:net'
import { once } from 'node:events'
import t from 'tap'
import { bearerRequest, oauth1Request, plainRequest } from '../support/http'
import { createIdentity, startTestRuntime } from '../support/runtime'
import { eventually } from '../support/util'
import { kafkaBus, startKafka } from '../support/infra'

t.test('embedded runtime answers health, readiness and metrics', async (t) => {
  const rt = await startTestRuntime(t)
  const health = await plainRequest('GET', `${rt.baseUrl}/healthz`)
  t.equal(health.status, 200)
  t.equal(health.json().status, 'ok')
  t.ok(health.headers.get('x-request-id'), 'every response carries a request id')
  const ready = await plainRequest('GET', `${rt.baseUrl}/readyz`)
  t.equal(ready.status, 200)
  t.match(ready.json(), { store: 'memory', bus: 'memory' })
  const metrics = await plainRequest('GET', `${rt.baseUrl}/metrics`)
  t.equal(metrics.status, 200)
  t.match(metrics.text, /http_request_duration_seconds/)
  t.ok(rt.sandboxUrl, 'the sandbox host is served')
})

t.test('unknown routes answer in the interface shape of their path', async (t) => {
  const rt = await startTestRuntime(t)
  const v2 = await plainRequest('GET', `${rt.baseUrl}/2/nope`)
  t.equal(v2.status, 404)
  t.equal(v2.headers.get('content-type'), 'application/problem+json; charset=utf-8')
  t.match(v2.json(), { type: 'about:blank', status: 404 })
  const ads = await plainRequest('GET', `${rt.baseUrl}/12/nope?count=3`)
  t.equal(ads.status, 404)
  t.same(ads.json(), { errors: [{ code: 'ROUTE_NOT_FOUND', message: 'The requested resource could not be found' }], request: { params: { count: '3' } } })
  const oauth = await plainRequest('GET', `${rt.baseUrl}/oauth/nope`)
  t.equal(oauth.status, 404)
  t.same(oauth.json(), { errors: [{ code: 34, message: 'Sorry, that page does not exist.' }] })
})

t.test('a test identity can be created and used by request helpers', async (t) => {
  const rt = await startTestRuntime(t)
  const id = await createIdentity(rt.ctx.store)
  t.match(id.user.id, /^\d{19}$/)
  t.ok(id.bearer.length > 20)
  // No route requires auth yet in this file; the helpers at least reach the server.
  t.equal((await oauth1Request('GET', `${rt.baseUrl}/healthz`, id)).status, 200)
  t.equal((await bearerRequest('GET', `${rt.baseUrl}/healthz`, id.bearer)).status, 200)
})

t.test('readiness follows the Kafka consumers: brokers down is 503 naming the group, back up is 200', async (t) => {
  const kafka = await startKafka(t, { brokers: 1, extraTopics: ['readyz.probe:3'] })
  const bus = await kafkaBus(t, kafka, 'readyz')
  const rt = await startTestRuntime(t, { services: [], bus })
  await bus.subscribe({ groupId: 'g-readyz', topics: ['readyz.probe'], handler: async () => undefined })
  const readyz = (): Promise<{ status: number; json: () => Record<string, unknown> }> => plainRequest('GET', `${rt.baseUrl}/readyz`)
  const up = await readyz()
  t.equal(up.status, 200)
  t.match(up.json(), { status: 'ready', bus: 'kafka' })

  await kafka.setBrokerDown(-1)
  const down = await eventually(async () => {
    const res = await readyz()
    return res.status === 503 ? res : undefined
  }, 20_000)
  t.match(down.json(), { status: 'unavailable', reason: /g-readyz/ }, 'the reason names the consumer group')

  await kafka.setBrokerUp(-1)
  await eventually(async () => (await readyz()).status === 200, 30_000)
  t.pass('ready again once the consumer is back in its group')
})

t.test('closing is bounded by SHUTDOWN_GRACE: an open stream, an idle keep-alive connection and a body that never ends do not hold it', async (t) => {
  const rt = await startTestRuntime(t, { env: { SHUTDOWN_GRACE: '1s' } })
  const id = await createIdentity(rt.ctx.store)
  const { port } = new URL(rt.baseUrl)

  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  t.teardown(() => agent.destroy())
  const idle = await new Promise<http.IncomingMessage>((resolve, reject) => http.get(`${rt.baseUrl}/healthz`, { agent }, resolve).on('error', reject))
  idle.resume()
  await once(idle, 'end')
  const keptAlive = idle.socket

  const stream = await new Promise<http.IncomingMessage>((resolve, reject) =>
    http.get(`${rt.baseUrl}/2/activity/stream`, { headers: { authorization: `Bearer ${id.bearer}` } }, resolve).on('error', reject))
  t.equal(stream.statusCode, 200, 'the stream is open')
  stream.resume()
  const streamEnded = once(stream.socket, 'close')

  // Headers and part of a body, then nothing: the server waits for the rest with no timeout of its own.
  const stalled = net.connect(Number(port), '127.0.0.1')
  t.teardown(() => stalled.destroy())
  await once(stalled, 'connect')
  // Emitted once the server has parsed the head: from then on the connection has a request in flight, it is not idle.
  const received = once(rt.app.server, 'request')
  stalled.write(`POST /2/webhooks HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAuthorization: Bearer ${id.bearer}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"url":`)
  stalled.resume()
  const stalledClosed = once(stalled, 'close')
  await received

  const started = Date.now()
  let timer: NodeJS.Timeout | undefined
  const outcome = await Promise.race([
    rt.close().then(() => 'closed'),
    new Promise<string>((resolve) => (timer = setTimeout(() => resolve('still closing after 8 s'), 8000)))
  ])
  clearTimeout(timer)
  t.equal(outcome, 'closed', `closed in ${Date.now() - started} ms with a 1 s grace`)
  if (outcome !== 'closed') return
  await Promise.all([streamEnded, stalledClosed])
  t.pass('the stream and the stalled request\'s connection were closed by the server')
  t.ok(keptAlive?.destroyed ?? true, 'the idle keep-alive connection is closed too')
})
