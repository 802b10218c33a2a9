import { createHmac } from 'node:crypto'
import http from 'node:http'
import t, { type Test } from 'tap'
import { ETwitterStreamEvent, TwitterApi } from 'twitter-api-v2'
import { EVENT_TYPES, type EventType } from '../../services/activity/event-types'
import { activityService } from '../../services/activity/service'
import type { Runtime } from '../../services/common/runtime'
import { gatewayService } from '../../services/gateway/service'
import { streamService } from '../../services/stream/service'
import { bearerRequest } from '../support/http'
import { createIdentity, startTestRuntime, type TestIdentity } from '../support/runtime'
import { eventually } from '../support/util'
import {
  ingest,
  nextUserId,
  OPENAPI_PAYLOADS,
  openApiErrors,
  openHttpStream,
  openWsStream,
  OPERATOR_TOKEN,
  sampleEvent,
  type StreamClient,
  type StreamEnvelope,
  subscribe
} from '../support/fixtures/activity'

/**
 * End to end in the embedded runtime (memory bus, memory store): ingest ->
 * matcher -> activity.deliveries -> stream, read over chunked HTTP, over
 * WebSocket, and by a real client library.
 */

const services = [gatewayService, activityService, streamService]
const WAIT = 15_000

async function start(t: Test, env: Record<string, string> = {}): Promise<{ rt: Runtime; id: TestIdentity }> {
  const rt = await startTestRuntime(t, { services, env: { OPERATOR_TOKEN, ...env } })
  const id = await createIdentity(rt.ctx.store)
  return { rt, id }
}

function tags(messages: StreamEnvelope[]): string[] {
  return messages.map((m) => m.data?.tag ?? '?')
}

async function ingestOk(t: Test, rt: Runtime, events: unknown[]): Promise<string[]> {
  const res = await ingest(rt.baseUrl, events)
  t.equal(res.status, 200, res.text)
  return res.json<{ data: { event_uuids: string[] } }>().data.event_uuids
}

t.test('every event kind travels ingest -> match -> stream, over HTTP and WebSocket alike', async (t) => {
  const { rt, id } = await start(t)
  // The filtered user subscribes in user context (dm.* activity is private).
  const subject = await createIdentity(rt.ctx.store, { app: id.app })
  const userId = subject.user.id
  for (const type of EVENT_TYPES) await subscribe(rt.baseUrl, subject, { event_type: type, filter: { user_id: userId }, tag: type })
  const viaHttp = await openHttpStream(rt.baseUrl, id.bearer)
  t.teardown(() => viaHttp.close())
  t.equal(viaHttp.status, 200)
  t.match(viaHttp.headers['content-type'], /^application\/json/)
  t.equal(viaHttp.headers['transfer-encoding'], 'chunked')
  const viaWs = await openWsStream(rt.baseUrl, id.bearer)
  t.teardown(() => viaWs.close())

  const events = EVENT_TYPES.map((type) => sampleEvent(type, userId))
  const uuids = await ingestOk(t, rt, events)
  // Barrier: one more event of the same user; a duplicate of an earlier line would come before it.
  const [barrier] = await ingestOk(t, rt, [sampleEvent('post.create', userId, { text: 'barrier' })])
  await viaHttp.waitFor((m) => m.some((e) => e.data?.event_uuid === barrier), WAIT)
  await viaWs.waitFor((m) => m.some((e) => e.data?.event_uuid === barrier), WAIT)
  for (const client of [viaHttp, viaWs]) t.equal(client.messages.pop()?.data?.event_uuid, barrier, 'the barrier comes last')
  t.equal(viaHttp.messages.length, EVENT_TYPES.length, 'exactly one line per event')
  t.same(tags(viaHttp.messages), [...EVENT_TYPES], 'in ingest order')

  EVENT_TYPES.forEach((type: EventType, i) => {
    const line = viaHttp.messages[i] as StreamEnvelope
    const sent = events[i] as { payload: unknown; includes: unknown }
    t.same(line, { data: { event_uuid: uuids[i], filter: { user_id: userId }, event_type: type, tag: type, payload: sent.payload, includes: sent.includes } }, type)
    t.equal(openApiErrors('ActivityStreamingEnvelope', line), undefined, `${type}: envelope matches ActivityStreamingResponse`)
    const payloadSchema = OPENAPI_PAYLOADS[type]
    if (payloadSchema) t.equal(openApiErrors(payloadSchema, line.data?.payload), undefined, `${type}: payload matches ${payloadSchema}`)
  })
  // Byte for byte: the HTTP lines are exactly the WebSocket messages.
  const httpLines = viaHttp.raw().split('\r\n').filter((l) => l !== '').slice(0, -1)
  t.same(httpLines, viaWs.messages.map((m) => JSON.stringify(m)))
  t.same(viaWs.messages, viaHttp.messages)
})

t.test('keyword and direction filters, webhook subscriptions also reach an open stream', async (t) => {
  const { rt, id } = await start(t)
  const aliceId = await createIdentity(rt.ctx.store, { app: id.app })
  const alice = aliceId.user.id
  const bob = nextUserId()
  await rt.ctx.store.hset('webhooks:config:3333333333333333333', { id: '3333333333333333333', app_id: id.app.id, url: 'https://example.com/hook' })
  await subscribe(rt.baseUrl, id.bearer, { event_type: 'post.create', filter: { user_id: alice, keyword: 'launch day' }, tag: 'kw' })
  await subscribe(rt.baseUrl, aliceId, { event_type: 'dm.read', filter: { user_id: alice, direction: 'sent' }, tag: 'read-sent' })
  await subscribe(rt.baseUrl, aliceId, { event_type: 'dm.read', filter: { user_id: alice, direction: 'inbound' }, tag: 'read-received' })
  await subscribe(rt.baseUrl, aliceId, { event_type: 'dm.received', filter: { user_id: alice, keyword: 'lunch', direction: 'received' }, tag: 'dm-kw' })
  await subscribe(rt.baseUrl, id.bearer, { event_type: 'profile.update.bio', filter: { user_id: bob }, tag: 'hooked', webhook_id: '3333333333333333333' })
  const stream = await openHttpStream(rt.baseUrl, id.bearer)
  t.teardown(() => stream.close())

  await ingestOk(t, rt, [
    sampleEvent('post.create', alice, { text: 'Launching tomorrow' }),
    sampleEvent('post.create', alice, { text: 'It is LAUNCH\tday, folks!' }),
    sampleEvent('post.create', bob, { text: 'launch day for bob' }),
    sampleEvent('dm.read', alice, { sent: true, other: bob }),
    sampleEvent('dm.read', alice, { sent: false, other: bob }),
    sampleEvent('dm.received', alice, { sent: false, text: 'Lunch at noon?' }),
    sampleEvent('dm.received', alice, { sent: false, text: 'dinner?' }),
    sampleEvent('profile.update.bio', bob, { text: 'new bio' })
  ])
  // Barriers, one per user (each user's events are in order): anything the filters let through would arrive before them.
  await ingestOk(t, rt, [sampleEvent('post.create', alice, { text: 'barrier: launch day' }), sampleEvent('profile.update.bio', bob, { text: 'barrier' })])
  await stream.waitFor((m) => m.filter((e) => /barrier/.test(JSON.stringify(e.data?.payload ?? {}))).length === 2, WAIT)
  const isBarrier = (m: StreamEnvelope): boolean => /barrier/.test(JSON.stringify(m.data?.payload ?? {}))
  stream.messages.splice(0, stream.messages.length, ...stream.messages.filter((m) => !isBarrier(m)))
  // Alice's events share a key (one partition, in order); bob's may interleave anywhere.
  t.same(tags(stream.messages).filter((tag) => tag !== 'hooked'), ['kw', 'read-sent', 'read-received', 'dm-kw'])
  t.equal(tags(stream.messages).filter((tag) => tag === 'hooked').length, 1, 'the webhook subscription reached the stream too')
  const byTag = new Map(stream.messages.map((m) => [m.data?.tag, m.data]))
  t.match(byTag.get('kw')?.payload, { text: 'It is LAUNCH\tday, folks!' })
  t.same(byTag.get('read-sent')?.filter, { user_id: alice, direction: 'sent' })
  t.same(byTag.get('read-received')?.filter, { user_id: alice, direction: 'received' }, 'inbound is delivered as the contract spells it')
  t.same(byTag.get('dm-kw')?.filter, { user_id: alice, keyword: 'lunch', direction: 'received' })
  t.match(byTag.get('dm-kw')?.payload, { direct_message_events: [{ message_create: { message_data: { text: 'Lunch at noon?' } } }] })
})

t.test('PascalCase subscriptions and events meet under the dotted name', async (t) => {
  const { rt, id } = await start(t)
  const userId = nextUserId()
  await subscribe(rt.baseUrl, id.bearer, { event_type: 'ProfileGeoUpdate', filter: { user_id: userId }, tag: 'geo' })
  await subscribe(rt.baseUrl, id.bearer, { event_type: 'profile.update.url', filter: { user_id: userId }, tag: 'url' })
  const stream = await openWsStream(rt.baseUrl, id.bearer)
  t.teardown(() => stream.close())
  await ingestOk(t, rt, [
    { ...sampleEvent('profile.update.geo', userId), event_type: 'profile.update.geo' },
    { ...sampleEvent('profile.update.geo', userId), event_type: 'ProfileGeoUpdate' },
    { ...sampleEvent('profile.update.url', userId), event_type: 'ProfileUrlUpdate' }
  ])
  await stream.waitFor((m) => m.length >= 3, WAIT)
  t.same(stream.messages.map((m) => [m.data?.event_type, m.data?.tag]), [
    ['profile.update.geo', 'geo'],
    ['profile.update.geo', 'geo'],
    ['profile.update.url', 'url']
  ])
})

t.test('updates and deletes take effect on live matching', async (t) => {
  const { rt, id } = await start(t)
  const userId = nextUserId()
  const url = `${rt.baseUrl}/2/activity/subscriptions`
  const subId = await subscribe(rt.baseUrl, id.bearer, { event_type: 'spaces.start', filter: { user_id: userId }, tag: 'before' })
  await subscribe(rt.baseUrl, id.bearer, { event_type: 'spaces.end', filter: { user_id: userId }, tag: 'sentinel' })
  const stream = await openHttpStream(rt.baseUrl, id.bearer)
  t.teardown(() => stream.close())

  await ingestOk(t, rt, [sampleEvent('spaces.start', userId)])
  await stream.waitFor((m) => m.length >= 1, WAIT)
  t.equal((await bearerRequest('PUT', `${url}/${subId}`, id.bearer, { json: { tag: 'after' } })).status, 200)
  await ingestOk(t, rt, [sampleEvent('spaces.start', userId)])
  await stream.waitFor((m) => m.length >= 2, WAIT)
  t.equal((await bearerRequest('DELETE', `${url}/${subId}`, id.bearer)).status, 200)
  // The sentinel follows the event of the deleted subscription in the user's partition: its arrival is the barrier.
  await ingestOk(t, rt, [sampleEvent('spaces.start', userId), sampleEvent('spaces.end', userId)])
  await stream.waitFor((m) => m.length >= 3, WAIT)
  t.same(tags(stream.messages), ['before', 'after', 'sentinel'], 'the deleted subscription no longer matches')
})

t.test('twitter-api-v2 reads the stream with its own parser', async (t) => {
  const { rt, id } = await start(t, { STREAM_KEEPALIVE: '150ms' })
  const userId = nextUserId()
  await subscribe(rt.baseUrl, id.bearer, { event_type: 'post.create', filter: { user_id: userId }, tag: 'lib' })
  const agent = new http.Agent()
  t.teardown(() => agent.destroy())
  const client = new TwitterApi(id.bearer, { httpAgent: agent })
  const stream = await client.v2.getStream('activity/stream', {}, { prefix: `${rt.baseUrl}/2/` })
  t.teardown(() => stream.close())
  const data: unknown[] = []
  let keepAlives = 0
  let parseErrors = 0
  stream.on(ETwitterStreamEvent.Data, (d: unknown) => data.push(d))
  stream.on(ETwitterStreamEvent.DataKeepAlive, () => keepAlives++)
  stream.on(ETwitterStreamEvent.TweetParseError, () => parseErrors++)
  const [uuid] = await ingestOk(t, rt, [sampleEvent('post.create', userId, { text: 'from the library' }), sampleEvent('post.create', userId)])
  await eventually(() => data.length >= 2 && keepAlives >= 1, WAIT)
  t.match(data[0], { data: { event_uuid: uuid, event_type: 'post.create', tag: 'lib', payload: { text: 'from the library' } } })
  t.equal(parseErrors, 0, 'every line parses')
  t.ok(keepAlives >= 1, 'keep-alives are recognised as such')
})

t.test('backfill_minutes replays recent deliveries of the app, without gaps or repeats', async (t) => {
  const { rt, id } = await start(t, { STREAM_CONNECTIONS_PER_APP: '3' })
  const other = await createIdentity(rt.ctx.store)
  const userId = nextUserId()
  await subscribe(rt.baseUrl, id.bearer, { event_type: 'post.delete', filter: { user_id: userId }, tag: 'mine' })
  await subscribe(rt.baseUrl, other.bearer, { event_type: 'post.delete', filter: { user_id: userId }, tag: 'theirs' })
  // Nobody is connected yet; the node keeps the deliveries for backfill.
  await ingestOk(t, rt, [sampleEvent('post.delete', userId), sampleEvent('post.delete', userId)])
  await eventually(async () => {
    const res = await fetch(`${rt.baseUrl}/metrics`)
    return /stream_deliveries_received_total\{[^}]*\} 4/.test(await res.text())
  }, WAIT)

  const none = await openHttpStream(rt.baseUrl, id.bearer, { backfill_minutes: '0' })
  t.teardown(() => none.close())
  const back = await openHttpStream(rt.baseUrl, id.bearer, { backfill_minutes: '5' })
  t.teardown(() => back.close())
  await back.waitFor((m) => m.length >= 2, WAIT)
  // Barrier: the live event; a repeat of a buffered line would come before it.
  const [live] = await ingestOk(t, rt, [sampleEvent('post.delete', userId)])
  await back.waitFor((m) => m.some((e) => e.data?.event_uuid === live), WAIT)
  await none.waitFor((m) => m.some((e) => e.data?.event_uuid === live), WAIT)
  t.same(tags(back.messages), ['mine', 'mine', 'mine'], 'two from the buffer, then the live one; none of the other app')
  t.equal(new Set(back.messages.map((m) => m.data?.event_uuid)).size, 3)
  t.equal(none.messages.length, 1, 'backfill_minutes=0 starts live')

  const ws = await openWsStream(rt.baseUrl, id.bearer, { backfill_minutes: '1' })
  t.teardown(() => ws.close())
  await ws.waitFor((m) => m.length >= 3, WAIT)
  t.same(ws.messages, back.messages, 'the WebSocket backfills the same way')

  const badQueries: Array<Record<string, string>> = [{ backfill_minutes: '6' }, { backfill_minutes: '-1' }, { backfill_minutes: 'x' }, { start_time: '2021-02-01T18:40:40.000Z' }]
  for (const query of badQueries) {
    const res = await bearerRequest('GET', `${rt.baseUrl}/2/activity/stream`, id.bearer, { query })
    t.equal(res.status, 400, JSON.stringify(query))
    t.match(res.json(), { type: 'https://api.twitter.com/2/problems/invalid-request' })
  }
  const wsBad = await openWsStream(rt.baseUrl, id.bearer, { backfill_minutes: '9' }).catch((e: { status: number; body: string }) => e)
  t.match(wsBad, { status: 400, body: /backfill_minutes/ })
})

t.test('the stream takes only an app-only bearer token', async (t) => {
  const { rt, id } = await start(t)
  const res = await fetch(`${rt.baseUrl}/2/activity/stream`)
  t.equal(res.status, 401)
  const bad = await bearerRequest('GET', `${rt.baseUrl}/2/activity/stream`, 'nope')
  t.equal(bad.status, 401)
  t.same(bad.json(), { errors: [{ code: 89, message: 'Invalid or expired token.' }] })
  const wsBad = await openWsStream(rt.baseUrl, 'nope').catch((e: { status: number; body: string }) => e)
  t.match(wsBad, { status: 401 })
  t.same(JSON.parse((wsBad as { body: string }).body), { errors: [{ code: 89, message: 'Invalid or expired token.' }] })
  const wsNone = await new Promise<number>((resolve) => {
    const req = http.get(`${rt.baseUrl}/2/activity/stream`, { headers: { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==' } })
    req.on('response', (r) => resolve(r.statusCode ?? 0))
    req.on('upgrade', () => resolve(101))
    req.on('error', () => resolve(-1))
  })
  t.equal(wsNone, 401, 'no credentials, no upgrade')
  const ok: StreamClient = await openHttpStream(rt.baseUrl, id.bearer)
  t.teardown(() => ok.close())
  t.equal(ok.status, 200)
})

t.test('with the webhooks service: the webhook and the open stream get the same envelope bytes', async (t) => {
  // Every service, as `make run` has them (the webhooks service consumes activity.deliveries too).
  const rt = await startTestRuntime(t, { env: { OPERATOR_TOKEN } })
  const id = await createIdentity(rt.ctx.store)
  const posts: Array<{ body: string; signature: string | undefined }> = []
  const secret = id.app.consumer_secret
  const receiver = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://receiver')
    if (req.method === 'GET') {
      const token = url.searchParams.get('crc_token') ?? ''
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ response_token: `sha256=${createHmac('sha256', secret).update(token).digest('base64')}` }))
      return
    }
    let body = ''
    req.on('data', (c: Buffer) => (body += c.toString('utf8')))
    req.on('end', () => {
      posts.push({ body, signature: req.headers['x-twitter-webhooks-signature'] as string | undefined })
      res.writeHead(200).end()
    })
  })
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => receiver.close(() => resolve())))
  const hookUrl = `http://127.0.0.1:${(receiver.address() as { port: number }).port}/hook`
  const created = await bearerRequest('POST', `${rt.baseUrl}/2/webhooks`, id.bearer, { json: { url: hookUrl } })
  t.equal(created.status, 200, created.text)
  const webhookId = created.json<{ data: { id: string } }>().data.id

  const userId = nextUserId()
  await subscribe(rt.baseUrl, id.bearer, { event_type: 'post.create', filter: { user_id: userId }, tag: 'both', webhook_id: webhookId })
  const stream = await openHttpStream(rt.baseUrl, id.bearer)
  t.teardown(() => stream.close())
  await ingestOk(t, rt, [sampleEvent('post.create', userId, { text: 'to the hook and the stream' })])
  await stream.waitFor((m) => m.length >= 1, WAIT)
  await eventually(() => posts.length >= 1, WAIT)
  const line = stream.raw().split('\r\n').find((l) => l !== '')
  t.equal(posts[0]?.body, line, 'byte for byte the same envelope')
  t.equal(posts[0]?.signature, `sha256=${createHmac('sha256', secret).update(posts[0]?.body ?? '').digest('base64')}`, 'signed with the consumer secret')
})
