import { isScheduleKey, scheduleSize } from '../../services/webhooks/delivery/schedule'
import t, { type Test } from 'tap'
import type { Runtime } from '../../services/common/runtime'
import { MemoryStore } from '../../services/common/store/memory'
import type { Store } from '../../services/common/store/types'
import type { DeliveryRecord } from '../../services/webhooks/delivery-log'
import { WebhookKeys } from '../../services/webhooks/keys'
import { deliveryMessage, publishDeliveries, startWebhooks } from '../support/fixtures/webhooks'
import { bearerRequest } from '../support/http'
import { gate, startReceiver, type Receiver } from '../support/receivers'
import { createIdentity } from '../support/runtime'
import { tempDir, eventually } from '../support/util'
import { redisStore, startRedis } from '../support/infra'
import { callsSince, commandCalls, redisWrites, roundCountingStore } from '../support/store-rounds'

/**
 * The webhooks intake costs two store round trips per consumed batch,
 * whatever its size: one pipelined read (the batch's webhooks, apps and
 * existing records) and one store batch writing every record, log entry and
 * schedule entry of the deliveries not answered within FIRST_ATTEMPT_WAIT_MS
 * (this fixture's receiver holds every POST: all of them). Counted in memory
 * with a store that groups the calls of one event-loop turn into a round
 * (test/support/store-rounds.ts), and on Redis by the ioredis client's socket writes (one
 * auto-pipeline, one write) and Redis's own command counts. And deliveries
 * answered at once are written once each: their outcome is their only write.
 */

const WEBHOOKS = 3
const PER_WEBHOOK = 10

interface Fixture {
  rt: Runtime
  receiver: Receiver
  webhookIds: string[]
  messages: Array<Record<string, unknown>>
  release(): void
}

/** Three webhooks of one app on one receiver, which holds every POST until released: attempts write nothing meanwhile. */
async function fixture(t: Test, store: Store): Promise<Fixture> {
  const rt = await startWebhooks(t, { store, env: { WEBHOOK_LIMIT_PER_APP: String(WEBHOOKS), WEBHOOK_CONCURRENCY: String(PER_WEBHOOK), WEBHOOK_TIMEOUT: '10s' } })
  const id = await createIdentity(rt.ctx.store)
  const receiver = await startReceiver(t, id.app.consumer_secret, '/w0')
  const webhookIds: string[] = []
  for (let w = 0; w < WEBHOOKS; w++) {
    const res = await bearerRequest('POST', `${rt.baseUrl}/2/webhooks`, id.bearer, { json: { url: receiver.urlFor(`/w${w}`) } })
    if (res.status !== 200) throw new Error(`webhook registration failed: ${res.status} ${res.text}`)
    webhookIds.push(res.json<{ data: { id: string } }>().data.id)
  }
  const held = gate()
  receiver.onPost = () => ({ status: 200, release: held.promise })
  // One app, one user: one key, one partition, one consumed batch.
  const messages = Array.from({ length: WEBHOOKS * PER_WEBHOOK }, (_, i) => deliveryMessage({ appId: id.app.id, webhookId: webhookIds[i % WEBHOOKS], text: `intake ${i}` }))
  t.teardown(() => held.open())
  return { rt, receiver, webhookIds, messages, release: () => held.open() }
}

t.test('a batch of deliveries costs one pipelined read and one store batch (memory store, rounds counted)', async (t) => {
  const memory = await MemoryStore.open(tempDir(t, 'gw-intake-'))
  t.teardown(() => memory.close())
  const { store, rounds } = roundCountingStore(memory)
  const f = await fixture(t, store)
  const from = rounds.length
  await publishDeliveries(f.rt, f.messages)
  // Every first attempt started (held by the receiver), and stored as pending once the wait for them ended.
  await eventually(() => f.receiver.posts.length === f.messages.length, 10_000)
  await eventually(async () => (await memory.mgetJson<DeliveryRecord>(f.messages.map((m) => WebhookKeys.delivery(String(m.delivery_id))))).every((r) => r?.status === 'pending'), 10_000)
  const batchRounds = rounds.slice(from)
  const deliveryKeys = new Set(f.messages.map((m) => WebhookKeys.delivery(String(m.delivery_id))))

  const reads = batchRounds.filter((r) => r.some((c) => c.method !== 'batch' && c.keys.some((k) => deliveryKeys.has(k))))
  t.equal(reads.length, 1, `the batch's existing records were read in ${reads.length} round trip(s)`)
  const read = reads[0] ?? []
  t.same(read.filter((c) => c.method === 'mgetJson' && c.keys.some((k) => deliveryKeys.has(k))).flatMap((c) => c.keys).sort(), [...deliveryKeys].sort(), 'one read for every record of the batch')
  t.same(read.filter((c) => c.method === 'hgetall' && c.keys[0]?.startsWith('webhooks:config:')).map((c) => c.keys[0]).sort(), f.webhookIds.map((w) => WebhookKeys.config(w)).sort(), 'each webhook read once, in the same round trip')
  t.ok(read.some((c) => c.method === 'mgetJson' && c.keys.some((k) => k.startsWith('auth:app:'))), 'and the app with them')

  const writes = batchRounds.flat().filter((c) => c.method === 'batch' && c.keys.some((k) => deliveryKeys.has(k)))
  t.equal(writes.length, 1, `the records were written in ${writes.length} store batch(es)`)
  const ops = writes[0]?.ops ?? []
  t.equal(ops.filter((o) => o.op === 'set' && deliveryKeys.has(o.key)).length, f.messages.length, 'every record')
  t.equal(ops.filter((o) => o.op === 'zadd' && o.key.startsWith('webhooks:log:')).length, f.messages.length, 'every delivery-log entry')
  t.equal(ops.filter((o) => o.op === 'zadd' && isScheduleKey(o.key)).length, f.messages.length, 'every schedule entry')
  f.release()
  await eventually(() => f.receiver.inFlight === 0, 10_000)
})

t.test('on Redis the batch is one pipeline of reads and one MULTI/EXEC of writes', async (t) => {
  const redis = await startRedis(t)
  const store = await redisStore(t, redis)
  const f = await fixture(t, store)
  const before = await commandCalls(redis.url)
  const writes = redisWrites(store)
  t.teardown(() => writes.restore())
  await publishDeliveries(f.rt, f.messages)
  await eventually(() => f.receiver.posts.length === f.messages.length, 10_000)
  // Watched over a connection of its own: the socket writes counted are the service's.
  const watcher = await redisStore(t, redis)
  await eventually(async () => (await watcher.mgetJson<DeliveryRecord>(f.messages.map((m) => WebhookKeys.delivery(String(m.delivery_id))))).every((r) => r?.status === 'pending'), 10_000)
  const keyed = writes.writes.filter((w) => f.messages.some((m) => w.includes(WebhookKeys.delivery(String(m.delivery_id)))))
  t.equal(keyed.length, 2, `the batch's records went over the socket in ${keyed.length} writes (one read pipeline, one write batch)`)
  const [read, write] = keyed as [string, string]
  t.ok(f.messages.every((m) => read.includes(WebhookKeys.delivery(String(m.delivery_id)))), 'the read names every record')
  t.equal(f.webhookIds.filter((w) => read.includes(WebhookKeys.config(w))).length, WEBHOOKS, 'and every webhook, in the same pipeline')
  t.match(write.toLowerCase(), /^\*1\r\n\$5\r\nmulti\r\n[\s\S]*\r\nmset\r\n[\s\S]*\r\nexec\r\n$/, 'the write is one transaction, the records in one MSET')
  t.ok(f.messages.every((m) => write.includes(WebhookKeys.delivery(String(m.delivery_id)))), 'carrying every record')
  const calls = callsSince(before, await commandCalls(redis.url))
  t.equal(calls.get('hgetall'), WEBHOOKS, `Redis counted ${calls.get('hgetall')} webhook reads for ${f.messages.length} deliveries`)
  t.equal(calls.get('type'), undefined, 'no TYPE check of the keys written')
  const stored = await store.mgetJson<DeliveryRecord>(f.messages.map((m) => WebhookKeys.delivery(String(m.delivery_id))))
  t.ok(stored.every((r) => r?.status === 'pending'), 'every record stored')
  f.release()
  await eventually(() => f.receiver.inFlight === 0, 10_000)
})

t.test('on Redis a delivery answered at once is written once: its outcome, no pending record, no schedule entry', async (t) => {
  const redis = await startRedis(t)
  const store = await redisStore(t, redis)
  const f = await fixture(t, store)
  f.release()
  const before = await commandCalls(redis.url)
  await publishDeliveries(f.rt, f.messages)
  const keys = f.messages.map((m) => WebhookKeys.delivery(String(m.delivery_id)))
  await eventually(async () => (await store.mgetJson<DeliveryRecord>(keys)).every((r) => r?.status === 'delivered'), 10_000)
  const calls = callsSince(before, await commandCalls(redis.url))
  t.equal(calls.get('set'), f.messages.length, `one SET per delivery (${calls.get('set')} for ${f.messages.length}): the record as delivered`)
  t.equal(calls.get('mset'), undefined, 'no pending record was written')
  t.equal(calls.get('zrem'), undefined, 'no schedule entry to remove')
  t.ok((calls.get('zadd') ?? 0) < f.messages.length, `log and tail entries in fewer ZADDs than deliveries (${calls.get('zadd')})`)
  t.equal(await scheduleSize(store), 0, 'and nothing on the schedule')
  t.equal(calls.get('type'), undefined, 'no TYPE check')
  const records = await store.mgetJson<DeliveryRecord>(keys)
  t.ok(records.every((r) => r?.attempt_log?.length === 1 && r.attempts === 1), 'each record carries its one attempt')
  t.equal((await f.rt.ctx.store.zcard(WebhookKeys.log(f.webhookIds[0] as string))), PER_WEBHOOK, 'and is listed in its webhook log')
})
