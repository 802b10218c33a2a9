import t from 'tap'
import { bearerRequest, createIdentity, eventually, oauth1Request, plainRequest, startTestRuntime } from '../helper'
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
