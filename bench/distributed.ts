/**
 * bench/distributed: the whole path, ingest -> matcher -> signed webhook and
 * ingest -> matcher -> stream, at fixed rates, as operators run it:
 *
 *  - `make up` (the figure): Redis, the Kafka mock cluster (3 brokers),
 *    supervisord running every instance (make up's counts: GATEWAY, WEBHOOKS,
 *    ACTIVITY, STREAM, ACCOUNT_HISTORY from the environment, 2 each by
 *    default) and nginx in front; everything through nginx;
 *  - `make run` (beside it, same rates): the embedded process.
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
 *  - CPU used per service while it ran (from /proc): where the time goes.
 *
 * Between rates it waits (BENCH_SETTLE_SECONDS, 60 at most) until the backlog
 * of the previous rate is delivered. Progress lines (`~ ...`) go to stderr.
 * Everything it started is stopped on exit, Ctrl-C included (up.js down).
 *
 *   node dist/bench/distributed.js                      (make bench-distributed)
 *   BENCH_RATES=1000,5000 BENCH_SECONDS=5 node dist/bench/distributed.js
 *   BENCH_MODES=embedded ...                            (one of make-up, embedded)
 *   BENCH_DISTRIBUTED_PROFILE=/tmp/prof ...             (a CPU profile of every service process, written when
 *                                                        it stops; node dist/bench/distributed/profile.js sums one up)
 *   KAFKA_FETCH_MAX_WAIT=20ms ...                       (any setting reaches every service)
 *
 * bench-timeout: 1800 (scripts/run-bench.sh: the default run takes about ten minutes)
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Observer, type PhaseReport } from './distributed/observers'
import { Publisher, type PublishResult } from './distributed/publisher'
import { cpuBetween, cpuSnapshot, createCustomer, machine, metricsDigest, metricsSnapshot, progress, registerWebhook, startEmbedded, startUp, type System } from './distributed/systems'

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
const PROFILE_DIR = process.env.BENCH_DISTRIBUTED_PROFILE
/** How long the idle system's CPU is sampled after the warm-up. */
const IDLE_SAMPLE_MS = 5000
const PUBLISH = { tickMs: number('BENCH_TICK_MS', 20), maxInFlight: number('BENCH_MAX_IN_FLIGHT', 16), maxBatch: number('BENCH_MAX_BATCH', 2000) }

const now = (): number => performance.timeOrigin + performance.now()
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))
const int = (n: number): string => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '-')
const ms = (n: number): string => (!Number.isFinite(n) ? '-' : n < 10 ? n.toFixed(1) : n.toFixed(0))

interface RateFigures {
  rate: number
  pub: PublishResult
  webhook: PhaseReport
  stream: PhaseReport
  /** Events seen after the drain deadline (while settling). */
  lateWebhook: number
  lateStream: number
  /** Deliveries of earlier rates not yet seen when this rate started (the system was still behind). */
  backlogWebhook: number
  backlogStream: number
  /** CPU seconds per service over publishing + drain, and that wall time. */
  cpu: Map<string, number>
  wallSeconds: number
  /** What the services' /metrics said about this rate. */
  metrics: string[]
}

interface RunFigures {
  kind: System['kind']
  description: string
  rates: RateFigures[]
  warmupNote: string
}

// ---------------------------------------------------------------- clean-up, Ctrl-C included

const stoppers: Array<() => Promise<void>> = []
let stopping: Promise<void> | undefined

function stopAll(): Promise<void> {
  stopping ??= (async () => {
    for (const stop of stoppers.splice(0).reverse()) await stop().catch((err: unknown) => progress(`clean-up: ${(err as Error).message}`))
  })()
  return stopping
}

for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.on(signal, () => {
    if (stopping) return
    progress(`${signal}: stopping everything the bench started`)
    void stopAll().finally(() => process.exit(signal === 'SIGINT' ? 130 : 143))
  })
}

// ---------------------------------------------------------------- one run (make up or embedded)

async function waitUntil(check: () => Promise<boolean>, deadline: number, every = 200): Promise<boolean> {
  for (;;) {
    if (await check()) return true
    if (now() >= deadline) return false
    await sleep(every)
  }
}

async function runRate(system: System, label: string, phase: number, rate: number, publisher: Publisher, webhook: Observer, stream: Observer, publishedBefore: number): Promise<RateFigures> {
  const [wb, sb] = await Promise.all([webhook.count(phase), stream.count(phase)])
  const backlogWebhook = Math.max(0, publishedBefore - wb.total)
  const backlogStream = Math.max(0, publishedBefore - sb.total)
  if (backlogWebhook + backlogStream > 0) progress(`${label} ${int(rate)}/s starts with ${int(backlogWebhook)} webhook and ${int(backlogStream)} stream deliveries of earlier rates still outstanding`)
  const cpuBefore = await cpuSnapshot(system)
  const metricsBefore = await metricsSnapshot(system)
  const wallStart = now()
  const tag = `${label} ${int(rate)}/s`
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
  return { rate, pub, webhook: w, stream: s, lateWebhook, lateStream, backlogWebhook, backlogStream, cpu, wallSeconds, metrics }
}

async function run(kind: 'make-up' | 'embedded', rates: number[], phaseBase: number, workDir: string): Promise<RunFigures> {
  const label = kind === 'make-up' ? 'make up' : 'embedded'
  progress(`${label}: starting`)
  const mark = stoppers.length
  const started = now()
  const onStop = (stop: () => Promise<void>): void => void stoppers.push(stop)
  const system = kind === 'make-up' ? await startUp(workDir, PROFILE_DIR, onStop) : await startEmbedded(workDir, PROFILE_DIR, onStop)
  const description =
    kind === 'make-up'
      ? `make up: supervisord, nginx, ${summariseInstances(system)}, Redis, Kafka mock cluster (3 brokers)`
      : 'embedded (make run): one process, every service, memory bus, memory store journaled to disk'
  progress(`${label}: up in ${((now() - started) / 1000).toFixed(1)} s (${description})`)

  const base = await createCustomer(system, FOLLOWED)
  const webhook = await Observer.start({ kind: 'webhook', secret: base.secret })
  stoppers.push(() => webhook.stop())
  await registerWebhook(system, base, webhook.url ?? '')
  const stream = await Observer.start({ kind: 'stream', url: system.baseUrl, bearer: base.bearer })
  stoppers.push(() => stream.stop())
  const publisher = new Publisher(system.baseUrl, system.operatorToken, base.users, PUBLISH)
  stoppers.push(() => publisher.close())
  progress(`${label}: app ${base.appId}, webhook ${webhook.url}, ${base.users.length} followed users, stream open`)

  // Warm-up (not reported): consumers assigned, subscriptions cached, JIT warm.
  const warm = await publisher.publish(phaseBase, 200, 2)
  const warmed = await waitUntil(async () => {
    const [w, s] = await Promise.all([webhook.count(phaseBase), stream.count(phaseBase)])
    return w.unique >= warm.published && s.unique >= warm.published
  }, now() + 60_000)
  const [ww, ws] = await Promise.all([webhook.count(phaseBase), stream.count(phaseBase)])
  // What the system costs doing nothing (kafkajs fetch loops and heartbeats, pollers): the share of the machine no event gets.
  const idleFrom = await cpuSnapshot(system)
  await sleep(IDLE_SAMPLE_MS)
  const idle = cpuBetween(idleFrom, await cpuSnapshot(system))
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

  // Stop this system before the next one starts: the machine is shared.
  for (const stop of stoppers.splice(mark).reverse()) await stop()
  progress(`${label}: stopped`)
  return { kind: system.kind, description, rates: figures, warmupNote }
}

function summariseInstances(system: System): string {
  const counts = new Map<string, number>()
  for (const i of system.instances) counts.set(i.service, (counts.get(i.service) ?? 0) + 1)
  return [...counts].map(([s, n]) => `${s} x${n}`).join(', ')
}

// ---------------------------------------------------------------- report

function row(r: RateFigures, kind: string): string {
  const published = r.pub.published
  const window = (r.pub.lastSend - r.pub.firstSend) / 1000 || SECONDS
  const lost = (x: PhaseReport): number => Math.max(0, published - x.onTime)
  const last = Math.max(r.webhook.lastArrival, r.stream.lastArrival)
  const allIn = lost(r.webhook) + lost(r.stream) === 0 ? `${((last - r.pub.lastSend) / 1000).toFixed(1)} s` : `not in ${DRAIN_S} s`
  const refused = r.pub.failed > 0 ? ` (+${int(r.pub.failed)} refused)` : ''
  const late = r.lateWebhook + r.lateStream > 0 ? ` (${int(r.lateWebhook)} / ${int(r.lateStream)} later)` : ''
  return `| ${int(r.rate)} | ${kind} | ${int(published / SECONDS)}${refused} | ${int(r.webhook.inWindow / window)} / ${int(r.stream.inWindow / window)} | ${ms(r.webhook.p50)} / ${ms(r.webhook.p99)} | ${ms(r.stream.p50)} / ${ms(r.stream.p99)} | ${allIn} | ${int(lost(r.webhook))} / ${int(lost(r.stream))}${late} | ${int(r.webhook.duplicates)} / ${int(r.stream.duplicates)} | ${int(r.webhook.badSignatures)} |`
}

function cpuTable(run: RunFigures): string[] {
  const services = new Map<string, number>()
  for (const r of run.rates) for (const [s, sec] of r.cpu) services.set(s, (services.get(s) ?? 0) + sec)
  const order = [...services].sort((a, b) => b[1] - a[1]).map(([s]) => s)
  const lines = [`| events/s | ${order.join(' | ')} | total |`, `|---|${order.map(() => '---|').join('')}---|`]
  for (const r of run.rates) {
    const cores = order.map((s) => (r.cpu.get(s) ?? 0) / r.wallSeconds)
    lines.push(`| ${int(r.rate)} | ${cores.map((c) => c.toFixed(2)).join(' | ')} | ${cores.reduce((a, b) => a + b, 0).toFixed(2)} |`)
  }
  return lines
}

function targets(up: RunFigures | undefined, embedded: RunFigures | undefined): string[] {
  const out = ['targets (issue 14):']
  // Every event published arrived on time, none failed, and the publisher kept the rate: short by less than the 1% the
  // report names (a timer's rounding left a handful unsent at 1,000 and 2,000/s, which read as "none" delivered fully).
  const complete = (r: RateFigures): boolean => r.webhook.onTime >= r.pub.published && r.stream.onTime >= r.pub.published && r.pub.failed === 0 && r.pub.shortfall <= r.rate * SECONDS * 0.01
  if (up) {
    const at5k = up.rates.find((r) => r.rate === 5000)
    if (at5k) {
      const lost = Math.max(0, at5k.pub.published - at5k.webhook.onTime) + Math.max(0, at5k.pub.published - at5k.stream.onTime)
      const last = (Math.max(at5k.webhook.lastArrival, at5k.stream.lastArrival) - at5k.pub.lastSend) / 1000
      out.push(
        `  make up at 5,000/s for ${SECONDS} s (target: 60 s, every event on webhook and stream within 10 s after publishing stops, 0 lost, 0 bad signatures): ` +
          `published ${int(at5k.pub.published / SECONDS)}/s, ${lost === 0 ? `all in ${last.toFixed(1)} s after` : `${int(lost)} deliveries lost`}, ${at5k.webhook.badSignatures} bad signatures -> ${complete(at5k) && at5k.webhook.badSignatures === 0 ? 'met' : 'NOT met'}`
      )
    }
    const at1k = up.rates.find((r) => r.rate === 1000)
    if (at1k) out.push(`  make up p99 ingest -> stream at 1,000/s (target < 100 ms): ${ms(at1k.stream.p99)} ms -> ${at1k.stream.p99 < 100 && complete(at1k) ? 'met' : 'NOT met'}`)
  }
  if (embedded) {
    const best = embedded.rates.filter(complete).sort((a, b) => b.rate - a.rate)[0]
    const top = [...embedded.rates].sort((a, b) => b.rate - a.rate)[0]
    const topNote = top ? `; at ${int(top.rate)}/s offered: ${int(top.webhook.inWindow / SECONDS)}/s on the webhook, ${int(top.stream.inWindow / SECONDS)}/s on the stream` : ''
    out.push(`  embedded >= 30,000 events/s ingest -> stream and webhook: highest rate fully delivered ${best ? `${int(best.rate)}/s` : 'none'}${topNote} -> ${best && best.rate >= 30_000 ? 'met' : 'NOT met'}`)
  }
  out.push('  signed webhook delivery >= 0.6x a raw undici POST loop: measured by bench/webhooks (ratio signed/raw)')
  return out
}

async function main(): Promise<void> {
  if (!fs.existsSync(path.join(__dirname, '..', 'scripts', 'up.js')) && !__filename.endsWith('.ts')) throw new Error('dist/scripts/up.js is missing: make build')
  const workDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-distributed-'))
  stoppers.push(async () => fs.rmSync(workDir, { recursive: true, force: true }))
  if (PROFILE_DIR) fs.mkdirSync(PROFILE_DIR, { recursive: true })
  const startedAt = now()
  let up: RunFigures | undefined
  let embedded: RunFigures | undefined
  try {
    if (MODES.includes('make-up')) up = await run('make-up', RATES, 0, workDir)
    if (MODES.includes('embedded')) embedded = await run('embedded', [...RATES, ...EMBEDDED_EXTRA.filter((r) => !RATES.includes(r))], 50, workDir)
  } finally {
    await stopAll()
  }

  const lines = [
    `bench/distributed: one app, one signed webhook receiver and one stream consumer on loopback; post.create events through POST /admin/activity/events`,
    `(NDJSON, a batch every ${PUBLISH.tickMs} ms) at fixed rates, ${SECONDS} s each, ${FOLLOWED} followed users; lost = acknowledged but not seen within ${DRAIN_S} s after publishing stopped`,
    `machine: ${machine()}; shared with other work while it ran (timings are noisy)`
  ]
  for (const r of [up, embedded]) if (r) lines.push(`${r.description}; ${r.warmupNote}`)
  lines.push(
    '',
    '| events/s | run | published/s | delivered/s webhook / stream | ingest → webhook p50 / p99 ms | ingest → stream p50 / p99 ms | last event in, after publishing stopped | lost webhook / stream | duplicated webhook / stream | bad signatures |',
    '|---|---|---|---|---|---|---|---|---|---|'
  )
  const allRates = [...new Set([...(up?.rates ?? []), ...(embedded?.rates ?? [])].map((r) => r.rate))].sort((a, b) => a - b)
  for (const rate of allRates) {
    const u = up?.rates.find((r) => r.rate === rate)
    const e = embedded?.rates.find((r) => r.rate === rate)
    if (u) lines.push(row(u, 'make up'))
    if (e) lines.push(row(e, 'embedded'))
  }
  const behind = [...(up?.rates.map((r) => ['make up', r] as const) ?? []), ...(embedded?.rates.map((r) => ['embedded', r] as const) ?? [])].filter(([, r]) => r.backlogWebhook + r.backlogStream > 0)
  lines.push('', `lost: acknowledged by the ingest route but not on the webhook / stream within ${DRAIN_S} s after publishing stopped (not necessarily dropped: "later" counts those that arrived while the bench waited, up to ${SETTLE_S} s, before the next rate).`)
  for (const [kind, r] of [...(up?.rates.map((r) => ['make up', r] as const) ?? []), ...(embedded?.rates.map((r) => ['embedded', r] as const) ?? [])]) {
    if (r.pub.failed > 0) lines.push(`${kind} at ${int(r.rate)}/s: the ingest route refused or did not answer batches of ${int(r.pub.failed)} events (${Object.entries(r.pub.errors).map(([k, n]) => `${k}: ${n}`).join(', ')}); not counted as published.`)
    // The last tick's events are always left out; more than 1 % means the ingest route held every connection.
    if (r.pub.shortfall > r.rate * SECONDS * 0.01) lines.push(`${kind} at ${int(r.rate)}/s: ${int(r.pub.shortfall)} of the period's events not sent in time (${PUBLISH.maxInFlight} batches at a time waited for the ingest route's answer).`)
  }
  for (const [kind, r] of behind) lines.push(`${kind} at ${int(r.rate)}/s started behind: ${int(r.backlogWebhook)} webhook and ${int(r.backlogStream)} stream deliveries of earlier rates still outstanding.`)
  for (const r of [up, embedded]) {
    if (!r) continue
    lines.push('', `CPU used while each rate ran (cores: CPU seconds / wall seconds of publishing and draining), ${r.kind}:`, '', ...cpuTable(r))
    lines.push('', `what the services' /metrics said over the same time, ${r.kind}:`)
    for (const x of r.rates) lines.push(`  ${int(x.rate)}/s:`, ...x.metrics.map((m) => `    ${m}`))
  }
  lines.push('', ...targets(up, embedded), '', `total ${((now() - startedAt) / 1000).toFixed(0)} s`)
  process.stdout.write(`${lines.join('\n')}\n`)
}

main().catch(async (err: unknown) => {
  process.stderr.write(`bench/distributed failed: ${(err as Error).stack ?? String(err)}\n`)
  await stopAll()
  process.exit(1)
})
