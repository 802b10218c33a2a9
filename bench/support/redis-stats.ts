/**
 * What a Redis node did between two points, from its own counters:
 * `INFO commandstats` (calls per command since `CONFIG RESETSTAT`; the
 * commands a Lua script or a MULTI/EXEC runs count one by one, next to the
 * EVALSHA/EXEC itself) and `INFO cpu` (used_cpu_sys + used_cpu_user of the
 * redis-server process, which RESETSTAT leaves alone). Read through
 * redis-cli, one short connection per request.
 */
import { runCommand } from '../../scripts/local-infra'

const CLI_TIMEOUT_MS = 10_000

function cli(port: number, args: string[]): Promise<string> {
  return runCommand('redis-cli', ['-p', String(port), ...args], CLI_TIMEOUT_MS)
}

export interface RedisNode {
  port: number
  role: 'master' | 'replica'
  /** A replica's master. */
  masterPort?: number
}

/**
 * Each node's role as the node itself reports it (INFO replication: a
 * replica names its master_port); right after the cluster was created, a
 * node's CLUSTER NODES may still show a replica as a master until gossip
 * catches up.
 */
export async function nodeRoles(ports: number[]): Promise<RedisNode[]> {
  const nodes = await Promise.all(
    ports.map(async (port): Promise<RedisNode> => {
      const info = await cli(port, ['info', 'replication'])
      const master = /^master_port:(\d+)/m.exec(info)?.[1]
      return /^role:slave/m.test(info) && master !== undefined ? { port, role: 'replica', masterPort: Number(master) } : { port, role: 'master' }
    })
  )
  // Each master followed by its replica.
  return nodes.sort((a, b) => (a.masterPort ?? a.port) - (b.masterPort ?? b.port) || (a.role === 'master' ? -1 : 1))
}

export interface NodeSample {
  /** Calls per command name (`get`, `config|resetstat`, ...) since the last reset. */
  calls: Map<string, number>
  /** CPU time of the redis-server process since it started, ms. */
  cpuMs: number
}

function cpuMsOf(info: string): number {
  const field = (name: string): number => Number(new RegExp(`^${name}:([0-9.]+)`, 'm').exec(info)?.[1] ?? Number.NaN)
  return (field('used_cpu_sys') + field('used_cpu_user')) * 1000
}

export async function cpuMs(port: number): Promise<number> {
  return cpuMsOf(await cli(port, ['info', 'cpu']))
}

/** Zeroes the node's command counters (its CPU time keeps counting: take cpuMs before). */
export async function resetStats(port: number): Promise<void> {
  await cli(port, ['config', 'resetstat'])
}

/** Counters and CPU time in one request, less the CONFIG RESETSTAT that started the count. */
export async function sample(port: number): Promise<NodeSample> {
  const info = await cli(port, ['info', 'commandstats', 'cpu'])
  const calls = new Map<string, number>()
  for (const m of info.matchAll(/^cmdstat_(\S+?):calls=(\d+),/gm)) calls.set(m[1] as string, Number(m[2]))
  const own = (calls.get('config|resetstat') ?? 0) - 1
  if (own > 0) calls.set('config|resetstat', own)
  else calls.delete('config|resetstat')
  return { calls, cpuMs: cpuMsOf(info) }
}

export function totalCalls(s: NodeSample): number {
  let n = 0
  for (const c of s.calls.values()) n += c
  return n
}

/** Calls per command summed over samples, most called first. */
export function mergedCalls(samples: NodeSample[]): Array<[string, number]> {
  const out = new Map<string, number>()
  for (const s of samples) for (const [name, n] of s.calls) out.set(name, (out.get(name) ?? 0) + n)
  return [...out].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
}
