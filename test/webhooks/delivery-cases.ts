import { allScheduled, scheduleSize } from '../../services/webhooks/delivery/schedule'
import type { Test } from 'tap'
import type { Runtime } from '../../services/common/runtime'
import { eventTypeOf } from '../../services/webhooks/delivery/attempt-log'
import type { DeliveryRecord } from '../../services/webhooks/delivery-log'
import { WebhookKeys } from '../../services/webhooks/keys'
import { bearerRequest, plainRequest } from '../helper'
import {
  collectDeadLetters,
  deliveryMessage,
  eventually,
  FAST_ENV,
  gate,
  metricsText,
  metricValue,
  publishDeliveries,
  registerTwoWebhooks,
  registerWebhook
} from './support'

/**
 * The delivery rules, written once and run against each runtime: the
 * embedded one (memory bus and store, delivery.test.ts) and the distributed
 * one (Kafka-protocol mock cluster and Redis, kafka.test.ts). A harness
 * starts the webhooks service on its bus and store; each case starts its own.
 */

export interface Harness {
  /** Starts the webhooks service (FAST_ENV plus `env`) on the harness's bus and a fresh store. */
  start(t: Test, env?: Record<string, string>): Promise<Runtime>
}

type Case = (t: Test, h: Harness) => Promise<void>

const ADMIN = { authorization: `Bearer ${FAST_ENV.OPERATOR_TOKEN}` }

async function adminDeliveries(baseUrl: string, webhookId: string, status?: string): Promise<Array<Record<string, unknown>>> {
  const res = await plainRequest('GET', `${baseUrl}/admin/webhooks/${webhookId}/deliveries`, { headers: ADMIN, query: status ? { status } : {} })
  if (res.status !== 200) throw new Error(`admin deliveries: ${res.status} ${res.text}`)
  return res.json<{ data: Array<Record<string, unknown>> }>().data
}

async function outcomeCount(rt: Runtime, outcome: string): Promise<number> {
  return metricValue(await metricsText(rt), 'webhook_deliveries_total', { outcome })
}

async function isValid(rt: Runtime, bearer: string, webhookId: string): Promise<boolean | undefined> {
  const listed = (await bearerRequest('GET', `${rt.baseUrl}/2/webhooks`, bearer)).json<{ data: Array<{ id: string; valid: boolean }> }>().data
  return listed.find((w) => w.id === webhookId)?.valid
}

/** Dead letters of one webhook (a shared bus may carry those of earlier cases). */
function deadLettersOf(all: Array<Record<string, unknown>>, webhookId: string): Array<Record<string, unknown>> {
  return all.filter((d) => d.webhook_id === webhookId)
}

const USER_AGENT = /^activity-gateway-webhooks\/\d+\.\d+\.\d+/

export const deliveryCases: Record<string, Case> = {
  'signed deliveries reach the webhook byte-for-byte': async (t, h) => {
    const rt = await h.start(t)
    const { id, receiver, webhookId } = await registerWebhook(t, rt)
    const messages = Array.from({ length: 5 }, (_, i) => deliveryMessage({ appId: id.app.id, webhookId, text: `event ${i} ünïcødé "quoted"` }))
    const streamOnly = deliveryMessage({ appId: id.app.id })
    const foreign = deliveryMessage({ appId: 'another-app', webhookId })
    await publishDeliveries(rt, [...messages, streamOnly, foreign])

    await eventually(() => receiver.accepted.length === 5, 10_000)
    t.same(receiver.posts.map((p) => p.body).sort(), messages.map((m) => JSON.stringify(m.envelope)).sort(), 'each body is the envelope exactly')
    t.ok(receiver.posts.every((p) => p.signatureValid), 'the receiver verified every signature')
    t.ok(receiver.posts.every((p) => /^sha256=[A-Za-z0-9+/]+=*$/.test(p.signature ?? '')))
    t.ok(receiver.posts.every((p) => USER_AGENT.test(p.userAgent ?? '')), `deliveries carry the service's User-Agent (${receiver.posts[0]?.userAgent})`)
    t.ok(receiver.crcUserAgents.length > 0 && receiver.crcUserAgents.every((ua) => USER_AGENT.test(ua ?? '')), 'so do CRC checks')

    const log = await adminDeliveries(rt.baseUrl, webhookId)
    t.equal(log.length, 5, 'the stream-only and the foreign delivery are not in the log')
    t.ok(log.every((r) => r.status === 'delivered' && r.attempts === 1 && r.last_status === 200))
    const records = await rt.ctx.store.mgetJson<DeliveryRecord>(messages.map((m) => WebhookKeys.delivery(String(m.delivery_id))))
    t.ok(records.every((r) => r?.event_type !== undefined && r.event_type === eventTypeOf(r.body)), 'each record keeps its type as the console would read it from the body')
    const text = await metricsText(rt)
    t.equal(metricValue(text, 'webhook_deliveries_total', { outcome: 'delivered' }), 5)
    t.equal(metricValue(text, 'webhook_deliveries_total', { outcome: 'dropped' }), 1)
    t.equal(metricValue(text, 'webhook_delivery_duration_seconds_count', { result: 'success' }), 5)
    t.equal(metricValue(text, 'webhook_retry_queue_depth'), 0)
  },

  'failures are retried on the schedule until one succeeds': async (t, h) => {
    const rt = await h.start(t)
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
    t.equal(await outcomeCount(rt, 'retry_scheduled'), 2)
  },

  'exhausted deliveries are dead-lettered, logged as failed, and can be re-sent': async (t, h) => {
    const rt = await h.start(t)
    const allDeadLetters = await collectDeadLetters(t, rt)
    const { id, receiver, webhookId } = await registerWebhook(t, rt)
    const deadLetters = () => deadLettersOf(allDeadLetters, webhookId)
    receiver.onPost = () => ({ status: 500 })
    const message = deliveryMessage({ appId: id.app.id, webhookId })
    await publishDeliveries(rt, [message])

    await eventually(() => deadLetters().length === 1, 10_000)
    t.equal(receiver.posts.length, 3, 'one attempt per step of the schedule')
    t.match(deadLetters()[0], {
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
    t.equal(await outcomeCount(rt, 'dead_lettered'), 1)

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
  },

  'a timeout is a failed attempt': async (t, h) => {
    const rt = await h.start(t)
    const { id, receiver, webhookId } = await registerWebhook(t, rt)
    receiver.onPost = (_p, n) => (n === 1 ? { status: 200, delayMs: 5000 } : { status: 200 })
    await publishDeliveries(rt, [deliveryMessage({ appId: id.app.id, webhookId })])
    await eventually(async () => (await adminDeliveries(rt.baseUrl, webhookId, 'delivered')).length === 1, 10_000)
    t.equal(receiver.posts.length, 2)
    const [delivered] = await adminDeliveries(rt.baseUrl, webhookId)
    t.match(delivered, { status: 'delivered', attempts: 2 })
    t.ok((receiver.posts[1]?.at ?? 0) - (receiver.posts[0]?.at ?? 0) >= 1400, 'the retry came after the 1.5 s timeout')
  },

  // Dead letters are read from the log here (they are published before the record turns failed): a
  // dead-letter consumer costs a Kafka group join per case. The exhausted case reads the topic itself.
  '410 Gone disables the webhook until a CRC passes': async (t, h) => {
    const rt = await h.start(t)
    const { id, receiver, webhookId } = await registerWebhook(t, rt)
    const failed = () => adminDeliveries(rt.baseUrl, webhookId, 'failed')
    receiver.onPost = () => ({ status: 410 })
    const first = deliveryMessage({ appId: id.app.id, webhookId })
    await publishDeliveries(rt, [first])
    await eventually(async () => (await failed()).length === 1, 10_000)
    t.equal(receiver.posts.length, 1, '410 is not retried')
    t.match((await failed())[0], { delivery_id: first.delivery_id, failure_reason: 'gone', last_status: 410, attempts: 1 })
    t.equal(await isValid(rt, id.bearer, webhookId), false, 'the webhook is invalid')

    receiver.onPost = () => ({ status: 200 })
    const second = deliveryMessage({ appId: id.app.id, webhookId })
    await publishDeliveries(rt, [second])
    await eventually(async () => (await failed()).length === 2, 10_000)
    t.equal(receiver.posts.length, 1, 'a disabled webhook is sent nothing')
    t.match((await failed()).find((r) => r.delivery_id === second.delivery_id), { failure_reason: 'gone', attempts: 0 })
    t.equal(await outcomeCount(rt, 'dead_lettered'), 2, 'both went to the dead letter topic')

    t.equal((await bearerRequest('PUT', `${rt.baseUrl}/2/webhooks/${webhookId}`, id.bearer)).status, 200)
    await publishDeliveries(rt, [deliveryMessage({ appId: id.app.id, webhookId })])
    await eventually(() => receiver.accepted.length === 1, 10_000)
    t.pass('after a passing CRC the webhook receives deliveries again')
    t.equal(await outcomeCount(rt, 'gone'), 1)
  },

  'Retry-After on 429 and 503 is honoured': async (t, h) => {
    const rt = await h.start(t)
    const { id, receiver, webhookId } = await registerWebhook(t, rt)
    receiver.onPost = (_p, n) =>
      n === 1 ? { status: 429, headers: { 'retry-after': '1' } } : n === 2 ? { status: 503, headers: { 'retry-after': new Date(Date.now() + 2000).toUTCString() } } : { status: 200 }
    await publishDeliveries(rt, [deliveryMessage({ appId: id.app.id, webhookId })])
    await eventually(() => receiver.accepted.length === 1, 10_000)
    const [a, b, c] = receiver.posts.map((p) => p.at) as [number, number, number]
    t.ok(b - a >= 950, `the retry after a 429 waited ${b - a} ms (Retry-After: 1; the schedule said 200 ms)`)
    // An HTTP date has one-second resolution: 2 s ahead is at least 1 s ahead, well above the schedule's 400 ms.
    t.ok(c - b >= 900, `the retry after a 503 waited ${c - b} ms (Retry-After as an HTTP date)`)
  },

  'an invalid webhook receives nothing; a passing PUT brings its deliveries forward': async (t, h) => {
    // The retry after a skipped turn is an hour away: only the pull-forward can deliver within the test.
    const rt = await h.start(t, { WEBHOOK_RETRY_SCHEDULE: '0,1h,1h' })
    const { id, receiver, webhookId } = await registerWebhook(t, rt)
    receiver.crcMode = 'wrong'
    t.equal((await bearerRequest('PUT', `${rt.baseUrl}/2/webhooks/${webhookId}`, id.bearer)).status, 400)
    await publishDeliveries(rt, [deliveryMessage({ appId: id.app.id, webhookId })])
    await eventually(async () => (await outcomeCount(rt, 'skipped_invalid')) === 1, 10_000)
    t.equal(receiver.posts.length, 0, 'nothing was POSTed to the invalid webhook')
    t.equal(metricValue(await metricsText(rt), 'webhook_retry_queue_depth'), 1, 'the delivery waits in the retry queue')
    const [waiting] = await adminDeliveries(rt.baseUrl, webhookId)
    t.ok(Number(waiting?.next_attempt_at) > Date.now() + 30 * 60_000, 'its next turn is about an hour away')

    receiver.crcMode = 'correct'
    t.equal((await bearerRequest('PUT', `${rt.baseUrl}/2/webhooks/${webhookId}`, id.bearer)).status, 200)
    await eventually(() => receiver.accepted.length === 1, 10_000)
    t.ok(receiver.accepted[0]?.signatureValid)
    await eventually(async () => (await adminDeliveries(rt.baseUrl, webhookId, 'delivered')).length === 1, 5000)
    t.match((await adminDeliveries(rt.baseUrl, webhookId))[0], { status: 'delivered', attempts: 2 }, 'one skipped turn, one delivery')
  },

  'a passing periodic CRC brings an invalid webhook\'s deliveries forward': async (t, h) => {
    const rt = await h.start(t, { WEBHOOK_RETRY_SCHEDULE: '0,1h,1h', WEBHOOK_CRC_INTERVAL: '200ms' })
    const { id, receiver, webhookId } = await registerWebhook(t, rt)
    receiver.crcMode = 'wrong'
    await eventually(async () => (await isValid(rt, id.bearer, webhookId)) === false, 10_000)
    await publishDeliveries(rt, [deliveryMessage({ appId: id.app.id, webhookId })])
    await eventually(async () => (await outcomeCount(rt, 'skipped_invalid')) === 1, 10_000)
    t.equal(receiver.posts.length, 0)
    receiver.crcMode = 'correct'
    await eventually(() => receiver.accepted.length === 1, 10_000)
    t.pass('delivered once the periodic check passed, not an hour later')
  },

  'at most WEBHOOK_CONCURRENCY deliveries are in flight per webhook': async (t, h) => {
    const rt = await h.start(t, { WEBHOOK_CONCURRENCY: '2' })
    const { id, receiver, webhookId } = await registerWebhook(t, rt)
    receiver.onPost = () => ({ status: 200, delayMs: 150 })
    await publishDeliveries(rt, Array.from({ length: 8 }, () => deliveryMessage({ appId: id.app.id, webhookId })))
    await eventually(() => receiver.accepted.length === 8 && receiver.inFlight === 0, 10_000)
    t.equal(receiver.maxInFlight, 2, 'two at a time, never more')
    const log = await adminDeliveries(rt.baseUrl, webhookId)
    t.ok(log.length === 8 && log.every((r) => r.status === 'delivered' && r.attempts === 1), 'each delivered once')
  },

  'the cap belongs to each webhook: two on one origin both reach it, and a CRC does not queue behind them': async (t, h) => {
    // A long timeout: the held deliveries must not time out while the test looks at them.
    const rt = await h.start(t, { WEBHOOK_CONCURRENCY: '2', WEBHOOK_LIMIT_PER_APP: '2', WEBHOOK_TIMEOUT: '10s' })
    const { id, receiver, webhookIds } = await registerTwoWebhooks(t, rt, '/first', '/second')
    const held = gate()
    receiver.onPost = () => ({ status: 200, release: held.promise })
    await publishDeliveries(rt, webhookIds.flatMap((webhookId) => Array.from({ length: 4 }, () => deliveryMessage({ appId: id.app.id, webhookId }))))
    await eventually(() => receiver.inFlightAt('/first') === 2 && receiver.inFlightAt('/second') === 2, 10_000)
    t.pass('each webhook has its own two deliveries in flight on the shared origin')

    const crcBefore = receiver.crcCount
    const put = await bearerRequest('PUT', `${rt.baseUrl}/2/webhooks/${webhookIds[0]}`, id.bearer)
    t.equal(put.status, 200, `a CRC while both lanes are full passes: ${put.text}`)
    t.equal(receiver.crcCount, crcBefore + 1)
    t.equal(receiver.inFlight, 4, 'the deliveries were still held when the CRC was answered')

    held.open()
    await eventually(() => receiver.accepted.length === 8 && receiver.inFlight === 0, 10_000)
    t.equal(receiver.maxInFlightByPath.get('/first'), 2, 'never more than the cap per webhook')
    t.equal(receiver.maxInFlightByPath.get('/second'), 2)
  },

  'a slow receiver never holds back another webhook\'s deliveries on the same partition': async (t, h) => {
    const rt = await h.start(t, { WEBHOOK_CONCURRENCY: '2', WEBHOOK_LIMIT_PER_APP: '2', WEBHOOK_TIMEOUT: '10s' })
    const { id, receiver, webhookIds } = await registerTwoWebhooks(t, rt, '/slow', '/fast')
    const [slow, fast] = webhookIds
    const held = gate()
    receiver.onPost = (p) => (p.path === '/slow' ? { status: 200, release: held.promise } : { status: 200 })
    // One app and user: one key, one partition. The slow webhook's deliveries come first in it.
    const messages = [
      ...Array.from({ length: 10 }, (_, i) => deliveryMessage({ appId: id.app.id, webhookId: slow, text: `slow ${i}` })),
      ...Array.from({ length: 10 }, (_, i) => deliveryMessage({ appId: id.app.id, webhookId: fast, text: `fast ${i}` }))
    ]
    await publishDeliveries(rt, messages)
    await eventually(() => receiver.posts.filter((p) => p.path === '/fast').length === 10, 10_000)
    t.equal(receiver.inFlightAt('/slow'), 2, 'the slow webhook still holds its two slots')
    t.ok(receiver.posts.filter((p) => p.path === '/slow').length <= 2, 'and has not been sent more than its cap')
    held.open()
    await eventually(() => receiver.accepted.length === 20 && receiver.inFlight === 0, 15_000)
    t.pass('the slow webhook gets all of its deliveries once it answers')
  },

  'a failing receiver never holds back another webhook\'s deliveries on the same partition': async (t, h) => {
    // The retry after a failure is an hour away: were it awaited in line, nothing behind it would arrive.
    const rt = await h.start(t, { WEBHOOK_LIMIT_PER_APP: '2', WEBHOOK_RETRY_SCHEDULE: '0,1h,1h' })
    const { id, receiver, webhookIds } = await registerTwoWebhooks(t, rt, '/failing', '/healthy')
    const [failing, healthy] = webhookIds
    // Answered at once, with an error: failing, not slow.
    receiver.onPost = (p) => (p.path === '/failing' ? { status: 500 } : { status: 200 })
    // One app, one user: one key, one partition. The failing webhook's deliveries come first in it.
    const failingMessages = Array.from({ length: 10 }, (_, i) => deliveryMessage({ appId: id.app.id, webhookId: failing, text: `failing ${i}` }))
    const healthyMessages = Array.from({ length: 10 }, (_, i) => deliveryMessage({ appId: id.app.id, webhookId: healthy, text: `healthy ${i}` }))
    await publishDeliveries(rt, [...failingMessages, ...healthyMessages])
    await eventually(() => receiver.accepted.filter((p) => p.path === '/healthy').length === 10, 10_000)
    t.same(receiver.accepted.filter((p) => p.path === '/healthy').map((p) => p.body).sort(), healthyMessages.map((m) => JSON.stringify(m.envelope)).sort(), 'every delivery of the healthy webhook arrived, once')
    const records = async (ms: Array<Record<string, unknown>>): Promise<Array<DeliveryRecord | undefined>> => rt.ctx.store.mgetJson<DeliveryRecord>(ms.map((m) => WebhookKeys.delivery(String(m.delivery_id))))
    await eventually(async () => (await records(failingMessages)).every((r) => r?.attempts === 1), 10_000)
    t.equal(receiver.posts.filter((p) => p.path === '/failing').length, 10, 'the failing webhook got one attempt per delivery')
    const failed = await records(failingMessages)
    t.ok(failed.every((r) => r?.status === 'pending' && r.last_status === 500 && r.next_attempt_at > Date.now() + 30 * 60_000), 'its retries are scheduled an hour ahead in the store, not awaited in the consumer')
    t.equal(await outcomeCount(rt, 'retry_scheduled'), 10)
  },

  'a slow webhook\'s backlog in the retry schedule never holds back another webhook\'s retry': async (t, h) => {
    // One connection: the slow lane holds 32 attempts and the rest of its 1,200 wait in the schedule,
    // due now, ahead of the other webhook's retry (due 200 ms later): more than a scheduler pass reads.
    const rt = await h.start(t, { WEBHOOK_CONCURRENCY: '1', WEBHOOK_LIMIT_PER_APP: '2', WEBHOOK_RETRY_SCHEDULE: '0,200ms,200ms', WEBHOOK_TIMEOUT: '30s' })
    const { id, receiver, webhookIds } = await registerTwoWebhooks(t, rt, '/slow', '/other')
    const [slow, other] = webhookIds
    const held = gate()
    let otherPosts = 0
    // The other webhook fails its first attempt, so its delivery goes through the schedule too.
    receiver.onPost = (p) => (p.path === '/slow' ? { status: 200, release: held.promise } : { status: ++otherPosts === 1 ? 500 : 200 })
    t.teardown(() => held.open())
    await publishDeliveries(rt, Array.from({ length: 1200 }, (_, i) => deliveryMessage({ appId: id.app.id, webhookId: slow, text: `slow ${i}` })))
    await eventually(() => receiver.inFlightAt('/slow') === 1, 10_000)
    const due = async (): Promise<number> => (await allScheduled(rt.ctx.store)).filter((e) => e.dueAt <= Date.now()).length
    await eventually(async () => (await due()) >= 1100, 20_000)
    await publishDeliveries(rt, [deliveryMessage({ appId: id.app.id, webhookId: other, text: 'other' })])
    const retried = await eventually(() => receiver.accepted.some((p) => p.path === '/other'), 10_000).then(
      () => true,
      () => false
    )
    t.ok(retried, `the other webhook's retry was delivered while ${receiver.inFlightAt('/slow')} slow POST(s) held the slow lane (${otherPosts} POST(s) to the other)`)
    t.equal(receiver.posts.filter((p) => p.path === '/slow').length, 1, 'the slow webhook was sent no more than its one connection')
    held.open()
  },

  'a burst larger than a lane holds is delivered completely, each once': async (t, h) => {
    // One connection: the lane holds 32 attempts; the rest wait in the store's schedule until it drains.
    const rt = await h.start(t, { WEBHOOK_CONCURRENCY: '1' })
    const { id, receiver, webhookId } = await registerWebhook(t, rt)
    const messages = Array.from({ length: 120 }, (_, i) => deliveryMessage({ appId: id.app.id, webhookId, text: `burst ${i}` }))
    await publishDeliveries(rt, messages)
    await eventually(() => receiver.accepted.length === 120, 20_000)
    // The receiver counts a POST when it answers; the record is written just after.
    const settled = async (): Promise<boolean> => (await rt.ctx.store.mgetJson<DeliveryRecord>(messages.map((m) => WebhookKeys.delivery(String(m.delivery_id))))).every((r) => r?.status === 'delivered')
    await eventually(settled, 10_000)
    const log = await rt.ctx.store.mgetJson<DeliveryRecord>(messages.map((m) => WebhookKeys.delivery(String(m.delivery_id))))
    t.ok(log.every((r) => r?.status === 'delivered' && r.attempts === 1), 'every delivery made exactly one attempt')
    t.equal(new Set(receiver.posts.map((p) => p.body)).size, 120)
    t.equal(receiver.maxInFlight, 1)
    t.equal(metricValue(await metricsText(rt), 'webhook_retry_queue_depth'), 0)
  },

  'deliveries for a deleted webhook are dropped cleanly: no record, retry or dead letter': async (t, h) => {
    const rt = await h.start(t, { WEBHOOK_RETRY_SCHEDULE: '0,300ms,300ms' })
    const { id, receiver, webhookId } = await registerWebhook(t, rt)
    receiver.onPost = () => ({ status: 500 })
    const pending = deliveryMessage({ appId: id.app.id, webhookId })
    await publishDeliveries(rt, [pending])
    await eventually(() => receiver.posts.length === 1, 10_000)
    t.equal((await bearerRequest('DELETE', `${rt.baseUrl}/2/webhooks/${webhookId}`, id.bearer)).status, 200)

    // What an activity subscription still naming the webhook produces after the delete.
    const late = deliveryMessage({ appId: id.app.id, webhookId })
    await publishDeliveries(rt, [late])
    await eventually(async () => (await outcomeCount(rt, 'webhook_deleted')) === 2, 10_000)
    t.equal(receiver.posts.length, 1, 'nothing was sent after the delete')
    t.equal(await rt.ctx.store.get(WebhookKeys.delivery(String(late.delivery_id))), undefined, 'the late delivery left no record')
    t.match(await rt.ctx.store.getJson(WebhookKeys.delivery(String(pending.delivery_id))), { status: 'cancelled', last_error: 'the webhook was deleted' })
    t.equal(await scheduleSize(rt.ctx.store), 0, 'no retry is left')
    t.equal(await outcomeCount(rt, 'dead_lettered'), 0, 'nothing went to the dead letter topic')
  }
}

/** Runs `names` (default: every case) as subtests of `t`. */
export async function runDeliveryCases(t: Test, h: Harness, names: string[] = Object.keys(deliveryCases)): Promise<void> {
  for (const name of names) {
    const run = deliveryCases[name]
    if (!run) throw new Error(`no delivery case named ${name}`)
    await t.test(name, (tt) => run(tt, h))
  }
}
