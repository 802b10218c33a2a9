/**
 * The Redis work of bench/distributed's `make up` runs (one Redis, or the
 * 6-node Redis Cluster of `make up REDIS=cluster`), from Redis's own
 * counters (bench/support/redis-stats.ts): at the start of a window every
 * node's CPU time is read and its command counters zeroed (CONFIG
 * RESETSTAT); at its end both are read again, against the events delivered
 * meanwhile. An event is one webhook delivery plus one stream line: the
 * smaller of the two counts of distinct events the observers saw in the
 * window (every phase, so a backlog of the previous rate delivered in it
 * counts with the commands it cost). Per-event figures are the masters'
 * (the single Redis is one); the replicas' commands are the replication
 * stream of the masters' writes, shown apart.
 */
import { cpuMs, mergedCalls, nodeRoles, resetStats, sample, totalCalls, type NodeSample, type RedisNode } from '../support/redis-stats'

export type RedisMode = 'single' | 'cluster'

export const redisLabel = (mode: RedisMode): string => (mode === 'single' ? '1 Redis' : 'Redis Cluster')

/** Commands listed per rate and mode. */
const TOP = 8

export interface RedisWindow {
  nodes: RedisNode[]
  /** CPU ms of each node (by port) at the start, and the counters at the end. */
  cpuBefore: Map<number, number>
  after: Map<number, NodeSample>
  events: number
  seconds: number
  /** A role changed during the window (a failover): the per-node figures mix roles. */
  problems: string[]
}

export interface RedisStart {
  nodes: RedisNode[]
  cpuBefore: Map<number, number>
  startedAt: number
  problems: string[]
}

/** How long a window's start waits for the cluster's roles to settle (after a failover). */
const SETTLE_ROLES_MS = 15_000

async function everyNode<T>(ports: number[], f: (port: number) => Promise<T>): Promise<Map<number, T>> {
  return new Map(await Promise.all(ports.map(async (p) => [p, await f(p)] as const)))
}

const roleOf = (n: RedisNode): string => (n.role === 'master' ? 'master' : `replica of :${n.masterPort}`)

/** What changed between two readings of the roles ('' when nothing did). */
function roleChanges(before: RedisNode[], after: RedisNode[]): string {
  const was = new Map(before.map((n) => [n.port, roleOf(n)]))
  return after
    .filter((n) => was.get(n.port) !== roleOf(n))
    .map((n) => `:${n.port} ${was.get(n.port) ?? '?'} -> ${roleOf(n)}`)
    .join(', ')
}

/** One master (single), or half the nodes each with exactly one replica (the cluster). */
function settled(nodes: RedisNode[]): boolean {
  const masters = nodes.filter((n) => n.role === 'master')
  if (nodes.length === 1) return masters.length === 1
  return masters.length === nodes.length / 2 && masters.every((m) => nodes.filter((n) => n.masterPort === m.port).length === 1)
}

/**
 * Roles (waiting up to SETTLE_ROLES_MS while a failover is still under way:
 * a promoted replica and its old master both saying `master`), CPU time,
 * then the counters zeroed (CONFIG RESETSTAT leaves CPU time alone).
 */
export async function beginWindow(ports: number[]): Promise<RedisStart> {
  const deadline = performance.now() + SETTLE_ROLES_MS
  let nodes = await nodeRoles(ports)
  while (!settled(nodes) && performance.now() < deadline) {
    await new Promise((r) => setTimeout(r, 500))
    nodes = await nodeRoles(ports)
  }
  const problems = settled(nodes) ? [] : [`roles not settled at the start (${nodes.map((n) => `:${n.port} ${roleOf(n)}`).join(', ')}): a failover under way`]
  const cpuBefore = await everyNode(ports, cpuMs)
  await everyNode(ports, resetStats)
  return { nodes, cpuBefore, startedAt: performance.now(), problems }
}

export async function endWindow(start: RedisStart, events: number): Promise<RedisWindow> {
  const ports = start.nodes.map((n) => n.port)
  const after = await everyNode(ports, sample)
  const seconds = (performance.now() - start.startedAt) / 1000
  const changed = roleChanges(start.nodes, await nodeRoles(ports))
  const problems = [...start.problems, ...(changed ? [`failover during the window (${changed}): masters and replicas are those at the start, their figures mix roles`] : [])]
  return { nodes: start.nodes, cpuBefore: start.cpuBefore, after, events, seconds, problems }
}

export interface RedisDigest {
  events: number
  seconds: number
  masterCalls: number
  masterCpuMs: number
  replicaCalls: number
  replicaCpuMs: number
  replicas: number
  /** Calls per command over the masters, most called first. */
  top: Array<[string, number]>
  /** Each master's commands, share of the masters' commands (0-1). */
  shares: Array<{ port: number; calls: number; share: number }>
  problems: string[]
}

export function digest(w: RedisWindow): RedisDigest {
  const of = (role: RedisNode['role']): RedisNode[] => w.nodes.filter((n) => n.role === role)
  const calls = (n: RedisNode): number => (w.after.has(n.port) ? totalCalls(w.after.get(n.port) as NodeSample) : 0)
  const cpu = (n: RedisNode): number => (w.after.get(n.port)?.cpuMs ?? 0) - (w.cpuBefore.get(n.port) ?? 0)
  const sum = (ns: RedisNode[], f: (n: RedisNode) => number): number => ns.reduce((a, n) => a + f(n), 0)
  const masters = of('master')
  const masterCalls = sum(masters, calls)
  return {
    events: w.events,
    seconds: w.seconds,
    masterCalls,
    masterCpuMs: sum(masters, cpu),
    replicaCalls: sum(of('replica'), calls),
    replicaCpuMs: sum(of('replica'), cpu),
    replicas: of('replica').length,
    top: mergedCalls(masters.flatMap((n) => (w.after.has(n.port) ? [w.after.get(n.port) as NodeSample] : []))),
    shares: masters.map((n) => ({ port: n.port, calls: calls(n), share: masterCalls > 0 ? calls(n) / masterCalls : Number.NaN })),
    problems: w.problems
  }
}

// ---------------------------------------------------------------- report

const fixed = (n: number, digits: number): string => (Number.isFinite(n) ? n.toFixed(digits) : '-')
const int = (n: number): string => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '-')
const per = (n: number, events: number, digits = 2): string => (events > 0 ? fixed(n / events, digits) : '-')
const shares = (d: RedisDigest): string => (d.shares.length > 1 ? d.shares.map((s) => `:${s.port} ${fixed(100 * s.share, 1)} %`).join(', ') : '-')

/** One progress line. */
export function redisLine(d: RedisDigest): string {
  const problems = d.problems.length > 0 ? `; ${d.problems.join('; ')}` : ''
  if (d.events === 0) return `Redis, no events in ${fixed(d.seconds, 1)} s: ${fixed(d.masterCalls / d.seconds, 1)} commands/s, ${fixed(d.masterCpuMs / d.seconds, 1)} CPU ms/s (masters)${problems}`
  const replicas = d.replicas > 0 ? `; replicas (apart) ${per(d.replicaCalls, d.events)} commands/event` : ''
  const split = d.shares.length > 1 ? `; masters' shares ${shares(d)}` : ''
  return `Redis: ${int(d.events)} events in ${fixed(d.seconds, 1)} s, ${per(d.masterCalls, d.events)} commands/event, ${per(d.masterCpuMs, d.events, 3)} CPU ms/event (masters)${split}${replicas}${problems}`
}

export interface RedisRun {
  mode: RedisMode
  /** The idle window before the first rate (no events). */
  idle?: RedisWindow
  rates: Array<{ rate: number; redis?: RedisWindow }>
}

/** The per-event table (a row per rate and mode), the idle background, then the top commands per rate. */
export function redisReport(runs: RedisRun[]): string[] {
  if (runs.length === 0) return []
  const out = [
    'Redis work per delivered event, make up (an event = one webhook delivery + one stream line, the smaller of the two counts in the window; Redis\'s own counters:',
    'INFO commandstats after CONFIG RESETSTAT on every node at the start of the rate, read after the rate\'s backlog was out; a command inside a Lua script or',
    'MULTI/EXEC counts itself besides the EVALSHA/EXEC; CPU = used_cpu_user + used_cpu_sys of redis-server). Per-event figures are the masters\' (the single',
    'Redis is one); the replicas\' commands (the replication stream of the masters\' writes) are in their own column, not in the per-event figures.',
    '',
    '| events/s | make up | events in the window (s) | Redis commands / event (masters) | Redis CPU ms / event (masters) | masters\' share of the commands | replicas (apart): commands / event, CPU ms / event |',
    '|---|---|---|---|---|---|---|'
  ]
  const rates = [...new Set(runs.flatMap((r) => r.rates.map((x) => x.rate)))].sort((a, b) => a - b)
  const notes: string[] = []
  for (const rate of rates) {
    for (const run of runs) {
      const w = run.rates.find((x) => x.rate === rate)
      if (!w) continue
      if (!w.redis) {
        out.push(`| ${int(rate)} | ${redisLabel(run.mode)} | not measured | - | - | - | - |`)
        continue
      }
      const d = digest(w.redis)
      for (const p of d.problems) notes.push(`${redisLabel(run.mode)} at ${int(rate)}/s: ${p}`)
      const replicas = d.replicas > 0 ? `${per(d.replicaCalls, d.events)}, ${per(d.replicaCpuMs, d.events, 3)}` : '-'
      const flag = d.problems.length > 0 ? '; roles changed, see below' : ''
      out.push(`| ${int(rate)} | ${redisLabel(run.mode)} | ${int(d.events)} (${fixed(d.seconds, 1)} s${flag}) | **${per(d.masterCalls, d.events)}** | **${per(d.masterCpuMs, d.events, 3)}** | ${shares(d)} | ${replicas} |`)
    }
  }
  out.push('')
  for (const run of runs) {
    if (!run.idle) continue
    const d = digest(run.idle)
    const top = d.top.slice(0, 4).map(([name, n]) => `${name} ${fixed(n / d.seconds, 1)}`).join(', ')
    out.push(`idle background before the first rate, ${redisLabel(run.mode)} (masters, in every window above too): ${fixed(d.masterCalls / d.seconds, 1)} commands/s (${top || 'none'}), ${fixed(d.masterCpuMs / d.seconds, 1)} CPU ms/s`)
    for (const p of d.problems) notes.push(`${redisLabel(run.mode)} while idle: ${p}`)
  }
  out.push(...notes)
  for (const rate of rates) {
    const cols = runs.map((run) => {
      const w = run.rates.find((x) => x.rate === rate)?.redis
      return { mode: run.mode, d: w ? digest(w) : undefined }
    })
    out.push('', `Top ${TOP} Redis commands at ${int(rate)}/s (masters):`, '')
    out.push(`| # | ${cols.map((c) => `${redisLabel(c.mode)}: command | calls / event`).join(' | ')} |`, `|---|${cols.map(() => '---|---|').join('')}`)
    for (let i = 0; i < TOP; i++) {
      const cells = cols.map((c) => {
        const entry = c.d?.top[i]
        return entry && c.d ? `${entry[0]} | ${per(entry[1], c.d.events)}` : '- | -'
      })
      out.push(`| ${i + 1} | ${cells.join(' | ')} |`)
    }
  }
  return out
}
