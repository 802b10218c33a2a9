import t from 'tap'
import type { BusMessage } from '../../services/common/bus/types'
import { startTracing, tracingOn } from '../../services/common/tracing'
import { startTestRuntime } from '../support/runtime'
import { eventually } from '../support/util'
import { ingest, nextUserId, OPERATOR_TOKEN, sampleEvent, subscribe } from '../support/fixtures/activity'
import { FAST_ENV, registerWebhook } from '../support/fixtures/webhooks'

/**
 * Tracing off (no OTEL_* variable set, the default): the SDK is not even
 * loaded, no message on the bus carries a trace header and no stored
 * delivery a traceparent. test/common/tracing.test.ts has it on.
 */

t.test('without OTEL_* variables nothing of the SDK runs and nothing carries a trace', async (t) => {
  for (const k of Object.keys(process.env)) if (k.startsWith('OTEL_')) delete process.env[k]
  t.equal(startTracing('embedded'), false)
  t.equal(tracingOn(), false)
  const rt = await startTestRuntime(t, { serviceName: 'embedded', env: { ...FAST_ENV, OPERATOR_TOKEN } })
  const seen: BusMessage[] = []
  const consumer = await rt.ctx.bus.subscribe({
    groupId: 'tracing-off-watch',
    topics: ['activity.events', 'activity.deliveries'],
    batchHandler: async (messages) => void seen.push(...messages)
  })
  t.teardown(() => consumer.close())
  const { id, receiver, webhookId } = await registerWebhook(t, rt)
  const userId = nextUserId()
  await subscribe(rt.baseUrl, id.bearer, { event_type: 'post.create', filter: { user_id: userId }, webhook_id: webhookId })
  // A trace context the request brings is not taken up either.
  const res = await fetch(`${rt.baseUrl}/admin/activity/events`, {
    method: 'POST',
    headers: { authorization: `Bearer ${OPERATOR_TOKEN}`, 'content-type': 'application/json', traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' },
    body: JSON.stringify(sampleEvent('post.create', userId))
  })
  t.equal(res.status, 200)
  t.equal((await ingest(rt.baseUrl, [sampleEvent('post.create', userId)], OPERATOR_TOKEN)).status, 200)
  await eventually(() => receiver.accepted.length === 2 && seen.filter((m) => m.topic === 'activity.deliveries').length === 2, 10_000)
  t.same(
    seen.map((m) => m.headers),
    seen.map(() => ({})),
    'no message has a header'
  )
  const log = await fetch(`${rt.baseUrl}/admin/webhooks/${webhookId}/deliveries`, { headers: { authorization: `Bearer ${OPERATOR_TOKEN}` } })
  const records = ((await log.json()) as { data: Array<Record<string, unknown>> }).data
  t.equal(records.length, 2)
  t.notOk(records.some((r) => 'traceparent' in r), 'no stored delivery has a traceparent')
  t.notOk(Object.keys(require.cache).some((f) => f.includes('@opentelemetry/sdk-node') || f.includes('@fastify/otel')), 'the SDK was never loaded')
})
