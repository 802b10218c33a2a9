/**
 * What bench/distributed runs against, started the way operators start it:
 *
 *  - `make up`: `node dist/scripts/up.js up` with a private RUN_DIR (Redis,
 *    one or, with REDIS=cluster, a 6-node Redis Cluster; the Kafka mock
 *    cluster, supervisord running every instance and nginx on a free port),
 *    stopped with `up.js down` (the test/system fault tests start it the
 *    same way, test/system/support/up-system.ts);
 *  - `make run`: `node dist/services/embedded/main.js` with a temporary
 *    DATA_DIR.
 *
 * and the customer set up through the public and operator routes: an app
 * and a user (operator API, as `make app` / `make user` do), an app-only
 * bearer, a webhook on the bench's signed receiver (CRC included), one
 * post.create activity subscription with that webhook per followed user.
 */
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { keysCoveringPartitions } from '../../services/common/bus/partitioner'
import { loadTopics, projectRoot } from '../../services/common/bus/topics'
import { TOPICS } from '../../services/common/bus/types'
import { newNumericId } from '../../services/common/ids'
import { programStatus } from '../../scripts/supervisor'
import type { RunState } from '../../scripts/up'
import { freePort } from '../../scripts/local-infra'
import type { RedisMode } from './redis-work'

const root = projectRoot()
const fromSource = __filename.endsWith('.ts')

export const progress = (line: string): void => void process.stderr.write(`~ ${line}\n`)

/** A process whose CPU time is accounted: `service` groups instances (gateway-1, gateway-2 -> gateway). */
export interface Accounted {
  name: string
  service: string
  pid: number
}

export interface System {
  kind: 'make up' | 'embedded'
  /** {base_url}: nginx under make up, the process itself embedded. */
  baseUrl: string
  operatorToken: string
  /** Every process of the system now (supervised pids as supervisord reports them; nginx workers included). */
  processes(): Promise<Accounted[]>
  /** Service instances with their own port (for /metrics). */
  instances: Array<{ name: string; service: string; port: number }>
  /** make up: its Redis node(s) (ports on loopback); empty embedded. */
  redisPorts: number[]
  stop(): Promise<void>
}

function newToken(): string {
  return randomBytes(32).toString('base64url')
}

/** The bench's own settings of every service process; the caller's environment wins (e.g. KAFKA_FETCH_MAX_WAIT=20ms). */
function serviceEnv(dataDir: string, token: string, profileDir: string | undefined): NodeJS.ProcessEnv {
  // Node refuses --cpu-prof in NODE_OPTIONS: a preloaded module profiles through the inspector instead.
  const preload = path.join(__dirname, `cpu-profile-preload${path.extname(__filename)}`)
  const profile = profileDir ? { NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --require=${preload}`.trim(), CPU_PROFILE_DIR: profileDir } : {}
  return {
    LOG_LEVEL: 'warn',
    ...process.env,
    DATA_DIR: dataDir,
    OPERATOR_TOKEN: token,
    WEBHOOK_ALLOW_INSECURE: 'true',
    ...profile
  }
}

/** Children of `pid` (nginx's workers), from /proc. */
function childrenOf(pid: number): number[] {
  const out: number[] = []
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8')
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
      if (ppid === pid) out.push(Number(entry))
    } catch {
      // gone
    }
  }
  return out
}

function runUp(args: string[], env: NodeJS.ProcessEnv, timeoutMs: number): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [path.join(root, 'dist', 'scripts', 'up.js'), ...args], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    const take = (d: Buffer): void => {
      const text = d.toString()
      out += text
      for (const line of text.split('\n')) if (line.trim() !== '') progress(`up.js ${args[0]}: ${line}`)
    }
    child.stdout.on('data', take)
    child.stderr.on('data', take)
    const timer = setTimeout(() => child.kill('SIGTERM'), timeoutMs)
    child.on('exit', (code) => {
      clearTimeout(timer)
      resolve({ code: code ?? 1, out })
    })
  })
}

/**
 * `make up` with a private run directory and free nginx ports, so it
 * neither uses nor disturbs a `make up` of the checkout (.run/, 8080).
 * Instance counts come from the environment as for `make up`
 * (GATEWAY=.. WEBHOOKS=.. ACTIVITY=.. STREAM=.. ACCOUNT_HISTORY=..); `redis`
 * is `make up REDIS=..`. Each mode has its own run directory (data, Redis files).
 */
export async function startUp(workDir: string, profileDir: string | undefined, onStop: (stop: () => Promise<void>) => void, redis: RedisMode): Promise<System> {
  const runDir = path.join(workDir, `run-${redis}`)
  fs.mkdirSync(runDir, { recursive: true })
  const token = newToken()
  const env: NodeJS.ProcessEnv = { ...serviceEnv(path.join(runDir, 'data'), token, profileDir), RUN_DIR: runDir, REDIS: redis, PORT: '0', SANDBOX_PORT: '0', DOWN_GRACE_MS: process.env.DOWN_GRACE_MS ?? '5000', UP_WAIT_MS: process.env.UP_WAIT_MS ?? '180000' }
  const stateFile = path.join(runDir, 'state.json')
  // `up.js down` runs without the profiling flags (the caller's own NODE_OPTIONS only).
  const { NODE_OPTIONS: _profile, ...plainEnv } = env
  let stopped = false
  const stop = async (): Promise<void> => {
    if (stopped || !fs.existsSync(stateFile)) return
    stopped = true
    await runUp(['down'], { ...plainEnv, ...(process.env.NODE_OPTIONS ? { NODE_OPTIONS: process.env.NODE_OPTIONS } : {}) }, 120_000)
  }
  // Registered before `up` runs: a Ctrl-C while it starts still ends in `up.js down`.
  onStop(stop)
  // supervisord's environment is up.js's, so with profiling up.js runs with the flags too (one small extra profile).
  // Ten processes starting at once on a busy 2-core machine: up.js waits up to UP_WAIT_MS (3 min here) for each to be ready.
  const started = await runUp(['up'], env, 300_000).catch((err: Error) => ({ code: 1, out: err.message }))
  if (started.code !== 0 || !fs.existsSync(stateFile)) {
    await stop()
    throw new Error(`make up failed:\n${started.out}`)
  }
  const state = JSON.parse(fs.readFileSync(stateFile, 'utf8')) as RunState
  if (!state.proxy || !state.supervisor) {
    await stop()
    throw new Error(`incomplete state in ${stateFile}`)
  }
  const files = state.supervisor
  const instances = state.processes.filter((p) => p.kind === 'service').map((p) => ({ name: p.name, service: p.service ?? p.name, port: p.port ?? 0 }))
  const redisPorts = state.processes.filter((p) => p.kind === 'redis' && p.port !== undefined).map((p) => p.port as number)
  if (redisPorts.length !== (redis === 'cluster' ? 6 : 1)) {
    await stop()
    throw new Error(`make up REDIS=${redis}: ${redisPorts.length} Redis nodes in ${stateFile}`)
  }
  return {
    kind: 'make up',
    baseUrl: `http://127.0.0.1:${state.proxy.port}`,
    operatorToken: token,
    instances,
    redisPorts,
    async processes() {
      const supervised = new Map((await programStatus(files)).map((s) => [s.name, s.pid]))
      const out: Accounted[] = []
      for (const p of state.processes) {
        const pid = p.supervised ? supervised.get(p.name) : p.pid
        if (!pid) continue
        // The cluster's six nodes (redis-1 ...) are one column, as the single Redis.
        const service = p.kind === 'service' ? (p.service ?? p.name) : p.kind === 'supervisor' ? 'supervisord' : p.kind === 'redis' ? 'redis' : p.name
        out.push({ name: p.name, service, pid })
        if (p.kind === 'nginx') for (const w of childrenOf(pid)) out.push({ name: `nginx worker ${w}`, service: 'nginx', pid: w })
      }
      return out
    },
    stop
  }
}

/** `make run`: every service in one process, memory bus, memory store journaled to a temporary DATA_DIR. */
export async function startEmbedded(workDir: string, profileDir: string | undefined, onStop: (stop: () => Promise<void>) => void): Promise<System> {
  const port = await freePort()
  const token = newToken()
  const main = fromSource ? path.join(root, 'services', 'embedded', 'main.ts') : path.join(root, 'dist', 'services', 'embedded', 'main.js')
  const env = serviceEnv(path.join(workDir, 'embedded'), token, undefined)
  const profile = profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`, '--cpu-prof-name=embedded.cpuprofile'] : []
  const proc = spawn(process.execPath, [...process.execArgv, ...profile, main], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...env, HOST: '127.0.0.1', PORT: String(port), SANDBOX_PORT: String(await freePort()) }
  })
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()))
  let out = ''
  proc.stderr.on('data', (d: Buffer) => (out = (out + d.toString()).slice(-20_000)))
  const stop = async (): Promise<void> => {
    if (proc.exitCode !== null || proc.signalCode !== null) return
    proc.kill('SIGTERM')
    const timer = setTimeout(() => proc.kill('SIGKILL'), 20_000)
    await exited
    clearTimeout(timer)
  }
  onStop(stop)
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`embedded not ready within 90 s: ${out}`)), 90_000)
      proc.stdout.on('data', (d: Buffer) => {
        out = (out + d.toString()).slice(-20_000)
        if (out.includes('embedded ready (')) {
          clearTimeout(timer)
          resolve()
        }
      })
      void exited.then(() => {
        clearTimeout(timer)
        reject(new Error(`embedded exited before it was ready: ${out}`))
      })
    })
  } catch (err) {
    await stop()
    throw err
  }
  progress(`embedded: pid ${proc.pid}, http://127.0.0.1:${port}`)
  return {
    kind: 'embedded',
    baseUrl: `http://127.0.0.1:${port}`,
    operatorToken: token,
    instances: [{ name: 'embedded', service: 'embedded', port }],
    redisPorts: [],
    processes: () => Promise.resolve(proc.pid ? [{ name: 'embedded', service: 'embedded', pid: proc.pid }] : []),
    stop
  }
}

// ---------------------------------------------------------------- the customer

async function call(method: string, url: string, headers: Record<string, string>, body?: string): Promise<Record<string, unknown>> {
  const res = await fetch(url, { method, headers, body, signal: AbortSignal.timeout(30_000) })
  const text = await res.text()
  if (res.status >= 300) throw new Error(`${method} ${new URL(url).pathname}: ${res.status} ${text.slice(0, 500)}`)
  return JSON.parse(text) as Record<string, unknown>
}

export interface Customer {
  appId: string
  secret: string
  bearer: string
  webhookId: string
  /** user_ids with a subscription: the created user, then ids covering every partition of activity.events. */
  users: string[]
}

/**
 * `atLeast` user ids (the first given) landing on every partition of
 * activity.events, so every matcher instance gets work (the same rule as
 * test/system/support/tenant.ts usersCoveringPartitions).
 */
function usersCoveringPartitions(first: string, atLeast: number): string[] {
  const partitions = loadTopics().topics.find((x) => x.name === TOPICS.activityEvents)?.partitions ?? 1
  return keysCoveringPartitions(first, atLeast, partitions, newNumericId)
}

/** App, user, bearer; the webhook is registered by `registerWebhook` once the receiver (which needs the secret) listens. */
export async function createCustomer(system: System, followed: number): Promise<Omit<Customer, 'webhookId'>> {
  const operator = { authorization: `Bearer ${system.operatorToken}`, 'content-type': 'application/json' }
  const base = system.baseUrl
  const app = (await call('POST', `${base}/admin/apps`, operator, JSON.stringify({ name: 'bench distributed', access_level: 'read-write' }))).data as { id: string; consumer_key: string; consumer_secret: string }
  const user = (await call('POST', `${base}/admin/users`, operator, JSON.stringify({ screen_name: `bench_${Date.now() % 1e8}`, password: randomBytes(12).toString('base64url') }))).data as { id: string }
  const basic = Buffer.from(`${encodeURIComponent(app.consumer_key)}:${encodeURIComponent(app.consumer_secret)}`).toString('base64')
  const token = await call('POST', `${base}/oauth2/token`, { authorization: `Basic ${basic}`, 'content-type': 'application/x-www-form-urlencoded' }, 'grant_type=client_credentials')
  return { appId: app.id, secret: app.consumer_secret, bearer: token.access_token as string, users: usersCoveringPartitions(user.id, followed) }
}

export async function registerWebhook(system: System, c: Omit<Customer, 'webhookId'>, receiverUrl: string): Promise<Customer> {
  const auth = { authorization: `Bearer ${c.bearer}`, 'content-type': 'application/json' }
  const created = (await call('POST', `${system.baseUrl}/2/webhooks`, auth, JSON.stringify({ url: receiverUrl }))).data as { id: string; valid: boolean }
  if (!created.valid) throw new Error('the webhook was registered invalid (CRC failed)')
  for (const user of c.users) {
    await call('POST', `${system.baseUrl}/2/activity/subscriptions`, auth, JSON.stringify({ event_type: 'post.create', filter: { user_id: user }, tag: 'bench', webhook_id: created.id }))
  }
  return { ...c, webhookId: created.id }
}

// ---------------------------------------------------------------- CPU time per process

const CLOCK_TICKS = 100

/** utime + stime of `pid` in seconds (/proc/<pid>/stat), undefined when it is gone. */
function cpuSeconds(pid: number): number | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS
  } catch {
    return undefined
  }
}

export type CpuSnapshot = Map<number, { service: string; seconds: number }>

export async function cpuSnapshot(system: System): Promise<CpuSnapshot> {
  const out: CpuSnapshot = new Map()
  for (const p of await system.processes()) {
    const s = cpuSeconds(p.pid)
    if (s !== undefined) out.set(p.pid, { service: p.service, seconds: s })
  }
  const self = process.cpuUsage()
  out.set(process.pid, { service: 'bench (publisher, receiver, stream client)', seconds: (self.user + self.system) / 1e6 })
  return out
}

/** CPU seconds per service between two snapshots (a pid absent before counts from 0: a restarted instance). */
export function cpuBetween(before: CpuSnapshot, after: CpuSnapshot): Map<string, number> {
  const out = new Map<string, number>()
  for (const [pid, a] of after) {
    const b = before.get(pid)?.seconds ?? 0
    out.set(a.service, (out.get(a.service) ?? 0) + Math.max(0, a.seconds - b))
  }
  return out
}

export function machine(): string {
  return `${os.cpus().length} cpu(s) (${os.cpus()[0]?.model ?? 'unknown'}), node ${process.version}`
}

// ---------------------------------------------------------------- the services' own metrics

/** Sums of the chosen series over every instance of each service (`name` or `name{label="v"}` prefixes). */
export type MetricsSnapshot = Map<string, Map<string, number>>

/** name, or name + a label it must carry. */
const SERIES = [
  'nodejs_eventloop_lag_mean_seconds',
  'activity_match_seconds_sum',
  'activity_match_seconds_count',
  'activity_deliveries_produced_total',
  'webhook_delivery_duration_seconds_sum result="success"',
  'webhook_delivery_duration_seconds_count result="success"',
  'webhook_deliveries_total outcome="delivered"',
  'webhook_retry_queue_depth',
  'stream_deliveries_received_total',
  'stream_lines_sent_total'
]

function seriesOf(line: string): string | undefined {
  return SERIES.find((s) => {
    const [name, label] = s.split(' ') as [string, string | undefined]
    return (line.startsWith(`${name}{`) || line.startsWith(`${name} `)) && (label === undefined || line.includes(label))
  })
}

export async function metricsSnapshot(system: System): Promise<MetricsSnapshot> {
  const out: MetricsSnapshot = new Map()
  await Promise.all(
    system.instances.map(async (i) => {
      const text = await fetch(`http://127.0.0.1:${i.port}/metrics`, { signal: AbortSignal.timeout(5000) })
        .then((res) => res.text())
        .catch(() => undefined)
      if (text === undefined) return
      const m = out.get(i.service) ?? new Map<string, number>()
      out.set(i.service, m)
      m.set('instances', (m.get('instances') ?? 0) + 1)
      for (const line of text.split('\n')) {
        if (line.startsWith('#')) continue
        const series = seriesOf(line)
        if (series) m.set(series, (m.get(series) ?? 0) + Number(line.slice(line.lastIndexOf(' ') + 1)))
      }
    })
  )
  return out
}

/** What the services say about one rate: per service, from the snapshots before and after. */
export function metricsDigest(before: MetricsSnapshot, after: MetricsSnapshot, seconds: number): string[] {
  const out: string[] = []
  const d = (service: string, s: string): number => (after.get(service)?.get(s) ?? 0) - (before.get(service)?.get(s) ?? 0)
  const lag = (service: string): string => {
    const a = after.get(service)
    return a ? `event-loop lag ${((1000 * (a.get('nodejs_eventloop_lag_mean_seconds') ?? 0)) / (a.get('instances') ?? 1)).toFixed(0)} ms` : ''
  }
  if (after.has('activity')) {
    const n = d('activity', 'activity_match_seconds_count')
    out.push(`activity: ${(n / seconds).toFixed(0)} events/s matched, ${n > 0 ? ((1000 * d('activity', 'activity_match_seconds_sum')) / n).toFixed(1) : '-'} ms per event (batch time / batch size), ${(d('activity', 'activity_deliveries_produced_total') / seconds).toFixed(0)} deliveries/s produced, ${lag('activity')}`)
  }
  if (after.has('webhooks')) {
    const n = d('webhooks', SERIES[5] as string)
    out.push(`webhooks: ${(d('webhooks', SERIES[6] as string) / seconds).toFixed(0)} delivered/s, signed POST ${n > 0 ? ((1000 * d('webhooks', SERIES[4] as string)) / n).toFixed(1) : '-'} ms on average, retry schedule ${(after.get('webhooks')?.get('webhook_retry_queue_depth') ?? 0) / (after.get('webhooks')?.get('instances') ?? 1)} entries, ${lag('webhooks')}`)
  }
  if (after.has('stream')) out.push(`stream: ${(d('stream', 'stream_deliveries_received_total') / seconds).toFixed(0)} deliveries/s consumed (all nodes), ${(d('stream', 'stream_lines_sent_total') / seconds).toFixed(0)} lines/s sent, ${lag('stream')}`)
  if (after.has('embedded')) {
    const n = d('embedded', 'activity_match_seconds_count')
    const p = d('embedded', SERIES[5] as string)
    out.push(
      `embedded: ${(n / seconds).toFixed(0)} events/s matched (${n > 0 ? ((1000 * d('embedded', 'activity_match_seconds_sum')) / n).toFixed(1) : '-'} ms per event), ${(d('embedded', SERIES[6] as string) / seconds).toFixed(0)} webhook deliveries/s ` +
        `(signed POST ${p > 0 ? ((1000 * d('embedded', SERIES[4] as string)) / p).toFixed(1) : '-'} ms, retry schedule ${after.get('embedded')?.get('webhook_retry_queue_depth') ?? 0}), ${lag('embedded')}`
    )
  }
  return out
}
