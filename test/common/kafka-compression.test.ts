import { randomUUID } from 'node:crypto'
import path from 'node:path'
import t from 'tap'
import type { Bus, LagSource } from '../../services/common/bus/types'
import { goneLines, runLag } from '../../services/cli/ops'
import { loadConfig } from '../../services/common/config'
import { createContext } from '../../services/common/context'
import { createLogger } from '../../services/common/logger'
import { startRuntime } from '../../services/common/runtime'
import { MemoryStore } from '../../services/common/store/memory'
import { kafkaBus, startKafka } from '../support/infra'
import { eventually, tempDir } from '../support/util'

/**
 * KAFKA_COMPRESSION: a consumer group that falls behind by more than a
 * partition's retention bytes loses what the broker dropped. librdkafka's
 * mock cluster keeps about 5 MB per partition, counted as the batches were
 * produced; gzip makes the same deliveries several times smaller, so a burst
 * that overflows the partition uncompressed fits in it compressed. The
 * uncompressed half of the case is what makes the compressed half mean
 * something: the same backlog, the same cluster, messages gone.
 *
 * Where retention still loses messages, the loss is counted and shown: a
 * consumer that was reading the partition when the broker dropped what it had
 * not read yet reports the gap (GET /admin/bus/lag `gone`, /metrics
 * bus_messages_gone_total, `make lag` GONE and exit status 1).
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

t.test('messages the broker dropped under a reading group are counted: /admin/bus/lag, /metrics, make lag', async (t) => {
  const kafka = await startKafka(t, { brokers: 1, deployTopics: false, extraTopics: ['overflow:1'] })
  const bus = await kafkaBus(t, kafka, 'overflow', { compression: 'none' })
  const dataDir = tempDir(t)
  const token = 'overflow-test-operator-token-0123456789'
  const config = loadConfig({ PORT: '0', SANDBOX_PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent', DATA_DIR: dataDir, OPERATOR_TOKEN: token })
  const log = createLogger('silent', 'overflow')
  const store = await MemoryStore.open(path.join(dataDir, 'state'))
  const ctx = await createContext({ serviceName: 'overflow', config, bus, store, log })
  const runtime = await startRuntime({ services: [], ctx })
  t.teardown(() => runtime.close())

  // The group's handler holds its first batch while the backlog overflows the partition under it.
  let release: () => void = () => undefined
  const gate = new Promise<void>((resolve) => (release = resolve))
  t.teardown(() => release())
  const handled = new Set<number>()
  await bus.subscribe({
    groupId: 'g-overflow',
    topics: ['overflow'],
    batchHandler: async (batch) => {
      for (const m of batch) handled.add(Number(m.offset))
      await gate
    }
  })
  await bus.publish('overflow', 'one-user', delivery(0))
  await eventually(() => handled.has(0), 20_000)
  // Twice the backlog of the case above: more than the group fetches ahead before its queue is full.
  const total = 2 * MESSAGES
  for (let start = 1; start <= total; start += 500) {
    await bus.publishMany('overflow', Array.from({ length: Math.min(500, total + 1 - start) }, (_, k) => ({ key: 'one-user', value: delivery(start + k) })))
  }
  release()
  await eventually(() => handled.has(total), 60_000)
  const lost = total + 1 - handled.size
  t.ok(lost > 0, `the partition overflowed under the group: ${lost} of ${total + 1} never handled`)

  const gone = (bus as unknown as LagSource).gone()
  t.same(gone, [{ group: 'g-overflow', topic: 'overflow', partition: 0, messages: lost, resets: 1 }], 'the bus counted exactly the messages the handler never got (and kafkajs\'s one reset past them)')

  const headers = { authorization: `Bearer ${token}` }
  const report = (await (await fetch(`${runtime.baseUrl}/admin/bus/lag`, { headers })).json()) as { gone: unknown[] }
  t.same(report.gone, gone, 'GET /admin/bus/lag reports them')
  const metrics = await (await fetch(`${runtime.baseUrl}/metrics`)).text()
  t.match(metrics, new RegExp(`^bus_messages_gone_total\\{[^}]*group="g-overflow"[^}]*\\} ${lost}$`, 'm'), '/metrics counts them')
  t.match(metrics, /^bus_offset_resets_total\{[^}]*group="g-overflow"[^}]*\} 1$/m, 'and the reset')

  const lines: string[] = []
  const status = await runLag([], { out: (l = '') => void lines.push(l), err: (l) => void lines.push(l), env: { RUN_DIR: tempDir(t), OPERATOR_TOKEN: token, GATEWAY_URL: runtime.baseUrl } })
  t.equal(status, 1, 'make lag exits 1: messages were lost')
  t.match(lines.join('\n'), new RegExp(`^GONE\\s+g-overflow: ${lost} message\\(s\\) dropped by the broker before this group read them \\(overflow partition\\(s\\) 0\\)`, 'm'), 'and says which group lost how many, where')
})

t.test('a group that comes back after the broker dropped what it had not read: its reset is counted', async (t) => {
  const kafka = await startKafka(t, { brokers: 1, deployTopics: false, extraTopics: ['comeback:1'] })
  // Logging silenced, as in the tests: the reset is seen all the same.
  const bus = await kafkaBus(t, kafka, 'comeback', { compression: 'none', log: createLogger('silent', 'comeback') })
  const handled = new Set<number>()
  const subscribe = () => bus.subscribe({ groupId: 'g-comeback', topics: ['comeback'], batchHandler: async (batch) => void batch.forEach((m) => handled.add(Number(m.offset))) })
  // The group reads the first message and commits it; then nobody reads while the backlog overflows.
  const first = await subscribe()
  await bus.publish('comeback', 'one-user', delivery(0))
  await eventually(() => handled.has(0), 20_000)
  await first.close()
  const total = 2 * MESSAGES
  for (let start = 1; start <= total; start += 500) {
    await bus.publishMany('comeback', Array.from({ length: Math.min(500, total + 1 - start) }, (_, k) => ({ key: 'one-user', value: delivery(start + k) })))
  }
  await subscribe()
  await eventually(() => handled.has(total), 60_000)
  t.ok(total + 1 - handled.size > 0, `the partition overflowed while the group was away: ${total + 1 - handled.size} of ${total + 1} never handled`)
  // kafkajs committed its reset over the group's position before the first batch: the count is not known, the reset is.
  t.same((bus as unknown as LagSource).gone(), [{ group: 'g-comeback', topic: 'comeback', partition: 0, messages: 0, resets: 1 }], 'one reset of the partition, no count')
  const lines = goneLines((bus as unknown as LagSource).gone())
  t.match(lines, [/^GONE\s+g-comeback: its position reset past messages the broker dropped while it was away, how many not known \(comeback partition\(s\) 0\)/], 'make lag says the group lost messages, and that how many is not known')
})
