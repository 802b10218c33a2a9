import { randomUUID } from 'node:crypto'
import t from 'tap'
import type { Bus } from '../../services/common/bus/types'
import { kafkaBus, startKafka } from '../support/infra'
import { eventually } from '../support/util'

/**
 * KAFKA_COMPRESSION: a consumer group that falls behind by more than a
 * partition's retention bytes loses what the broker dropped. librdkafka's
 * mock cluster keeps about 5 MB per partition, counted as the batches were
 * produced; gzip makes the same deliveries several times smaller, so a burst
 * that overflows the partition uncompressed fits in it compressed. The
 * uncompressed half of the case is what makes the compressed half mean
 * something: the same backlog, the same cluster, messages gone.
 */

const WORDS = 'the a launch team today new update thanks great event live join us watch read more about our product release week data city music game love time people world'.split(' ')
const MESSAGES = 9000

/** A delivery-shaped message of about 1 KB: the envelope the services carry, with post-like text. */
function delivery(i: number): Record<string, unknown> {
  const text = Array.from({ length: 40 }, (_, w) => WORDS[(i * 7 + w * 13) % WORDS.length]).join(' ')
  return {
    delivery_id: randomUUID(),
    app_id: '1000000000000000001',
    webhook_id: '1700000000000000001',
    subscription_id: String(1_800_000_000_000_000_000n + BigInt(i)),
    data: {
      event_uuid: randomUUID(),
      filter: { user_id: String(2_000_000_000 + (i % 24)) },
      event_type: 'post.create',
      tag: 'bench',
      payload: { id: String(1_900_000_000_000_000_000n + BigInt(i)), author_id: String(2_000_000_000 + (i % 24)), text, created_at: new Date(1_780_000_000_000 + i).toISOString(), lang: 'en', public_metrics: { like_count: i % 97, reply_count: i % 13, repost_count: i % 31 } },
      includes: {}
    }
  }
}

/** Publishes MESSAGES on one key (one partition) with nobody reading, then counts what a group reading from the start gets. */
async function backlogSurvivors(bus: Bus, topic: string): Promise<{ seen: number; first: number }> {
  for (let start = 0; start < MESSAGES; start += 500) {
    await bus.publishMany(topic, Array.from({ length: 500 }, (_, k) => ({ key: 'one-user', value: delivery(start + k) })))
  }
  const ns: number[] = []
  await bus.subscribe({
    groupId: `g-${topic}`,
    topics: [topic],
    fromBeginning: true,
    batchHandler: async (batch) => void ns.push(...batch.map((m) => Number((m.value as { subscription_id: string }).subscription_id.slice(-6))))
  })
  // The last message is always kept: read until it is in.
  await eventually(() => ns.includes(MESSAGES - 1), 60_000)
  return { seen: new Set(ns).size, first: Math.min(...ns) }
}

t.test('gzip batches: a group ~9 MB behind on one partition still reads every message the mock would otherwise drop', async (t) => {
  const kafka = await startKafka(t, { brokers: 1, deployTopics: false, extraTopics: ['backlog.gzip:1', 'backlog.none:1'] })
  const gzip = await kafkaBus(t, kafka, 'compression-gzip', { compression: 'gzip' })
  const none = await kafkaBus(t, kafka, 'compression-none', { compression: 'none' })

  const plain = await backlogSurvivors(none, 'backlog.none')
  t.ok(plain.seen < MESSAGES, `uncompressed, the partition overflowed: ${plain.seen} of ${MESSAGES} left, from #${plain.first}`)

  const packed = await backlogSurvivors(gzip, 'backlog.gzip')
  t.equal(packed.seen, MESSAGES, 'gzip: every message is still there')
  t.equal(packed.first, 0, 'from the first one')
})
