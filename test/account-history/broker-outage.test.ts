import t from 'tap'
import { eventually } from '../support/util'
import { kafkaBus, redisStore, startKafka, startRedis } from '../support/infra'
import { outboxDepth } from '../support/fixtures/change'
import { advertiser, historyOf, sharedStore, startGateway, startHistory } from '../support/fixtures/account-history'

/**
 * "Impossible to lose an event" through a broker outage: with every Kafka
 * broker down the ads writes still succeed (the change waits in the
 * gateway's outbox, committed with the entity); once the brokers are back
 * the relay publishes everything and account history shows every change,
 * in the order made, none doubled.
 */

t.test('kafka: with every broker down ads writes succeed; once they are back every change reaches account history, in order', async (t) => {
  const kafka = await startKafka(t)
  const redis = await startRedis(t)
  const store = await redisStore(t, redis)
  const gateway = await startGateway(t, await kafkaBus(t, kafka, 'gateway'), sharedStore(store))
  const history = await startHistory(t, await kafkaBus(t, kafka, 'history'), sharedStore(store))
  const a = await advertiser(gateway)
  const campaign = await a.ads('POST', '/campaigns', { funding_instrument_id: a.fi.id, name: 'b0' })
  const cid = campaign.id as string
  await historyOf(a, history, 'CAMPAIGN', cid, 1, 30_000)

  for (const id of [1, 2, 3]) await kafka.setBrokerDown(id)
  const total = 8
  for (let i = 1; i <= total; i++) await a.ads('PUT', `/campaigns/${cid}`, { name: `b${i}` })
  const second = await a.ads('POST', '/campaigns', { funding_instrument_id: a.fi.id, name: 'made during the outage' })
  await a.ads('DELETE', `/campaigns/${cid}`)
  t.pass('every write answered 200 while no broker was reachable')
  const read = await a.ads('GET', `/campaigns/${cid}`, { with_deleted: 'true' })
  t.match(read, { name: `b${total}`, deleted: true }, 'the writes are committed')
  const depth = await gateway.ctx.metrics.getSingleMetric('ads_outbox_depth')?.get()
  t.ok((depth?.values[0]?.value ?? 0) >= total + 2, `the outbox holds the changes not yet published (ads_outbox_depth ${depth?.values[0]?.value})`)

  for (const id of [1, 2, 3]) await kafka.setBrokerUp(id)
  const entries = await historyOf(a, history, 'CAMPAIGN', cid, total + 2, 90_000)
  t.same(entries.map((e) => e.change_type), ['CREATE', ...Array<string>(total).fill('UPDATE'), 'DELETE'], 'none lost, none doubled')
  t.same(entries.slice(0, total + 1).map((e) => e.entity_data.name), Array.from({ length: total + 1 }, (_, i) => `b${i}`), 'in the order they were made')
  for (let i = 1; i <= total; i++) t.same(entries[i]?.changes, { name: { old: `b${i - 1}`, new: `b${i}` } })
  const other = await historyOf(a, history, 'CAMPAIGN', second.id as string, 1, 30_000)
  t.match(other[0], { change_type: 'CREATE', entity_data: { name: 'made during the outage' } })
  await eventually(async () => (await outboxDepth(store)) === 0, 30_000, 50)
  t.pass('the outbox is empty again')
})
