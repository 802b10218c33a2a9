import { scheduleSize } from '../../services/webhooks/delivery/schedule'
import t from 'tap'
import { RedisStore } from '../../services/common/store/redis'
import { createLogger } from '../../services/common/logger'
import { kafkaBus, startKafka, startRedis } from '../support/infra'
import { runDeliveryCases } from '../support/fixtures/webhook-delivery-cases'
import { collectDeadLetters, deliveryMessage, publishDeliveries, registerWebhook, startWebhooks } from '../support/fixtures/webhooks'
import { metricsText, metricValue } from '../support/metrics'
import { eventually } from '../support/util'

/**
 * The distributed set-up: the bus on a real Kafka-protocol cluster (librdkafka's
 * mock cluster, 3 brokers) and the state in a real Redis. The same delivery
 * rules as in embedded mode (test/support/fixtures/webhook-delivery-cases.ts), then a restart of the
 * service with retries pending.
 */

const redisLog = () => createLogger('silent', 'redis-store')

t.test('deliveries, retries, dead letters and a restart with the bus on Kafka and the store on Redis', async (t) => {
  const kafka = await startKafka(t)
  const redis = await startRedis(t)
  // Six attempts: the deliveries left pending at the restart below must not run out of attempts in the
  // moment between the receiver's third 502 and the first process's close (its scheduler stops at once).
  const env = { WEBHOOK_RETRY_SCHEDULE: '0,300ms,300ms,300ms,300ms,300ms' }
  const open = () => RedisStore.connect(redis.url, redisLog())

  const rt1 = await startWebhooks(t, { bus: await kafkaBus(t, kafka, 'webhooks-kafka-1'), store: await open(), env, serviceName: 'webhooks' })
  const deadLetters = await collectDeadLetters(t, rt1)
  const { id, receiver, webhookId } = await registerWebhook(t, rt1)
  receiver.onPost = (p) => ({ status: p.body.includes('always-fails') ? 500 : p.body.includes('fails-once') && receiver.posts.filter((q) => q.body === p.body).length === 1 ? 500 : 200 })

  const plain = Array.from({ length: 5 }, (_, i) => deliveryMessage({ appId: id.app.id, webhookId, text: `plain ${i}` }))
  const once = deliveryMessage({ appId: id.app.id, webhookId, text: 'fails-once' })
  const dead = deliveryMessage({ appId: id.app.id, webhookId, text: 'always-fails' })
  await publishDeliveries(rt1, [...plain, once, dead])

  await eventually(() => receiver.accepted.length === 6, 30_000)
  t.same(receiver.accepted.map((p) => p.body).sort(), [...plain, once].map((m) => JSON.stringify(m.envelope)).sort())
  t.ok(receiver.posts.every((p) => p.signatureValid), 'every body verified by the receiver')
  await eventually(() => deadLetters.length === 1, 30_000)
  t.match(deadLetters[0], { delivery_id: dead.delivery_id, reason: 'exhausted', attempts: 6, last_status: 500 })

  // Restart with retries pending: the next service process (new Kafka client, same Redis) makes them.
  receiver.onPost = () => ({ status: 502 })
  const pending = Array.from({ length: 3 }, (_, i) => deliveryMessage({ appId: id.app.id, webhookId, text: `pending ${i}` }))
  const before = receiver.posts.length
  await publishDeliveries(rt1, pending)
  await eventually(() => receiver.posts.length === before + 3, 30_000)
  await rt1.close()
  receiver.onPost = () => ({ status: 200 })
  const rt2 = await startWebhooks(t, { bus: await kafkaBus(t, kafka, 'webhooks-kafka-2'), store: await open(), env, serviceName: 'webhooks' })
  // The new process first joins both consumer groups (the old member's leave, a rebalance), then its scheduler runs:
  // on a machine the rest of the suite keeps busy that took over 30 s once (a clean-clone run at four test jobs).
  await eventually(() => pending.every((m) => receiver.accepted.some((p) => p.body === JSON.stringify(m.envelope))), 60_000).catch((err: Error) => {
    const dead = deadLetters.filter((d) => pending.some((m) => m.delivery_id === d.delivery_id))
    throw new Error(`${err.message}; accepted ${receiver.accepted.filter((p) => p.body.includes('pending')).length} of 3, dead-lettered ${JSON.stringify(dead)}`)
  })
  t.pass('every pending retry happened after the restart')
  await eventually(async () => (await scheduleSize(rt2.ctx.store)) === 0, 10_000)
  t.equal(receiver.accepted.filter((p) => p.body.includes('pending')).length, 3, 'each delivered once')

  // Scale-out: a second process joins the webhooks-delivery group; the two split its partitions.
  const rt3 = await startWebhooks(t, { bus: await kafkaBus(t, kafka, 'webhooks-kafka-3'), store: await open(), env, serviceName: 'webhooks' })
  const delivered = async (rt: typeof rt2): Promise<number> => metricValue(await metricsText(rt), 'webhook_deliveries_total', { outcome: 'delivered' })
  const [base2, base3] = [await delivered(rt2), await delivered(rt3)]
  // One app, many users: keyed app_id:user_id, spread over the partitions of activity.deliveries.
  const spread = Array.from({ length: 48 }, (_, i) => deliveryMessage({ appId: id.app.id, webhookId, userId: String(3_000_000 + i), text: `spread ${i}` }))
  const posted = receiver.posts.length
  await publishDeliveries(rt2, spread)
  const bodies = new Set(spread.map((m) => JSON.stringify(m.envelope)))
  const got = (): string[] => receiver.accepted.map((p) => p.body).filter((b) => bodies.has(b))
  await eventually(() => new Set(got()).size === spread.length, 30_000)
  // The receiver counts a POST when it answers; the process counts it once the record is written.
  const counts = async (): Promise<[number, number]> => [(await delivered(rt2)) - base2, (await delivered(rt3)) - base3]
  const [by2, by3] = await eventually(async () => {
    const c = await counts()
    return c[0] + c[1] >= spread.length ? c : undefined
  }, 10_000)
  t.ok(by2 > 0 && by3 > 0, `both processes delivered (${by2} and ${by3})`)
  t.equal(by2 + by3, spread.length, 'between them, every delivery once')
  t.equal(got().length, spread.length, 'the receiver got each once: none lost, none doubled')
  t.equal(receiver.posts.length - posted, spread.length, 'and nothing else')
})

t.test('the delivery rules with the bus on Kafka and the store on Redis', async (t) => {
  const kafka = await startKafka(t)
  const redis = await startRedis(t)
  let started = 0
  // One cluster and one redis-server for every case; each case gets its own Redis database (1..15), so
  // its state (retry queue, log) is its own, and its own Kafka client. Deliveries and dead letters of
  // earlier cases are committed or filtered by webhook id.
  await runDeliveryCases(
    t,
    {
      async start(tt, env = {}) {
        started++
        if (started > 15) throw new Error('more cases than Redis databases')
        const store = await RedisStore.connect(`${redis.url}/${started}`, redisLog())
        const bus = await kafkaBus(tt, kafka, `webhooks-kafka-case-${started}`)
        return startWebhooks(tt, { bus, store, env, serviceName: 'webhooks' })
      }
    },
    [
      'a timeout is a failed attempt',
      '410 Gone disables the webhook until a CRC passes',
      'Retry-After on 429 and 503 is honoured',
      'an invalid webhook receives nothing; a passing PUT brings its deliveries forward',
      'at most WEBHOOK_CONCURRENCY deliveries are in flight per webhook',
      'the cap belongs to each webhook: two on one origin both reach it, and a CRC does not queue behind them',
      'deliveries for a deleted webhook are dropped cleanly: no record, retry or dead letter'
    ]
  )
})
