import fs from 'node:fs'
import path from 'node:path'
import { projectRoot } from '../services/common/bus/topics'
import type { SupervisorFiles } from './supervisor'

/**
 * What `make up` started, recorded in RUN_DIR/state.json (default .run/) the
 * moment each process starts, so `make down` stops exactly those and `make
 * status` reports them; and the small helpers up, down and status share:
 * whether a recorded pid is still ours, waiting, probing /healthz, output.
 */

export interface ProcessRecord {
  /** Instance name: `redis`, `kafka`, `supervisord`, `nginx`, `activity-1` ... */
  name: string
  kind: 'redis' | 'kafka' | 'supervisor' | 'service' | 'nginx'
  service?: string
  /** The pid when started; a supervised process's current pid comes from supervisorctl. */
  pid: number
  /** A word of the process's command line, checked before signalling so a recycled pid is never hit. */
  signature: string
  /** Run by supervisord (services and nginx). */
  supervised?: boolean
  port?: number
  sandboxPort?: number
  log: string
}

export interface RunState {
  startedAt: string
  root: string
  redisUrl?: string
  /** `make up REDIS=cluster`: the cluster's nodes (host:port); the services get them as REDIS_CLUSTER_NODES. */
  redisClusterNodes?: string[]
  kafkaBrokers?: string[]
  proxy?: { port: number; sandboxPort: number }
  supervisor?: SupervisorFiles
  processes: ProcessRecord[]
}

export const root = projectRoot()
export const runDir = path.resolve(process.env.RUN_DIR ?? path.join(root, '.run'))
export const stateFile = path.join(runDir, 'state.json')
export const logDir = path.join(runDir, 'logs')

export const NAME_WIDTH = 18

export function shortPath(file: string): string {
  const rel = path.relative(process.cwd(), file)
  return rel.startsWith('..') ? file : rel
}

export function say(line: string): void {
  process.stdout.write(`${line}\n`)
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

export function readState(): RunState | undefined {
  if (!fs.existsSync(stateFile)) return undefined
  return JSON.parse(fs.readFileSync(stateFile, 'utf8')) as RunState
}

export function writeState(state: RunState): void {
  fs.mkdirSync(runDir, { recursive: true })
  const tmp = `${stateFile}.tmp`
  fs.writeFileSync(tmp, `${JSON.stringify(state, null, 2)}\n`)
  fs.renameSync(tmp, stateFile)
}

/** True when `pid` runs and its command line still contains `signature`. */
export function isOurs(record: Pick<ProcessRecord, 'pid' | 'signature'>): boolean {
  try {
    process.kill(record.pid, 0)
  } catch {
    return false
  }
  try {
    return fs.readFileSync(`/proc/${record.pid}/cmdline`, 'utf8').replace(/\0/g, ' ').includes(record.signature)
  } catch {
    // No /proc (not Linux): the pid check above is all we have.
    return true
  }
}

export async function waitFor(check: () => Promise<boolean> | boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (await check()) return true
    await sleep(150)
  }
  return false
}

export async function answers(url: string, timeoutMs = 2000): Promise<string> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) })
    await res.arrayBuffer()
    return String(res.status)
  } catch {
    return 'no answer'
  }
}

export function logSince(file: string, from: number): string {
  try {
    const text = fs.readFileSync(file)
    return text.subarray(Math.min(from, text.length)).toString('utf8')
  } catch {
    return ''
  }
}

export const fileSize = (file: string): number => (fs.existsSync(file) ? fs.statSync(file).size : 0)
