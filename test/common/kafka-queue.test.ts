import t from 'tap'
import { kafkaBus, startKafka } from '../support/infra'
import { eventually, sleep } from '../support/util'

/**
 * Fetching apart from handling (services/common/bus/partition-queue.ts), on
 * librdkafka's mock cluster, which answers a fetch with one record batch per
 * partition: 300 messages produced one request each are 300 record batches.
 * Handled inside kafkajs's fetch loop, a slow handler got them one at a time
 * (one fetch, one handler call, one fetch...); with the queue, what arrived
 * while the handler worked is handed over together.
 */

t.test('a slow batch handler gets what piled up meanwhile, not one record batch per call; order and commits hold', async (t) => {
  const kafka = await startKafka(t, { brokers: 1, deployTopics: false })
  const topic = `queue-${process.pid}`
  await kafka.createTopic(topic, 1)
  const producer = await kafkaBus(t, kafka, 'queue-producer')
  // One message per produce request: one record batch each.
  for (let n = 0; n < 300; n++) await producer.publish(topic, 'k', { n })

  const consumerBus = await kafkaBus(t, kafka, 'queue-consumer')
  const sizes: number[] = []
  const seen: number[] = []
  const consumer = await consumerBus.subscribe({
    groupId: `queue-group-${process.pid}`,
    topics: [topic],
    maxBatch: 500,
    batchHandler: async (messages) => {
      sizes.push(messages.length)
      for (const m of messages) seen.push((m.value as { n: number }).n)
      await sleep(150)
    }
  })
  await eventually(() => seen.length >= 300, 30_000)
  t.same(seen, [...Array(300).keys()], 'every message once, in order')
  t.ok(sizes.length < 60, `300 record batches in ${sizes.length} handler calls (sizes ${sizes.join(',')})`)
  t.ok(Math.max(...sizes) >= 20, `the largest call took ${Math.max(...sizes)} messages`)

  // What was handled is committed: a new member of the group starts after it.
  await consumer.close()
  await producer.publish(topic, 'k', { n: 300 })
  const again: number[] = []
  const next = await consumerBus.subscribe({ groupId: `queue-group-${process.pid}`, topics: [topic], handler: async (m) => void again.push((m.value as { n: number }).n) })
  t.teardown(() => next.close())
  await eventually(() => again.includes(300), 20_000)
  t.same(again, [300], 'after a clean close only the new message is read: the handled ones were committed')
})

t.test('a member whose queues are full (its handler stuck) still takes part when the group rebalances', async (t) => {
  const kafka = await startKafka(t, { brokers: 1, deployTopics: false })
  const topic = `queue-full-${process.pid}`
  await kafka.createTopic(topic, 2)
  const producer = await kafkaBus(t, kafka, 'queue-full-producer')
  // One produce: one record batch per partition, about 2,000 messages each, so a single fetch fills
  // each partition's queue past its cap (1,000) and the fetch loop waits for a drain.
  await producer.publishMany(topic, Array.from({ length: 4000 }, (_, n) => ({ key: `k${n}`, value: { n } })))

  let release: () => void = () => undefined
  const stuck = new Promise<void>((resolve) => (release = resolve))
  t.teardown(() => release())
  const handled = new Set<number>()
  const groupId = `queue-full-group-${process.pid}`
  const a = await kafkaBus(t, kafka, 'queue-full-a')
  let calls = 0
  await a.subscribe({
    groupId,
    topics: [topic],
    maxBatch: 100,
    batchHandler: async (messages) => {
      calls++
      await stuck
      for (const m of messages) handled.add((m.value as { n: number }).n)
    }
  })
  await eventually(() => calls >= 2, 15_000)
  await sleep(500)

  // A second member joins. The stuck one must rejoin in the rebalance, keeping one partition; waiting
  // on its queues instead, it misses the join window and the group goes on without it (the newcomer
  // takes both partitions), until its handler comes unstuck and it rejoins: another rebalance.
  const b = await kafkaBus(t, kafka, 'queue-full-b')
  const partitionsOfB = new Set<number>()
  await b.subscribe({
    groupId,
    topics: [topic],
    maxBatch: 100,
    batchHandler: async (messages) => {
      for (const m of messages) {
        partitionsOfB.add(m.partition)
        handled.add((m.value as { n: number }).n)
      }
    }
  })
  await eventually(() => partitionsOfB.size > 0, 15_000)
  await sleep(3000)
  t.equal(partitionsOfB.size, 1, `the newcomer got one partition, the stuck member kept the other (newcomer read ${[...partitionsOfB].join(', ')})`)

  release()
  await eventually(() => handled.size === 4000, 30_000)
  t.pass('every message handled once the handler came unstuck')
})
