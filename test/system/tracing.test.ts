import t from 'tap'
import { createApp, issueBearer } from '../../services/gateway/identity'
import { ingest, nextUserId, openHttpStream, sampleEvent, subscribe } from '../support/fixtures/activity'
import { startOtlpReceiver, type ReceivedSpan } from '../support/otlp-receiver'
import { eventually } from '../support/util'
import { startReceiver } from '../support/receivers'
import { OPERATOR_TOKEN } from './support/system'
import { startUpSystem } from './support/up-system'

/**
 * Tracing across `make up` (one instance of each service, Kafka between
 * them, nginx in front), exported to an OTLP/HTTP receiver in this process:
 * one event published through the proxy, with a user subscription that
 * names a webhook and an open stream of the same app, gives one trace whose
 * spans come from three processes: activity's ingest request (the http
 * server span and @fastify/otel's request span), activity's match of the
 * event (their child, through the traceparent of the activity.events
 * record), and, both children of the match through the activity.deliveries
 * record's traceparent, the webhooks service's attempt and the stream
 * node's write of the line. Each process names itself (OTEL_SERVICE_NAME
 * unset: the service's own name).
 */

const SPAN_WAIT_MS = 20_000

t.test('one event: spans of activity, webhooks and stream share one trace, parented ingest -> match -> (attempt, stream write)', async (t) => {
  const collector = await startOtlpReceiver(t)
  const system = await startUpSystem(t, {
    GATEWAY: '1',
    ACTIVITY: '1',
    WEBHOOKS: '1',
    STREAM: '1',
    ACCOUNT_HISTORY: '0',
    OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
    OTEL_BSP_SCHEDULE_DELAY: '100'
  })
  const proxy = system.proxyUrl
  const app = await createApp(system.store, { name: `tracing app ${process.pid}`, access_level: 'read', callback_urls: ['http://127.0.0.1/callback'] })
  const { token: bearer } = await issueBearer(system.store, app)
  const receiver = await startReceiver(t, app.consumer_secret)
  const created = await fetch(`${proxy}/2/webhooks`, { method: 'POST', headers: { authorization: `Bearer ${bearer}`, 'content-type': 'application/json' }, body: JSON.stringify({ url: receiver.url }) })
  const createdText = await created.text()
  t.equal(created.status, 200, createdText)
  const webhookId = (JSON.parse(createdText) as { data: { id: string } }).data.id
  const userId = nextUserId()
  await subscribe(proxy, bearer, { event_type: 'post.create', filter: { user_id: userId }, webhook_id: webhookId })
  const stream = await openHttpStream(proxy, bearer)
  t.teardown(() => stream.close())

  const ingested = await ingest(proxy, [sampleEvent('post.create', userId)], OPERATOR_TOKEN)
  t.equal(ingested.status, 200, ingested.text)
  const uuid = ingested.json<{ data: { event_uuids: string[] } }>().data.event_uuids[0]
  await stream.waitFor((m) => m.some((x) => x.data?.event_uuid === uuid), SPAN_WAIT_MS)
  await eventually(() => receiver.accepted.length === 1, SPAN_WAIT_MS)
  t.notOk(receiver.posts[0]?.headers.traceparent, 'the customer gets no trace header')

  const one = (name: string): ReceivedSpan | undefined => collector.spans.find((s) => s.name === name && (name !== 'activity.match' || s.attributes['gateway.event_uuid'] === uuid))
  const match = await eventually(() => one('activity.match'), SPAN_WAIT_MS).catch((err: unknown) => {
    throw new Error(`${(err as Error).message}; spans: ${collector.spans.map((s) => `${s.service}/${s.name}`).join(', ')}; refused: ${collector.refused.join(', ')}`)
  })
  const inTrace = (name: string): ReceivedSpan | undefined => collector.spans.find((s) => s.name === name && s.traceId === match.traceId)
  const attempt = await eventually(() => inTrace('webhook.attempt'), SPAN_WAIT_MS)
  const write = await eventually(() => inTrace('stream.write'), SPAN_WAIT_MS)
  // The ingest request's spans: nginx sends the request on to activity, whose http server span is the root.
  const ingestSpans = await eventually(() => {
    const found = collector.spans.filter((s) => s.traceId === match.traceId && s.service === 'activity' && s.attributes['http.route'] === '/admin/activity/events')
    return found.length >= 2 ? found : undefined
  }, SPAN_WAIT_MS)

  t.same(collector.refused, [], 'every export was OTLP JSON on /v1/traces')
  t.same(
    { match: match.service, attempt: attempt.service, write: write.service, ingest: [...new Set(ingestSpans.map((s) => s.service))] },
    { match: 'activity', attempt: 'webhooks', write: 'stream', ingest: ['activity'] },
    'each process names itself'
  )
  const root = ingestSpans.find((s) => s.parentSpanId === undefined)
  t.ok(root, 'the ingest request is the trace root')
  t.ok(ingestSpans.some((s) => s.spanId === match.parentSpanId), 'the match is a child of the ingest request')
  t.match(match.attributes, { 'messaging.system': 'kafka', 'messaging.destination.name': 'activity.events', 'gateway.deliveries': 1 })
  t.equal(attempt.parentSpanId, match.spanId, 'the webhook attempt is a child of the match')
  t.match(attempt.attributes, { 'gateway.webhook_id': webhookId, 'gateway.attempt': 1, 'http.response.status_code': 200 })
  t.equal(write.parentSpanId, match.spanId, 'the stream write is a child of the match')
  t.match(write.attributes, { 'gateway.app_id': app.id, 'gateway.lines': 1 })
  t.same([...new Set([root?.traceId, match.traceId, attempt.traceId, write.traceId])], [match.traceId], 'one trace id')
  t.same(system.crashes(), [], 'no process crashed')
})
