/**
 * bench/faults: what a kill -9 and an overload cost the people at the end of
 * the pipe, measured as bench/distributed measures (same customer, signed
 * webhook receiver and stream consumer in worker threads, same publisher).
 *
 * 1. Recovery, `make up` (one Redis, make up's counts, supervisord restarting
 *    what dies): FAULT_RATE (2,000) events/s for FAULT_SECONDS (20), twice:
 *    without a fault (the baseline), then with FAULT_VICTIMS killed with
 *    SIGKILL one every FAULT_KILL_EVERY_MS (3 s). Printed: ingest -> webhook
 *    and ingest -> stream p50/p99/max over the whole run beside the baseline,
 *    lost, duplicates, publisher errors; each kill's timeline (restarted by
 *    supervisord, ready on its port); and, per second of sending, the p99 of
 *    the events sent in it: where the delay sits and how soon it is gone.
 * 2. Overload, embedded (`make run`) then `make up`: a probe at
 *    FAULT_PROBE_RATE measures the webhook's capacity (delivered/s over its
 *    last seconds, the probe being above it); then 3x and 10x that capacity
 *    offered for OVERLOAD_SECONDS (10). Printed: delivered/s during each
 *    burst as a share of the capacity (target: >= 90 %), the publisher's
 *    refusals (503 + Retry-After; this publisher honours it and sends the
 *    batch again), and whether every accepted event arrived afterwards.
 *
 *   node dist/bench/faults.js                                    (make bench-faults)
 *   FAULT_PARTS=recovery ...   (or overload; both by default)
 *   FAULT_OVERLOAD_MODES=embedded ...   (embedded,make-up by default)
 *   FAULT_MULTIPLES=10 FAULT_PROFILE=/tmp/prof ...   (only 10x; CPU profiles, summed up by dist/bench/distributed/profile.js)
 *
 * bench-timeout: 1800
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { PhaseReport, PhaseSamples } from './distributed/observers'
import type { PublishResult } from './distributed/publisher'
import { int, ms } from './distributed/report'
import { openScene, type Scene } from './distributed/scene'
import { progress, startEmbedded, startUp, type System } from './distributed/systems'
import { CleanUp } from './support/clean-up'
import { percentile } from './support/stats'

function number(name: string, fallback: number): number {
  const n = Number(process.env[name] ?? fallback)
  if (!Number.isFinite(n) || n < 0) throw new Error(`${name} must be a non-negative number`)
  return n
}

const RATE = number('FAULT_RATE', 2000)
const SECONDS = number('FAULT_SECONDS', 20)
const VICTIMS = (process.env.FAULT_VICTIMS ?? 'activity-1,webhooks-1,gateway-1,account-history-1,webhooks-2,activity-2').split(',').filter((s) => s !== '')
const FIRST_KILL_MS = number('FAULT_FIRST_KILL_MS', 3000)
const KILL_EVERY_MS = number('FAULT_KILL_EVERY_MS', 3000)
const SETTLE_MS = number('FAULT_SETTLE_MS', 120_000)
const OVERLOAD_SECONDS = number('OVERLOAD_SECONDS', 10)
const MULTIPLES = (process.env.FAULT_MULTIPLES ?? '3,10').split(',').map(Number)
/** A directory for a CPU profile of every service process (written when it stops), as bench/distributed's. */
const PROFILE_DIR = process.env.FAULT_PROFILE
const PARTS = (process.env.FAULT_PARTS ?? 'recovery,overload').split(',')
const OVERLOAD_MODES = (process.env.FAULT_OVERLOAD_MODES ?? 'embedded,make-up').split(',')
const FOLLOWED = 24
const PUBLISH = { tickMs: 20, maxInFlight: 16, maxBatch: 2000, honourRetryAfter: true }

const now = (): number => performance.timeOrigin + performance.now()
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))
const seconds = (n: number): string => (n / 1000).toFixed(1)

const cleanUp = new CleanUp(progress)
cleanUp.onSignals()

/** A scene warmed up: consumers assigned, subscriptions cached (phase 1, not reported). */
async function scene(system: System): Promise<Scene> {
  const s = await openScene(system, FOLLOWED, PUBLISH, cleanUp)
  const warm = await s.publisher.publish(1, 200, 2)
  await drained(s, 1, warm.published, 60_000)
  return s
}

/** Waits until every event of `phase` is on both, or nothing more arrived for 10 s, or `limitMs`; true when all arrived. */
async function drained(s: Scene, phase: number, published: number, limitMs: number): Promise<boolean> {
  const until = now() + limitMs
  let last = -1
  let since = now()
  let printed = now()
  for (;;) {
    const [w, st] = await Promise.all([s.webhook.count(phase), s.stream.count(phase)])
    if (w.unique >= published && st.unique >= published) return true
    if (w.unique + st.unique !== last) {
      last = w.unique + st.unique
      since = now()
    }
    if (now() - since > 10_000 || now() > until) return false
    if (now() - printed > 2000) {
      printed = now()
      progress(`  draining: webhook ${int(w.unique)} / ${int(published)}, stream ${int(st.unique)} / ${int(published)}`)
    }
    await sleep(250)
  }
}


function latencies(x: PhaseSamples, from = -Infinity, to = Infinity): Float64Array {
  const out: number[] = []
  for (let i = 0; i < x.sentAt.length; i++) {
    const sent = x.sentAt[i] as number
    if (sent >= from && sent < to) out.push((x.arrivedAt[i] as number) - sent)
  }
  return Float64Array.from(out).sort()
}

interface RunFigures {
  pub: PublishResult
  webhook: PhaseReport
  stream: PhaseReport
  webhookSamples: PhaseSamples
  streamSamples: PhaseSamples
  complete: boolean
}

async function runPhase(s: Scene, phase: number, rate: number, durationS: number, label: string, during?: (start: number) => Promise<void>): Promise<RunFigures> {
  const start = now()
  const duringDone = during ? during(start) : Promise.resolve()
  const pub = await s.publisher.publish(phase, rate, durationS, (p) => {
    void Promise.all([s.webhook.count(phase), s.stream.count(phase)]).then(([w, st]) =>
      progress(`${label} ${seconds(p.elapsedMs)} s: acknowledged ${int(p.published)}, webhook ${int(w.unique)}, stream ${int(st.unique)}`)
    )
  })
  await duringDone
  const complete = await drained(s, phase, pub.published, SETTLE_MS)
  const end = now()
  const [webhook, stream, webhookSamples, streamSamples] = await Promise.all([
    s.webhook.report(phase, pub.firstSend, pub.lastSend, end),
    s.stream.report(phase, pub.firstSend, pub.lastSend, end),
    s.webhook.samples(phase),
    s.stream.samples(phase)
  ])
  return { pub, webhook, stream, webhookSamples, streamSamples, complete }
}

// ---------------------------------------------------------------- recovery

interface Kill {
  name: string
  at: number
  pid: number
  restartedMs?: number
  readyMs?: number
  note?: string
}

async function pidOf(system: System, name: string): Promise<number | undefined> {
  return (await system.processes()).find((p) => p.name === name)?.pid
}

/** Kills `name` and follows it back: a new pid from supervisord, then /readyz answering 200 on its port. */
async function killAndFollow(system: System, name: string): Promise<Kill> {
  const pid = await pidOf(system, name)
  if (pid === undefined) return { name, at: now(), pid: 0, note: 'not running' }
  const kill: Kill = { name, at: now(), pid }
  process.kill(pid, 'SIGKILL')
  const port = system.instances.find((i) => i.name === name)?.port
  while (now() - kill.at < 90_000) {
    const current = await pidOf(system, name).catch(() => undefined)
    if (current !== undefined && current !== pid) {
      kill.restartedMs ??= now() - kill.at
      const ready = await fetch(`http://127.0.0.1:${port}/readyz`, { signal: AbortSignal.timeout(1000) }).then((r) => r.ok, () => false)
      if (ready) {
        kill.readyMs = now() - kill.at
        return kill
      }
    }
    await sleep(100)
  }
  kill.note = 'not ready within 90 s'
  return kill
}

function figuresLine(label: string, r: RunFigures): string {
  const lost = (x: PhaseReport): number => Math.max(0, r.pub.published - x.unique)
  return `| ${label} | ${int(r.pub.published)} | ${int(r.pub.failed)} | ${int(r.pub.refusals)} | ${ms(r.webhook.p50)} | ${ms(r.webhook.p99)} | ${ms(r.webhook.max)} | ${int(lost(r.webhook))} | ${int(r.webhook.duplicates)} | ${ms(r.stream.p50)} | ${ms(r.stream.p99)} | ${ms(r.stream.max)} | ${int(lost(r.stream))} | ${int(r.stream.duplicates)} |`
}

async function recovery(workDir: string): Promise<string[]> {
  const mark = cleanUp.mark()
  const system = await startUp(workDir, PROFILE_DIR, (stop) => cleanUp.add(stop), 'single')
  try {
    const s = await scene(system)
    progress(`recovery: baseline, ${int(RATE)}/s for ${SECONDS} s without a fault`)
    const base = await runPhase(s, 2, RATE, SECONDS, 'baseline')
    const kills: Kill[] = []
    progress(`recovery: ${int(RATE)}/s for ${SECONDS} s, killing ${VICTIMS.join(', ')} one every ${KILL_EVERY_MS} ms from ${FIRST_KILL_MS} ms`)
    const faulted = await runPhase(s, 3, RATE, SECONDS, 'kill -9', async (start) => {
      const follows: Array<Promise<Kill>> = []
      for (const [i, name] of VICTIMS.entries()) {
        await sleep(Math.max(0, start + FIRST_KILL_MS + i * KILL_EVERY_MS - now()))
        progress(`kill -9 ${name}`)
        follows.push(killAndFollow(system, name))
      }
      kills.push(...(await Promise.all(follows)))
    })
    const start = faulted.pub.firstSend
    const out = [
      `Recovery: make up (one Redis; ${system.instances.map((i) => i.name).join(', ')}), ${int(RATE)} events/s for ${SECONDS} s, one webhook and one stream consumer; latency from the batch's send to the first arrival.`,
      '',
      '| run | published | publisher errors | batches refused with 503 (sent again after Retry-After) | webhook p50 ms | webhook p99 ms | webhook max ms | webhook lost | webhook duplicates | stream p50 ms | stream p99 ms | stream max ms | stream lost | stream duplicates |',
      '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
      figuresLine('baseline: no fault', base),
      figuresLine(`kill -9 of ${VICTIMS.length}, one every ${seconds(KILL_EVERY_MS)} s`, faulted),
      '',
      'Each kill (seconds from the first event sent):',
      '',
      '| instance | killed at s | restarted by supervisord after ms | ready (/readyz 200) after ms |',
      '|---|---|---|---|',
      ...kills.map((k) => `| ${k.name} | ${seconds(k.at - start)} | ${k.restartedMs === undefined ? '-' : int(k.restartedMs)} | ${k.readyMs === undefined ? (k.note ?? '-') : int(k.readyMs)} |`),
      '',
      'Per second of sending (kills marked): the p99 and max latency of the events sent in it.',
      '',
      '| second | kills | webhook p99 ms | webhook max ms | stream p99 ms | stream max ms |',
      '|---|---|---|---|---|---|'
    ]
    for (let sec = 0; sec < Math.ceil(SECONDS); sec++) {
      const from = start + sec * 1000
      const w = latencies(faulted.webhookSamples, from, from + 1000)
      const st = latencies(faulted.streamSamples, from, from + 1000)
      const inIt = kills.filter((k) => k.at >= from && k.at < from + 1000).map((k) => k.name)
      out.push(`| ${sec} | ${inIt.join(', ')} | ${ms(percentile(w, 99))} | ${ms(w[w.length - 1] ?? Number.NaN)} | ${ms(percentile(st, 99))} | ${ms(st[st.length - 1] ?? Number.NaN)} |`)
    }
    out.push('', `targets: kill -9 run webhook p99 <= 10,000 ms (${ms(faulted.webhook.p99)}), stream p99 <= 3,000 ms (${ms(faulted.stream.p99)}), 0 lost (${int(Math.max(0, faulted.pub.published - faulted.webhook.unique))} webhook, ${int(Math.max(0, faulted.pub.published - faulted.stream.unique))} stream), publishers no error (${int(faulted.pub.failed)})`)
    return out
  } finally {
    await cleanUp.unwindTo(mark)
  }
}

// ---------------------------------------------------------------- overload

/** Webhook arrivals of `x` per second between `from` and `to` (epoch ms). */
function arrivalRate(x: PhaseSamples, from: number, to: number): number {
  let n = 0
  for (const at of x.arrivedAt) if (at >= from && at < to) n++
  return (n * 1000) / Math.max(1, to - from)
}

async function overload(workDir: string, mode: 'embedded' | 'make-up'): Promise<string[]> {
  const mark = cleanUp.mark()
  const onStop = (stop: () => Promise<void>): void => cleanUp.add(stop)
  const system = mode === 'embedded' ? await startEmbedded(workDir, PROFILE_DIR, onStop) : await startUp(workDir, PROFILE_DIR, onStop, 'single')
  try {
    const s = await scene(system)
    const probeRate = number('FAULT_PROBE_RATE', mode === 'embedded' ? 8000 : 3000)
    progress(`overload ${mode}: capacity probe at ${int(probeRate)}/s for ${OVERLOAD_SECONDS} s`)
    const probe = await runPhase(s, 4, probeRate, OVERLOAD_SECONDS, `${mode} probe`)
    // The first seconds fill the pipeline: the capacity is what arrives in the probe's second half.
    const half = (probe.pub.firstSend + probe.pub.lastSend) / 2
    const capacity = Math.min(probeRate, arrivalRate(probe.webhookSamples, half, probe.pub.lastSend))
    const rows: string[] = [
      `| probe ${int(probeRate)}/s | ${int(probe.pub.published / OVERLOAD_SECONDS)} | ${int(capacity)} | 100 % (the capacity) | ${int(probe.pub.refusals)} | ${probe.complete ? 'yes' : 'NO'} |`
    ]
    const notes: string[] = []
    for (const [i, multiple] of MULTIPLES.entries()) {
      const rate = Math.round(capacity * multiple)
      progress(`overload ${mode}: ${multiple}x capacity, ${int(rate)}/s for ${OVERLOAD_SECONDS} s`)
      const r = await runPhase(s, 5 + i, rate, OVERLOAD_SECONDS, `${mode} ${multiple}x`)
      const during = arrivalRate(r.webhookSamples, r.pub.firstSend, r.pub.lastSend)
      rows.push(`| ${multiple}x capacity, ${int(rate)}/s | ${int(r.pub.published / OVERLOAD_SECONDS)} | ${int(during)} | ${((100 * during) / capacity).toFixed(0)} % | ${int(r.pub.refusals)} | ${r.complete ? 'yes' : 'NO'} |`)
      notes.push(`${multiple}x: ${int(r.pub.published)} accepted (${int(r.pub.failed)} failed ${JSON.stringify(r.pub.errors)}, ${int(r.pub.shortfall)} not sent in the period), ${int(r.webhook.unique)} on the webhook and ${int(r.stream.unique)} on the stream, last ${ms((r.webhook.lastArrival - r.pub.lastSend) / 1000)} s after the last batch`)
    }
    return [
      `Overload, ${mode === 'embedded' ? 'embedded (make run)' : 'make up (one Redis)'}: offered above the webhook's capacity for ${OVERLOAD_SECONDS} s each; delivered/s counts webhook arrivals while publishing.`,
      '',
      '| offered | accepted/s | delivered/s during | share of capacity | 503 refusals (sent again after Retry-After) | every accepted event delivered |',
      '|---|---|---|---|---|---|',
      ...rows,
      '',
      ...notes
    ]
  } finally {
    await cleanUp.unwindTo(mark)
  }
}

async function main(): Promise<void> {
  const workDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-faults-'))
  cleanUp.add(async () => fs.rmSync(workDir, { recursive: true, force: true }))
  const out: string[] = []
  try {
    if (PARTS.includes('recovery')) out.push(...(await recovery(path.join(workDir, 'recovery'))), '')
    if (PARTS.includes('overload')) for (const mode of OVERLOAD_MODES) out.push(...(await overload(path.join(workDir, mode), mode === 'embedded' ? 'embedded' : 'make-up')), '')
  } finally {
    await cleanUp.stopAll()
  }
  process.stdout.write(`${out.join('\n')}\n`)
}

main().catch(async (err: unknown) => {
  process.stderr.write(`bench/faults failed: ${(err as Error).stack ?? String(err)}\n`)
  await cleanUp.stopAll()
  process.exit(1)
})
