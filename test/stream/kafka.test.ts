import t from 'tap'
import { EVENT_TYPES } from '../../services/activity/event-types'
import { activityService } from '../../services/activity/service'
import type { Runtime } from '../../services/common/runtime'
import type { ServiceDefinition } from '../../services/common/service'
import { gatewayService } from '../../services/gateway/service'
import { KafkaBus } from '../../services/common/bus/kafka'
import { streamServiceWith } from '../../services/stream/service'
import { bearerRequest, plainRequest } from '../support/http'
import { createIdentity, startTestRuntime } from '../support/runtime'
import { eventually } from '../support/util'
import { kafkaBus, redisStore, startKafka, startRedis } from '../support/infra'
import { ingest, openHttpStream, openWsStream, OPERATOR_TOKEN, sampleEvent, type StreamEnvelope, subscribe } from '../support/fixtures/activity'

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
  const streamB = await node('stream-b', [streamServiceWith({ nodeId: 'node-b' })])
  const streamC = await node('stream-c', [streamServiceWith({ nodeId: 'node-c' })])
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
    // Barrier: one more event of the same user (same partitions all the way): a duplicate of an earlier one would arrive before it.
    const barrier = await ingest(api.baseUrl, [sampleEvent('post.create', userId, { text: 'barrier' })])
    const [barrierUuid] = barrier.json<{ data: { event_uuids: string[] } }>().data.event_uuids
    for (const client of [onB, onC]) await client.waitFor((m) => m.some((e) => e.data?.event_uuid === barrierUuid), WAIT)
    for (const [name, client] of [['http on node B', onB], ['websocket on node C', onC]] as const) {
      const before = client.messages.slice(0, -1)
      t.equal(client.messages.at(-1)?.data?.event_uuid, barrierUuid, `${name}: the barrier came last`)
      t.equal(before.length, EVENT_TYPES.length, `${name}: one message per event, no duplicates`)
      t.same(before.map((m: StreamEnvelope) => m.data?.tag), [...EVENT_TYPES], `${name}: in order (one user key, one partition)`)
      t.same(before.map((m: StreamEnvelope) => m.data?.event_uuid), uuids, name)
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
    // The dm.sent event follows the post of the deleted subscription in the user's partition: once it is here, the post was matched (or not).
    await stream.waitFor((m) => m.length >= 5, WAIT)
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

t.test('a restarted stream node resumes its own consumer group and backfills what it missed', async (t) => {
  const redis = await startRedis(t)
  const kafka = await startKafka(t)
  const env = { OPERATOR_TOKEN, STREAM_CONNECTIONS_PER_APP: '4', KAFKA_BROKERS: kafka.brokers.join(','), REDIS_URL: redis.url, STREAM_BACKFILL: '2m' }
  const node = async (name: string, services: ServiceDefinition[]): Promise<Runtime> =>
    startTestRuntime(t, { services, serviceName: name, bus: await kafkaBus(t, kafka, name), store: await redisStore(t, redis), env })
  const restarting = streamServiceWith({ nodeId: 'restarting' })
  const api = await node('api', [gatewayService, activityService])
  const witness = await node('witness', [streamServiceWith({ nodeId: 'witness' })])
  let stream = await node('restarting-1', [restarting])

  const id = await createIdentity(api.ctx.store)
  const userId = (await createIdentity(api.ctx.store, { app: id.app })).user.id
  await subscribe(api.baseUrl, id.bearer, { event_type: 'post.create', filter: { user_id: userId } })
  const uuidsOf = async (texts: string[]): Promise<string[]> => {
    const res = await ingest(api.baseUrl, texts.map((text) => sampleEvent('post.create', userId, { text })))
    t.equal(res.status, 200, res.text)
    return res.json<{ data: { event_uuids: string[] } }>().data.event_uuids
  }
  const uuids = (client: { messages: StreamEnvelope[] }): Array<string | undefined> => client.messages.filter((m) => m.data).map((m) => m.data?.event_uuid)

  const live = await openHttpStream(stream.baseUrl, id.bearer)
  const watching = await openHttpStream(witness.baseUrl, id.bearer)
  t.teardown(() => watching.close())
  const [before] = await uuidsOf(['before the restart'])
  await live.waitFor((m) => m.length >= 1, WAIT)
  t.same(uuids(live), [before])

  // Shutdown: the client gets ForceDisconnect; the node leaves its group with its offsets committed.
  await stream.close()
  await live.ended
  t.match(live.messages.at(-1), { errors: [{ disconnect_type: 'ForceDisconnect' }] })
  const missed = await uuidsOf(['while down 1', 'while down 2'])
  await watching.waitFor(() => uuids(watching).length >= 3, WAIT)
  t.same(uuids(watching), [before, ...missed], 'the deliveries were published while the node was down')

  // The node's one group (stream-<node id>, no random suffix) kept its place: exactly the two missed deliveries are ahead of it.
  const inspector = (await kafkaBus(t, kafka, 'inspector')) as KafkaBus
  const lagOf = async (group: string): Promise<number> => (await inspector.groupOffsets([group])).reduce((n, p) => n + (p.committed >= 0 ? p.lag : 0), 0)
  t.equal(await lagOf('stream-restarting'), 2, 'the stopped node\'s group is behind by what it missed')
  await eventually(async () => (await lagOf('stream-witness')) === 0, WAIT)

  stream = await node('restarting-2', [restarting])
  const fresh = await openHttpStream(stream.baseUrl, id.bearer)
  t.teardown(() => fresh.close())
  const back = await openHttpStream(stream.baseUrl, id.bearer, { backfill_minutes: '1' })
  t.teardown(() => back.close())
  // Barrier: a delivery published after the restart reaches both clients; everything missed comes before it.
  const [after] = await uuidsOf(['after the restart'])
  await back.waitFor(() => uuids(back).includes(after), WAIT)
  await fresh.waitFor(() => uuids(fresh).includes(after), WAIT)
  t.same(uuids(back), [...missed, after], 'the reconnecting client gets what it missed, then live; not what it had already')
  t.same(uuids(fresh), [after], 'a client without backfill gets no old lines as live ones')
  const metrics = (await plainRequest('GET', `${stream.baseUrl}/metrics`)).text
  t.match(metrics, /stream_deliveries_caught_up_total\{outcome="buffered"[^}]*\} 2\n/)
  await eventually(async () => (await lagOf('stream-restarting')) === 0, WAIT)
})
