/**
 * bench/distributed: the whole path, ingest -> matcher -> signed webhook and
 * ingest -> matcher -> stream, at fixed rates, as operators run it:
 *
 *  - `make up` (the figure), twice: with one Redis (`make up`), then with a
 *    6-node Redis Cluster, 3 masters + 1 replica each (`make up
 *    REDIS=cluster`); each time the Kafka mock cluster (3 brokers),
 *    supervisord running every instance (make up's counts: GATEWAY, WEBHOOKS,
 *    ACTIVITY, STREAM, ACCOUNT_HISTORY from the environment, 2 each by
 *    default) and nginx in front; everything through nginx;
 *  - `make run` (beside them, same rates): the embedded process.
 *
 * For each: one app and user (operator API), one webhook on a loopback
 * receiver that verifies every signature, one post.create subscription with
 * that webhook per followed user (BENCH_FOLLOWED, covering every partition of
 * activity.events), one stream consumer on GET /2/activity/stream. Then, for
 * each rate of BENCH_RATES (1000,2000,5000,10000 events/s; embedded also
 * BENCH_EMBEDDED_EXTRA_RATES, 30000) for BENCH_SECONDS (20) each: publish
 * through POST /admin/activity/events (bench/distributed/publisher.ts), wait
 * until every event is on both or BENCH_DRAIN_SECONDS (10) after publishing
 * stopped, and report:
 *
 *  - published/s (acknowledged by the ingest route), delivered/s on the
 *    webhook and the stream while publishing (the sustained rate);
 *  - p50 / p99 ingest -> webhook and ingest -> stream (from the time the
 *    event's batch was handed to the HTTP client, carried in its payload);
 *  - when the last event arrived after publishing stopped; lost (acknowledged
 *    but not seen within the drain period), duplicated, bad signatures;
 *  - CPU used per service while it ran (from /proc): where the time goes;
 *  - make up: Redis commands and Redis CPU ms per delivered event (an event =
 *    one webhook delivery + one stream line), the masters' sum from INFO
 *    commandstats / INFO cpu of every node, counters reset (CONFIG RESETSTAT)
 *    at the start of each rate; the top commands per event; on the cluster
 *    each master's share of the commands; the replicas' apart
 *    (bench/distributed/redis-work.ts).
 *
 * Between rates it waits (BENCH_SETTLE_SECONDS, 60 at most) until the backlog
 * of the previous rate is delivered. Progress lines (`~ ...`) go to stderr.
 * Everything it started is stopped on exit, Ctrl-C included (up.js down).
 *
 *   node dist/bench/distributed.js                      (make bench-distributed)
 *   BENCH_RATES=1000,5000 BENCH_SECONDS=5 node dist/bench/distributed.js
 *   BENCH_MODES=embedded ...                            (one of make-up, embedded)
 *   BENCH_REDIS=single ...                              (make up with one Redis only; cluster: the Redis Cluster only; both)
 *   BENCH_DISTRIBUTED_PROFILE=/tmp/prof ...             (a CPU profile of every service process, written when
 *                                                        it stops; node dist/bench/distributed/profile.js sums one up)
 *   KAFKA_FETCH_MAX_WAIT=20ms ...                       (any setting reaches every service)
 *   REDIS_CLUSTER_NODE_TIMEOUT=15000 ...                (make up's own settings reach up.js: here, fewer failovers
 *                                                        of the cluster when the machine is busy; default 2000 ms)
 *
 * A run that fails (e.g. make up REDIS=cluster does not start) is reported as
 * such, the others still run; the exit status is then 1.
 *
 * bench-timeout: 2700 (scripts/run-bench.sh: the default run takes about fifteen minutes)
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { Observer, PhaseReport } from './distributed/observers'
import type { Publisher } from './distributed/publisher'
import { beginWindow, digest, endWindow, redisLabel, redisLine, type RedisMode, type RedisStart, type RedisWindow } from './distributed/redis-work'
import { int, ms, report, type RateFigures, type RunFigures, type RunSpec } from './distributed/report'
import { openScene } from './distributed/scene'
import { cpuBetween, cpuSnapshot, metricsDigest, metricsSnapshot, progress, startEmbedded, startUp, type System } from './distributed/systems'
import { CleanUp } from './support/clean-up'

function numbers(name: string, fallback: string): number[] {
  const raw = process.env[name] ?? fallback
  const out = raw.split(',').map((s) => s.trim()).filter((s) => s !== '').map(Number)
  if (out.some((n) => !Number.isFinite(n) || n <= 0)) throw new Error(`${name} must be a comma list of positive numbers, got "${raw}"`)
  return out
}

function number(name: string, fallback: number): number {
  const n = Number(process.env[name] ?? fallback)
  if (!Number.isFinite(n) || n < 0) throw new Error(`${name} must be a non-negative number`)
  return n
}

const RATES = numbers('BENCH_RATES', '1000,2000,5000,10000')
const EMBEDDED_EXTRA = process.env.BENCH_EMBEDDED_EXTRA_RATES === '' ? [] : numbers('BENCH_EMBEDDED_EXTRA_RATES', '30000')
const SECONDS = number('BENCH_SECONDS', 20)
const DRAIN_S = number('BENCH_DRAIN_SECONDS', 10)
const SETTLE_S = number('BENCH_SETTLE_SECONDS', 60)
const FOLLOWED = number('BENCH_FOLLOWED', 24)
const MODES = (process.env.BENCH_MODES ?? 'make-up,embedded').split(',').map((s) => s.trim())
const REDIS_MODES = ((): RedisMode[] => {
  const raw = process.env.BENCH_REDIS ?? 'both'
  if (raw === 'single' || raw === 'cluster') return [raw]
  if (raw === 'both' || raw === '') return ['single', 'cluster']
  throw new Error(`BENCH_REDIS must be single, cluster or both, got "${raw}"`)
})()
/** After a rate's backlog is out, before Redis's counters are read: usage counts are written each second. */
const REDIS_SETTLE_MS = 2000
const PROFILE_DIR = process.env.BENCH_DISTRIBUTED_PROFILE
/** How long the idle system's CPU is sampled after the warm-up. */
const IDLE_SAMPLE_MS = 5000
const PUBLISH = { tickMs: number('BENCH_TICK_MS', 20), maxInFlight: number('BENCH_MAX_IN_FLIGHT', 16), maxBatch: number('BENCH_MAX_BATCH', 2000) }

const now = (): number => performance.timeOrigin + performance.now()
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

// ---------------------------------------------------------------- clean-up, Ctrl-C included

const cleanUp = new CleanUp(progress)
cleanUp.onSignals()

// ---------------------------------------------------------------- one run (make up or embedded)

async function waitUntil(check: () => Promise<boolean>, deadline: number, every = 200): Promise<boolean> {
  for (;;) {
    if (await check()) return true
    if (now() >= deadline) return false
    await sleep(every)
  }
}

/** Distinct events seen so far on the webhook and on the stream, every phase. */
async function delivered(webhook: Observer, stream: Observer): Promise<[number, number]> {
  const [w, s] = await Promise.all([webhook.count(0), stream.count(0)])
  return [w.total, s.total]
}

/** Redis's counters are a side measure: a failed read leaves the rate without them, the run goes on. */
async function redisBegin(system: System, tag: string): Promise<RedisStart | undefined> {
  if (system.redisPorts.length === 0) return undefined
  return beginWindow(system.redisPorts).catch((err: unknown) => {
    progress(`${tag}: Redis counters not reset, no Redis figures: ${(err as Error).message}`)
    return undefined
  })
}

async function redisEnd(start: RedisStart | undefined, tag: string, webhook: Observer, stream: Observer, before: [number, number]): Promise<RedisWindow | undefined> {
  if (!start) return undefined
  const [w, s] = await delivered(webhook, stream)
  const window = await endWindow(start, Math.min(w - before[0], s - before[1])).catch((err: unknown) => {
    progress(`${tag}: Redis counters not read, no Redis figures: ${(err as Error).message}`)
    return undefined
  })
  if (window) progress(`${tag}: ${redisLine(digest(window))}`)
  return window
}

async function runRate(system: System, label: string, phase: number, rate: number, publisher: Publisher, webhook: Observer, stream: Observer, publishedBefore: number): Promise<RateFigures> {
  const tag = `${label} ${int(rate)}/s`
  const [wb, sb] = await Promise.all([webhook.count(phase), stream.count(phase)])
  const backlogWebhook = Math.max(0, publishedBefore - wb.total)
  const backlogStream = Math.max(0, publishedBefore - sb.total)
  if (backlogWebhook + backlogStream > 0) progress(`${tag} starts with ${int(backlogWebhook)} webhook and ${int(backlogStream)} stream deliveries of earlier rates still outstanding`)
  const cpuBefore = await cpuSnapshot(system)
  const metricsBefore = await metricsSnapshot(system)
  const redisStart = await redisBegin(system, tag)
  const deliveredBefore = await delivered(webhook, stream)
  const wallStart = now()
  const pub = await publisher.publish(phase, rate, SECONDS, (p) => {
    void Promise.all([webhook.count(phase), stream.count(phase)]).then(([w, s]) =>
      progress(`${tag} ${(p.elapsedMs / 1000).toFixed(0).padStart(3)} s: sent ${int(p.sent)}, acknowledged ${int(p.published)} (${int(p.published / (p.elapsedMs / 1000))}/s), webhook ${int(w.unique)}, stream ${int(s.unique)}, batches in flight ${p.inFlight}`)
    )
  })
  const deadline = pub.lastSend + DRAIN_S * 1000
  let lastPrint = now()
  await waitUntil(async () => {
    const [w, s] = await Promise.all([webhook.count(phase), stream.count(phase)])
    if (now() - lastPrint >= 1000) {
      lastPrint = now()
      progress(`${tag} draining ${((now() - pub.lastSend) / 1000).toFixed(0)} s after the last batch: webhook ${int(w.unique)} / ${int(pub.published)}, stream ${int(s.unique)} / ${int(pub.published)}`)
    }
    return w.unique >= pub.published && s.unique >= pub.published
  }, deadline)
  const wallSeconds = (now() - wallStart) / 1000
  const cpu = cpuBetween(cpuBefore, await cpuSnapshot(system))
  const metrics = metricsDigest(metricsBefore, await metricsSnapshot(system), wallSeconds)
  for (const m of metrics) progress(`${tag}: ${m}`)
  const [w, s] = await Promise.all([webhook.report(phase, pub.firstSend, pub.lastSend, deadline), stream.report(phase, pub.firstSend, pub.lastSend, deadline)])
  const lost = (r: PhaseReport): number => Math.max(0, pub.published - r.onTime)
  progress(
    `${tag}: published ${int(pub.published)} (${int(pub.published / SECONDS)}/s${pub.failed ? `, ${int(pub.failed)} refused ${JSON.stringify(pub.errors)}` : ''}); ` +
      `webhook p50 ${ms(w.p50)} p99 ${ms(w.p99)} ms, lost ${int(lost(w))}; stream p50 ${ms(s.p50)} p99 ${ms(s.p99)} ms, lost ${int(lost(s))}`
  )

  // The next rate starts once the backlog is out (every event of this rate on both, or nothing more arriving
  // for 3 s), or after SETTLE_S: late arrivals are counted, not timed.
  let lastTotal = -1
  let stableSince = now()
  await waitUntil(async () => {
    const [wc, sc] = await Promise.all([webhook.count(phase), stream.count(phase)])
    const total = wc.total + sc.total
    if (total !== lastTotal) {
      lastTotal = total
      stableSince = now()
    }
    return (wc.unique >= pub.published && sc.unique >= pub.published) || now() - stableSince > 3000
  }, now() + SETTLE_S * 1000, 500)
  const [wc, sc] = await Promise.all([webhook.count(phase), stream.count(phase)])
  const lateWebhook = wc.unique - w.onTime
  const lateStream = sc.unique - s.onTime
  if (lateWebhook + lateStream > 0) progress(`${tag}: after the drain period ${int(lateWebhook)} more on the webhook, ${int(lateStream)} more on the stream`)
  if (redisStart) await sleep(REDIS_SETTLE_MS)
  const redis = await redisEnd(redisStart, tag, webhook, stream, deliveredBefore)
  return { rate, pub, webhook: w, stream: s, lateWebhook, lateStream, backlogWebhook, backlogStream, cpu, wallSeconds, metrics, redis }
}

async function run(spec: RunSpec, rates: number[], workDir: string): Promise<RunFigures> {
  const { label, phaseBase } = spec
  progress(`${label}: starting`)
  const mark = cleanUp.mark()
  const started = now()
  const onStop = (stop: () => Promise<void>): void => cleanUp.add(stop)
  try {
    const system = spec.kind === 'make-up' ? await startUp(workDir, PROFILE_DIR, onStop, spec.redis) : await startEmbedded(workDir, PROFILE_DIR, onStop)
    const redisNote = spec.kind === 'make-up' && spec.redis === 'cluster' ? `Redis Cluster (${system.redisPorts.length} nodes: 3 masters + 1 replica each)` : 'Redis'
    const description =
      spec.kind === 'make-up'
        ? `${label}: supervisord, nginx, ${summariseInstances(system)}, ${redisNote}, Kafka mock cluster (3 brokers)`
        : 'embedded (make run): one process, every service, memory bus, memory store journaled to disk'
    progress(`${label}: up in ${((now() - started) / 1000).toFixed(1)} s (${description})`)

    const { customer, webhook, stream, publisher } = await openScene(system, FOLLOWED, PUBLISH, cleanUp)
    progress(`${label}: app ${customer.appId}, webhook ${webhook.url}, ${customer.users.length} followed users, stream open`)

    // Warm-up (not reported): consumers assigned, subscriptions cached, JIT warm.
    const warm = await publisher.publish(phaseBase, 200, 2)
    const warmed = await waitUntil(async () => {
      const [w, s] = await Promise.all([webhook.count(phaseBase), stream.count(phaseBase)])
      return w.unique >= warm.published && s.unique >= warm.published
    }, now() + 60_000)
    const [ww, ws] = await Promise.all([webhook.count(phaseBase), stream.count(phaseBase)])
    // What the system costs doing nothing (kafkajs fetch loops and heartbeats, pollers): the share of the machine no event gets.
    const idleFrom = await cpuSnapshot(system)
    const redisIdleStart = await redisBegin(system, `${label} idle`)
    const idleDelivered = await delivered(webhook, stream)
    await sleep(IDLE_SAMPLE_MS)
    const idle = cpuBetween(idleFrom, await cpuSnapshot(system))
    const redisIdle = await redisEnd(redisIdleStart, `${label} idle`, webhook, stream, idleDelivered)
    const services = [...idle].filter(([k]) => !k.startsWith('bench'))
    const idleTotal = services.reduce((a, [, v]) => a + v, 0) / (IDLE_SAMPLE_MS / 1000)
    const idleNote = `idle before the first rate: ${idleTotal.toFixed(2)} cores (${services.map(([k, v]) => `${k} ${(v / (IDLE_SAMPLE_MS / 1000)).toFixed(2)}`).join(', ')})`
    const warmupNote = `warm-up: ${warm.published} events, ${ww.unique} on the webhook and ${ws.unique} on the stream${warmed ? '' : ' (not all within 60 s)'}; ${idleNote}`
    progress(`${label}: ${warmupNote}`)

    const figures: RateFigures[] = []
    let publishedBefore = warm.published
    for (const [i, rate] of rates.entries()) {
      const r = await runRate(system, label, phaseBase + 1 + i, rate, publisher, webhook, stream, publishedBefore)
      publishedBefore += r.pub.published
      figures.push(r)
    }
    return { spec, description, rates: figures, warmupNote, redisIdle }
  } finally {
    // Stop this system before the next one starts (the machine is shared), also when the run failed.
    await cleanUp.unwindTo(mark)
    progress(`${label}: stopped`)
  }
}

function summariseInstances(system: System): string {
  const counts = new Map<string, number>()
  for (const i of system.instances) counts.set(i.service, (counts.get(i.service) ?? 0) + 1)
  return [...counts].map(([s, n]) => `${s} x${n}`).join(', ')
}

/** make up with one Redis, then with the Redis Cluster (BENCH_REDIS), then embedded (BENCH_MODES); phases apart (2 digits). */
function runSpecs(): RunSpec[] {
  const specs: RunSpec[] = []
  if (MODES.includes('make-up')) for (const redis of REDIS_MODES) specs.push({ kind: 'make-up', redis, label: `make up, ${redisLabel(redis)}`, phaseBase: specs.length * 33 })
  if (MODES.includes('embedded')) specs.push({ kind: 'embedded', label: 'embedded', phaseBase: specs.length * 33 })
  return specs
}

async function main(): Promise<void> {
  if (!fs.existsSync(path.join(__dirname, '..', 'scripts', 'up.js')) && !__filename.endsWith('.ts')) throw new Error('dist/scripts/up.js is missing: make build')
  const embeddedRates = [...RATES, ...EMBEDDED_EXTRA.filter((r) => !RATES.includes(r))]
  if (embeddedRates.length >= 33) throw new Error('at most 32 rates (each run numbers its phases in 33)')
  const workDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-distributed-'))
  cleanUp.add(async () => fs.rmSync(workDir, { recursive: true, force: true }))
  if (PROFILE_DIR) fs.mkdirSync(PROFILE_DIR, { recursive: true })
  const startedAt = now()
  const runs: RunFigures[] = []
  const failures: Array<[string, Error]> = []
  try {
    for (const spec of runSpecs()) {
      // A run that fails is reported; the next still runs (its own processes were stopped by run()).
      try {
        runs.push(await run(spec, spec.kind === 'embedded' ? embeddedRates : RATES, workDir))
      } catch (err) {
        if (cleanUp.stopping) throw err
        progress(`${spec.label} failed: ${(err as Error).stack ?? String(err)}`)
        failures.push([spec.label, err as Error])
      }
    }
  } finally {
    await cleanUp.stopAll()
  }
  const settings = { seconds: SECONDS, drainSeconds: DRAIN_S, settleSeconds: SETTLE_S, followed: FOLLOWED, tickMs: PUBLISH.tickMs, maxInFlight: PUBLISH.maxInFlight }
  process.stdout.write(`${report(runs, failures, settings, (now() - startedAt) / 1000).join('\n')}\n`)
  if (failures.length > 0) process.exitCode = 1
}

main().catch(async (err: unknown) => {
  process.stderr.write(`bench/distributed failed: ${(err as Error).stack ?? String(err)}\n`)
  await cleanUp.stopAll()
  process.exit(1)
})
