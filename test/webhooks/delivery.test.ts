import t from 'tap'
import { bearerRequest, plainRequest } from '../helper'
import {
  collectDeadLetters,
  deliveryMessage,
  eventually,
  FAST_ENV,
  metricsText,
  metricValue,
  publishDeliveries,
  registerWebhook,
  startWebhooks
} from './support'

const ADMIN = { authorization: `Bearer ${FAST_ENV.OPERATOR_TOKEN}` }

async function adminDeliveries(baseUrl: string, webhookId: string, status?: string): Promise<Array<Record<string, unknown>>> {
  const res = await plainRequest('GET', `${baseUrl}/admin/webhooks/${webhookId}/deliveries`, { headers: ADMIN, query: status ? { status } : {} })
  if (res.status !== 200) throw new Error(`admin deliveries: ${res.status} ${res.text}`)
  return res.json<{ data: Array<Record<string, unknown>> }>().data
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

t.test('signed deliveries reach the webhook byte-for-byte', async (t) => {
  const rt = await startWebhooks(t)
  const { id, receiver, webhookId } = await registerWebhook(t, rt)
  const messages = Array.from({ length: 5 }, (_, i) => deliveryMessage({ appId: id.app.id, webhookId, text: `event ${i} ünïcødé "quoted"` }))
  const streamOnly = deliveryMessage({ appId: id.app.id })
  const foreign = deliveryMessage({ appId: 'another-app', webhookId })
  await publishDeliveries(rt, [...messages, streamOnly, foreign])

  await eventually(() => receiver.accepted.length === 5, 10_000)
  t.same(receiver.posts.map((p) => p.body).sort(), messages.map((m) => JSON.stringify(m.envelope)).sort(), 'each body is the envelope exactly')
  t.ok(receiver.posts.every((p) => p.signatureValid), 'the receiver verified every signature')
  t.ok(receiver.posts.every((p) => /^sha256=[A-Za-z0-9+/]+=*$/.test(p.signature ?? '')))

  const log = await adminDeliveries(rt.baseUrl, webhookId)
  t.equal(log.length, 5, 'the stream-only and the foreign delivery are not in the log')
  t.ok(log.every((r) => r.status === 'delivered' && r.attempts === 1 && r.last_status === 200))
  const text = await metricsText(rt)
  t.equal(metricValue(text, 'webhook_deliveries_total', { outcome: 'delivered' }), 5)
  t.equal(metricValue(text, 'webhook_deliveries_total', { outcome: 'dropped' }), 1)
  t.equal(metricValue(text, 'webhook_delivery_duration_seconds_count', { result: 'success' }), 5)
  t.equal(metricValue(text, 'webhook_retry_queue_depth'), 0)
})

t.test('failures are retried on the schedule until one succeeds', async (t) => {
  const rt = await startWebhooks(t)
  const { id, receiver, webhookId } = await registerWebhook(t, rt)
  receiver.onPost = (_p, n) => (n <= 2 ? { status: 500 } : { status: 200 })
  await publishDeliveries(rt, [deliveryMessage({ appId: id.app.id, webhookId })])
  await eventually(() => receiver.accepted.length === 1, 10_000)
  t.equal(receiver.posts.length, 3)
  const [a, b, c] = receiver.posts.map((p) => p.at) as [number, number, number]
  t.ok(b - a >= 170, `second attempt ${b - a} ms after the first (schedule 200 ms, jitter 10%)`)
  t.ok(c - b >= 350, `third attempt ${c - b} ms after the second (schedule 400 ms)`)
  t.ok(receiver.posts.every((p) => p.signatureValid && p.body === receiver.posts[0]?.body), 'every attempt sends the same signed body')
  const [record] = await adminDeliveries(rt.baseUrl, webhookId)
  t.match(record, { status: 'delivered', attempts: 3, last_status: 200 })
  t.equal(metricValue(await metricsText(rt), 'webhook_deliveries_total', { outcome: 'retry_scheduled' }), 2)
})

t.test('exhausted deliveries are dead-lettered, logged as failed, and can be re-sent', async (t) => {
  const rt = await startWebhooks(t)
  const deadLetters = await collectDeadLetters(t, rt)
  const { id, receiver, webhookId } = await registerWebhook(t, rt)
  receiver.onPost = () => ({ status: 500 })
  const message = deliveryMessage({ appId: id.app.id, webhookId })
  await publishDeliveries(rt, [message])

  await eventually(() => deadLetters.length === 1, 10_000)
  t.equal(receiver.posts.length, 3, 'one attempt per step of the schedule')
  t.match(deadLetters[0], {
    delivery_id: message.delivery_id,
    webhook_id: webhookId,
    app_id: id.app.id,
    source: 'activity',
    reason: 'exhausted',
    attempts: 3,
    last_status: 500,
    body: JSON.stringify(message.envelope)
  })
  const failed = await adminDeliveries(rt.baseUrl, webhookId, 'failed')
  t.equal(failed.length, 1)
  t.match(failed[0], { delivery_id: message.delivery_id, status: 'failed', failure_reason: 'exhausted', attempts: 3 })
  t.same(await adminDeliveries(rt.baseUrl, webhookId, 'delivered'), [])
  const one = await plainRequest('GET', `${rt.baseUrl}/admin/webhooks/${webhookId}/deliveries/${String(message.delivery_id)}`, { headers: ADMIN })
  t.equal(one.json<{ data: { body: string } }>().data.body, JSON.stringify(message.envelope), 'the logged body is inspectable')
  t.equal(metricValue(await metricsText(rt), 'webhook_deliveries_total', { outcome: 'dead_lettered' }), 1)

  // The operator API needs the operator token.
  t.equal((await plainRequest('GET', `${rt.baseUrl}/admin/webhooks/${webhookId}/deliveries`)).status, 401)
  const bad = await plainRequest('POST', `${rt.baseUrl}/admin/webhooks/${webhookId}/resend`, { headers: ADMIN, json: { since: 'yesterday' } })
  t.equal(bad.status, 400)

  receiver.onPost = () => ({ status: 200 })
  const since = new Date(Date.now() - 60_000).toISOString()
  const resend = await plainRequest('POST', `${rt.baseUrl}/admin/webhooks/${webhookId}/resend`, { headers: ADMIN, json: { since } })
  t.equal(resend.status, 200, resend.text)
  t.same(resend.json(), { data: { webhook_id: webhookId, resent: 1 } })
  await eventually(() => receiver.accepted.length === 1, 10_000)
  t.ok(receiver.accepted[0]?.signatureValid)
  await eventually(async () => (await adminDeliveries(rt.baseUrl, webhookId, 'delivered')).length === 1, 5000)
  t.same(await adminDeliveries(rt.baseUrl, webhookId, 'failed'), [])
})

t.test('a timeout is a failed attempt', async (t) => {
  const rt = await startWebhooks(t)
  const { id, receiver, webhookId } = await registerWebhook(t, rt)
  receiver.onPost = (_p, n) => (n === 1 ? { status: 200, delayMs: 5000 } : { status: 200 })
  await publishDeliveries(rt, [deliveryMessage({ appId: id.app.id, webhookId })])
  await eventually(async () => (await adminDeliveries(rt.baseUrl, webhookId, 'delivered')).length === 1, 10_000)
  t.equal(receiver.posts.length, 2)
  const [delivered] = await adminDeliveries(rt.baseUrl, webhookId)
  t.match(delivered, { status: 'delivered', attempts: 2 })
  t.ok((receiver.posts[1]?.at ?? 0) - (receiver.posts[0]?.at ?? 0) >= 1400, 'the retry came after the 1.5 s timeout')
})

t.test('410 Gone disables the webhook until a CRC passes', async (t) => {
  const rt = await startWebhooks(t)
  const deadLetters = await collectDeadLetters(t, rt)
  const { id, receiver, webhookId } = await registerWebhook(t, rt)
  receiver.onPost = () => ({ status: 410 })
  await publishDeliveries(rt, [deliveryMessage({ appId: id.app.id, webhookId })])
  await eventually(() => deadLetters.length === 1, 10_000)
  t.equal(receiver.posts.length, 1, '410 is not retried')
  t.match(deadLetters[0], { reason: 'gone', last_status: 410, attempts: 1 })
  const listed = (await bearerRequest('GET', `${rt.baseUrl}/2/webhooks`, id.bearer)).json<{ data: Array<{ valid: boolean }> }>().data
  t.equal(listed[0]?.valid, false, 'the webhook is invalid')

  receiver.onPost = () => ({ status: 200 })
  await publishDeliveries(rt, [deliveryMessage({ appId: id.app.id, webhookId })])
  await eventually(() => deadLetters.length === 2, 10_000)
  t.equal(receiver.posts.length, 1, 'a disabled webhook is sent nothing')
  t.equal(deadLetters[1]?.reason, 'gone')

  t.equal((await bearerRequest('PUT', `${rt.baseUrl}/2/webhooks/${webhookId}`, id.bearer)).status, 200)
  await publishDeliveries(rt, [deliveryMessage({ appId: id.app.id, webhookId })])
  await eventually(() => receiver.accepted.length === 1, 10_000)
  t.pass('after a passing CRC the webhook receives deliveries again')
  t.equal(metricValue(await metricsText(rt), 'webhook_deliveries_total', { outcome: 'gone' }), 1)
})

t.test('Retry-After on 429 and 503 is honoured', async (t) => {
  const rt = await startWebhooks(t)
  const { id, receiver, webhookId } = await registerWebhook(t, rt)
  receiver.onPost = (_p, n) =>
    n === 1 ? { status: 429, headers: { 'retry-after': '1' } } : n === 2 ? { status: 503, headers: { 'retry-after': new Date(Date.now() + 2000).toUTCString() } } : { status: 200 }
  await publishDeliveries(rt, [deliveryMessage({ appId: id.app.id, webhookId })])
  await eventually(() => receiver.accepted.length === 1, 10_000)
  const [a, b, c] = receiver.posts.map((p) => p.at) as [number, number, number]
  t.ok(b - a >= 950, `the retry after a 429 waited ${b - a} ms (Retry-After: 1; the schedule said 200 ms)`)
  // An HTTP date has one-second resolution: 2 s ahead is at least 1 s ahead, well above the schedule's 400 ms.
  t.ok(c - b >= 900, `the retry after a 503 waited ${c - b} ms (Retry-After as an HTTP date)`)
})

t.test('an invalid webhook receives nothing until a CRC passes', async (t) => {
  const rt = await startWebhooks(t, { env: { WEBHOOK_RETRY_SCHEDULE: '0,300ms,1s,1s,1s,1s,1s' } })
  const { id, receiver, webhookId } = await registerWebhook(t, rt)
  receiver.crcMode = 'wrong'
  t.equal((await bearerRequest('PUT', `${rt.baseUrl}/2/webhooks/${webhookId}`, id.bearer)).status, 400)
  await publishDeliveries(rt, [deliveryMessage({ appId: id.app.id, webhookId })])
  await eventually(async () => metricValue(await metricsText(rt), 'webhook_deliveries_total', { outcome: 'skipped_invalid' }) >= 2, 5000)
  t.equal(receiver.posts.length, 0, 'nothing was POSTed to the invalid webhook')
  t.equal(metricValue(await metricsText(rt), 'webhook_retry_queue_depth'), 1, 'the delivery waits in the retry queue')
  receiver.crcMode = 'correct'
  t.equal((await bearerRequest('PUT', `${rt.baseUrl}/2/webhooks/${webhookId}`, id.bearer)).status, 200)
  await eventually(() => receiver.accepted.length === 1, 10_000)
  t.ok(receiver.accepted[0]?.signatureValid)
})

t.test('at most WEBHOOK_CONCURRENCY deliveries are in flight per webhook', async (t) => {
  const rt = await startWebhooks(t, { env: { WEBHOOK_CONCURRENCY: '2' } })
  const { id, receiver, webhookId } = await registerWebhook(t, rt)
  receiver.onPost = () => ({ status: 200, delayMs: 150 })
  await publishDeliveries(rt, Array.from({ length: 8 }, () => deliveryMessage({ appId: id.app.id, webhookId })))
  await eventually(() => receiver.accepted.length === 8 && receiver.inFlight === 0, 10_000)
  t.equal(receiver.maxInFlight, 2, 'two at a time, never more')
  await sleep(50)
  t.equal(receiver.posts.length, 8, 'each delivered once')
})

t.test('a burst larger than a lane holds is delivered completely, each once', async (t) => {
  // One connection: the lane holds 32 attempts; the rest wait in the store's schedule until it drains.
  const rt = await startWebhooks(t, { env: { WEBHOOK_CONCURRENCY: '1' } })
  const { id, receiver, webhookId } = await registerWebhook(t, rt)
  const messages = Array.from({ length: 120 }, (_, i) => deliveryMessage({ appId: id.app.id, webhookId, text: `burst ${i}` }))
  await publishDeliveries(rt, messages)
  await eventually(() => receiver.accepted.length === 120, 20_000)
  await sleep(100)
  t.equal(receiver.posts.length, 120, 'no delivery was made twice')
  t.equal(new Set(receiver.posts.map((p) => p.body)).size, 120)
  t.equal(receiver.maxInFlight, 1)
  t.equal(metricValue(await metricsText(rt), 'webhook_retry_queue_depth'), 0)
})
