import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { projectRoot } from '../services/common/bus/topics'
import { freePort, launchMockCluster, launchRedis } from './local-infra'
import { loadRoutes, servicesOf, upstreamEnvName } from './proxy'

/**
 * `make up` / `make down` / `make status`: the distributed system on this
 * machine. A Redis, the Kafka mock cluster (3 brokers, topics of
 * deploy/topics.json), one process per service instance (counts from
 * ACTIVITY, WEBHOOKS, STREAM, GATEWAY, ACCOUNT_HISTORY) and the reverse
 * proxy on PORT (default 8080) that routes path families per
 * deploy/routes.json. Everything started is recorded in RUN_DIR/state.json
 * (default .run/) the moment it starts, so `down` stops exactly those
 * processes, even after a failed `up`.
 *
 *   node dist/scripts/up.js up | down | status
 */

/** The service processes of `make up` by default: two matchers and two stream nodes show scaling out. */
export const LOCAL_SERVICES: ReadonlyArray<{ name: string; instances: number }> = [
  { name: 'gateway', instances: 1 },
  { name: 'webhooks', instances: 1 },
  { name: 'activity', instances: 2 },
  { name: 'stream', instances: 2 },
  { name: 'account-history', instances: 1 }
]

/** The environment variable giving a service's instance count: ACTIVITY=3, ACCOUNT_HISTORY=2. */
export function instancesEnvName(service: string): string {
  return service.toUpperCase().replace(/-/g, '_')
}

/**
 * Instances per service: LOCAL_SERVICES, each overridden by its count
 * variable (`make up ACTIVITY=3 STREAM=1`); 0 leaves a service out. The
 * instances of a service share its consumer groups, so the count is how
 * far a service is scaled out.
 */
export function instanceCounts(env: NodeJS.ProcessEnv = process.env): Array<{ name: string; instances: number }> {
  return LOCAL_SERVICES.map(({ name, instances }) => {
    const variable = instancesEnvName(name)
    const raw = env[variable]
    if (raw === undefined || raw.trim() === '') return { name, instances }
    const n = Number(raw)
    if (!Number.isInteger(n) || n < 0 || n > 16) throw new Error(`${variable} must be an instance count from 0 to 16, got "${raw}"`)
    return { name, instances: n }
  })
}

/**
 * A stream node's identity (STREAM_NODE_ID): its consumer group on
 * activity.deliveries is named from it, so a restarted node resumes its own
 * group. Every local node runs on one host on an ephemeral port, so the
 * service's default (host name + port) would not survive a restart: each
 * node is named after its instance (stream-1, stream-2).
 */
export function streamNodeEnv(service: string, instance: string): Record<string, string> {
  return service === 'stream' ? { STREAM_NODE_ID: instance } : {}
}

/** What `up` decides for one service instance; everything else comes from the operator's environment. */
export interface InstanceSettings {
  service: string
  instance: string
  port: number
  sandboxPort: number
  kafkaBrokers: string[]
  redisUrl: string
  operatorToken: string
  dataDir: string
}

/**
 * The environment of one service instance: the operator's whole environment
 * (every configuration variable, e.g. `make up KAFKA_FETCH_MAX_WAIT=50ms`,
 * reaches every process), then what `up` owns: loopback address, ports,
 * the local Redis and Kafka, the shared operator token, a data directory per
 * instance and the stream node identity. A session timeout of 10 s unless
 * set: a killed member's partitions move within it.
 */
export function serviceEnv(base: NodeJS.ProcessEnv, s: InstanceSettings): Record<string, string> {
  const env: Record<string, string> = {}
  for (const [k, v] of Object.entries(base)) if (v !== undefined) env[k] = v
  return {
    ...env,
    ...streamNodeEnv(s.service, s.instance),
    HOST: '127.0.0.1',
    PORT: String(s.port),
    SANDBOX_PORT: String(s.sandboxPort),
    KAFKA_BROKERS: s.kafkaBrokers.join(','),
    REDIS_URL: s.redisUrl,
    OPERATOR_TOKEN: s.operatorToken,
    KAFKA_SESSION_TIMEOUT: base.KAFKA_SESSION_TIMEOUT ?? '10s',
    DATA_DIR: s.dataDir
  }
}

/**
 * The ports a process printed when it started: a service's
 * `{base_url} and {ads_url}: http://127.0.0.1:P` and `{ads_sandbox_url}: ...:S`
 * lines, the proxy's `listening on host:P (api) and :S (sandbox)`. Children
 * listen on port 0 and report what they got: a port probed free and handed
 * over could be taken before the child binds it.
 */
export function printedPorts(text: string): { port?: number; sandboxPort?: number } {
  const service = /\{base_url\} and \{ads_url\}: https?:\/\/[^:\s]+:(\d+)/.exec(text)
  const sandbox = /\{ads_sandbox_url\}:\s+https?:\/\/[^:\s]+:(\d+)/.exec(text)
  const proxy = /listening on [^\s]+:(\d+) \(api\)(?: and :(\d+) \(sandbox\))?/.exec(text)
  const port = service?.[1] ?? proxy?.[1]
  const sandboxPort = sandbox?.[1] ?? proxy?.[2]
  return { ...(port ? { port: Number(port) } : {}), ...(sandboxPort ? { sandboxPort: Number(sandboxPort) } : {}) }
}

/** UP_SERVICES=gateway,webhooks starts a subset (default: every service with at least one instance). */
export function selectedServices(env: NodeJS.ProcessEnv = process.env): ReadonlyArray<{ name: string; instances: number }> {
  const counts = instanceCounts(env)
  const raw = env.UP_SERVICES ?? ''
  if (raw.trim() === '') return counts.filter((s) => s.instances > 0)
  const wanted = raw.split(',').map((s) => s.trim()).filter((s) => s !== '')
  const unknown = wanted.filter((w) => !LOCAL_SERVICES.some((s) => s.name === w))
  if (unknown.length > 0) throw new Error(`UP_SERVICES names unknown service(s): ${unknown.join(', ')} (known: ${LOCAL_SERVICES.map((s) => s.name).join(', ')})`)
  return counts.filter((s) => wanted.includes(s.name) && s.instances > 0)
}

export interface ProcessRecord {
  /** Instance name: `redis`, `kafka`, `proxy`, `activity-1` ... */
  name: string
  kind: 'redis' | 'kafka' | 'service' | 'proxy'
  service?: string
  pid: number
  /** A word of the process's command line, checked before signalling so a recycled pid is never hit. */
  signature: string
  port?: number
  sandboxPort?: number
  log: string
}

export interface RunState {
  startedAt: string
  root: string
  redisUrl?: string
  kafkaBrokers?: string[]
  proxy?: { port: number; sandboxPort: number }
  processes: ProcessRecord[]
}

const root = projectRoot()
const runDir = path.resolve(process.env.RUN_DIR ?? path.join(root, '.run'))
const stateFile = path.join(runDir, 'state.json')

const NAME_WIDTH = 17

/** A path relative to the working directory when it lies below it, else absolute. */
function shortPath(file: string): string {
  const rel = path.relative(process.cwd(), file)
  return rel.startsWith('..') ? file : rel
}

function say(line: string): void {
  process.stdout.write(`${line}\n`)
}

function readState(): RunState | undefined {
  if (!fs.existsSync(stateFile)) return undefined
  return JSON.parse(fs.readFileSync(stateFile, 'utf8')) as RunState
}

function writeState(state: RunState): void {
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

function openLog(name: string): { fd: number; file: string; from: number } {
  const dir = path.join(runDir, 'logs')
  fs.mkdirSync(dir, { recursive: true })
  const file = path.join(dir, `${name}.log`)
  const fd = fs.openSync(file, 'a')
  return { fd, file, from: fs.fstatSync(fd).size }
}

/** What a log holds from byte `from` on. */
function logSince(file: string, from: number): string {
  try {
    const text = fs.readFileSync(file)
    return text.subarray(Math.min(from, text.length)).toString('utf8')
  } catch {
    return ''
  }
}

/**
 * Waits until a process printed `line` in its log (after `from`) and
 * returns the ports it printed; undefined when it exited or `timeoutMs` passed.
 */
async function waitPrinted(r: Pick<ProcessRecord, 'pid' | 'signature' | 'log'>, from: number, line: string, timeoutMs: number): Promise<{ port?: number; sandboxPort?: number } | undefined> {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    const text = logSince(r.log, from)
    if (text.includes(line)) return printedPorts(text)
    if (!isOurs(r)) return undefined
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  return undefined
}

/** The operator token shared by every process: OPERATOR_TOKEN, else the one in DATA_DIR the CLI reads. */
function operatorToken(): string {
  if (process.env.OPERATOR_TOKEN) return process.env.OPERATOR_TOKEN
  const dataDir = path.resolve(root, process.env.DATA_DIR ?? 'data')
  const file = path.join(dataDir, 'operator-token')
  if (fs.existsSync(file)) return fs.readFileSync(file, 'utf8').trim()
  fs.mkdirSync(dataDir, { recursive: true })
  const token = randomBytes(32).toString('base64url')
  fs.writeFileSync(file, `${token}\n`, { mode: 0o600 })
  return token
}

function portSetting(name: string, fallback: number): number {
  const raw = process.env[name]
  if (raw === undefined || raw === '') return fallback
  const n = Number(raw)
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new Error(`${name} must be a port number, got "${raw}"`)
  return n
}

/**
 * Redis on REDIS_PORT, or on a free port (redis-server cannot report one it
 * chose itself): a probed port taken before Redis binds it is retried with
 * another.
 */
async function startRedis(preferred: number, logFile: string): Promise<{ redis: Awaited<ReturnType<typeof launchRedis>>; port: number }> {
  for (let attempt = 0; ; attempt++) {
    const port = preferred === 0 ? await freePort() : preferred
    try {
      return { redis: await launchRedis({ port, dir: path.join(runDir, 'redis'), tied: false, logFile }), port }
    } catch (err) {
      if (preferred !== 0 || attempt >= 4) throw err
    }
  }
}

function mainOf(service: string): string {
  return path.join(root, 'dist', 'services', service, 'main.js')
}

async function waitHealthy(port: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    try {
      const res = await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(1000) })
      if (res.ok) return true
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100))
  }
  return false
}

async function up(): Promise<number> {
  const existing = readState()
  if (existing && existing.processes.some((p) => isOurs(p))) {
    say(`already up (state: ${shortPath(stateFile)}); \`make down\` stops it. Current status:`)
    return status()
  }
  const selection = selectedServices()
  const proxyPort = portSetting('PORT', 8080)
  const proxySandboxPort = portSetting('SANDBOX_PORT', 8081)
  const token = operatorToken()
  const state: RunState = { startedAt: new Date().toISOString(), root, processes: [] }
  writeState(state)
  const record = (r: ProcessRecord): void => {
    state.processes.push(r)
    writeState(state)
  }

  try {
    // Redis, persisted (AOF) under RUN_DIR so a Redis restart keeps the data.
    const redisLog = path.join(runDir, 'logs', 'redis.log')
    fs.mkdirSync(path.dirname(redisLog), { recursive: true })
    const { redis, port: redisPort } = await startRedis(portSetting('REDIS_PORT', 0), redisLog)
    redis.child.unref()
    record({ name: 'redis', kind: 'redis', pid: redis.child.pid as number, signature: 'redis-server', port: redisPort, log: redisLog })
    state.redisUrl = `redis://127.0.0.1:${redisPort}`
    say(`${'redis'.padEnd(NAME_WIDTH)}${state.redisUrl}`)

    const kafkaLog = openLog('kafka')
    const kafka = await launchMockCluster({ brokers: 3, detach: true, logFd: kafkaLog.fd })
    kafka.child.unref()
    kafka.child.stdout?.destroy()
    record({ name: 'kafka', kind: 'kafka', pid: kafka.child.pid as number, signature: 'mock-cluster', log: kafkaLog.file })
    state.kafkaBrokers = kafka.bootstrap
    say(`${'kafka'.padEnd(NAME_WIDTH)}${kafka.bootstrap.join(',')} (librdkafka mock cluster, 3 brokers)`)

    const waitMs = Number(process.env.UP_WAIT_MS ?? 60_000)
    const started: Array<{ record: ProcessRecord; from: number }> = []
    for (const { name, instances } of selection) {
      const main = mainOf(name)
      if (!fs.existsSync(main)) {
        say(`warning: ${path.relative(root, main)} is missing (not built yet?): ${name} not started`)
        continue
      }
      for (let i = 1; i <= instances; i++) {
        const instance = instances > 1 ? `${name}-${i}` : name
        const log = openLog(instance)
        const child = spawn(process.execPath, [main], {
          cwd: root,
          detached: true,
          stdio: ['ignore', log.fd, log.fd],
          // Port 0: the kernel picks a free port and the service prints it (read below).
          env: serviceEnv(process.env, { service: name, instance, port: 0, sandboxPort: 0, kafkaBrokers: kafka.bootstrap, redisUrl: state.redisUrl, operatorToken: token, dataDir: path.join(runDir, 'data', instance) })
        })
        child.unref()
        fs.closeSync(log.fd)
        const r: ProcessRecord = { name: instance, kind: 'service', service: name, pid: child.pid as number, signature: main, log: log.file }
        record(r)
        started.push({ record: r, from: log.from })
      }
    }

    // Each service prints its ports once it serves and its consumers joined their groups.
    await Promise.all(
      started.map(async ({ record: r, from }) => {
        const ports = await waitPrinted(r, from, `${r.service ?? ''} ready (`, waitMs)
        if (ports?.port !== undefined) r.port = ports.port
        if (ports?.sandboxPort !== undefined) r.sandboxPort = ports.sandboxPort
      })
    )
    writeState(state)
    const upstreams = new Map<string, string[]>()
    for (const { record: r } of started) {
      if (r.port === undefined || r.service === undefined) continue
      upstreams.set(r.service, [...(upstreams.get(r.service) ?? []), `http://127.0.0.1:${r.port}`])
      if (r.service === 'gateway' && r.sandboxPort !== undefined) upstreams.set('gateway-sandbox', [`http://127.0.0.1:${r.sandboxPort}`])
    }

    const proxyScript = path.join(root, 'dist', 'scripts', 'proxy.js')
    const proxyLog = openLog('proxy')
    const upstreamEnv: Record<string, string> = {}
    for (const service of servicesOf(loadRoutes())) upstreamEnv[upstreamEnvName(service)] = (upstreams.get(service) ?? []).join(',')
    const proxy = spawn(process.execPath, [proxyScript], {
      cwd: root,
      detached: true,
      stdio: ['ignore', proxyLog.fd, proxyLog.fd],
      env: { ...process.env, ...upstreamEnv, HOST: process.env.HOST ?? '127.0.0.1', PORT: String(proxyPort), SANDBOX_PORT: String(proxySandboxPort) }
    })
    proxy.unref()
    fs.closeSync(proxyLog.fd)
    const proxyRecord: ProcessRecord = { name: 'proxy', kind: 'proxy', pid: proxy.pid as number, signature: proxyScript, log: proxyLog.file }
    record(proxyRecord)
    const proxyPorts = await waitPrinted(proxyRecord, proxyLog.from, 'listening on', 10_000)
    if (proxyPorts?.port !== undefined) proxyRecord.port = proxyPorts.port
    if (proxyPorts?.sandboxPort !== undefined) proxyRecord.sandboxPort = proxyPorts.sandboxPort
    state.proxy = { port: proxyRecord.port ?? proxyPort, sandboxPort: proxyRecord.sandboxPort ?? proxySandboxPort }
    writeState(state)

    const healthy = async (p: ProcessRecord, ms: number): Promise<boolean> => p.port !== undefined && (await waitHealthy(p.port, ms))
    const health = await Promise.all(started.map(async ({ record: p }) => [p, await healthy(p, waitMs)] as const))
    health.push([proxyRecord, await healthy(proxyRecord, 5000)])
    for (const [p, ok] of health) say(`${p.name.padEnd(NAME_WIDTH)}${ok ? 'up  ' : 'DOWN'} http://127.0.0.1:${p.port ?? '?'}${p.kind === 'service' ? '' : ' (proxy)'}   log: ${shortPath(p.log)}`)
    const failed = health.filter(([, ok]) => !ok)
    say('')
    say(`{base_url} and {ads_url}: http://127.0.0.1:${state.proxy.port}    {ads_sandbox_url}: http://127.0.0.1:${state.proxy.sandboxPort}`)
    say(`state: ${stateFile}    stop everything: make down`)
    if (failed.length > 0) {
      say(`${failed.length} process(es) not healthy within ${waitMs} ms: see their logs`)
      return 1
    }
    return 0
  } catch (err) {
    say(`up failed: ${(err as Error).message}; stopping what was started`)
    await down()
    return 1
  }
}

async function stopProcess(p: ProcessRecord, graceMs: number): Promise<'stopped' | 'killed' | 'gone'> {
  if (!isOurs(p)) return 'gone'
  const signal = (sig: NodeJS.Signals): void => {
    try {
      // Detached children lead their own process group: signal the group.
      process.kill(-p.pid, sig)
    } catch {
      try {
        process.kill(p.pid, sig)
      } catch {
        // already gone
      }
    }
  }
  signal('SIGTERM')
  const deadline = Date.now() + graceMs
  while (Date.now() < deadline) {
    if (!isOurs(p)) return 'stopped'
    await new Promise((r) => setTimeout(r, 50))
  }
  signal('SIGKILL')
  for (let i = 0; i < 40 && isOurs(p); i++) await new Promise((r) => setTimeout(r, 50))
  return 'killed'
}

async function down(): Promise<number> {
  const state = readState()
  if (!state) {
    say('nothing to stop (no state file)')
    return 0
  }
  // Proxy and services first (they drain and commit), then Kafka and Redis.
  const order = (p: ProcessRecord): number => ({ proxy: 0, service: 1, kafka: 2, redis: 3 })[p.kind]
  const processes = [...state.processes].sort((a, b) => order(a) - order(b))
  const grace = Number(process.env.DOWN_GRACE_MS ?? 15_000)
  const groups = [processes.filter((p) => order(p) <= 1), processes.filter((p) => order(p) === 2), processes.filter((p) => order(p) === 3)]
  let left = 0
  for (const group of groups) {
    const results = await Promise.all(group.map(async (p) => [p, await stopProcess(p, grace)] as const))
    for (const [p, result] of results) {
      say(`${p.name.padEnd(NAME_WIDTH)}${result === 'gone' ? 'was not running' : result} (pid ${p.pid})`)
      if (isOurs(p)) left++
    }
  }
  if (left > 0) {
    say(`${left} process(es) could not be stopped; state kept in ${stateFile}`)
    return 1
  }
  fs.rmSync(stateFile, { force: true })
  return 0
}

async function probe(url: string): Promise<string> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(2000) })
    return String(res.status)
  } catch {
    return 'no answer'
  }
}

async function status(): Promise<number> {
  const state = readState()
  if (!state) {
    say('not running (no state file): `make up` starts it')
    return 1
  }
  let bad = 0
  say(`${'process'.padEnd(NAME_WIDTH)}${'pid'.padEnd(9)}${'port'.padEnd(7)}${'running'.padEnd(9)}${'healthz'.padEnd(10)}readyz`)
  for (const p of state.processes) {
    const running = isOurs(p)
    let health = '-'
    let ready = '-'
    if (p.port !== undefined && p.kind !== 'redis') {
      health = running ? await probe(`http://127.0.0.1:${p.port}/healthz`) : '-'
      ready = running && p.kind === 'service' ? await probe(`http://127.0.0.1:${p.port}/readyz`) : '-'
    }
    if (!running || (health !== '-' && health !== '200')) bad++
    say(`${p.name.padEnd(NAME_WIDTH)}${String(p.pid).padEnd(9)}${String(p.port ?? '').padEnd(7)}${(running ? 'yes' : 'NO').padEnd(9)}${health.padEnd(10)}${ready}`)
  }
  if (state.kafkaBrokers) say(`kafka brokers: ${state.kafkaBrokers.join(',')}`)
  if (state.redisUrl) say(`redis: ${state.redisUrl}`)
  return bad === 0 ? 0 : 1
}

async function main(): Promise<number> {
  const command = process.argv[2]
  if (command === 'up') return up()
  if (command === 'down') return down()
  if (command === 'status') return status()
  process.stderr.write('usage: up.js up|down|status\n')
  return 2
}

if (require.main === module) {
  main().then(
    (code) => process.exit(code),
    (err: unknown) => {
      process.stderr.write(`${process.argv[2] ?? 'up'}: ${(err as Error).message}\n`)
      process.exit(1)
    }
  )
}

export { stateFile, runDir }
