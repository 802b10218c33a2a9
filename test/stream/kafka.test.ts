import t from 'tap'
import { EVENT_TYPES } from '../../services/activity/event-types'
import { activityService } from '../../services/activity/service'
import type { Runtime } from '../../services/common/runtime'
import type { ServiceDefinition } from '../../services/common/service'
import { gatewayService } from '../../services/gateway/service'
import { streamService } from '../../services/stream/service'
import { bearerRequest, createIdentity, eventually, startTestRuntime } from '../helper'
import { kafkaBus, redisStore, startKafka, startRedis } from '../support/infra'
import { ingest, openHttpStream, openWsStream, OPERATOR_TOKEN, sampleEvent, type StreamEnvelope, subscribe } from '../activity/support'

/**
 * The distributed shape on real infrastructure: a Kafka-protocol cluster
 * (librdkafka mock, 3 brokers) and redis-server. One API node (gateway +
 * activity), a second matcher in the same consumer group, and two stream
 * nodes, each a separate runtime with its own Kafka and Redis clients.
 */

const WAIT = 30_000

t.test('ingest -> match -> stream across processes on Kafka and Redis', async (t) => {
  const redis = await startRedis(t)
  const kafka = await startKafka(t)
  const node = async (name: string, services: ServiceDefinition[]): Promise<Runtime> =>
    startTestRuntime(t, {
      services,
      serviceName: name,
      bus: await kafkaBus(t, kafka, name),
      store: await redisStore(t, redis),
      env: { OPERATOR_TOKEN, STREAM_CONNECTIONS_PER_APP: '2', KAFKA_BROKERS: kafka.brokers.join(','), REDIS_URL: redis.url }
    })
  const api = await node('api', [gatewayService, activityService])
  const matcher2 = await node('matcher-2', [activityService])
  const streamB = await node('stream-b', [streamService])
  const streamC = await node('stream-c', [streamService])
  t.equal(api.ctx.bus.kind, 'kafka')
  t.equal(streamB.ctx.store.kind, 'redis')

  const id = await createIdentity(api.ctx.store)
  // Filtered users subscribe in user context (dm.* activity is private).
  const subject = await createIdentity(api.ctx.store, { app: id.app })
  const userId = subject.user.id

  await t.test('every event kind reaches streams on both stream nodes', async (t) => {
    for (const type of EVENT_TYPES) await subscribe(api.baseUrl, subject, { event_type: type, filter: { user_id: userId }, tag: type })
    const onB = await openHttpStream(streamB.baseUrl, id.bearer)
    t.teardown(() => onB.close())
    const onC = await openWsStream(streamC.baseUrl, id.bearer)
    t.teardown(() => onC.close())
    const res = await ingest(api.baseUrl, EVENT_TYPES.map((type) => sampleEvent(type, userId)))
    t.equal(res.status, 200, res.text)
    const uuids = res.json<{ data: { event_uuids: string[] } }>().data.event_uuids
    await onB.waitFor((m) => m.length >= EVENT_TYPES.length, WAIT)
    await onC.waitFor((m) => m.length >= EVENT_TYPES.length, WAIT)
    await new Promise((r) => setTimeout(r, 300))
    for (const [name, client] of [['http on node B', onB], ['websocket on node C', onC]] as const) {
      t.equal(client.messages.length, EVENT_TYPES.length, `${name}: one message per event, no duplicates`)
      t.same(client.messages.map((m: StreamEnvelope) => m.data?.tag), [...EVENT_TYPES], `${name}: in order (one user key, one partition)`)
      t.same(client.messages.map((m: StreamEnvelope) => m.data?.event_uuid), uuids, name)
    }
    t.same(onB.messages, onC.messages, 'both nodes send the same envelopes')
  })

  await t.test('filters, aliases and live subscription changes, with two matchers sharing the store', async (t) => {
    const otherId = await createIdentity(api.ctx.store, { app: id.app })
    const other = otherId.user.id
    const kw = await subscribe(matcher2.baseUrl, id.bearer, { event_type: 'post.create', filter: { user_id: other, keyword: 'kafka' }, tag: 'kw' })
    await subscribe(api.baseUrl, otherId, { event_type: 'dm.sent', filter: { user_id: other, direction: 'outbound' }, tag: 'dm-out' })
    await subscribe(api.baseUrl, id.bearer, { event_type: 'ProfileBannerUpdate', filter: { user_id: other }, tag: 'banner' })
    const stream = await openHttpStream(streamC.baseUrl, id.bearer)
    t.teardown(() => stream.close())
    const first = await ingest(api.baseUrl, [
      sampleEvent('post.create', other, { text: 'not this one' }),
      sampleEvent('post.create', other, { text: 'Kafka works' }),
      sampleEvent('dm.sent', other, { sent: false }),
      sampleEvent('dm.sent', other, { sent: true }),
      { ...sampleEvent('profile.update.banner_picture', other), event_type: 'ProfileBannerUpdate' }
    ])
    t.equal(first.status, 200)
    await stream.waitFor((m) => m.length >= 3, WAIT)
    t.same(stream.messages.map((m) => m.data?.tag), ['kw', 'dm-out', 'banner'])
    t.equal(stream.messages[2]?.data?.event_type, 'profile.update.banner_picture')

    t.equal((await bearerRequest('PUT', `${api.baseUrl}/2/activity/subscriptions/${kw}`, id.bearer, { json: { tag: 'kw2' } })).status, 200)
    await ingest(api.baseUrl, [sampleEvent('post.create', other, { text: 'kafka again' })])
    await stream.waitFor((m) => m.length >= 4, WAIT)
    t.equal(stream.messages[3]?.data?.tag, 'kw2', 'the update is seen by whichever matcher owns the partition')
    t.equal((await bearerRequest('DELETE', `${matcher2.baseUrl}/2/activity/subscriptions/${kw}`, id.bearer)).status, 200)
    await ingest(api.baseUrl, [sampleEvent('post.create', other, { text: 'kafka once more' }), sampleEvent('dm.sent', other, { sent: true })])
    await stream.waitFor((m) => m.length >= 5, WAIT)
    await new Promise((r) => setTimeout(r, 500))
    t.same(stream.messages.slice(4).map((m) => m.data?.tag), ['dm-out'], 'the deleted subscription no longer matches')
  })

  await t.test('the connection limit holds across stream nodes', async (t) => {
    const app2 = await createIdentity(api.ctx.store)
    const onB = await openHttpStream(streamB.baseUrl, app2.bearer)
    t.teardown(() => onB.close())
    const onC = await openWsStream(streamC.baseUrl, app2.bearer)
    t.teardown(() => onC.close())
    const third = await bearerRequest('GET', `${streamB.baseUrl}/2/activity/stream`, app2.bearer)
    t.equal(third.status, 429)
    t.match(third.json(), { connection_issue: 'TooManyConnections' })
    const thirdWs = await openWsStream(streamC.baseUrl, app2.bearer).catch((e: { status: number }) => e)
    t.match(thirdWs, { status: 429 })
    onB.close()
    const again = await eventually(async () => {
      const s = await openHttpStream(streamC.baseUrl, app2.bearer)
      if (s.status === 200) return s
      s.close()
      return undefined
    }, WAIT)
    t.teardown(() => again.close())
    t.equal(again.status, 200, 'a place freed on node B is usable on node C')
  })
})
