import t from 'tap'
import type { KafkaBus } from '../../services/common/bus/kafka'
import { type GroupOffsets, TOPICS } from '../../services/common/bus/types'
import type { Runtime } from '../../services/common/runtime'
import { HISTORY_GROUP } from '../../services/account-history/history-consumer'
import { eventually } from '../support/util'
import { kafkaBus, redisStore, startKafka, startRedis } from '../support/infra'
import { advertiser, campaignAndLineItemLifecycle, checkLifecycleHistory, historyOf, startGateway, startHistory } from '../support/fixtures/account-history'

/**
 * Account history in distributed mode: the gateway and the history service
 * as separate runtimes, each with its own Kafka client (librdkafka mock
 * cluster, 3 brokers) and its own Redis connection, like separate
 * processes. The history service is restarted mid-stream: a new instance
 * with new clients resumes from the group's committed offsets.
 *
 * Entries are idempotent and the worker subscribes from the beginning, so
 * "nothing lost" alone would also hold for a consumer that never commits:
 * the test also checks, against the group's offsets read from the broker,
 * that the first instance committed exactly what it recorded and that the
 * second one handled exactly the messages after those offsets.
 */

/** Changes recorded by one history instance (its metric; each instance has its own registry). */
async function recordedBy(rt: Runtime): Promise<number> {
  const metric = await rt.ctx.metrics.getSingleMetric('account_history_entries_recorded_total')?.get()
  return (metric?.values ?? []).reduce((n, v) => n + v.value, 0)
}

async function historyOffsets(admin: KafkaBus): Promise<GroupOffsets[]> {
  return (await admin.groupOffsets([HISTORY_GROUP])).filter((o) => o.topic === TOPICS.adsEntityChanges)
}

t.test('kafka + redis: history keeps up with the topic and survives a restart', async (t) => {
  const kafka = await startKafka(t)
  const redis = await startRedis(t)
  const gatewayBus = (await kafkaBus(t, kafka, 'gateway')) as KafkaBus
  const gateway = await startGateway(t, gatewayBus, await redisStore(t, redis))
  let history = await startHistory(t, await kafkaBus(t, kafka, 'history-1'), await redisStore(t, redis))
  const a = await advertiser(gateway)

  const ids = await campaignAndLineItemLifecycle(a)
  await checkLifecycleHistory(t, a, history, ids)

  // Mid-stream restart: updates keep being published while the history service is replaced.
  const campaign = await a.ads('POST', '/campaigns', { funding_instrument_id: a.fi.id, name: 'k0' })
  const cid = campaign.id as string
  const total = 30
  const writer = (async () => {
    for (let i = 1; i <= total; i++) await a.ads('PUT', `/campaigns/${cid}`, { name: `k${i}` })
  })()
  await eventually(async () => (await a.history(history, 'CAMPAIGN', cid)).length >= 3, 20_000, 25)
  await history.close()
  // What the first instance handled, and what its group committed on the broker when it left.
  const recordedBefore = await recordedBy(history)
  const committed = new Map((await historyOffsets(gatewayBus)).map((o) => [o.partition, Math.max(0, o.committed)]))
  const committedTotal = [...committed.values()].reduce((n, c) => n + c, 0)
  t.ok(recordedBefore > 0, `the first instance recorded ${recordedBefore} changes`)
  t.equal(committedTotal, recordedBefore, 'the first instance committed exactly the messages it recorded')
  history = await startHistory(t, await kafkaBus(t, kafka, 'history-2'), await redisStore(t, redis))
  await writer

  const entries = await historyOf(a, history, 'CAMPAIGN', cid, total + 1, 30_000)
  // Caught up and committed: the group's position is the end of every partition.
  const final = await eventually(async () => {
    const offsets = await historyOffsets(gatewayBus)
    return offsets.length > 0 && offsets.every((o) => o.lag === 0 && (o.committed >= 0) === (o.end > 0)) ? offsets : undefined
  }, 30_000, 100)
  const expected = final.reduce((n, o) => n + o.end - (committed.get(o.partition) ?? 0), 0)
  t.ok(expected > 0, `${expected} changes were published after the first instance's commits`)
  t.equal(await recordedBy(history), expected, 'the second instance handled only the messages after the committed offsets')
  t.equal(entries.length, total + 1, 'one entry per change, none lost, none doubled')
  t.same(entries.map((e) => e.entity_data.name), Array.from({ length: total + 1 }, (_, i) => `k${i}`), 'in order')
  t.same(entries[total]?.changes, { name: { old: `k${total - 1}`, new: `k${total}` } })
  // The earlier lifecycle is still there, read through the new instance.
  await checkLifecycleHistory(t, a, history, ids)
})
