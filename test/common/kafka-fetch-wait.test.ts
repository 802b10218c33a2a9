import t from 'tap'
import type { Consumer } from '../../services/common/bus/types'
import { kafkaBus, startKafka } from '../support/infra'
import { sleep } from '../support/util'

/**
 * A background subscription (an index, a history) fetches with the longer
 * wait (KAFKA_BACKGROUND_FETCH_MAX_WAIT): an idle process polls the brokers
 * less. Counted on kafkajs's own fetch events of idle consumers on the mock
 * cluster, which answers an empty fetch only after the whole wait.
 */

function fetchesOf(consumer: Consumer): () => number {
  // The kafkajs consumer inside the bus's (kafka-consumer.ts): its FETCH events are the fetches made.
  const inner = (consumer as unknown as { consumer: { on(event: string, listener: () => void): void; events: { FETCH: string } } }).consumer
  let n = 0
  inner.on(inner.events.FETCH, () => n++)
  return () => n
}

t.test('an idle background consumer fetches at its longer wait, an event-path one at the short wait', async (t) => {
  const kafka = await startKafka(t, { brokers: 1, deployTopics: false })
  const topic = `fetch-wait-${process.pid}`
  await kafka.createTopic(topic, 1)
  const bus = await kafkaBus(t, kafka, 'fetch-wait', { maxWaitTimeMs: 100, backgroundMaxWaitTimeMs: 1000 })
  const eventPath = await bus.subscribe({ groupId: `fetch-wait-fast-${process.pid}`, topics: [topic], handler: async () => undefined })
  const background = await bus.subscribe({ groupId: `fetch-wait-slow-${process.pid}`, topics: [topic], handler: async () => undefined, background: true })
  t.teardown(() => Promise.all([eventPath.close(), background.close()]))
  const fast = fetchesOf(eventPath)
  const slow = fetchesOf(background)
  await sleep(3000)
  t.ok(fast() >= 10, `the event-path consumer fetched ${fast()} times in 3 s (100 ms wait)`)
  t.ok(slow() <= 5, `the background consumer fetched ${slow()} times in 3 s (1 s wait)`)
})
