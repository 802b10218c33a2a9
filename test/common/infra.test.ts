import { spawn } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'
import { Kafka, logLevel } from 'kafkajs'
import { startKafka, startRedis, redisStore } from '../support/infra'
import { alive } from '../support/util'
import { ephemeralPortRange, freePort, redisPing } from '../../scripts/local-infra'
import { loadTopics } from '../../services/common/bus/topics'
import { TOPICS } from '../../services/common/bus/types'

/** The harness itself: real processes up, controllable, and gone afterwards. */

async function waitGone(pid: number, ms = 5000): Promise<boolean> {
  const deadline = Date.now() + ms
  while (Date.now() < deadline) {
    if (!alive(pid)) return true
    await new Promise((r) => setTimeout(r, 25))
  }
  return !alive(pid)
}

t.test('deploy/topics.json describes every topic with partitions and >= 24 h retention', async (t) => {
  const { topics } = loadTopics()
  for (const name of Object.values(TOPICS)) {
    const spec = topics.find((s) => s.name === name)
    t.ok(spec, `${name} is described`)
    t.ok((spec?.partitions ?? 0) >= 1)
    t.ok((spec?.retentionMs ?? 0) >= 24 * 3_600_000)
  }
})

t.test('a broken topics file is refused with the reason', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gw-topics-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const file = path.join(dir, 'topics.json')
  fs.writeFileSync(file, JSON.stringify({ topics: [{ name: 'activity.events', partitions: 6, retentionMs: 1000, key: 'user_id' }] }))
  t.throws(() => loadTopics(file), /retentionMs must be at least 24 h/)
  fs.writeFileSync(file, JSON.stringify({ topics: [{ name: 'activity.events', partitions: 6, retentionMs: 86_400_000, key: 'user_id' }] }))
  t.throws(() => loadTopics(file), /activity.deliveries .* is missing/)
  fs.writeFileSync(file, '{not json')
  t.throws(() => loadTopics(file), /unreadable/)
})

t.test('redis-server starts on a free port, restarts with its data, and stops', async (t) => {
  const redis = await startRedis(t)
  t.ok(await redisPing(redis.port), 'answers PING')
  const store = await redisStore(t, redis)
  await store.set('infra:k', 'v')
  await redis.restart()
  t.ok(await redisPing(redis.port), 'answers PING after restart')
  t.equal(await store.get('infra:k'), 'v', 'data kept through a restart (AOF)')
  await redis.stop()
  t.notOk(await redisPing(redis.port), 'stopped')
  await redis.start()
  t.ok(await redisPing(redis.port))
})

t.test('the mock cluster serves the topics of deploy/topics.json and obeys down/up', async (t) => {
  const kafka = await startKafka(t, { extraTopics: ['infra.extra:2'] })
  t.equal(kafka.brokers.length, 3)
  const client = new Kafka({ brokers: kafka.brokers, clientId: 'infra-test', logLevel: logLevel.NOTHING, retry: { retries: 2, initialRetryTime: 50 } })
  const admin = client.admin()
  await admin.connect()
  t.teardown(() => admin.disconnect())
  const meta = await admin.fetchTopicMetadata({ topics: [] })
  const byName = new Map(meta.topics.map((tp) => [tp.name, tp.partitions.length]))
  for (const spec of loadTopics().topics) t.equal(byName.get(spec.name), spec.partitions, `${spec.name} has ${spec.partitions} partitions`)
  t.equal(byName.get('infra.extra'), 2)

  // Known limitation of the mock: the CreateTopics admin API is not implemented, hence the launcher.
  await t.rejects(admin.createTopics({ topics: [{ topic: 'infra.admin-created', numPartitions: 1 }], timeout: 2000 }))
  await kafka.createTopic('infra.created', 3)
  const created = await admin.fetchTopicMetadata({ topics: ['infra.created'] })
  t.equal(created.topics[0]?.partitions.length, 3, 'topics can be created through the launcher')

  await kafka.setBrokerDown(2)
  await kafka.setBrokerUp(2)
  await t.rejects(kafka.setLeader('no-such-topic-zz', 0, 99), /refused/, 'launcher errors come back as rejections')
})

t.test('children die with the test process, even when it is killed', async (t) => {
  // A child test process starts Redis and the cluster, reports their pids, then is SIGKILLed.
  const script = path.join(__dirname, '..', 'support', 'processes', 'hold-infra.ts')
  const child = spawn(process.execPath, [...process.execArgv, script], { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, TS_NODE_TRANSPILE_ONLY: '1' } })
  t.teardown(() => {
    child.kill('SIGKILL')
  })
  const pids = await new Promise<number[]>((resolve, reject) => {
    let out = ''
    const timer = setTimeout(() => reject(new Error(`no pids from fixture: ${out}`)), 20_000)
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString()
      const m = /^pids (\d+) (\d+)$/m.exec(out)
      if (m) {
        clearTimeout(timer)
        resolve([Number(m[1]), Number(m[2])])
      }
    })
  })
  for (const pid of pids) t.ok(alive(pid), `child ${pid} running`)
  child.kill('SIGKILL')
  for (const pid of pids) t.ok(await waitGone(pid), `child ${pid} gone after the parent was killed`)
})

t.test('free ports are handed out below the ephemeral range, so a restarted process can always bind its own again', async (t) => {
  const [ephemeralLow] = ephemeralPortRange()
  const ports = await Promise.all(Array.from({ length: 20 }, () => freePort()))
  t.ok(
    ports.every((p) => p >= 10_000 && p < ephemeralLow),
    `20 ports in 10000..${ephemeralLow - 1}, where outgoing connections never take a local port (${ports.slice(0, 5).join(', ')}, ...)`
  )
  // Each is free: a listener binds it.
  const port = ports[0] as number
  const server = net.createServer()
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, '127.0.0.1', resolve)
  })
  t.pass(`bound ${port}`)
  // While it is held, a probe never returns it.
  const more = await Promise.all(Array.from({ length: 50 }, () => freePort()))
  t.notOk(more.includes(port), 'a port in use is not handed out')
  await new Promise<void>((resolve) => server.close(() => resolve()))
})
