import t from 'tap'
import { eventually } from '../helper'
import { kafkaBus, redisStore, startKafka, startRedis } from '../support/infra'
import { advertiser, campaignAndLineItemLifecycle, checkLifecycleHistory, historyOf, startGateway, startHistory } from './support'

/**
 * Account history in distributed mode: the gateway and the history service
 * as separate runtimes, each with its own Kafka client (librdkafka mock
 * cluster, 3 brokers) and its own Redis connection, like separate
 * processes. The history service is restarted mid-stream: a new instance
 * with new clients resumes from the group's committed offsets.
 */

t.test('kafka + redis: history keeps up with the topic and survives a restart', async (t) => {
  const kafka = await startKafka(t)
  const redis = await startRedis(t)
  const gateway = await startGateway(t, await kafkaBus(t, kafka, 'gateway'), await redisStore(t, redis))
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
  history = await startHistory(t, await kafkaBus(t, kafka, 'history-2'), await redisStore(t, redis))
  await writer

  const entries = await historyOf(a, history, 'CAMPAIGN', cid, total + 1, 30_000)
  t.equal(entries.length, total + 1, 'one entry per change, none lost, none doubled')
  t.same(entries.map((e) => e.entity_data.name), Array.from({ length: total + 1 }, (_, i) => `k${i}`), 'in order')
  t.same(entries[total]?.changes, { name: { old: `k${total - 1}`, new: `k${total}` } })
  // The earlier lifecycle is still there, read through the new instance.
  await checkLifecycleHistory(t, a, history, ids)
})
