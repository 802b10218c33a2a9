import path from 'node:path'
import t from 'tap'
import { SubscriptionStore } from '../../services/activity/subscriptions'
import { MATCHER_GROUP, startMatcher } from '../../services/activity/worker'
import { MemoryBus } from '../../services/common/bus/memory'
import { TOPICS, type Bus, type BusMessage, type OutgoingMessage } from '../../services/common/bus/types'
import { createContext } from '../../services/common/context'
import { createLogger } from '../../services/common/logger'
import { MemoryStore } from '../../services/common/store/memory'
import { eventually } from '../support/util'
import { testConfig } from '../helper'
import { nextUserId, sampleEvent } from './support'

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
