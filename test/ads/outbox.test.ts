import path from 'node:path'
import t, { type Test } from 'tap'
import { MemoryBus } from '../../services/common/bus/memory'
import { type Bus, type BusMessage, TOPICS } from '../../services/common/bus/types'
import { createContext, type ServiceContext } from '../../services/common/context'
import { AdsError } from '../../services/common/errors'
import { createLogger } from '../../services/common/logger'
import { MemoryStore } from '../../services/common/store/memory'
import type { Store } from '../../services/common/store/types'
import { type AdsEntity, type EntityChange, entityChangeMessage, EntityRepo } from '../../services/gateway/ads/entities'
import { Outbox, OutboxRelay } from '../../services/gateway/outbox'
import { testConfig } from '../support/runtime'
import { eventually, tempDir } from '../support/util'
import { kafkaBus, redisStore, startKafka, startRedis } from '../support/infra'
import { sharedBus, sharedStore, startGateway } from '../support/fixtures/account-history'
import { checkChain, collectChanges, outboxDepth } from '../support/fixtures/change'

/**
 * The gateway outbox: an entity change is committed with the entity and
 * reaches the bus even when the bus is down at write time (a process that
 * crashed before publishing; the broker outage is in
 * test/account-history/broker-outage.test.ts), in order per account, once
 * per relay even with several relays; and per-entity leases keep
 * concurrent updates from losing each other.
 */

const log = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent', 'outbox-test')
const actor = { user_id: '42', platform: 'API' }

interface Probe extends AdsEntity {
  name: string
  count: number
  [field: string]: unknown
}

/** A bus that cannot publish: a broker that is unreachable, or a process that dies before publishing. */
function deadBus(): Bus {
  const refuse = async (): Promise<never> => {
    throw new Error('broker unreachable')
  }
  return { kind: 'kafka', publish: refuse, publishMany: refuse, subscribe: refuse, close: async () => undefined }
}

async function contextWith(t: Test, bus: Bus, store: Store): Promise<ServiceContext> {
  return createContext({ serviceName: 'gateway', config: testConfig(t), bus, store, log })
}

async function memoryStore(t: Test): Promise<Store> {
  const store = await MemoryStore.open(path.join(tempDir(t, 'outbox-'), 'state'))
  t.teardown(() => store.close())
  return store
}

for (const mode of ['memory', 'kafka+redis'] as const) {
  t.test(`${mode}: a change committed by a process that could not publish is delivered by another process's relay`, async (t) => {
    let store: Store
    let goodBus: Bus
    if (mode === 'memory') {
      store = await memoryStore(t)
      goodBus = new MemoryBus(6, log)
      t.teardown(() => goodBus.close())
    } else {
      store = await redisStore(t, await startRedis(t))
      goodBus = await kafkaBus(t, await startKafka(t), 'relay')
    }
    const seen = await collectChanges(t, goodBus, 'outbox-crash')

    // The "crashed" gateway: its writes commit, its publishes never happen.
    const crashed = await contextWith(t, deadBus(), store)
    const repo = new EntityRepo<Probe>(crashed, 'CAMPAIGN', 'outbox_probe')
    const created = await repo.create('acc1', { name: 'n0', count: 0 }, actor)
    for (let i = 1; i <= 3; i++) await repo.update('acc1', created.id, { name: `n${i}` }, actor)
    await repo.softDelete('acc1', created.id, actor)
    t.match(await repo.get('acc1', created.id, { withDeleted: true }), { name: 'n3', deleted: true }, 'the writes committed')
    t.equal(await outboxDepth(store), 5, 'their five changes wait in the outbox')

    const relay = new OutboxRelay({ store, bus: goodBus, log, sweepMs: 100 })
    t.teardown(() => relay.close())
    relay.start()
    await eventually(() => seen.filter((c) => c.entity_id === created.id).length >= 5, 30_000)
    const mine = seen.filter((c) => c.entity_id === created.id)
    t.same(mine.map((c) => c.change_type), ['CREATE', 'UPDATE', 'UPDATE', 'UPDATE', 'DELETE'])
    t.same(mine.map((c) => c.entity_data.name), ['n0', 'n1', 'n2', 'n3', 'n3'], 'in commit order')
    checkChain(t, mine)
    await eventually(async () => (await outboxDepth(store)) === 0, 10_000)
    t.pass('published records are removed')
  })
}

t.test('two relays on one outbox: each record published once, per-key order kept', async (t) => {
  const store = await redisStore(t, await startRedis(t))
  const bus = new MemoryBus(6, log)
  t.teardown(() => bus.close())
  const seen: BusMessage[] = []
  const consumer = await bus.subscribe({ groupId: 'two-relays', topics: [TOPICS.adsEntityChanges], handler: async (m) => void seen.push(m) })
  t.teardown(() => consumer.close())

  // Records written by writers whose own relay never ran.
  const idle = new OutboxRelay({ store, bus: deadBus(), log })
  const writer = new Outbox(store, idle)
  const keys = ['k1', 'k2', 'k3', 'k4', 'k5']
  const perKey = 40
  for (let n = 0; n < perKey; n++) {
    const staged = await writer.stage(keys.map((key) => entityChangeMessage({ account_id: key, entity_type: 'CAMPAIGN', entity_id: 'e', change_type: 'UPDATE', changed_by: actor, changes: {}, entity_data: { n } })))
    await store.batch(staged.ops)
  }
  const relays = [0, 1].map(() => new OutboxRelay({ store, bus, log, busyRetryMs: 20 }))
  t.teardown(() => Promise.all(relays.map((r) => r.close())))
  await Promise.all(relays.map((r) => r.sweep()))
  await eventually(async () => (await outboxDepth(store)) === 0, 20_000)
  await eventually(() => seen.length >= keys.length * perKey, 10_000)
  t.equal(seen.length, keys.length * perKey, 'no record published twice')
  for (const key of keys) {
    const order = seen.filter((m) => m.key === key).map((m) => (m.value as EntityChange).entity_data.n)
    t.same(order, Array.from({ length: perKey }, (_, n) => n), `${key}: in the order written`)
  }
})

t.test('an event that does not match its topic schema is refused before anything is committed', async (t) => {
  const store = await memoryStore(t)
  const ctx = await contextWith(t, new MemoryBus(6, log), store)
  const repo = new EntityRepo<Probe>(ctx, 'not a valid entity type', 'outbox_probe')
  await t.rejects(repo.create('acc1', { name: 'x', count: 0, id: 'p1' }, actor), /event refused for topic ads\.entity-changes/)
  t.equal(await repo.get('acc1', 'p1'), undefined, 'the entity was not written either')
  t.equal(await outboxDepth(store), 0)
})

for (const mode of ['memory', 'redis'] as const) {
  t.test(`${mode}: concurrent updates of one entity lose nothing and their diffs chain`, async (t) => {
    const store = mode === 'memory' ? await memoryStore(t) : await redisStore(t, await startRedis(t))
    const bus = new MemoryBus(6, log)
    t.teardown(() => bus.close())
    const seen = await collectChanges(t, bus, 'concurrent')
    // Two "gateway processes": two contexts on one store and one bus.
    const contexts = [await contextWith(t, sharedBus(bus), store), await contextWith(t, sharedBus(bus), store)]
    const repos = contexts.map((ctx) => new EntityRepo<Probe>(ctx, 'CAMPAIGN', 'outbox_probe'))
    const repo = repos[0] as EntityRepo<Probe>
    const created = await repo.create('acc1', { name: 'start', count: 0 }, actor)
    const n = 20
    await Promise.all(Array.from({ length: n }, (_, i) => (repos[i % 2] as EntityRepo<Probe>).update('acc1', created.id, { [`field_${i}`]: i } as Partial<Probe>, actor)))
    await Promise.all(Array.from({ length: n }, (_, i) => (repos[i % 2] as EntityRepo<Probe>).updateWith('acc1', created.id, (before) => ({ count: before.count + 1 }), actor)))
    const final = await repo.require('acc1', created.id)
    t.same(Array.from({ length: n }, (_, i) => final[`field_${i}`]), Array.from({ length: n }, (_, i) => i), 'every field update landed')
    t.equal(final.count, n, 'every increment landed')
    await eventually(() => seen.filter((c) => c.entity_id === created.id).length >= 2 * n + 1, 10_000)
    const changes = seen.filter((c) => c.entity_id === created.id)
    t.equal(changes.length, 2 * n + 1)
    checkChain(t, changes)
    t.same(changes.slice(n + 1).map((c) => c.changes), Array.from({ length: n }, (_, i) => ({ count: { old: i, new: i + 1 } })), 'the increments in order')
  })
}

t.test('an update that cannot get the entity lease in time is refused with 423 and changes nothing', async (t) => {
  const store = await memoryStore(t)
  const bus = new MemoryBus(6, log)
  t.teardown(() => bus.close())
  const ctx = await contextWith(t, bus, store)
  const repo = new EntityRepo<Probe>(ctx, 'CAMPAIGN', 'outbox_probe', { lockWaitMs: 100 })
  const created = await repo.create('acc1', { name: 'kept', count: 0 }, actor)
  await eventually(async () => (await outboxDepth(store)) === 0)
  t.ok(await store.setIfAbsent(repo.lockKey('acc1', created.id), 'another request', 30_000), 'another change holds the lease')
  const err = await repo.update('acc1', created.id, { name: 'lost' }, actor).then(
    () => undefined,
    (e: unknown) => e
  )
  t.ok(err instanceof AdsError, 'an ads error')
  t.match(err, { statusCode: 423, items: [{ code: 'LOCK_ACQUISITION_TIMEOUT' }] })
  t.equal((await repo.require('acc1', created.id)).name, 'kept')
  t.equal(await outboxDepth(store), 0, 'no change event either')
})

t.test('embedded: the outbox depth is exported on /metrics', async (t) => {
  const store = await memoryStore(t)
  const bus = new MemoryBus(6, log)
  t.teardown(() => bus.close())
  const gateway = await startGateway(t, sharedBus(bus), sharedStore(store))
  const res = await fetch(`${gateway.baseUrl}/metrics`)
  t.equal(res.status, 200)
  t.match(await res.text(), /^ads_outbox_depth\{[^}]*\} 0$/m)
})
