import path from 'node:path'
import t, { type Test } from 'tap'
import type { Delivery } from '../../services/activity/deliveries'
import { SubscriptionStore } from '../../services/activity/subscriptions'
import { deliveryKey, MATCHER_GROUP, startMatcher } from '../../services/activity/matcher'
import { MemoryBus } from '../../services/common/bus/memory'
import { partitionFor } from '../../services/common/bus/partitioner'
import { loadTopics } from '../../services/common/bus/topics'
import { TOPICS, type Bus, type BusMessage, type OutgoingMessage } from '../../services/common/bus/types'
import { createContext } from '../../services/common/context'
import { createLogger } from '../../services/common/logger'
import { MemoryStore } from '../../services/common/store/memory'
import type { Store } from '../../services/common/store/types'
import { kafkaBus, redisStore, startKafka, startRedis } from '../support/infra'
import { testConfig } from '../support/runtime'
import { eventually } from '../support/util'
import { callsSince, commandCalls, redisWrites, roundCountingStore } from '../support/store-rounds'
import { nextUserId, sampleEvent } from '../support/fixtures/activity'

/**
 * The matcher works a batch at a time: a burst of events becomes a few
 * produce calls (one per batch), every match is published once with its
 * own delivery id, and a malformed event in a batch is skipped without
 * holding back the others.
 */

/** Counts publishMany calls per topic on the way to the real bus. */
class CountingBus extends MemoryBus {
  readonly publishes = new Map<string, number>()
  override async publishMany(topic: string, messages: OutgoingMessage[]): Promise<void> {
    this.publishes.set(topic, (this.publishes.get(topic) ?? 0) + 1)
    await super.publishMany(topic, messages)
  }
}

t.test('a burst of events is matched in batches: one produce per batch, every match once', async (t) => {
  const config = testConfig(t)
  const log = createLogger('silent', 'matcher-test')
  const bus = new CountingBus(config.busPartitions, log)
  const store = await MemoryStore.open(path.join(config.dataDir, 'state'))
  const ctx = await createContext({ serviceName: 'activity', config, bus: bus as Bus, store, log })
  t.teardown(async () => {
    await bus.close()
    await store.close()
  })
  const subs = new SubscriptionStore(store, 1000)
  const users = Array.from({ length: 20 }, () => nextUserId())
  for (const u of users) {
    await subs.create({ app_id: 'app-a', event_type: 'post.create', filter: { user_id: u } })
    await subs.create({ app_id: 'app-b', event_type: 'post.create', filter: { user_id: u, keyword: 'rust' } })
  }
  const events: Array<Record<string, unknown>> = Array.from({ length: 1000 }, (_, i) => ({ ...sampleEvent('post.create', users[i % users.length] as string, { text: i % 2 === 0 ? 'Rust, Go' : 'hello' }), event_uuid: `${Date.now()}${String(i).padStart(4, '0')}` }))
  // Published before the matcher starts: its first batches are full ones.
  await bus.publishMany(TOPICS.activityEvents, [
    ...events.slice(0, 500).map((e) => ({ key: e.user_id as string, value: e })),
    { key: users[0] as string, value: { event_type: 'post.create', user_id: users[0], broken: true } },
    ...events.slice(500).map((e) => ({ key: e.user_id as string, value: e }))
  ])
  const seen: BusMessage[] = []
  await bus.subscribe({ groupId: 'reader', topics: [TOPICS.activityDeliveries], handler: async (m) => void seen.push(m) })
  const worker = await startMatcher(ctx)
  t.teardown(() => worker.close())
  await eventually(() => seen.length >= 1500, 20_000)
  await eventually(() => bus.lag(MATCHER_GROUP) === 0, 10_000)
  t.equal(seen.length, 1500, 'app-a gets every event, app-b the 500 mentioning rust (the malformed one in between held nothing back)')
  t.equal(new Set(seen.map((m) => (m.value as { delivery_id: string }).delivery_id)).size, 1500, 'each match once, with its own delivery id')
  const produces = bus.publishes.get(TOPICS.activityDeliveries) ?? 0
  t.ok(produces <= 12, `${produces} produce calls for 1000 events on ${config.busPartitions} partitions (one per batch)`)
  t.same(new Set(seen.filter((m) => (m.value as { app_id: string }).app_id === 'app-b').map((m) => (m.value as { envelope: { data: { payload: { text: string } } } }).envelope.data.payload.text)), new Set(['Rust, Go']), 'the keyword filter still applies')
})

// ---------------------------------------------------------------- store round trips per batch

/** `count` user ids whose events land on one partition of activity.events (keyed by user id): one batch. */
function usersOnOnePartition(count: number, partitions: number): string[] {
  const out: string[] = []
  while (out.length < count) {
    const u = nextUserId()
    if (partitionFor(u, partitions) === 0) out.push(u)
  }
  return out
}

const LOOKUP_TYPES = ['post.create', 'post.delete'] as const

/**
 * K = users × event types distinct (event_type, user_id) pairs, two subscriptions each (two apps),
 * N events cycling over the pairs, all on one partition, published before the matcher starts: one batch.
 */
async function lookupFixture(store: Store, partitions: number, n: number): Promise<{ pairs: number; events: Array<Record<string, unknown>> }> {
  const subs = new SubscriptionStore(store, 1000)
  const users = usersOnOnePartition(4, partitions)
  const pairs = users.flatMap((u) => LOOKUP_TYPES.map((type) => ({ u, type })))
  for (const { u, type } of pairs) {
    await subs.create({ app_id: 'app-a', event_type: type, filter: { user_id: u } })
    await subs.create({ app_id: 'app-b', event_type: type, filter: { user_id: u } })
  }
  const events = Array.from({ length: n }, (_, i) => {
    const { u, type } = pairs[i % pairs.length] as { u: string; type: (typeof LOOKUP_TYPES)[number] }
    return { ...sampleEvent(type, u), event_uuid: `${Date.now()}${String(i).padStart(4, '0')}` }
  })
  return { pairs: pairs.length, events }
}

t.test('one batch of N events over K (event_type, user_id) pairs: K lookups in one store round trip, one produce', async (t) => {
  const config = testConfig(t)
  const log = createLogger('silent', 'matcher-test')
  const bus = new CountingBus(config.busPartitions, log)
  const memory = await MemoryStore.open(path.join(config.dataDir, 'state'))
  const { store, rounds } = roundCountingStore(memory)
  const ctx = await createContext({ serviceName: 'activity', config, bus: bus as Bus, store, log })
  t.teardown(async () => {
    await bus.close()
    await memory.close()
  })
  const { pairs, events } = await lookupFixture(memory, config.busPartitions, 200)
  await bus.publishMany(TOPICS.activityEvents, events.map((e) => ({ key: e.user_id as string, value: e })))
  const seen: BusMessage[] = []
  await bus.subscribe({ groupId: 'reader', topics: [TOPICS.activityDeliveries], handler: async (m) => void seen.push(m) })
  const worker = await startMatcher(ctx)
  t.teardown(() => worker.close())
  await eventually(() => seen.length >= 400, 10_000)
  await eventually(() => bus.lag(MATCHER_GROUP) === 0, 5000)
  t.equal(seen.length, 400, 'every event matched both of its subscriptions')

  const lookupRounds = rounds.filter((r) => r.some((c) => c.method === 'hgetall' && c.keys.some((k) => k.startsWith('activity:match:'))))
  t.equal(lookupRounds.length, 1, `the batch's candidate lookups took ${lookupRounds.length} store round trip(s): issued in one turn, not awaited one after another`)
  const lookups = (lookupRounds[0] ?? []).filter((c) => c.method === 'hgetall')
  t.equal(lookups.length, pairs, `${lookups.length} lookups for ${events.length} events over ${pairs} distinct (event_type, user_id)`)
  t.equal(new Set(lookups.flatMap((c) => c.keys)).size, pairs, 'one per pair')
  t.equal(bus.publishes.get(TOPICS.activityDeliveries), 1, 'one produce for the whole batch')
})

t.test('on Redis the batch\'s lookups go out as one pipeline (one socket write), and Redis counts K of them', async (t) => {
  const config = testConfig(t)
  const log = createLogger('silent', 'matcher-test')
  const redis = await startRedis(t)
  const store = await redisStore(t, redis)
  const bus = new CountingBus(config.busPartitions, log)
  t.teardown(() => bus.close())
  const ctx = await createContext({ serviceName: 'activity', config, bus: bus as Bus, store, log })
  const { pairs, events } = await lookupFixture(store, config.busPartitions, 200)
  await bus.publishMany(TOPICS.activityEvents, events.map((e) => ({ key: e.user_id as string, value: e })))
  const seen: BusMessage[] = []
  await bus.subscribe({ groupId: 'reader', topics: [TOPICS.activityDeliveries], handler: async (m) => void seen.push(m) })
  const before = await commandCalls(redis.url)
  const writes = redisWrites(store)
  t.teardown(() => writes.restore())
  const worker = await startMatcher(ctx)
  t.teardown(() => worker.close())
  await eventually(() => seen.length >= 400, 10_000)
  await eventually(() => bus.lag(MATCHER_GROUP) === 0, 5000)
  t.equal(seen.length, 400)
  t.same(writes.carrying('hgetall'), [pairs], `one write (one pipeline) carried all ${pairs} HGETALLs`)
  t.equal(callsSince(before, await commandCalls(redis.url)).get('hgetall'), pairs, `Redis counted ${pairs} HGETALL for ${events.length} events`)
  t.equal(bus.publishes.get(TOPICS.activityDeliveries), 1, 'one produce for the whole batch')
})

// ---------------------------------------------------------------- partitioning of activity.deliveries

/**
 * One app, many users: the matcher keys each delivery app_id:user_id (deliveryKey), so the app's
 * deliveries spread over the partitions of activity.deliveries while each user's stay in order on one.
 */
async function spreadCase(t: Test, bus: Bus, partitions: number, join: (groupId: string, handler: (m: BusMessage) => Promise<void>) => Promise<unknown>): Promise<void> {
  const config = testConfig(t)
  const log = createLogger('silent', 'matcher-test')
  const store = await MemoryStore.open(path.join(config.dataDir, 'state'))
  t.teardown(() => store.close())
  const ctx = await createContext({ serviceName: 'activity', config, bus, store, log })
  const subs = new SubscriptionStore(store, 1000)
  const users = Array.from({ length: 24 }, () => nextUserId())
  for (const u of users) await subs.create({ app_id: 'one-app', event_type: 'post.create', filter: { user_id: u } })
  const seen: BusMessage[] = []
  const [worker] = await Promise.all([startMatcher(ctx), join(`reader-${process.pid}-${Date.now()}`, async (m) => void seen.push(m))])
  t.teardown(() => (worker as { close(): Promise<void> }).close())
  const PER_USER = 6
  for (let round = 0; round < PER_USER; round++) {
    await bus.publishMany(TOPICS.activityEvents, users.map((u, i) => ({ key: u, value: { ...sampleEvent('post.create', u, { text: `seq ${round}` }), event_uuid: `${Date.now()}${String(round * 100 + i).padStart(4, '0')}` } })))
  }
  await eventually(() => seen.length >= users.length * PER_USER, 20_000)
  t.equal(seen.length, users.length * PER_USER, 'every event delivered once')
  const delivery = (m: BusMessage): Delivery => m.value as Delivery
  t.ok(seen.every((m) => m.key === `one-app:${delivery(m).envelope.data.filter.user_id}` && m.key === deliveryKey(delivery(m))), 'keyed app_id:user_id (deliveryKey)')
  t.ok(seen.every((m) => m.partition === partitionFor(m.key, partitions)), `on the key's partition of ${partitions}`)
  const used = new Set(seen.map((m) => m.partition))
  t.ok(used.size >= Math.min(4, partitions), `one app's deliveries spread over ${used.size} of ${partitions} partitions`)
  for (const u of users) {
    const order = seen.filter((m) => delivery(m).envelope.data.filter.user_id === u).map((m) => (delivery(m).envelope.data.payload as { text: string }).text)
    if (!t.same(order, Array.from({ length: PER_USER }, (_, i) => `seq ${i}`), `user ${u}: in order`)) break
  }
}

t.test('one app\'s deliveries spread over the partitions of activity.deliveries, each user\'s in order', async (t) => {
  t.test('memory bus', async (t) => {
    const bus = new MemoryBus(6, createLogger('silent', 'memory-bus'))
    t.teardown(() => bus.close())
    await spreadCase(t, bus, 6, (groupId, handler) => bus.subscribe({ groupId, topics: [TOPICS.activityDeliveries], handler }))
  })
  t.test('kafka (mock cluster, partitions of deploy/topics.json)', async (t) => {
    const kafka = await startKafka(t)
    const bus = await kafkaBus(t, kafka, 'matcher-spread')
    const partitions = loadTopics().topics.find((x) => x.name === TOPICS.activityDeliveries)?.partitions ?? 0
    t.ok(partitions > 1, `activity.deliveries has ${partitions} partitions`)
    await spreadCase(t, bus, partitions, (groupId, handler) => bus.subscribe({ groupId, topics: [TOPICS.activityDeliveries], handler }))
  })
})
