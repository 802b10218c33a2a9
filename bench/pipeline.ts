/**
 * bench/pipeline: activity ingest -> stream, end to end, as operators run it.
 *
 *  - distributed (the figure): Redis, the Kafka mock cluster (3 brokers,
 *    topics of deploy/topics.json) and one OS process per service (gateway,
 *    activity, stream), each with its default settings, as `make up` starts
 *    them;
 *  - embedded (the baseline, same run): the `make run` process (every service,
 *    memory bus, memory store journaled to disk).
 *
 * In both: an app (POST /admin/apps), its bearer (POST /oauth2/token), one
 * post.create subscription per followed user, and a stream client on
 * GET /2/activity/stream. Then
 *  1. latency at a fixed rate: BENCH_PIPELINE_RATE events/s (default 200) for
 *     BENCH_PIPELINE_SECONDS (10) through POST /admin/activity/events in
 *     NDJSON batches every 50 ms; time from the ingest request to the event's
 *     line on the stream, p50 / p99 / max;
 *  2. throughput: BENCH_PIPELINE_BURST events (5,000) sent as fast as the
 *     ingest route takes them (batches of 100, 4 in flight); events/s from
 *     the first request to the last line on the stream.
 *
 *   node dist/bench/pipeline.js        (after `make build`; `make bench` runs it)
 *   BENCH_PIPELINE_PROFILE=/tmp/prof node dist/bench/pipeline.js   (CPU profile per service process)
 *
 * Bounded: every wait has a deadline; the run takes about a minute.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { freePort, launchMockCluster, launchRedis, terminate, type Launched } from '../scripts/local-infra'
import { batch, call, createApp, ingest, latencies as latenciesOf, publishPaced, StreamReader } from './support/activity-client'
import { percentile } from './support/stats'
import { startService as startServiceProcess, stopService, type ServiceChild } from './support/service-process'

const RATE = Number(process.env.BENCH_PIPELINE_RATE ?? 200)
const SECONDS = Number(process.env.BENCH_PIPELINE_SECONDS ?? 10)
const BURST = Number(process.env.BENCH_PIPELINE_BURST ?? 5000)
const SHORT_FETCH_WAIT_MS = 20
const BURST_BATCH = 100
const BURST_IN_FLIGHT = 4
const FOLLOWED = 8
const TICK_MS = 50
const OPERATOR_TOKEN = 'bench-pipeline-operator-token-0123456789'

// ---------------------------------------------------------------- processes

function startService(service: string, env: Record<string, string>): Promise<ServiceChild> {
  const profileDir = process.env.BENCH_PIPELINE_PROFILE
  const cpuProfile = profileDir ? { dir: profileDir, name: `pipeline-${service}-${env.KAFKA_BROKERS ? 'kafka' : 'embedded'}.cpuprofile` } : undefined
  return startServiceProcess(service, env, { operatorToken: OPERATOR_TOKEN, ...(cpuProfile ? { cpuProfile } : {}) })
}

// ---------------------------------------------------------------- the run

interface Endpoints {
  gateway: string
  activity: string
  stream: string
}

/** App, bearer and FOLLOWED subscriptions, through the public and operator routes. */
async function setUp(e: Endpoints): Promise<{ bearer: string; users: string[] }> {
  const { bearer } = await createApp(e.gateway, OPERATOR_TOKEN, 'bench pipeline')
  const users = Array.from({ length: FOLLOWED }, (_, i) => `90${Date.now() % 1e9}${String(i).padStart(3, '0')}`)
  for (const user of users) {
    await call('POST', `${e.activity}/2/activity/subscriptions`, { authorization: `Bearer ${bearer}`, 'content-type': 'application/json' }, JSON.stringify({ event_type: 'post.create', filter: { user_id: user } }))
  }
  return { bearer, users }
}

interface Figures {
  sent: number
  delivered: number
  p50: number
  p99: number
  max: number
  burstPerSecond: number
  burstDelivered: number
}

async function run(e: Endpoints): Promise<Figures> {
  const { bearer, users } = await setUp(e)
  const reader = new StreamReader()
  await reader.open(e.stream, bearer)
  try {
    // Warm-up: the consumers' first fetches and the JIT, not timed.
    const warm = batch(users, 50)
    await ingest(e.activity, OPERATOR_TOKEN, warm.body)
    await reader.waitFor(50, 30_000)

    // 1. fixed rate
    const sentAt = await publishPaced(e.activity, OPERATOR_TOKEN, users, { rate: RATE, count: Math.round(RATE * SECONDS), tickMs: TICK_MS })
    const expected = reader.arrivals.size + sentAt.size
    await reader.waitFor(expected, 30_000)
    const latencies = latenciesOf(sentAt, reader.arrivals)

    // 2. burst throughput
    const before = reader.arrivals.size
    const burstStart = performance.now()
    let left = BURST
    const sender = async (): Promise<void> => {
      while (left > 0) {
        const size = Math.min(BURST_BATCH, left)
        left -= size
        await ingest(e.activity, OPERATOR_TOKEN, batch(users, size).body)
      }
    }
    await Promise.all(Array.from({ length: BURST_IN_FLIGHT }, sender))
    await reader.waitFor(before + BURST, 60_000)
    const burstDelivered = reader.arrivals.size - before
    const lastArrival = Math.max(...[...reader.arrivals.values()].slice(before))
    const burstSeconds = (lastArrival - burstStart) / 1000

    return {
      sent: sentAt.size,
      delivered: latencies.length,
      p50: percentile(latencies, 50),
      p99: percentile(latencies, 99),
      max: latencies[latencies.length - 1] ?? Number.NaN,
      burstPerSecond: burstDelivered / burstSeconds,
      burstDelivered
    }
  } finally {
    reader.close()
  }
}

// ---------------------------------------------------------------- modes

async function embedded(dir: string): Promise<Figures> {
  const s = await startService('embedded', { DATA_DIR: path.join(dir, 'embedded') })
  try {
    return await run({ gateway: s.url, activity: s.url, stream: s.url })
  } finally {
    await stopService(s)
  }
}

/** The three services as their own processes on Kafka (mock cluster) and Redis; `extraEnv` varies one setting. */
async function distributed(dir: string, extraEnv: Record<string, string> = {}): Promise<Figures> {
  const infra: Launched[] = []
  const services: ServiceChild[] = []
  try {
    const redisPort = await freePort()
    infra.push(await launchRedis({ port: redisPort, dir: path.join(dir, 'redis'), tied: true }))
    const cluster = await launchMockCluster({ brokers: 3, detach: false })
    infra.push(cluster)
    const env = { KAFKA_BROKERS: cluster.bootstrap.join(','), REDIS_URL: `redis://127.0.0.1:${redisPort}`, ...extraEnv }
    for (const name of ['gateway', 'activity', 'stream']) services.push(await startService(name, { ...env, DATA_DIR: path.join(dir, name) }))
    const [gateway, activity, stream] = services.map((s) => s.url) as [string, string, string]
    return await run({ gateway, activity, stream })
  } finally {
    await Promise.all(services.map(stopService))
    for (const l of infra.reverse()) await terminate(l)
  }
}

async function main(): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-pipeline-'))
  try {
    const base = await embedded(dir)
    const kafka = await distributed(fs.mkdtempSync(path.join(dir, 'default-')))
    // Same pipeline, one setting changed: shows how much of the distributed latency is the mock cluster's fetch wait.
    const shortWait = await distributed(fs.mkdtempSync(path.join(dir, 'short-wait-')), { KAFKA_FETCH_MAX_WAIT: `${SHORT_FETCH_WAIT_MS}ms` })
    const fmt = (n: number): string => (Number.isFinite(n) ? n.toFixed(1) : '-')
    const row = (name: string, f: Figures): string =>
      `| ${name} | ${f.delivered}/${f.sent} | ${fmt(f.p50)} | ${fmt(f.p99)} | ${fmt(f.max)} | ${f.burstPerSecond.toFixed(0)} (${f.burstDelivered}/${BURST}) |`
    const lines = [
      `bench/pipeline: ingest (POST /admin/activity/events) -> matcher -> stream line, ${FOLLOWED} subscriptions, one stream client`,
      `fixed rate ${RATE} events/s for ${SECONDS} s, then a burst of ${BURST}; node ${process.version}, ${os.cpus().length} cpu(s) (${os.cpus()[0]?.model ?? 'unknown'})`,
      '',
      `| pipeline | delivered at ${RATE}/s | p50 ms | p99 ms | max ms | burst events/s (delivered) |`,
      '|---|---|---|---|---|---|',
      row('embedded: one process, memory bus + store (baseline)', base),
      row('distributed: gateway, activity, stream processes; Kafka mock cluster (3 brokers) + Redis', kafka),
      row(`distributed, KAFKA_FETCH_MAX_WAIT=${SHORT_FETCH_WAIT_MS}ms (default 500ms)`, shortWait),
      '',
      `ratio p99 distributed / embedded: ${(kafka.p99 / base.p99).toFixed(1)}x (with the short fetch wait: ${(shortWait.p99 / base.p99).toFixed(1)}x)`,
      `ratio p50 distributed, default / short fetch wait: ${(kafka.p50 / shortWait.p50).toFixed(1)}x`,
      `ratio burst throughput distributed / embedded: ${(kafka.burstPerSecond / base.burstPerSecond).toFixed(3)}`,
      '',
      'Reading the distributed rows: librdkafka\'s mock cluster answers a fetch only after the',
      'consumer\'s whole fetch wait instead of as soon as data arrives (a real broker answers at once);',
      'the second distributed row changes only that wait, so the difference between the two rows is',
      'the mock cluster\'s, and what remains over the embedded row is the two Kafka hops and Redis.'
    ]
    process.stdout.write(`${lines.join('\n')}\n`)
    if ([base, kafka, shortWait].some((f) => f.delivered < f.sent || f.burstDelivered < BURST)) {
      process.stderr.write('bench/pipeline: some events did not reach the stream in time\n')
      process.exitCode = 1
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench/pipeline failed: ${(err as Error).stack ?? String(err)}\n`)
  process.exit(1)
})
