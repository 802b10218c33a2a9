import t from 'tap'
import { startTracing, stopTracing, tracingOn, tracingRequested } from '../../services/common/tracing'
import { startOtlpReceiver, type ReceivedSpan } from '../support/otlp-receiver'

/**
 * Tracing in the embedded runtime (one process, the memory bus): with the
 * OTEL_* variables pointing at an OTLP/HTTP receiver in this process, one
 * ingested event gives one trace: the ingest request's spans, the matcher's
 * span of the event (their child), and as the match span's children every
 * webhook attempt (the retry too, read back from the store) and the stream
 * write of its line; an Account Activity delivery's attempt is a child of
 * the ingest request (no match in between). The webhook POST carries no trace header to the
 * customer. test/system/tracing.test.ts proves the same across `make up`'s
 * processes and Kafka.
 */

t.test('the OTEL_* variables that turn tracing on', async (t) => {
  t.equal(tracingRequested({}), false, 'nothing set: off')
  t.equal(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' }), true)
  t.equal(tracingRequested({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://127.0.0.1:4318/v1/traces' }), true)
  t.equal(tracingRequested({ OTEL_TRACES_EXPORTER: 'otlp' }), true, 'an exporter named (the SDK defaults the endpoint)')
  t.equal(tracingRequested({ OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x:4318' }), false, 'exporter none wins')
  t.equal(tracingRequested({ OTEL_SDK_DISABLED: 'true', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x:4318' }), false, 'the SDK disabled')
  t.equal(tracingRequested({ OTEL_EXPORTER_OTLP_ENDPOINT: ' ' }), false, 'blank is unset')
})

t.test('one event: ingest, match, every webhook attempt and the stream write share a trace', async (t) => {
  const collector = await startOtlpReceiver(t)
  const saved = { ...process.env }
  Object.assign(process.env, {
    OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
    OTEL_BSP_SCHEDULE_DELAY: '50'
  })
  delete process.env.OTEL_SERVICE_NAME
  t.teardown(async () => {
    await stopTracing()
    process.env = saved
  })
  t.equal(startTracing('embedded'), true)
  t.equal(tracingOn(), true)
  // Loaded after the SDK started, as a service's main does.
  const { createIdentity, startTestRuntime } = await import('../support/runtime')
  const { oauth1Request } = await import('../support/http')
  const { eventually } = await import('../support/util')
  const { registerWebhook, FAST_ENV } = await import('../support/fixtures/webhooks')
  const { ingest, nextUserId, openHttpStream, OPERATOR_TOKEN, sampleEvent, subscribe } = await import('../support/fixtures/activity')

  const rt = await startTestRuntime(t, { serviceName: 'embedded', env: { ...FAST_ENV, OPERATOR_TOKEN } })
  const { id, receiver, webhookId } = await registerWebhook(t, rt)
  // The first POST fails: the retry is made from the stored record, and must stay in the trace.
  receiver.onPost = (_post, n) => ({ status: n === 1 ? 500 : 200 })
  const userId = nextUserId()
  await subscribe(rt.baseUrl, id.bearer, { event_type: 'post.create', filter: { user_id: userId }, webhook_id: webhookId })
  const stream = await openHttpStream(rt.baseUrl, id.bearer)
  t.teardown(() => stream.close())

  const event = sampleEvent('post.create', userId)
  const ingested = await ingest(rt.baseUrl, [event], OPERATOR_TOKEN)
  t.equal(ingested.status, 200)
  const uuid = ingested.json<{ data: { event_uuids: string[] } }>().data.event_uuids[0]
  await stream.waitFor((m) => m.some((x) => x.data?.event_uuid === uuid), 10_000)
  await eventually(() => receiver.accepted.length === 1, 10_000)
  t.equal(receiver.posts.length, 2, 'one failed attempt, then the retry')
  t.notOk(receiver.posts.some((p) => p.headers.traceparent !== undefined || p.headers.tracestate !== undefined), 'no trace header goes to the customer')

  const find = (name: string, n = 1): ReceivedSpan[] | undefined => {
    const found = collector.spans.filter((s) => s.name === name && (name !== 'activity.match' || s.attributes['gateway.event_uuid'] === uuid))
    return found.length >= n ? found : undefined
  }
  const [match] = await eventually(() => find('activity.match'), 10_000)
  const attempts = await eventually(() => find('webhook.attempt', 2), 10_000)
  const [write] = await eventually(() => find('stream.write'), 10_000)
  if (!match || !write) throw new Error('unreachable')
  const trace = collector.spans.filter((s) => s.traceId === match.traceId)
  const byId = new Map(trace.map((s) => [s.spanId, s]))

  t.ok(trace.every((s) => s.service === 'embedded'), 'the default service name of the process')
  t.same(collector.refused, [], 'every export was OTLP JSON on /v1/traces')
  // The match span's ancestors: the ingest request's handler and request spans, up to the root.
  const ancestors: ReceivedSpan[] = []
  for (let s = byId.get(match.parentSpanId ?? ''); s; s = byId.get(s.parentSpanId ?? '')) ancestors.push(s)
  const root = ancestors[ancestors.length - 1]
  t.ok(root && root.parentSpanId === undefined, `the chain reaches the trace's root (${ancestors.map((s) => s.name).join(' <- ')})`)
  t.ok(ancestors.some((s) => s.attributes['http.route'] === '/admin/activity/events' || s.attributes['url.path'] === '/admin/activity/events'), 'the match is a descendant of the ingest request')
  t.match(match.attributes, { 'messaging.system': 'memory', 'messaging.destination.name': 'activity.events', 'gateway.event_type': 'post.create', 'gateway.deliveries': 1 })

  t.same(attempts.map((a) => a.traceId), [match.traceId, match.traceId], 'both attempts are in the trace')
  t.same(attempts.map((a) => a.parentSpanId), [match.spanId, match.spanId], 'each attempt is a child of the match')
  const [first, retry] = [...attempts].sort((a, b) => Number(a.attributes['gateway.attempt']) - Number(b.attributes['gateway.attempt']))
  t.match(first?.attributes, { 'gateway.attempt': 1, 'gateway.webhook_id': webhookId, 'http.response.status_code': 500 })
  t.equal(first?.status, 2, 'the failed attempt is an error span')
  t.match(retry?.attributes, { 'gateway.attempt': 2, 'gateway.webhook_id': webhookId, 'http.response.status_code': 200, 'gateway.first_attempt': false })
  t.equal(first?.attributes['gateway.delivery_id'], retry?.attributes['gateway.delivery_id'], 'one delivery')
  t.equal(retry?.status, 0)

  t.equal(write.traceId, match.traceId)
  t.equal(write.parentSpanId, match.spanId, 'the stream write is a child of the match')
  t.match(write.attributes, { 'gateway.lines': 1, 'gateway.app_id': id.app.id, 'gateway.transport': 'http' })
  t.type(write.attributes['gateway.connection_id'], 'string')

  // Account Activity: routed from activity.events by the webhooks service itself, no match in between.
  const alice = await createIdentity(rt.ctx.store, { app: id.app })
  const aaa = await oauth1Request('POST', `${rt.baseUrl}/2/account_activity/webhooks/${webhookId}/subscriptions/all`, alice)
  t.equal(aaa.status, 200, aaa.text)
  const aaaIngest = await ingest(rt.baseUrl, [sampleEvent('post.create', alice.user.id)], OPERATOR_TOKEN)
  t.equal(aaaIngest.status, 200)
  const aaaAttempt = await eventually(() => collector.spans.find((s) => s.name === 'webhook.attempt' && s.attributes['gateway.source'] === 'account-activity'), 10_000)
  const aaaParent = await eventually(() => collector.spans.find((s) => s.spanId === aaaAttempt.parentSpanId), 10_000)
  t.equal(aaaParent.traceId, aaaAttempt.traceId)
  t.equal(aaaParent.attributes['http.route'], '/admin/activity/events', 'an Account Activity attempt is a child of the ingest request')

  const everything = JSON.stringify(trace)
  t.notOk(everything.includes(id.app.consumer_secret) || everything.includes(String((event.payload as { text?: string }).text ?? '\u0000')), 'no secret or body in the spans')
})
