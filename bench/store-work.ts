/**
 * bench/store-work: the Redis work per delivered event of the whole system.
 *
 * The embedded process (`node dist/services/embedded/main.js`: every service,
 * memory bus) on a Redis store, twice:
 *  - one redis-server (REDIS_URL);
 *  - a Redis Cluster of 6 nodes, 3 masters with one replica each
 *    (REDIS_CLUSTER_NODES).
 * Set up as an app does: an app and its bearer, a signed webhook receiver on
 * loopback (CRC answered, every signature checked) registered with
 * POST /2/webhooks, one post.create subscription of one user with that
 * webhook, one client on GET /2/activity/stream. After a warm-up (50
 * events), every node's counters are zeroed (CONFIG RESETSTAT) and its CPU
 * time read; then BENCH_STORE_EVENTS events (10,000) are published at
 * BENCH_STORE_RATE events/s (1,000) through POST /admin/activity/events, the
 * bench waits until each reached the webhook and the stream (at most
 * BENCH_STORE_DRAIN_SECONDS, 60, after the last send) and SETTLE_MS more for
 * the writes that follow a delivery (usage counts are written each second),
 * and reads every node's INFO commandstats and INFO cpu.
 *
 * An event is one webhook delivery plus one stream line. Per-event figures
 * are the masters' (the single server is a master); the replicas' commands
 * are the replication stream of those writes and are shown apart. The system's
 * own background work (timers, pollers, replication acks) runs in the window
 * too: its rate, measured idle just before, is printed and subtracted in one
 * row.
 *
 *   BENCH_STORE_EVENTS=2000 BENCH_STORE_RATE=500 node dist/bench/store-work.js
 *
 * Exit status 1 when an event did not arrive on the webhook or the stream.
 * bench-timeout: 420 (scripts/run-bench.sh: about a minute and a half by default; startups are bounded at 90 s each)
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { freeClusterPort, freePort, launchRedis, launchRedisCluster, terminate, type Launched } from '../scripts/local-infra'
import { batch, call, createApp, ingest, latencies, publishPaced, StreamReader } from './support/activity-client'
import { percentile } from './support/stats'
import { cpuMs, mergedCalls, nodeRoles, resetStats, sample, totalCalls, type NodeSample, type RedisNode } from './support/redis-stats'
import { startService, stopService } from './support/service-process'
import { WebhookReceiver } from './support/webhook-receiver'

function positive(name: string, fallback: number): number {
  const n = Number(process.env[name] ?? fallback)
  if (!Number.isFinite(n) || n <= 0) throw new Error(`${name} must be a positive number`)
  return n
}

const EVENTS = Math.round(positive('BENCH_STORE_EVENTS', 10_000))
const RATE = positive('BENCH_STORE_RATE', 1000)
const DRAIN_MS = positive('BENCH_STORE_DRAIN_SECONDS', 60) * 1000
const WARMUP = 50
const TICK_MS = 50
/** After the last arrival: usage counts are written within a second, attempt logs right after the answer. */
const SETTLE_MS = 2000
/** The idle sample of background commands, right before the measured run. */
const IDLE_MS = 3000
const TOP = 10
const CLUSTER_NODE_TIMEOUT_MS = 15_000
const OPERATOR_TOKEN = 'bench-store-work-operator-token-0123456789'

const progress = (line: string): void => void process.stderr.write(`~ ${line}\n`)
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

// ---------------------------------------------------------------- clean-up, Ctrl-C and run-bench's timeout included

const stoppers: Array<() => Promise<void>> = []
let interrupted = false

/** Runs `stop` now, unless a signal's stopAll already took it. */
async function stopNow(stop: () => Promise<void>): Promise<void> {
  const at = stoppers.indexOf(stop)
  if (at < 0) return
  stoppers.splice(at, 1)
  await stop()
}

async function stopAll(): Promise<void> {
  for (const stop of stoppers.splice(0).reverse()) await stop().catch((err: unknown) => progress(`clean-up: ${(err as Error).message}`))
}

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    interrupted = true
    progress(`${signal}: stopping everything the bench started`)
    void stopAll().finally(() => process.exit(1))
  })
}

// ---------------------------------------------------------------- one system

interface Figures {
  nodes: RedisNode[]
  webhook: number
  stream: number
  windowMs: number
  /** Commands per second per node while idle (after the warm-up, before publishing). */
  idleRate: Map<number, number>
  cpuBefore: Map<number, number>
  after: Map<number, NodeSample>
  toWebhook: number[]
  toStream: number[]
  /** What makes these figures wrong (printed, exit status 1). */
  problems: string[]
}

async function everyNode<T>(nodes: RedisNode[], f: (port: number) => Promise<T>): Promise<Map<number, T>> {
  return new Map(await Promise.all(nodes.map(async (n) => [n.port, await f(n.port)] as const)))
}

async function measure(label: string, redisEnv: Record<string, string>, nodes: RedisNode[], dataDir: string): Promise<Figures> {
  const service = await startService('embedded', { ...redisEnv, DATA_DIR: dataDir, WEBHOOK_ALLOW_INSECURE: 'true' }, { operatorToken: OPERATOR_TOKEN })
  const stopping = (): Promise<void> => stopService(service)
  stoppers.push(stopping)
  const reader = new StreamReader()
  let receiver: WebhookReceiver | undefined
  try {
    const base = service.url
    const app = await createApp(base, OPERATOR_TOKEN, 'bench store-work')
    receiver = new WebhookReceiver(app.consumerSecret)
    const auth = { authorization: `Bearer ${app.bearer}`, 'content-type': 'application/json' }
    const webhook = (await call('POST', `${base}/2/webhooks`, auth, JSON.stringify({ url: await receiver.listen() }))).data as { id: string; valid: boolean }
    if (!webhook.valid) throw new Error('the webhook was registered invalid (CRC failed)')
    const user = `90${Date.now() % 1e9}${Math.floor(Math.random() * 1000)}`
    await call('POST', `${base}/2/activity/subscriptions`, auth, JSON.stringify({ event_type: 'post.create', filter: { user_id: user }, webhook_id: webhook.id }))
    await reader.open(base, app.bearer)

    const warm = batch([user], WARMUP)
    await ingest(base, OPERATOR_TOKEN, warm.body)
    await Promise.all([receiver.waitFor(WARMUP, 60_000), reader.waitFor(WARMUP, 60_000)])
    if (receiver.arrivals.size < WARMUP || reader.arrivals.size < WARMUP) {
      throw new Error(`warm-up: ${receiver.arrivals.size} of ${WARMUP} events on the webhook and ${reader.arrivals.size} on the stream within 60 s`)
    }
    await sleep(SETTLE_MS)

    await everyNode(nodes, resetStats)
    await sleep(IDLE_MS)
    const idle = await everyNode(nodes, sample)
    const idleRate = new Map([...idle].map(([port, s]) => [port, (totalCalls(s) * 1000) / IDLE_MS]))

    const cpuBefore = await everyNode(nodes, cpuMs)
    await everyNode(nodes, resetStats)
    const started = performance.now()
    progress(`${label}: publishing ${EVENTS} events at ${RATE}/s`)
    const sentAt = await publishPaced(base, OPERATOR_TOKEN, [user], { rate: RATE, count: EVENTS, tickMs: TICK_MS })
    const expected = WARMUP + EVENTS
    await Promise.all([receiver.waitFor(expected, DRAIN_MS), reader.waitFor(expected, DRAIN_MS)])
    await sleep(SETTLE_MS)
    const after = await everyNode(nodes, sample)
    const windowMs = performance.now() - started
    const toWebhook = latencies(sentAt, receiver.arrivals)
    const toStream = latencies(sentAt, reader.arrivals)
    progress(`${label}: ${toWebhook.length} on the webhook, ${toStream.length} on the stream, window ${(windowMs / 1000).toFixed(1)} s`)
    const problems: string[] = []
    if (toWebhook.length < EVENTS || toStream.length < EVENTS) problems.push(`${label}: ${EVENTS - toWebhook.length} events missing on the webhook, ${EVENTS - toStream.length} on the stream`)
    if (receiver.badSignatures > 0) problems.push(`${label}: ${receiver.badSignatures} webhook POSTs with a bad signature`)
    return { nodes, webhook: toWebhook.length, stream: toStream.length, windowMs, idleRate, cpuBefore, after, toWebhook, toStream, problems }
  } finally {
    reader.close()
    await receiver?.close()
    await stopNow(stopping)
  }
}

/** A Redis node (or the cluster's six) stopped with the bench, kept until the end of `run`. */
async function withInfra<T>(launch: () => Promise<Launched[]>, run: () => Promise<T>): Promise<T> {
  const launched = await launch()
  const stop = async (): Promise<void> => {
    for (const l of launched) await terminate(l)
  }
  stoppers.push(stop)
  try {
    return await run()
  } finally {
    await stopNow(stop)
  }
}

async function single(dir: string): Promise<Figures> {
  const port = await freePort()
  return withInfra(
    async () => [await launchRedis({ port, dir: path.join(dir, 'redis'), tied: true })],
    () => measure('single redis-server', { REDIS_URL: `redis://127.0.0.1:${port}` }, [{ port, role: 'master' }], path.join(dir, 'data-single'))
  )
}

async function cluster(dir: string): Promise<Figures> {
  const taken = new Set<number>()
  const ports: number[] = []
  for (let i = 0; i < 6; i++) {
    const p = await freeClusterPort(taken)
    taken.add(p).add(p + 10_000)
    ports.push(p)
  }
  progress(`Redis Cluster on ${ports.join(', ')}`)
  return withInfra(
    () => launchRedisCluster({ ports, dir: path.join(dir, 'cluster'), tied: true, nodeTimeoutMs: CLUSTER_NODE_TIMEOUT_MS }),
    async () => {
      const nodes = await nodeRoles(ports)
      const env = { REDIS_CLUSTER_NODES: ports.map((p) => `127.0.0.1:${p}`).join(',') }
      const figures = await measure('Redis Cluster', env, nodes, path.join(dir, 'data-cluster'))
      const roles = (ns: RedisNode[]): string => ns.map((n) => `${n.port}:${n.masterPort ?? 'master'}`).join(',')
      if (roles(await nodeRoles(ports)) !== roles(nodes)) figures.problems.push('a replica took over during the cluster run: the per-node figures mix roles')
      return figures
    }
  )
}

// ---------------------------------------------------------------- report

interface Digest {
  events: number
  masters: NodeSample[]
  masterCalls: number
  replicaCalls: number
  idleMasters: number
  masterCpuMs: number
  replicaCpuMs: number
}

function digest(f: Figures): Digest {
  const events = Math.min(f.webhook, f.stream)
  const of = (role: RedisNode['role']): RedisNode[] => f.nodes.filter((n) => n.role === role)
  const calls = (ns: RedisNode[]): number => ns.reduce((sum, n) => sum + totalCalls(f.after.get(n.port) as NodeSample), 0)
  const cpu = (ns: RedisNode[]): number => ns.reduce((sum, n) => sum + ((f.after.get(n.port)?.cpuMs ?? 0) - (f.cpuBefore.get(n.port) ?? 0)), 0)
  return {
    events,
    masters: of('master').map((n) => f.after.get(n.port) as NodeSample),
    masterCalls: calls(of('master')),
    replicaCalls: calls(of('replica')),
    idleMasters: of('master').reduce((sum, n) => sum + (f.idleRate.get(n.port) ?? 0), 0),
    masterCpuMs: cpu(of('master')),
    replicaCpuMs: cpu(of('replica'))
  }
}

const int = (n: number): string => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '-')
const fixed = (n: number, digits: number): string => (Number.isFinite(n) ? n.toFixed(digits) : '-')
const perEvent = (n: number, events: number, digits = 2): string => (events > 0 ? fixed(n / events, digits) : '-')
const p50p99 = (sorted: number[]): string => `${fixed(percentile(sorted, 50), 1)} / ${fixed(percentile(sorted, 99), 1)}`

function summary(s: Figures, c: Figures | undefined): string[] {
  const both = c ? [s, c] : [s]
  const d = both.map(digest)
  const row = (name: string, cell: (f: Figures, g: Digest) => string): string => `| ${name} | ${both.map((f, i) => cell(f, d[i] as Digest)).join(' | ')}${c ? '' : ' | -'} |`
  return [
    '| per event (an event = one webhook delivery + one stream line) | single redis-server | Redis Cluster, 3 masters + 3 replicas |',
    '|---|---|---|',
    row('events delivered: webhook / stream (of sent)', (f) => `${int(f.webhook)} / ${int(f.stream)} (of ${int(EVENTS)})`),
    row('measured window: publishing + drain + settle, s', (f) => fixed(f.windowMs / 1000, 1)),
    row('Redis commands (masters)', (_, g) => int(g.masterCalls)),
    row('**commands per event** (masters)', (_, g) => `**${perEvent(g.masterCalls, g.events)}**`),
    row('idle background, commands/s (masters; timers, pollers, replication acks)', (_, g) => fixed(g.idleMasters, 1)),
    row('commands per event, idle background subtracted', (f, g) => perEvent(g.masterCalls - (g.idleMasters * f.windowMs) / 1000, g.events)),
    row('**Redis CPU ms per event** (masters, user + sys)', (_, g) => `**${perEvent(g.masterCpuMs, g.events, 3)}**`),
    row('replicas: commands (replication stream, not in the rows above)', (f, g) => (f.nodes.some((n) => n.role === 'replica') ? int(g.replicaCalls) : '-')),
    row('replicas: commands per event (not in the rows above)', (f, g) => (f.nodes.some((n) => n.role === 'replica') ? perEvent(g.replicaCalls, g.events) : '-')),
    row('replicas: CPU ms per event (not in the rows above)', (f, g) => (f.nodes.some((n) => n.role === 'replica') ? perEvent(g.replicaCpuMs, g.events, 3) : '-')),
    row('ingest -> webhook p50 / p99 ms', (f) => p50p99(f.toWebhook)),
    row('ingest -> stream p50 / p99 ms', (f) => p50p99(f.toStream))
  ]
}

function topCommands(s: Figures, c: Figures | undefined): string[] {
  const lists = [s, c].map((f) => (f ? { top: mergedCalls(digest(f).masters).slice(0, TOP), events: digest(f).events } : undefined))
  const cells = (l: (typeof lists)[number], i: number): string => {
    const entry = l?.top[i]
    return entry ? `${entry[0]} | ${int(entry[1])} | ${perEvent(entry[1], l.events)}` : '- | - | -'
  }
  const out = [`| # | single: command | calls | calls/event | cluster: command | calls (3 masters) | calls/event |`, '|---|---|---|---|---|---|---|']
  for (let i = 0; i < TOP; i++) out.push(`| ${i + 1} | ${cells(lists[0], i)} | ${cells(lists[1], i)} |`)
  return out
}

function clusterNodesTable(c: Figures): string[] {
  const g = digest(c)
  const out = ['| cluster node | role | commands | share of the masters\' commands | commands/event | CPU ms/event |', '|---|---|---|---|---|---|']
  for (const n of c.nodes) {
    const sample = c.after.get(n.port) as NodeSample
    const calls = totalCalls(sample)
    const cpu = sample.cpuMs - (c.cpuBefore.get(n.port) ?? 0)
    const role = n.role === 'master' ? 'master' : `replica of :${n.masterPort}`
    const share = n.role === 'master' && g.masterCalls > 0 ? `${fixed((100 * calls) / g.masterCalls, 1)} %` : '(replication, apart)'
    out.push(`| :${n.port} | ${role} | ${int(calls)} | ${share} | ${perEvent(calls, g.events)} | ${perEvent(cpu, g.events, 3)} |`)
  }
  return out
}

async function main(): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-store-work-'))
  stoppers.push(() => Promise.resolve(fs.rmSync(dir, { recursive: true, force: true })))
  try {
    const s = await single(dir)
    let c: Figures | undefined
    let clusterError: Error | undefined
    try {
      c = await cluster(dir)
    } catch (err) {
      clusterError = err as Error
    }
    // The runs in progress fail as their processes stop: nothing to report.
    if (interrupted) return
    const redis = /v=(\S+)/.exec(execFileSync('redis-server', ['--version']).toString())?.[1] ?? '?'
    const lines = [
      'bench/store-work: Redis work per delivered event, the embedded process (every service, memory bus) on a Redis store',
      `${int(EVENTS)} post.create events at ${int(RATE)}/s through POST /admin/activity/events; one subscription with a webhook (signed POSTs to a loopback receiver) and one stream client`,
      `node ${process.version}, redis ${redis}, ${os.cpus().length} cpu(s) (${os.cpus()[0]?.model ?? 'unknown'}); Redis and the gateway share these cpus`,
      '',
      ...summary(s, c),
      '',
      'Commands are Redis\'s own counters (INFO commandstats after CONFIG RESETSTAT on every node): a command run',
      'inside a Lua script or a MULTI/EXEC counts once itself, besides the EVALSHA/EXEC. Per-event figures are the',
      'masters\' (the single server counts as one); the replicas\' commands are the replication stream of the masters\'',
      'writes and are counted apart in their own rows, not in the per-event figures. REPLCONF on a master is its replica\'s',
      'acknowledgement (one a second, and one for each WAIT). CPU: used_cpu_user + used_cpu_sys of redis-server.',
      '',
      `Top ${TOP} commands by calls (masters):`,
      '',
      ...topCommands(s, c),
      ...(c ? ['', ...clusterNodesTable(c)] : [])
    ]
    process.stdout.write(`${lines.join('\n')}\n`)
    const problems = [s, ...(c ? [c] : [])].flatMap((f) => {
      const d = digest(f)
      // Under one command per event, the gateway did not keep its state on this Redis (memory store?).
      return d.events > 0 && d.masterCalls < d.events ? [...f.problems, `${f === s ? 'single' : 'cluster'}: ${int(d.masterCalls)} commands for ${int(d.events)} events: the gateway did not use this Redis`] : f.problems
    })
    if (clusterError) problems.push(`the cluster run failed: ${clusterError.stack ?? clusterError.message}`)
    for (const p of problems) process.stderr.write(`bench/store-work: ${p}\n`)
    if (problems.length > 0) process.exitCode = 1
  } finally {
    await stopAll()
  }
}

main().catch(async (err: unknown) => {
  process.stderr.write(`bench/store-work failed: ${(err as Error).stack ?? String(err)}\n`)
  await stopAll()
  process.exit(1)
})
