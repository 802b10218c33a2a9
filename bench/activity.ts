/**
 * bench/activity: the activity pipeline, each figure next to a baseline
 * measured in the same run.
 *
 *  1. Matcher throughput with BENCH_ACTIVITY_SUBS (100k) subscriptions in the
 *     store: the (event_type, user_id) index lookup + filters on the memory
 *     store and on a real redis-server (one round trip per event), against a
 *     linear scan of every subscription (what the index saves), then the real
 *     matcher worker end to end on the memory bus (events in, deliveries out).
 *     Each measurement follows a warm-up pass, so JIT compilation is not timed.
 *  2. Stream fan-out: BENCH_ACTIVITY_CONNECTIONS (5,000) concurrent HTTP
 *     streams of one app on an embedded gateway process, events delivered per
 *     second and RSS per connection of that process, against a raw node:http
 *     server writing the same lines to as many connections (the ceiling).
 *  3. End-to-end latency ingest -> stream line at BENCH_ACTIVITY_RATE events/s,
 *     on Kafka (librdkafka mock cluster) + Redis, against the embedded
 *     memory bus + memory store, after BENCH_ACTIVITY_WARMUP events whose
 *     latencies are not counted (a cold process would decide the p99).
 *
 *   node dist/bench/activity.js          (after `make build`)
 *   node --import=tsx bench/activity.ts  (from source; BENCH_ACTIVITY_* env for smaller sizes,
 *                                         BENCH_ACTIVITY_PHASES=matcher,fan-out,latency to pick phases)
 *
 * Bounded: every phase has a deadline; the whole run stays under ~90 s.
 *
 * Over 400 lines on purpose: the three phases and their baselines are read
 * (and compared in bench/RESULTS.md) side by side; each phase is one function
 * with its own baseline next to it.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import { EVENT_TYPES, type EventType } from '../services/activity/event-types'
import type { ActivityEvent } from '../services/activity/subscription-filter'
import { subscriptionMatches } from '../services/activity/subscription-filter'
import { activityService } from '../services/activity/service'
import { ActivityKeys, createOps, type Subscription, SubscriptionStore } from '../services/activity/subscriptions'
import { matchEvent, startMatcher } from '../services/activity/matcher'
import { KafkaBus } from '../services/common/bus/kafka'
import { MemoryBus } from '../services/common/bus/memory'
import { TOPICS } from '../services/common/bus/types'
import { loadConfig } from '../services/common/config'
import { createContext } from '../services/common/context'
import { createLogger } from '../services/common/logger'
import { startRuntime, type Runtime } from '../services/common/runtime'
import { MemoryStore } from '../services/common/store/memory'
import { RedisStore } from '../services/common/store/redis'
import type { Store, StoreOp } from '../services/common/store/types'
import { createApp, issueBearer } from '../services/gateway/identity'
import { gatewayService } from '../services/gateway/service'
import { streamService } from '../services/stream/service'
import { deployTopicArgs, freePort, launchMockCluster, launchRedis, terminate } from '../scripts/local-infra'
import { percentile } from './support/stats'

const SUBS = Number(process.env.BENCH_ACTIVITY_SUBS ?? 100_000)
const MATCH_EVENTS = Number(process.env.BENCH_ACTIVITY_EVENTS ?? 20_000)
const CONNECTIONS = Number(process.env.BENCH_ACTIVITY_CONNECTIONS ?? 5000)
const FANOUT_EVENTS = Number(process.env.BENCH_ACTIVITY_FANOUT_EVENTS ?? 20)
const RATE = Number(process.env.BENCH_ACTIVITY_RATE ?? 100)
const PACED_SECONDS = Number(process.env.BENCH_ACTIVITY_PACED_SECONDS ?? 4)
const WARMUP = Number(process.env.BENCH_ACTIVITY_WARMUP ?? Math.max(50, RATE))
const OPERATOR_TOKEN = 'bench-operator-token-0123456789abcdef'
/** One app opens thousands of streams and subscriptions: lift the per-caller windows of every authenticated route. */
const UNLIMITED = { RATE_LIMIT_DEFAULT: '10000000' }
const ROOT = path.resolve(__dirname, '..', ...(__dirname.includes(`${path.sep}dist${path.sep}`) ? ['..'] : []))

const rows: Array<[string, string, string]> = []
function report(what: string, value: string, baseline: string): void {
  rows.push([what, value, baseline])
  process.stdout.write(`  ${what}: ${value}   (baseline: ${baseline})\n`)
}

function tmp(prefix: string): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix))
}

function fmt(n: number): string {
  return Math.round(n).toLocaleString('en-US')
}

/** A 19-digit event id unique per (phase, i) (numbers that large lose precision as floats). */
function uuidOf(phase: number, i: number): string {
  return `${phase}${String(i).padStart(18, '0')}`
}


async function until(check: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 5))
  }
}

function sampleEvent(type: EventType, userId: string, uuid: string, text = 'ship it on launch day'): ActivityEvent {
  const payload: Record<string, unknown> = type.startsWith('profile.')
    ? { before: 'old', after: text }
    : type === 'post.create'
      ? { id: '1445880548472328192', text, author_id: userId }
      : type === 'post.delete'
        ? { id: '1445880548472328192', author_id: userId }
        : type === 'spaces.start' || type === 'spaces.end'
          ? { user: { data: { id: userId } }, broadcast_id: 'b1', event_type: type === 'spaces.start' ? 'spaces_start' : 'spaces_end' }
          : type === 'dm.read'
            ? { direct_message_mark_read_events: [{ created_timestamp: '1', sender_id: userId, target: { recipient_id: '7' }, last_read_event_id: '9' }] }
            : type === 'dm.indicate_typing'
              ? { direct_message_indicate_typing_events: [{ created_timestamp: '1', sender_id: userId, target: { recipient_id: '7' } }] }
              : { direct_message_events: [{ type: 'message_create', id: '5', created_timestamp: '1', message_create: { target: { recipient_id: '7' }, sender_id: userId, message_data: { text } } }] }
  return { event_uuid: uuid, event_type: type, user_id: userId, created_at: new Date().toISOString(), payload }
}

// ---------------------------------------------------------------- 1. matcher

/** The bench's subscriptions: BENCH_ACTIVITY_SUBS over SUBS/5 users and every kind, a third with a keyword. */
function benchSubscriptions(): Subscription[] {
  const users = Math.max(1, Math.floor(SUBS / 5))
  const iso = new Date().toISOString()
  return Array.from({ length: SUBS }, (_, i) => {
    const userId = String(1_000_000 + (i % users))
    const type = EVENT_TYPES[Math.floor(i / users) % EVENT_TYPES.length] as EventType
    const keyword = i % 3 === 0 ? 'launch day' : undefined
    return { subscription_id: String(1_000_000_000_000 + i), app_id: `app-${i % 50}`, event_type: type, filter: { user_id: userId, ...(keyword ? { keyword } : {}) }, created_at: iso, updated_at: iso }
  })
}

/** Writes `all` in large atomic batches with the keys SubscriptionStore.create writes one by one (same layout, faster setup). */
async function seed(store: Store, all: Subscription[]): Promise<void> {
  let ops: StoreOp[] = []
  for (const [i, sub] of all.entries()) {
    ops.push(...createOps(sub, i), { op: 'incr', key: ActivityKeys.appCount(sub.app_id), by: 1 })
    if (ops.length >= 20_000) {
      await store.batch(ops)
      ops = []
    }
  }
  await store.batch(ops)
}

/** Events/s of index lookup + filters over `events`, after one untimed pass over a slice of them (warm-up). */
async function lookupRate(subs: SubscriptionStore, events: ActivityEvent[]): Promise<{ rate: number; matched: number }> {
  for (const e of events.slice(0, Math.min(events.length, 2000))) matchEvent(e, await subs.candidates(e.event_type, e.user_id))
  let matched = 0
  const t0 = performance.now()
  for (const e of events) matched += matchEvent(e, await subs.candidates(e.event_type, e.user_id)).length
  return { rate: events.length / ((performance.now() - t0) / 1000), matched }
}

async function benchMatcher(): Promise<void> {
  process.stdout.write(`\n1. matcher with ${fmt(SUBS)} subscriptions\n`)
  const dir = tmp('bench-activity-')
  const store = await MemoryStore.open(path.join(dir, 'state'))
  const subs = new SubscriptionStore(store, SUBS + 1)
  const all = benchSubscriptions()
  const started = Date.now()
  await seed(store, all)
  process.stdout.write(`  (created ${fmt(SUBS)} subscriptions in ${((Date.now() - started) / 1000).toFixed(1)} s)\n`)

  const events = Array.from({ length: MATCH_EVENTS }, (_, i) => {
    const sub = all[(i * 7919) % all.length] as Subscription
    return sampleEvent(sub.event_type, sub.filter.user_id, uuidOf(1, i))
  })
  const { rate: indexed, matched } = await lookupRate(subs, events)

  // Baseline: scanning every subscription per event (no index), on a sample, warmed up the same way.
  const scanEvents = events.slice(0, Math.max(20, Math.floor(MATCH_EVENTS / 200)))
  const scan = (): number => {
    let n = 0
    for (const e of scanEvents) for (const s of all) if (subscriptionMatches(s, e)) n++
    return n
  }
  scan()
  let t0 = performance.now()
  const scanned = scan()
  const linear = scanEvents.length / ((performance.now() - t0) / 1000)
  report('index lookup + filters, memory store', `${fmt(indexed)} events/s (${fmt(matched)} matches)`, `linear scan ${fmt(linear)} events/s (${fmt(scanned)} matches on ${scanEvents.length})`)

  // The same lookups against a real redis-server: one HGETALL per event over loopback.
  const redisDir = tmp('bench-matcher-redis-')
  const redisPort = await freePort()
  const redis = await launchRedis({ port: redisPort, dir: redisDir, tied: true })
  try {
    const redisStore = await RedisStore.connect(`redis://127.0.0.1:${redisPort}`, createLogger('silent', 'bench'))
    try {
      await seed(redisStore, all)
      const viaRedis = await lookupRate(new SubscriptionStore(redisStore, SUBS + 1), events)
      report('index lookup + filters, redis-server', `${fmt(viaRedis.rate)} events/s (${fmt(viaRedis.matched)} matches)`, `memory store ${fmt(indexed)} events/s`)
    } finally {
      await redisStore.close()
    }
  } finally {
    await terminate(redis).catch(() => undefined)
    fs.rmSync(redisDir, { recursive: true, force: true })
  }

  // The real worker on the memory bus: publish, consume, match, publish deliveries.
  const config = loadConfig({ LOG_LEVEL: 'silent', DATA_DIR: dir, SUBSCRIPTION_LIMIT_PER_APP: String(SUBS + 1), ...UNLIMITED })
  const log = createLogger('silent', 'bench')
  const ctx = await createContext({ serviceName: 'bench', config, bus: new MemoryBus(config.busPartitions, log), store, log })
  let delivered = 0
  const sink = await ctx.bus.subscribe({ groupId: 'bench-sink', topics: [TOPICS.activityDeliveries], handler: async () => void delivered++ })
  const worker = await startMatcher(ctx)
  t0 = performance.now()
  for (let i = 0; i < events.length; i += 500) {
    await ctx.bus.publishMany(TOPICS.activityEvents, events.slice(i, i + 500).map((e) => ({ key: e.user_id, value: e })))
  }
  await until(() => delivered >= matched, 60_000, 'matcher deliveries')
  const endToEnd = MATCH_EVENTS / ((performance.now() - t0) / 1000)
  report('matcher worker (memory bus, in -> deliveries out)', `${fmt(endToEnd)} events/s`, `index lookup alone ${fmt(indexed)} events/s`)
  await worker.close()
  await sink.close()
  await ctx.bus.close()
  await store.close()
  fs.rmSync(dir, { recursive: true, force: true })
}

// ---------------------------------------------------------------- 2. fan-out

function rssOf(pid: number): number {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8')
  const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0)
  return kb * 1024
}

interface Child {
  proc: ChildProcess
  baseUrl: string
}

async function startChild(args: string[], env: Record<string, string>, ready: RegExp): Promise<Child> {
  const proc = spawn(process.execPath, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] })
  let out = ''
  const baseUrl = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`child did not start: ${out}`)), 30_000)
    proc.stdout?.on('data', (d: Buffer) => {
      out += d.toString()
      const m = ready.exec(out)
      if (m) {
        clearTimeout(timer)
        resolve(m[1] as string)
      }
    })
    proc.once('exit', (code) => reject(new Error(`child exited ${code}: ${out}`)))
  })
  return { proc, baseUrl }
}

async function stopChild(child: Child): Promise<void> {
  if (child.proc.exitCode !== null) return
  const exited = new Promise((r) => child.proc.once('exit', r))
  child.proc.kill('SIGTERM')
  const timer = setTimeout(() => child.proc.kill('SIGKILL'), 8000)
  await exited
  clearTimeout(timer)
}

/** Opens `n` streaming GETs; each counts the \r\n-terminated non-empty lines it receives. */
async function openClients(url: string, headers: Record<string, string>, n: number): Promise<{ counts: Int32Array; close: () => void }> {
  const counts = new Int32Array(n)
  const reqs: http.ClientRequest[] = []
  const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity })
  let opened = 0
  const batch = 250
  for (let i = 0; i < n; i += batch) {
    await Promise.all(
      Array.from({ length: Math.min(batch, n - i) }, (_, j) => {
        const k = i + j
        return new Promise<void>((resolve, reject) => {
          const req = http.get(url, { headers, agent }, (res) => {
            if (res.statusCode !== 200) return reject(new Error(`stream ${k}: HTTP ${res.statusCode}`))
            opened++
            let tail = ''
            res.setEncoding('utf8')
            res.on('data', (chunk: string) => {
              const text = tail + chunk
              const parts = text.split('\r\n')
              tail = parts.pop() ?? ''
              for (const p of parts) if (p !== '') counts[k] = (counts[k] ?? 0) + 1
            })
            res.on('error', () => undefined)
            resolve()
          })
          req.on('error', reject)
          reqs.push(req)
        })
      })
    )
  }
  if (opened !== n) throw new Error(`only ${opened} of ${n} streams opened`)
  return { counts, close: () => reqs.forEach((r) => r.destroy()) }
}

const RAW_SERVER = `
const http = require('node:http')
const conns = new Set()
const line = process.env.LINE + '\\r\\n'
const server = http.createServer((req, res) => {
  if (req.url.startsWith('/fire')) {
    const n = Number(new URL(req.url, 'http://x').searchParams.get('n'))
    for (let i = 0; i < n; i++) for (const c of conns) c.write(line)
    return res.end('ok')
  }
  res.writeHead(200, { 'content-type': 'application/json' })
  res.flushHeaders()
  conns.add(res)
  res.on('close', () => conns.delete(res))
})
server.listen(0, '127.0.0.1', () => console.log('listening http://127.0.0.1:' + server.address().port))
process.on('SIGTERM', () => process.exit(0))
`

async function benchFanout(): Promise<void> {
  process.stdout.write(`\n2. stream fan-out to ${fmt(CONNECTIONS)} concurrent connections of one app\n`)
  const dir = tmp('bench-stream-')
  // The identity is written to the store the gateway process will open (its journal in DATA_DIR).
  const seed = await MemoryStore.open(path.join(dir, 'state'))
  const app = await createApp(seed, { name: 'bench', access_level: 'read-write-dm', callback_urls: ['http://127.0.0.1/cb'] })
  const { token: bearer } = await issueBearer(seed, app)
  await seed.close()

  const main = path.join(ROOT, 'dist', 'services', 'embedded', 'main.js')
  if (!fs.existsSync(main)) throw new Error(`${main} is missing: run make build first`)
  const gw = await startChild([main], {
    DATA_DIR: dir, PORT: '0', SANDBOX_PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'warn', OPERATOR_TOKEN, ...UNLIMITED, KAFKA_BROKERS: '', REDIS_URL: '',
    STREAM_CONNECTIONS_PER_APP: String(CONNECTIONS + 10), STREAM_KEEPALIVE: '20s'
  }, /\{base_url\} and \{ads_url\}: (http:\/\/\S+)/)
  try {
    const userId = '4242424242'
    const sub = await fetch(`${gw.baseUrl}/2/activity/subscriptions`, { method: 'POST', headers: { authorization: `Bearer ${bearer}`, 'content-type': 'application/json' }, body: JSON.stringify({ event_type: 'post.create', filter: { user_id: userId } }) })
    if (sub.status !== 200) throw new Error(`subscription refused: ${await sub.text()}`)
    await new Promise((r) => setTimeout(r, 500))
    const rssBefore = rssOf(gw.proc.pid as number)
    let t0 = performance.now()
    const clients = await openClients(`${gw.baseUrl}/2/activity/stream`, { authorization: `Bearer ${bearer}` }, CONNECTIONS)
    const connectSeconds = (performance.now() - t0) / 1000
    await new Promise((r) => setTimeout(r, 500))
    const rssAfter = rssOf(gw.proc.pid as number)
    const events = Array.from({ length: FANOUT_EVENTS }, (_, i) => JSON.stringify(sampleEvent('post.create', userId, uuidOf(2, i))))
    t0 = performance.now()
    const res = await fetch(`${gw.baseUrl}/admin/activity/events`, { method: 'POST', headers: { authorization: `Bearer ${OPERATOR_TOKEN}`, 'content-type': 'application/x-ndjson' }, body: events.join('\n') })
    if (res.status !== 200) throw new Error(`ingest refused: ${await res.text()}`)
    await until(() => clients.counts.every((c) => c >= FANOUT_EVENTS), 60_000, 'fan-out')
    const seconds = (performance.now() - t0) / 1000
    const lines = FANOUT_EVENTS * CONNECTIONS
    clients.close()
    const gwRate = lines / seconds
    const gwRss = (rssAfter - rssBefore) / CONNECTIONS

    // Baseline: a bare node:http server writing the same line to as many connections.
    const line = JSON.stringify({ data: { event_uuid: '1', filter: { user_id: userId }, event_type: 'post.create', payload: JSON.parse(events[0] as string).payload, includes: {} } })
    const raw = await startChild(['-e', RAW_SERVER], { LINE: line }, /listening (http:\/\/\S+)/)
    try {
      const rawBefore = rssOf(raw.proc.pid as number)
      const rawClients = await openClients(`${raw.baseUrl}/stream`, {}, CONNECTIONS)
      await new Promise((r) => setTimeout(r, 500))
      const rawAfter = rssOf(raw.proc.pid as number)
      t0 = performance.now()
      await fetch(`${raw.baseUrl}/fire?n=${FANOUT_EVENTS}`)
      await until(() => rawClients.counts.every((c) => c >= FANOUT_EVENTS), 60_000, 'raw fan-out')
      const rawRate = lines / ((performance.now() - t0) / 1000)
      rawClients.close()
      report(`lines delivered (${FANOUT_EVENTS} events x ${fmt(CONNECTIONS)} streams)`, `${fmt(gwRate)} lines/s`, `raw node:http ${fmt(rawRate)} lines/s`)
      report('server RSS per open stream', `${(gwRss / 1024).toFixed(1)} KiB`, `raw node:http ${((rawAfter - rawBefore) / CONNECTIONS / 1024).toFixed(1)} KiB`)
      report('time to open all streams', `${connectSeconds.toFixed(1)} s`, 'n/a')
    } finally {
      await stopChild(raw)
    }
  } finally {
    await stopChild(gw)
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

// ---------------------------------------------------------------- 3. latency

const LATENCY_USERS = 24

async function pipelineLatency(label: string, api: Runtime, streamRt: Runtime, bearer: string): Promise<number[]> {
  // Several users, so their keys spread over the topic's partitions as real traffic does.
  const users = Array.from({ length: LATENCY_USERS }, (_, i) => String(5_151_515_100 + i))
  for (const userId of users) {
    const sub = await fetch(`${api.baseUrl}/2/activity/subscriptions`, { method: 'POST', headers: { authorization: `Bearer ${bearer}`, 'content-type': 'application/json' }, body: JSON.stringify({ event_type: 'profile.update.bio', filter: { user_id: userId } }) })
    if (sub.status !== 200) throw new Error(`${label}: subscription refused: ${await sub.text()}`)
  }
  const sentAt = new Map<string, number>()
  const latencies: number[] = []
  /** Warm-up events still on their way (their latencies are not counted). */
  const warming = new Set<string>()
  await new Promise<void>((resolve, reject) => {
    const req = http.get(`${streamRt.baseUrl}/2/activity/stream`, { headers: { authorization: `Bearer ${bearer}` }, agent: false }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`${label}: stream HTTP ${res.statusCode}`))
      let tail = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => {
        const parts = (tail + chunk).split('\r\n')
        tail = parts.pop() ?? ''
        for (const p of parts) {
          if (p === '') continue
          const uuid = (JSON.parse(p) as { data?: { event_uuid: string } }).data?.event_uuid
          if (uuid !== undefined && warming.delete(uuid)) continue
          const t = uuid === undefined ? undefined : sentAt.get(uuid)
          if (t !== undefined) latencies.push(performance.now() - t)
          if (process.env.BENCH_DEBUG && t !== undefined && latencies.length % 40 === 1) process.stdout.write(`  ${label} #${uuid} ${(performance.now() - t).toFixed(1)} ms\n`)
        }
      })
      res.on('error', () => undefined)
      /** Sends `count` events at RATE; `phase` keeps their uuids apart. */
      const paced = async (count: number, phase: number, sent: (uuid: string) => void): Promise<void> => {
        const start = performance.now()
        for (let i = 0; i < count; i++) {
          const due = start + (i * 1000) / RATE
          const wait = due - performance.now()
          if (wait > 0) await new Promise((r) => setTimeout(r, wait))
          const uuid = uuidOf(phase, i)
          sent(uuid)
          void fetch(`${api.baseUrl}/admin/activity/events`, {
            method: 'POST',
            headers: { authorization: `Bearer ${OPERATOR_TOKEN}`, 'content-type': 'application/json' },
            body: JSON.stringify(sampleEvent('profile.update.bio', users[i % users.length] as string, uuid))
          }).then((r) => r.arrayBuffer())
        }
      }
      void (async () => {
        // Warm-up: the same traffic, not timed, until every line of it arrived (JIT, connections, consumer fetch loops).
        await paced(WARMUP, 4, (uuid) => warming.add(uuid))
        await until(() => warming.size === 0, 30_000, `${label} warm-up lines`).catch((err: unknown) => process.stdout.write(`  ${label}: ${(err as Error).message}\n`))
        const total = RATE * PACED_SECONDS
        await paced(total, 3, (uuid) => sentAt.set(uuid, performance.now()))
        await until(() => latencies.length >= total, 30_000, `${label} stream lines`).catch((err: unknown) => process.stdout.write(`  ${label}: ${(err as Error).message} (${latencies.length}/${total})\n`))
        req.destroy()
        resolve()
      })()
    })
    req.on('error', reject)
  })
  return latencies.sort((a, b) => a - b)
}

async function runtimes(store: Store, streamStore: Store, bus: () => Promise<import('../services/common/bus/types').Bus>, env: Record<string, string>, dir: string): Promise<{ api: Runtime; stream: Runtime; bearer: string }> {
  const config = loadConfig({ PORT: '0', SANDBOX_PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent', DATA_DIR: dir, OPERATOR_TOKEN, ...UNLIMITED, ...env })
  const log = createLogger('silent', 'bench')
  const app = await createApp(store, { name: 'bench-latency', access_level: 'read-write-dm', callback_urls: ['http://127.0.0.1/cb'] })
  const { token: bearer } = await issueBearer(store, app)
  const api = await startRuntime({ services: [gatewayService, activityService], ctx: await createContext({ serviceName: 'bench-api', config, bus: await bus(), store, log }) })
  const stream = await startRuntime({ services: [streamService], ctx: await createContext({ serviceName: 'bench-stream', config, bus: await bus(), store: streamStore, log }) })
  return { api, stream, bearer }
}

async function benchLatency(): Promise<void> {
  process.stdout.write(`\n3. ingest -> stream latency at ${RATE} events/s for ${PACED_SECONDS} s\n`)
  const dir = tmp('bench-latency-')
  const redisDir = tmp('bench-redis-')
  const results: Record<string, number[]> = {}

  // Baseline: embedded (one memory bus and one memory store shared by both runtimes).
  {
    const log = createLogger('silent', 'bench')
    const store = await MemoryStore.open(path.join(dir, 'embedded'))
    const shared = new MemoryBus(6, log)
    const { api, stream, bearer } = await runtimes(store, store, async () => shared, {}, dir)
    results.embedded = await pipelineLatency('embedded', api, stream, bearer)
    await stream.close().catch(() => undefined)
    await api.close().catch(() => undefined)
  }

  // Kafka mode: librdkafka mock cluster (3 brokers) + redis-server, separate clients per runtime.
  const cluster = await launchMockCluster({ brokers: 3, detach: false, topics: deployTopicArgs() })
  const port = await freePort()
  const redis = await launchRedis({ port, dir: redisDir, tied: true })
  try {
    const log = createLogger('silent', 'bench')
    const kafka = (id: string) => async () =>
      KafkaBus.connect({ brokers: cluster.bootstrap, clientId: id, log, sessionTimeoutMs: 6000, heartbeatIntervalMs: 1000, maxWaitTimeMs: 50, rebalanceTimeoutMs: 10_000 })
    const url = `redis://127.0.0.1:${port}`
    const apiStore = await RedisStore.connect(url, log)
    const streamStore = await RedisStore.connect(url, log)
    let n = 0
    const { api, stream, bearer } = await runtimes(apiStore, streamStore, () => kafka(`bench-${++n}`)(), { KAFKA_BROKERS: cluster.bootstrap.join(','), REDIS_URL: url }, dir)
    results.kafka = await pipelineLatency('kafka', api, stream, bearer)
    await stream.close().catch(() => undefined)
    await api.close().catch(() => undefined)
  } finally {
    cluster.child.stdin?.end()
    await terminate(cluster).catch(() => undefined)
    await terminate(redis).catch(() => undefined)
    fs.rmSync(dir, { recursive: true, force: true })
    fs.rmSync(redisDir, { recursive: true, force: true })
  }
  const fmtLat = (l: number[] | undefined): string =>
    l && l.length > 0 ? `p50 ${percentile(l, 50).toFixed(1)} ms, p99 ${percentile(l, 99).toFixed(1)} ms (${l.length} events)` : 'no data'
  report('ingest -> stream, Kafka + Redis', fmtLat(results.kafka), `embedded memory bus + store ${fmtLat(results.embedded)}`)
}

async function main(): Promise<void> {
  const started = Date.now()
  process.stdout.write(`bench/activity on ${os.cpus().length} cpu(s), node ${process.version}\n`)
  const phases: Array<[string, () => Promise<void>]> = [
    ['matcher', benchMatcher],
    ['fan-out', benchFanout],
    ['latency', benchLatency]
  ]
  const only = (process.env.BENCH_ACTIVITY_PHASES ?? '').split(',').filter((p) => p !== '')
  let failed = false
  for (const [name, phase] of phases) {
    if (only.length > 0 && !only.includes(name)) continue
    try {
      await phase()
    } catch (err) {
      failed = true
      process.stdout.write(`  ${name} failed: ${(err as Error).message}\n`)
    }
  }
  process.stdout.write(`\n| measurement | result | baseline (same run) |\n|---|---|---|\n`)
  for (const [a, b, c] of rows) process.stdout.write(`| ${a} | ${b} | ${c} |\n`)
  process.stdout.write(`\ntotal ${((Date.now() - started) / 1000).toFixed(1)} s\n`)
  process.exit(failed ? 1 : 0)
}

void main()
