import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import t, { type Test } from 'tap'
import { MemoryBus } from '../../services/common/bus/memory'
import { partitionFor } from '../../services/common/bus/partitioner'
import type { Bus, BusMessage, GroupOffsets, LagSource } from '../../services/common/bus/types'
import { StoreUnavailableError } from '../../services/common/store/unavailable'
import { EventValidationError, ValidatingBus } from '../../services/common/bus/validating'
import { loadConfig } from '../../services/common/config'
import { createBus } from '../../services/common/context'
import { createLogger } from '../../services/common/logger'
import { SchemaRegistry } from '../../services/common/schemas'
import { eventually, tempDir } from '../support/util'
import { kafkaBus, startKafka, type KafkaCluster } from '../support/infra'

/**
 * One contract, two buses: every case below runs unchanged against the
 * in-memory bus and against Kafka (librdkafka mock cluster, 3 brokers).
 */

const PARTITIONS = 6

interface Driver {
  readonly name: string
  /** A fresh bus (closed at the end of the test). */
  bus(t: Test, clientId: string): Promise<Bus>
  /** A fresh topic with PARTITIONS partitions. */
  topic(name: string): Promise<string>
  /** Real Kafka only: the cluster, for the crash case. */
  readonly kafka?: KafkaCluster
  /** Opens a bus on state that outlives it (a journal directory, the Kafka cluster); each call is a restart. */
  durable(t: Test, name: string): () => Promise<Bus>
}

let seq = 0
const unique = (base: string): string => `contract.${base}.${process.pid}.${++seq}`

function memoryDriver(): Driver {
  let shared: MemoryBus | undefined
  return {
    name: 'memory',
    // Members of one group must share one in-process bus, as in the embedded runtime.
    async bus(t) {
      if (!shared) {
        const bus = new MemoryBus(PARTITIONS, createLogger('silent', 'memory-bus'))
        shared = bus
        t.teardown(async () => {
          await bus.close()
          shared = undefined
        })
      }
      return shared
    },
    async topic(name) {
      return unique(name)
    },
    durable(t) {
      const dir = tempDir(t, 'gw-bus-')
      return async () => {
        const bus = new MemoryBus(PARTITIONS, createLogger('silent', 'memory-bus'), { dir })
        t.teardown(() => bus.close())
        return bus
      }
    }
  }
}

function kafkaDriver(kafka: KafkaCluster): Driver {
  return {
    name: 'kafka',
    kafka,
    bus: (t, clientId) => kafkaBus(t, kafka, clientId),
    async topic(name) {
      const topic = unique(name)
      await kafka.createTopic(topic, PARTITIONS)
      return topic
    },
    durable(t, name) {
      let n = 0
      return () => kafkaBus(t, kafka, `${name}-${++n}`)
    }
  }
}

/** Collects what a consumer's handler saw. */
function recorder(): { seen: BusMessage[]; handler: (m: BusMessage) => Promise<void> } {
  const seen: BusMessage[] = []
  return { seen, handler: async (m) => void seen.push(m) }
}

function contract(suite: Test, driver: Driver): void {
  suite.test('messages keep their order per key, land on the murmur2 partition, and carry value and headers', async (t) => {
    const d = driver
    const bus = await d.bus(t, 'order')
    const topic = await d.topic('order')
    const rec = recorder()
    await bus.subscribe({ groupId: unique('g-order'), topics: [topic], handler: rec.handler })
    const keys = ['alice', 'bob', 'carol', 'dave', 'erin', '1234567890123456789']
    const perKey = 15
    const before = Date.now()
    for (let i = 0; i < perKey; i++) {
      // Alternate single publishes and batches: both keep order.
      if (i % 2 === 0) for (const k of keys) await bus.publish(topic, k, { key: k, i }, { 'x-seq': String(i) })
      else await bus.publishMany(topic, keys.map((k) => ({ key: k, value: { key: k, i }, headers: { 'x-seq': String(i) } })))
    }
    await eventually(() => rec.seen.length >= keys.length * perKey, 15_000)
    t.equal(rec.seen.length, keys.length * perKey, 'each message once (no failure happened)')
    for (const k of keys) {
      const mine = rec.seen.filter((m) => m.key === k)
      t.same(mine.map((m) => (m.value as { i: number }).i), [...Array(perKey).keys()], `${k}: in publish order`)
      t.ok(mine.every((m) => m.partition === partitionFor(k, PARTITIONS)), `${k}: on partition ${partitionFor(k, PARTITIONS)}`)
    }
    const first = rec.seen[0] as BusMessage
    t.equal(first.topic, topic)
    t.equal(typeof first.offset, 'string')
    t.match(first.headers, { 'x-seq': /^\d+$/ }, 'headers arrive as strings')
    t.ok(first.timestamp >= before - 1000 && first.timestamp <= Date.now() + 1000, 'timestamp is the publish time')
  })

  suite.test('publishes issued concurrently keep their issue order per key', async (t) => {
    const d = driver
    const bus = await d.bus(t, 'concurrent')
    const topic = await d.topic('concurrent')
    const rec = recorder()
    await bus.subscribe({ groupId: unique('g-concurrent'), topics: [topic], handler: rec.handler })
    const calls: Array<Promise<void>> = []
    for (let i = 0; i < 200; i++) calls.push(bus.publish(topic, `k${i % 4}`, { i }))
    await Promise.all(calls)
    await eventually(() => rec.seen.length >= 200, 15_000)
    for (let k = 0; k < 4; k++) {
      const order = rec.seen.filter((m) => m.key === `k${k}`).map((m) => (m.value as { i: number }).i)
      t.same(order, [...order].sort((a, b) => a - b), `k${k}: in issue order`)
      t.equal(order.length, 50)
    }
  })

  suite.test('a throwing handler gets the message again, and later messages of that key wait', async (t) => {
    const d = driver
    const bus = await d.bus(t, 'retry')
    const topic = await d.topic('retry')
    const attempts: string[] = []
    const done: number[] = []
    let failuresLeft = 2
    await bus.subscribe({
      groupId: unique('g-retry'),
      topics: [topic],
      handler: async (m) => {
        const i = (m.value as { i: number }).i
        attempts.push(`${i}`)
        if (i === 2 && failuresLeft > 0) {
          failuresLeft--
          throw new Error('effect failed')
        }
        done.push(i)
      }
    })
    for (let i = 0; i < 6; i++) await bus.publish(topic, 'same-key', { i })
    await eventually(() => done.length === 6, 15_000)
    t.same(done, [0, 1, 2, 3, 4, 5], 'every message handled once, in order')
    t.same(attempts, ['0', '1', '2', '2', '2', '3', '4', '5'], 'message 2 redelivered twice; 3 waited until 2 succeeded')
  })

  suite.test('closing a member whose handler keeps failing does not wait out the backoff', async (t) => {
    const d = driver
    const bus = await d.bus(t, 'backoff')
    const topic = await d.topic('backoff')
    let attempts = 0
    const consumer = await bus.subscribe({
      groupId: unique('g-backoff'),
      topics: [topic],
      handler: async () => {
        attempts++
        throw new Error('downstream is down')
      }
    })
    await bus.publish(topic, 'k', { n: 1 })
    // The backoff doubles with every failure: after 7 the next wait is seconds long.
    await eventually(() => attempts >= 7, 15_000)
    const started = Date.now()
    await consumer.close()
    t.ok(Date.now() - started < 2500, `closed in ${Date.now() - started} ms`)
  })

  suite.test('a member that closes before its handler succeeded leaves the message to the next member', async (t) => {
    const d = driver
    const bus = await d.bus(t, 'handover')
    const topic = await d.topic('handover')
    const group = unique('g-handover')
    let release: (() => void) | undefined
    const gate = new Promise<void>((r) => (release = r))
    let firstGot = false
    const first = await bus.subscribe({
      groupId: group,
      topics: [topic],
      handler: async () => {
        firstGot = true
        await gate
        throw new Error('shutting down before the effect was durable')
      }
    })
    await bus.publish(topic, 'k', { n: 1 })
    await eventually(() => firstGot, 15_000)
    const closing = first.close()
    release?.()
    await closing
    const rec = recorder()
    await bus.subscribe({ groupId: group, topics: [topic], handler: rec.handler })
    await eventually(() => rec.seen.length === 1, 15_000)
    t.same(rec.seen[0]?.value, { n: 1 }, 'the uncommitted message is delivered to the next member')
  })

  suite.test('a member that closes gracefully commits what it handled: nothing is delivered twice', async (t) => {
    const d = driver
    const bus = await d.bus(t, 'graceful')
    const topic = await d.topic('graceful')
    const group = unique('g-graceful')
    const a = recorder()
    const first = await bus.subscribe({ groupId: group, topics: [topic], handler: a.handler })
    for (let i = 0; i < 12; i++) await bus.publish(topic, `k${i}`, { i })
    await eventually(() => a.seen.length === 12, 15_000)
    await first.close()
    const b = recorder()
    await bus.subscribe({ groupId: group, topics: [topic], handler: b.handler })
    await bus.publish(topic, 'k-after', { i: 99 })
    await eventually(() => b.seen.length >= 1, 15_000)
    await new Promise((r) => setTimeout(r, 300))
    t.same(b.seen.map((m) => m.value), [{ i: 99 }], 'only the new message reaches the next member')
  })

  suite.test('members of one group split the partitions; a third takes over when one leaves', async (t) => {
    const d = driver
    const bus = await d.bus(t, 'split')
    const topic = await d.topic('split')
    const group = unique('g-split')
    const a = recorder()
    const b = recorder()
    const c = recorder()
    const ca = await bus.subscribe({ groupId: group, topics: [topic], handler: a.handler })
    await bus.subscribe({ groupId: group, topics: [topic], handler: b.handler })
    const keys = Array.from({ length: 48 }, (_, i) => `user-${i}`)
    await bus.publishMany(topic, keys.map((k) => ({ key: k, value: { k, round: 1 } })))
    await eventually(() => new Set([...a.seen, ...b.seen].map((m) => m.key)).size === keys.length, 20_000)
    t.ok(a.seen.length > 0 && b.seen.length > 0, `both members work (a=${a.seen.length}, b=${b.seen.length})`)
    const pa = new Set(a.seen.map((m) => m.partition))
    const pb = new Set(b.seen.map((m) => m.partition))
    t.same([...pa].filter((p) => pb.has(p)), [], 'no partition is consumed by both')

    await ca.close()
    const aBefore = a.seen.length
    await bus.subscribe({ groupId: group, topics: [topic], handler: c.handler })
    await bus.publishMany(topic, keys.map((k) => ({ key: k, value: { k, round: 2 } })))
    const round2 = (): BusMessage[] => [...b.seen, ...c.seen].filter((m) => (m.value as { round: number }).round === 2)
    await eventually(() => new Set(round2().map((m) => m.key)).size === keys.length, 20_000)
    t.equal(a.seen.length, aBefore, 'the member that left gets nothing more')
    t.ok(c.seen.some((m) => (m.value as { round: number }).round === 2), 'the new member took over partitions')
  })

  suite.test('after a restart the uncommitted messages are delivered again and the committed ones are not', async (t) => {
    const d = driver
    const open = d.durable(t, 'restart')
    const topic = await d.topic('restart')
    const group = unique('g-restart')
    const first = await open()
    const tried: number[] = []
    const consumer = await first.subscribe({
      groupId: group,
      topics: [topic],
      handler: async (m) => {
        const i = (m.value as { i: number }).i
        tried.push(i)
        if (i >= 4) throw new Error('the effect is not durable yet')
      }
    })
    for (let i = 0; i < 10; i++) await first.publish(topic, 'k', { i })
    await eventually(() => tried.includes(4), 15_000)
    await consumer.close()
    await first.close()
    t.same([...new Set(tried)], [0, 1, 2, 3, 4], 'the first run handled 0..3 and failed on 4')

    const second = await open()
    const rec = recorder()
    await second.subscribe({ groupId: group, topics: [topic], handler: rec.handler })
    await second.publish(topic, 'k', { i: 10 })
    await eventually(() => rec.seen.some((m) => (m.value as { i: number }).i === 10), 20_000)
    t.same(rec.seen.map((m) => (m.value as { i: number }).i), [4, 5, 6, 7, 8, 9, 10], 'exactly the uncommitted messages, in order, then the new one')
  })

  suite.test('a batch handler gets one partition at a time, in order per key, at most maxBatch messages per call', async (t) => {
    const bus = await driver.bus(t, 'batch')
    const topic = await driver.topic('batch')
    const batches: BusMessage[][] = []
    await bus.subscribe({ groupId: unique('g-batch'), topics: [topic], maxBatch: 25, batchHandler: async (ms) => void batches.push(ms) })
    const keys = Array.from({ length: 8 }, (_, i) => `user-${i}`)
    await bus.publishMany(topic, Array.from({ length: 400 }, (_, i) => ({ key: keys[i % keys.length] as string, value: { i } })))
    await eventually(() => batches.flat().length >= 400, 15_000)
    const seen = batches.flat()
    t.equal(seen.length, 400, 'each message once')
    t.ok(batches.every((b) => b.length >= 1 && b.length <= 25), `batch sizes within 1..25 (${Math.min(...batches.map((b) => b.length))}..${Math.max(...batches.map((b) => b.length))})`)
    t.ok(batches.every((b) => b.every((m) => m.partition === b[0]?.partition && m.topic === topic)), 'a batch holds one partition')
    t.ok(batches.some((b) => b.length > 1), 'messages arrive several at a time')
    for (const k of keys) {
      const order = seen.filter((m) => m.key === k).map((m) => (m.value as { i: number }).i)
      t.same(order, [...order].sort((a, b) => a - b), `${k}: in publish order`)
    }
  })

  suite.test('a batch handler that reports a durable prefix has it committed; the rest comes again from the first undone message', async (t) => {
    const open = driver.durable(t, 'prefix')
    const topic = await driver.topic('prefix')
    const group = unique('g-prefix')
    const first = await open()
    const calls: number[][] = []
    const consumer = await first.subscribe({
      groupId: group,
      topics: [topic],
      batchHandler: async (ms) => {
        const values = ms.map((m) => (m.value as { i: number }).i)
        calls.push(values)
        // 0..3 are durable; 4 is not, whatever is retried.
        const done = values.filter((i) => i < 4).length
        return done === ms.length ? undefined : { done, error: new Error('effect of 4 not durable') }
      }
    })
    await first.publishMany(topic, Array.from({ length: 10 }, (_, i) => ({ key: 'k', value: { i } })))
    await eventually(() => calls.filter((c) => c[0] === 4).length >= 2, 15_000)
    t.ok(calls.slice(calls.findIndex((c) => c.includes(4)) + 1).every((c) => c[0] === 4), 'after the failure every call starts at the first undone message')
    await consumer.close()
    await first.close()

    const second = await open()
    const rec = recorder()
    await second.subscribe({ groupId: group, topics: [topic], batchHandler: async (ms) => void rec.seen.push(...ms) })
    await eventually(() => rec.seen.length >= 6, 20_000)
    await new Promise((r) => setTimeout(r, 200))
    t.same(rec.seen.map((m) => (m.value as { i: number }).i), [4, 5, 6, 7, 8, 9], 'the committed prefix is not delivered again; everything after it is')
  })

  suite.test('a message that always fails goes to the dead-letter topic after its attempts; its partition moves on', async (t) => {
    const bus = await driver.bus(t, 'poison')
    const topic = await driver.topic('poison')
    const deadLetters = await driver.topic('poison-dl')
    const group = unique('g-poison')
    const handled: number[] = []
    let poisonAttempts = 0
    await bus.subscribe({
      groupId: group,
      topics: [topic],
      maxAttempts: 3,
      deadLetterTopic: deadLetters,
      handler: async (m) => {
        const v = m.value as { i: number; poison?: boolean }
        if (v.poison) {
          poisonAttempts++
          throw new TypeError('cannot read the payload')
        }
        handled.push(v.i)
      }
    })
    const dead = recorder()
    await bus.subscribe({ groupId: unique('g-dl-reader'), topics: [deadLetters], handler: dead.handler })
    await bus.publishMany(topic, [0, 1, 2, 3].map((i) => ({ key: 'same', value: i === 1 ? { i, poison: true } : { i } })))
    await eventually(() => handled.length === 3 && dead.seen.length === 1, 20_000)
    t.same(handled, [0, 2, 3], 'the messages behind the poison one were handled, in order')
    t.equal(poisonAttempts, 3, 'the poison message was tried maxAttempts times')
    const record = dead.seen[0]?.value as Record<string, unknown>
    t.match(record, { group, topic, key: 'same', value: { i: 1, poison: true }, error: 'cannot read the payload', attempts: 3 }, 'the dead letter says what, where and why')
    t.equal(dead.seen[0]?.key, 'same', 'keyed like the original')
  })

  suite.test('a batch handler failing at a message in the middle of its batch: the prefix is committed once, the message is dead-lettered, the rest follows in order', async (t) => {
    const bus = await driver.bus(t, 'batch-poison')
    const topic = await driver.topic('batch-poison')
    const deadLetters = await driver.topic('batch-poison-dl')
    const group = unique('g-batch-poison')
    const POISON = 4
    const calls: number[][] = []
    const effects: number[] = []
    const dead = recorder()
    // Both join at once (a Kafka group join takes seconds).
    await Promise.all([
      bus.subscribe({ groupId: unique('g-batch-poison-dl'), topics: [deadLetters], handler: dead.handler }),
      bus.subscribe({
        groupId: group,
        topics: [topic],
        maxBatch: 50,
        maxAttempts: 3,
        deadLetterTopic: deadLetters,
        batchHandler: async (ms) => {
          const values = ms.map((m) => (m.value as { i: number }).i)
          calls.push(values)
          // Effects one at a time, like a handler writing as it goes; the poison one always fails.
          for (let n = 0; n < ms.length; n++) {
            if (values[n] === POISON) return { done: n, error: new TypeError(`cannot read payload ${POISON}`) }
            effects.push(values[n] as number)
          }
        }
      })
    ])
    // One publish, one key: one partition, fetched and handed over as one batch.
    await bus.publishMany(topic, Array.from({ length: 10 }, (_, i) => ({ key: 'same', value: { i } })))
    await eventually(() => effects.includes(9) && dead.seen.length === 1, 20_000)

    const first = calls.findIndex((c) => c.includes(POISON))
    t.ok((calls[first] ?? []).indexOf(POISON) > 0 && (calls[first] ?? []).at(-1) === 9, `the poison message sat in the middle of a batch (${JSON.stringify(calls[first])})`)
    const retries = calls.slice(first + 1)
    const onPoison = retries.filter((c) => c[0] === POISON)
    t.equal(onPoison.length, 2, 'retried from the poison message until maxAttempts (3 tries in all)')
    t.ok(retries.every((c) => (c[0] as number) >= POISON), 'no call after the failure went back behind the poison message: the prefix was committed')
    t.same(effects.filter((i) => i < POISON), [0, 1, 2, 3], 'the prefix was handled once')
    t.same(retries.at(-1)?.[0], POISON + 1, 'after the dead letter the partition moved on past it')
    t.same([...new Set(effects)], [0, 1, 2, 3, 5, 6, 7, 8, 9], 'everything but the poison message handled, in order, none lost')
    t.equal(effects.length, 9, 'none handled twice (one stable member: nothing for the at-least-once allowance to repeat)')

    const letter = dead.seen[0] as BusMessage
    const record = letter.value as Record<string, unknown>
    t.match(record, { group, topic, partition: partitionFor('same', PARTITIONS), key: 'same', value: { i: POISON }, error: `cannot read payload ${POISON}`, attempts: 3 }, 'the dead letter names group, position and last error')
    t.equal(String(record.offset), String(POISON), 'with the offset of the poison message (a fresh topic starts at 0)')
    t.equal(letter.key, 'same', 'keyed like the original')
    const lagSource = bus as unknown as Partial<LagSource>
    if (lagSource.groupOffsets) {
      const groupOffsets = lagSource.groupOffsets.bind(bus)
      const committed = async (): Promise<GroupOffsets | undefined> => (await groupOffsets([group])).find((o) => o.topic === topic && o.partition === partitionFor('same', PARTITIONS))
      const end = await eventually(async () => {
        const o = await committed()
        return o && o.committed === o.end ? o : undefined
      }, 10_000)
      t.equal(end.committed, 10, 'the group committed through the end of the partition, past the dead-lettered message')
    }
  })

  suite.test('an outage (store unreachable) is waited out: it never dead-letters', async (t) => {
    const bus = await driver.bus(t, 'outage-dl')
    const topic = await driver.topic('outage-dl')
    const deadLetters = await driver.topic('outage-dl-dl')
    let failures = 0
    const rec = recorder()
    await bus.subscribe({
      groupId: unique('g-outage-dl'),
      topics: [topic],
      maxAttempts: 2,
      deadLetterTopic: deadLetters,
      batchHandler: async (ms) => {
        if (failures < 5) {
          failures++
          return { done: 0, error: new Error('could not write', { cause: new StoreUnavailableError('redis unavailable (reconnecting)') }) }
        }
        rec.seen.push(...ms)
      }
    })
    const dead = recorder()
    await bus.subscribe({ groupId: unique('g-outage-dl-reader'), topics: [deadLetters], handler: dead.handler })
    await bus.publish(topic, 'k', { i: 0 })
    await eventually(() => rec.seen.length === 1, 20_000)
    await new Promise((r) => setTimeout(r, 200))
    t.equal(failures, 5, 'failed more often than maxAttempts')
    t.same(dead.seen, [], 'nothing was dead-lettered')
  })

  suite.test('a schema-invalid event is refused at publish with the reason', async (t) => {
    const d = driver
    const topic = await d.topic('schema')
    const dir = tempDir(t, 'gw-schemas-')
    fs.mkdirSync(path.join(dir, 'events'))
    fs.writeFileSync(
      path.join(dir, 'events', `${topic}.json`),
      JSON.stringify({
        type: 'object',
        required: ['event_uuid', 'user_id'],
        additionalProperties: false,
        properties: { event_uuid: { type: 'string', format: 'uuid' }, user_id: { type: 'string', pattern: '^[0-9]{1,19}$' } }
      })
    )
    const bus = new ValidatingBus(await d.bus(t, 'schema'), new SchemaRegistry(dir))
    const rec = recorder()
    await bus.subscribe({ groupId: unique('g-schema'), topics: [topic], handler: rec.handler })
    const err = await bus.publish(topic, '1', { event_uuid: 'not-a-uuid', user_id: '12' }).catch((e: unknown) => e)
    t.type(err, EventValidationError)
    t.match((err as Error).message, new RegExp(`event refused for topic ${topic.replace(/\./g, '\\.')}: /event_uuid must match format "uuid"`))
    await t.rejects(bus.publishMany(topic, [{ key: '1', value: { event_uuid: crypto.randomUUID(), user_id: '1' } }, { key: '2', value: { user_id: 'x' } }]), /is missing "event_uuid"/, 'one bad message refuses the whole batch')
    await t.rejects(bus.publish(unique('undescribed'), '1', {}), /no schema schemas\/events\//, 'a topic without a schema is refused')
    const good = { event_uuid: crypto.randomUUID(), user_id: '42' }
    await bus.publish(topic, '42', good)
    await eventually(() => rec.seen.length === 1, 15_000)
    await new Promise((r) => setTimeout(r, 200))
    t.same(rec.seen.map((m) => m.value), [good], 'consumers only ever see the valid event')
  })
}

t.test('memory bus', async (t) => {
  const d = memoryDriver()
  contract(t, d)

  t.test('the journal survives kill -9: accepted messages are delivered after the restart, committed ones are not', async (t) => {
    const dir = tempDir(t, 'gw-bus-crash-')
    const topic = unique('crash')
    // A child publishes 10, handles (and commits) 0..3, hangs in the handler of 4, and is killed.
    const script = `
      const { MemoryBus } = require(${JSON.stringify(path.join(__dirname, '..', '..', 'services', 'common', 'bus', 'memory.ts'))})
      const bus = new MemoryBus(${PARTITIONS}, undefined, { dir: ${JSON.stringify(dir)} })
      setInterval(() => undefined, 1000) // alive until killed: nothing else holds the event loop
      ;(async () => {
        for (let i = 0; i < 10; i++) await bus.publish(${JSON.stringify(topic)}, 'k', { i })
        await bus.subscribe({ groupId: 'g', topics: [${JSON.stringify(topic)}], handler: async (m) => {
          if (m.value.i < 4) return
          process.stdout.write('stuck\\n')
          await new Promise(() => undefined)
        } })
      })()
    `
    const child = spawn(process.execPath, ['--import=tsx', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] })
    t.teardown(() => {
      child.kill('SIGKILL')
    })
    let out = ''
    child.stdout.on('data', (c: Buffer) => (out += c.toString()))
    const exited = new Promise((r) => child.once('exit', r))
    await eventually(() => out.includes('stuck'), 30_000)
    t.equal(child.exitCode, null, 'the child is still running when it is killed')
    child.kill('SIGKILL')
    await exited

    const bus = new MemoryBus(PARTITIONS, createLogger('silent', 'memory-bus'), { dir })
    t.teardown(() => bus.close())
    const rec = recorder()
    await bus.subscribe({ groupId: 'g', topics: [topic], handler: rec.handler })
    await bus.publish(topic, 'k', { i: 10 })
    await eventually(() => rec.seen.length >= 7, 15_000)
    t.same(rec.seen.map((m) => (m.value as { i: number }).i), [4, 5, 6, 7, 8, 9, 10], 'nothing accepted was lost, nothing committed came back')
    t.same(rec.seen.map((m) => m.offset), ['4', '5', '6', '7', '8', '9', '10'], 'offsets continue where they were')
  })

  t.test('killed mid-batch (kill -9): the whole uncommitted batch is delivered after the restart', async (t) => {
    const dir = tempDir(t, 'gw-bus-crash-batch-')
    const topic = unique('crash-batch')
    const script = `
      const { MemoryBus } = require(${JSON.stringify(path.join(__dirname, '..', '..', 'services', 'common', 'bus', 'memory.ts'))})
      const bus = new MemoryBus(${PARTITIONS}, undefined, { dir: ${JSON.stringify(dir)} })
      setInterval(() => undefined, 1000)
      ;(async () => {
        await bus.publishMany(${JSON.stringify(topic)}, Array.from({ length: 20 }, (_, i) => ({ key: 'k', value: { i } })))
        await bus.subscribe({ groupId: 'g', topics: [${JSON.stringify(topic)}], batchHandler: async (ms) => {
          process.stdout.write('stuck ' + ms.length + '\\n')
          await new Promise(() => undefined)
        } })
      })()
    `
    const child = spawn(process.execPath, ['--import=tsx', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] })
    t.teardown(() => {
      child.kill('SIGKILL')
    })
    let out = ''
    child.stdout.on('data', (c: Buffer) => (out += c.toString()))
    const exited = new Promise((r) => child.once('exit', r))
    await eventually(() => out.includes('stuck 20'), 30_000)
    child.kill('SIGKILL')
    await exited
    const bus = new MemoryBus(PARTITIONS, createLogger('silent', 'memory-bus'), { dir })
    t.teardown(() => bus.close())
    const rec = recorder()
    await bus.subscribe({ groupId: 'g', topics: [topic], batchHandler: async (ms) => void rec.seen.push(...ms) })
    await eventually(() => rec.seen.length >= 20, 15_000)
    t.same(rec.seen.map((m) => (m.value as { i: number }).i), [...Array(20).keys()], 'the batch the dead process held comes again, whole and in order')
  })

  t.test('a topic no group reads stays bounded, in memory and on disk', async (t) => {
    const dir = tempDir(t, 'gw-bus-bounded-')
    const topic = unique('unread')
    const open = (): MemoryBus => new MemoryBus(PARTITIONS, createLogger('silent', 'memory-bus'), { dir, maxUnreadPerPartition: 5 })
    const first = open()
    for (let i = 0; i < 12; i++) await first.publishMany(topic, Array.from({ length: 1000 }, (_, j) => ({ key: 'dead', value: { i: i * 1000 + j, pad: 'x'.repeat(100) } })))
    const file = path.join(dir, `${topic}.log`)
    t.ok(fs.statSync(file).size < 2 * 1024 * 200, `the journal was compacted (${fs.statSync(file).size} bytes for 12000 messages of ~130 bytes)`)
    await first.close()

    const second = open()
    t.teardown(() => second.close())
    const rec = recorder()
    await second.subscribe({ groupId: unique('g-late'), topics: [topic], handler: rec.handler })
    await second.publish(topic, 'dead', { i: 12_000 })
    await eventually(() => rec.seen.some((m) => (m.value as { i: number }).i === 12_000), 15_000)
    t.same(rec.seen.map((m) => (m.value as { i: number }).i), [11_995, 11_996, 11_997, 11_998, 11_999, 12_000], 'only the newest maxUnreadPerPartition survived the restart')
    t.equal(rec.seen[0]?.offset, '11995', 'offsets were kept across the compaction')
  })

  t.test('messages older than the topic retention are dropped; committed ones leave the journal', async (t) => {
    const dir = tempDir(t, 'gw-bus-retention-')
    const topic = unique('retention')
    // Long while the reader works through the burst (a slow machine must not age unread messages out),
    // short once the old message is published.
    let retentionMs = 10 * 60_000
    const open = (): MemoryBus => new MemoryBus(PARTITIONS, createLogger('silent', 'memory-bus'), { dir, retentionMs: () => retentionMs })
    const first = open()
    const reader = recorder()
    const group = unique('g-reader')
    const consumer = await first.subscribe({ groupId: group, topics: [topic], handler: reader.handler })
    await first.publishMany(topic, Array.from({ length: 12_000 }, (_, i) => ({ key: `k${i % 3}`, value: { i } })))
    await eventually(() => reader.seen.length === 12_000, 30_000)
    await consumer.close()
    t.ok(fs.statSync(path.join(dir, `${topic}.log`)).size < 200 * 1024, 'committed messages were compacted out of the journal')
    retentionMs = 300
    const old = Date.now()
    await first.publish(topic, 'k0', { i: 'old' })
    await first.close()
    // Time passing, not an event being awaited: the old message must age past the retention.
    await new Promise((r) => setTimeout(r, old + retentionMs + 50 - Date.now()))

    const second = open()
    t.teardown(() => second.close())
    const late = recorder()
    await second.subscribe({ groupId: unique('g-new'), topics: [topic], handler: late.handler })
    await second.publish(topic, 'k0', { i: 'new' })
    await eventually(() => late.seen.length >= 1, 15_000)
    t.same(late.seen.map((m) => m.value), [{ i: 'new' }], 'the expired message is gone; a new group starts at what is kept')
    const positions = await second.groupOffsets([group])
    t.equal(positions.reduce((n, o) => n + o.committed, 0), 12_000, 'the reader group kept its committed positions across the restart')
  })

  t.test('a journal written with another partition count is refused with the remedy', async (t) => {
    const dir = tempDir(t, 'gw-bus-parts-')
    await new MemoryBus(PARTITIONS, undefined, { dir }).close()
    t.throws(() => new MemoryBus(PARTITIONS + 1, undefined, { dir }), new RegExp(`written with ${PARTITIONS} partitions per topic, not ${PARTITIONS + 1}: set BUS_PARTITIONS=${PARTITIONS}`))
  })

  t.test('the embedded bus journals to DATA_DIR/bus', async (t) => {
    const dataDir = tempDir(t, 'gw-data-')
    const bus = await createBus(loadConfig({ DATA_DIR: dataDir }), 'embedded', createLogger('silent', 'embedded'))
    t.teardown(() => bus.close())
    const topic = unique('embedded')
    await bus.publish(topic, 'k', { n: 1 })
    t.match(fs.readFileSync(path.join(dataDir, 'bus', `${topic}.log`), 'utf8'), /"v":\{"n":1\}/)
  })
})

t.test('kafka bus (mock cluster)', { jobs: 11 }, async (t) => {
  const kafka = await startKafka(t)
  const d = kafkaDriver(kafka)
  contract(t, d)

  t.test('a publish refused by the broker fails alone; publishes sharing its request succeed', async (t) => {
    // Its own cluster: injected errors hit whichever produce request comes next.
    const own = await startKafka(t, { brokers: 1, extraTopics: ['refusal:1'] })
    const bus = await kafkaBus(t, own, 'refusal')
    await bus.publish('refusal', 'warm-up', { x: 0 })
    // TOPIC_AUTHORIZATION_FAILED (not retriable) for the shared request, then for the first retry alone.
    await own.pushRequestErrors(0, 29, 29)
    const [first, second] = await Promise.allSettled([bus.publish('refusal', 'a', { x: 1 }), bus.publish('refusal', 'b', { x: 2 })])
    t.equal(first.status, 'rejected', 'the refused publish fails')
    t.match(first.status === 'rejected' ? String(first.reason) : '', /authoriz/i, 'with the broker’s reason')
    t.equal(second.status, 'fulfilled', 'the publish that shared its request is sent again on its own')
    await bus.publish('refusal', 'c', { x: 3 })
    t.pass('the producer keeps working')
  })

  t.test('a 2 s outage of every broker: publishes made during it complete after, consumption resumes in order', async (t) => {
    // Its own cluster: the outage must not disturb the cases running alongside.
    const own = await startKafka(t, { extraTopics: ['outage:6'] })
    const bus = await kafkaBus(t, own, 'outage')
    const rec = recorder()
    await bus.subscribe({ groupId: unique('g-outage'), topics: ['outage'], handler: rec.handler })
    for (let i = 0; i < 5; i++) await bus.publish('outage', 'k', { i })
    await eventually(() => rec.seen.length === 5, 15_000)
    await own.setBrokerDown(-1)
    const during = Promise.all([5, 6, 7].map((i) => bus.publish('outage', 'k', { i })))
    await new Promise((r) => setTimeout(r, 2000))
    await own.setBrokerUp(-1)
    await during
    await eventually(() => rec.seen.length >= 8, 30_000)
    const order = rec.seen.map((m) => (m.value as { i: number }).i)
    t.same([...new Set(order)], [0, 1, 2, 3, 4, 5, 6, 7], 'every message, in order (a redelivery may repeat one)')
  })

  t.test('a member killed mid-handler (no commit, no leave) has its message redelivered to another member', async (t) => {
    const topic = await d.topic('crash')
    const group = unique('g-crash')
    const { child, output } = await startStuckConsumer(t, kafka.brokers, topic, group)
    const bus = await d.bus(t, 'crash-publisher')
    await bus.publish(topic, 'k', { n: 7 })
    await eventually(() => output().includes('got k'), 15_000)
    child.kill('SIGKILL')
    const rec = recorder()
    await bus.subscribe({ groupId: group, topics: [topic], handler: rec.handler })
    await eventually(() => rec.seen.length === 1, 20_000)
    t.same(rec.seen[0]?.value, { n: 7 }, 'redelivered after the dead member’s session expired')
  })

  t.test('a member killed mid-batch (no commit, no leave) has the whole batch redelivered, in order', async (t) => {
    const topic = await d.topic('crash-batch')
    const group = unique('g-crash-batch')
    const { child, output } = await startStuckConsumer(t, kafka.brokers, topic, group, ['batch'])
    const bus = await d.bus(t, 'crash-batch-publisher')
    await bus.publishMany(topic, Array.from({ length: 30 }, (_, n) => ({ key: 'k', value: { n } })))
    await eventually(() => /got batch \d+/.test(output()), 20_000)
    child.kill('SIGKILL')
    const rec = recorder()
    await bus.subscribe({ groupId: group, topics: [topic], batchHandler: async (ms) => void rec.seen.push(...ms) })
    await eventually(() => rec.seen.length >= 30, 20_000)
    t.same(rec.seen.map((m) => (m.value as { n: number }).n), [...Array(30).keys()], 'every message of the batch once more, in order')
  })

  t.test('inside a long batch, handled offsets are committed about every second: a crash repeats only the rest', async (t) => {
    const topic = await d.topic('long-batch')
    const group = unique('g-long-batch')
    // 150 handled 15 ms apart (over two seconds, all in the batch of one fetch), then a hang, then SIGKILL.
    const { child, output } = await startStuckConsumer(t, kafka.brokers, topic, group, ['150', '15'])
    const bus = await d.bus(t, 'long-batch-publisher')
    // One produce request: one message set, fetched whole as one batch.
    await bus.publishMany(topic, Array.from({ length: 200 }, (_, n) => ({ key: 'k', value: { n } })))
    await eventually(() => output().includes('got k'), 30_000)
    child.kill('SIGKILL')
    const rec = recorder()
    await bus.subscribe({ groupId: group, topics: [topic], handler: rec.handler })
    await eventually(() => rec.seen.length > 0 && (rec.seen.at(-1)?.value as { n: number }).n === 199, 30_000)
    const first = (rec.seen[0]?.value as { n: number }).n
    t.ok(first > 0, `offsets were committed while the batch ran (redelivery starts at ${first}, not at the batch's start)`)
    t.ok(first <= 150, `nothing unhandled was committed (redelivery starts at ${first}, the hung message is 150)`)
  })
})

/** The stuck-consumer fixture as its own group member (a process the test can SIGKILL), once it has subscribed. */
async function startStuckConsumer(t: Test, brokers: string[], topic: string, group: string, extra: string[] = []): Promise<{ child: ChildProcess; output: () => string }> {
  const fixture = path.join(__dirname, '..', 'support', 'processes', 'stuck-consumer.ts')
  const child = spawn(process.execPath, [...process.execArgv, fixture, brokers.join(','), topic, group, ...extra], {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, TS_NODE_TRANSPILE_ONLY: '1' }
  })
  t.teardown(() => {
    child.kill('SIGKILL')
  })
  let out = ''
  child.stdout?.on('data', (chunk: Buffer) => (out += chunk.toString()))
  // Its start (a node process compiling the bus with tsx, connecting, joining) is setup, not the subject: on a
  // machine the rest of the suite keeps busy it took over 20 s once (CI at four test jobs).
  await eventually(() => out.includes('subscribed'), 60_000)
  return { child, output: () => out }
}
