import { spawn, execFileSync, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { loadTopics, projectRoot } from '../services/common/bus/topics'

/**
 * Local Redis and Kafka-protocol cluster for tests (test/support/infra.ts)
 * and for `make up` (scripts/up.ts). The Kafka side is librdkafka's mock
 * cluster behind a small C launcher kept in test/support/mock-cluster.c and
 * compiled here with gcc on first use (or when the source is newer).
 */

export interface Launched {
  child: ChildProcess
  /** Resolves with the exit code (or signal name) once the process is gone. */
  exited: Promise<number | string>
}

function watchExit(child: ChildProcess): Promise<number | string> {
  return new Promise((resolve) => {
    if (child.exitCode !== null) return resolve(child.exitCode)
    if (child.signalCode !== null) return resolve(child.signalCode)
    child.once('exit', (code, signal) => resolve(code ?? signal ?? 'unknown'))
  })
}

const SETPRIV = '/usr/bin/setpriv'

/**
 * Spawns `command`; with `tied`, the kernel sends it SIGTERM when this
 * process dies for any reason, even SIGKILL (setpriv --pdeathsig), so no
 * test can leave a Redis behind.
 */
export function launch(command: string, args: string[], options: { tied: boolean; stdio?: Array<'pipe' | 'ignore' | number>; cwd?: string }): Launched {
  const stdio = options.stdio ?? ['ignore', 'pipe', 'pipe']
  const useSetpriv = options.tied && process.platform === 'linux' && fs.existsSync(SETPRIV)
  const child = useSetpriv
    ? spawn(SETPRIV, ['--pdeathsig', 'TERM', '--', command, ...args], { stdio, cwd: options.cwd, detached: false })
    : spawn(command, args, { stdio, cwd: options.cwd, detached: !options.tied })
  return { child, exited: watchExit(child) }
}

/** Where the kernel takes the local ports of outgoing connections from (Linux; elsewhere its usual range). */
export function ephemeralPortRange(): [number, number] {
  try {
    const [low, high] = fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number)
    if (Number.isInteger(low) && Number.isInteger(high) && (low as number) <= (high as number)) return [low as number, high as number]
  } catch {
    // not Linux
  }
  return [32768, 60999]
}

/** Whether a listener can bind 127.0.0.1:port right now. */
export function canBind(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer()
    server.unref()
    server.once('error', () => resolve(false))
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)))
  })
}

/** The lowest port handed out: above the well-known and registered ports most daemons use. */
const LOW_PORT = 10_000

/**
 * A port free on 127.0.0.1 (bind-then-release; callers retry on a lost race),
 * below the kernel's ephemeral range. A process that is restarted must bind its
 * port again: one in the ephemeral range may meanwhile have become the local
 * port of any outgoing connection on the machine (nginx's upstream keep-alives,
 * a test's client), and the restart fails with EADDRINUSE for as long as that
 * connection lives. Ports below the range are never handed to connections.
 */
export async function freePort(): Promise<number> {
  const [ephemeralLow] = ephemeralPortRange()
  const span = ephemeralLow - LOW_PORT
  if (span >= 1000) {
    const start = Math.floor(Math.random() * span)
    // A prime stride: consecutive probes land far apart, away from ports a neighbour just took.
    for (let i = 0; i < 200; i++) {
      const port = LOW_PORT + ((start + i * 7919) % span)
      if (await canBind(port)) return port
    }
  }
  return new Promise((resolve, reject) => {
    const server = net.createServer()
    server.unref()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      const port = typeof address === 'object' && address ? address.port : 0
      server.close(() => resolve(port))
    })
  })
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms))
}

/**
 * What listens on a TCP port (Linux: /proc/net/tcp{,6} for the listening
 * socket's inode, then the process whose fd is that socket): `pid command`,
 * or undefined when it cannot be told (another user's process, not Linux).
 */
export function portHolder(port: number): string | undefined {
  const attempt = <T,>(read: () => T): T | undefined => {
    try {
      return read()
    } catch {
      return undefined
    }
  }
  const inodes = new Set<string>()
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    for (const line of (attempt(() => fs.readFileSync(file, 'utf8')) ?? '').split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/)
      const local = cols[1]
      // State 0A: LISTEN.
      if (!local || cols[3] !== '0A' || parseInt(local.split(':')[1] ?? '', 16) !== port) continue
      if (cols[9]) inodes.add(cols[9])
    }
  }
  if (inodes.size === 0) return undefined
  for (const pid of (attempt(() => fs.readdirSync('/proc')) ?? []).filter((d) => /^\d+$/.test(d))) {
    for (const fd of attempt(() => fs.readdirSync(`/proc/${pid}/fd`)) ?? []) {
      const inode = /^socket:\[(\d+)\]$/.exec(attempt(() => fs.readlinkSync(`/proc/${pid}/fd/${fd}`)) ?? '')?.[1]
      if (inode && inodes.has(inode)) {
        const cmd = (attempt(() => fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8')) ?? '').split('\0').filter((a) => a !== '').join(' ')
        return `pid ${pid} (${cmd.slice(0, 120)})`
      }
    }
  }
  return undefined
}

// ------------------------------------------------------------------ Redis

/** Sends PING over a raw socket; true on +PONG. */
export function redisPing(port: number, timeoutMs = 500): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host: '127.0.0.1' })
    const done = (ok: boolean): void => {
      socket.destroy()
      resolve(ok)
    }
    socket.setTimeout(timeoutMs, () => done(false))
    socket.once('error', () => done(false))
    socket.once('connect', () => socket.write('PING\r\n'))
    socket.once('data', (d) => done(d.toString().startsWith('+PONG')))
  })
}

export interface RedisOptions {
  port: number
  /** Working directory: the AOF lives here, so a restart keeps the data. */
  dir: string
  tied: boolean
  /** Where redis-server's log goes (default: discarded). */
  logFile?: string
  /** A Redis Cluster node: how long a master may be unreachable before its replica takes over (ms). */
  clusterNodeTimeoutMs?: number
}

export function redisArgs(options: RedisOptions): string[] {
  return [
    '--port', String(options.port),
    '--bind', '127.0.0.1',
    '--dir', options.dir,
    '--save', '',
    '--appendonly', 'yes',
    '--appendfsync', 'everysec',
    '--daemonize', 'no',
    '--protected-mode', 'yes',
    '--logfile', options.logFile ?? '',
    '--loglevel', 'warning',
    ...(options.clusterNodeTimeoutMs === undefined
      ? []
      : [
          '--cluster-enabled', 'yes',
          '--cluster-config-file', `nodes-${options.port}.conf`,
          '--cluster-node-timeout', String(options.clusterNodeTimeoutMs),
          // A replica that has never synced cannot take over; Redis 7 waits 5 s before a first sync by default.
          '--repl-diskless-sync-delay', '0'
        ])
  ]
}

/** Starts redis-server and waits until it answers PING. */
export async function launchRedis(options: RedisOptions, timeoutMs = 10_000): Promise<Launched> {
  fs.mkdirSync(options.dir, { recursive: true })
  // A detached Redis (make up) outlives this process: no pipe may tie the two together.
  const launched = launch('redis-server', redisArgs(options), { tied: options.tied, stdio: ['ignore', 'ignore', options.tied ? 'pipe' : 'ignore'] })
  let stderr = ''
  launched.child.stderr?.on('data', (d: Buffer) => {
    stderr += d.toString()
  })
  const spawnError = new Promise<Error>((resolve) => launched.child.once('error', resolve))
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const outcome = await Promise.race([
      redisPing(options.port).then((ok) => (ok ? 'up' : 'down')),
      launched.exited.then(() => 'exited'),
      spawnError.then((err) => `spawn: ${err.message}`)
    ])
    if (outcome === 'up') return launched
    if (outcome !== 'down') throw new Error(`redis-server on port ${options.port} did not start (${outcome}): ${stderr.trim()}`)
    if (Date.now() > deadline) {
      launched.child.kill('SIGKILL')
      throw new Error(`redis-server on port ${options.port} not answering after ${timeoutMs} ms`)
    }
    await sleep(20)
  }
}

// ------------------------------------------------------------------ Redis Cluster

/** A port free on 127.0.0.1 whose cluster bus port (port + 10000) is free too, both below the ephemeral range. */
export async function freeClusterPort(taken: Set<number> = new Set()): Promise<number> {
  const [ephemeralLow] = ephemeralPortRange()
  const span = ephemeralLow - 10_000 - LOW_PORT
  const start = Math.floor(Math.random() * Math.max(1, span))
  for (let i = 0; i < 400; i++) {
    const port = LOW_PORT + ((start + i * 7919) % Math.max(1, span))
    if (taken.has(port) || taken.has(port + 10_000)) continue
    if ((await canBind(port)) && (await canBind(port + 10_000))) return port
  }
  throw new Error('no free port pair for a Redis Cluster node')
}

export interface RedisClusterOptions {
  /** Six ports: three masters and a replica of each (`redis-cli --cluster create`). */
  ports: number[]
  dir: string
  tied: boolean
  nodeTimeoutMs: number
  logDir?: string
}

/**
 * Starts six `redis-server --cluster-enabled yes` nodes, joins them with
 * `redis-cli --cluster create ... --cluster-replicas 1` (three masters, each
 * with a replica; slots split in three equal ranges) and waits until every
 * node reports `cluster_state:ok`. Node i keeps its files in dir/node-<port>.
 */
export async function launchRedisCluster(options: RedisClusterOptions, timeoutMs = 30_000): Promise<Launched[]> {
  const nodes: Launched[] = []
  try {
    for (const port of options.ports) {
      const dir = path.join(options.dir, `node-${port}`)
      nodes.push(
        await launchRedis({ port, dir, tied: options.tied, clusterNodeTimeoutMs: options.nodeTimeoutMs, ...(options.logDir ? { logFile: path.join(options.logDir, `redis-${port}.log`) } : {}) })
      )
    }
    const addresses = options.ports.map((p) => `127.0.0.1:${p}`)
    await runCommand('redis-cli', ['--cluster', 'create', ...addresses, '--cluster-replicas', '1', '--cluster-yes'], timeoutMs)
    const deadline = Date.now() + timeoutMs
    for (const port of options.ports) {
      while (!(await clusterOk(port)) || !(await replicaSynced(port))) {
        if (Date.now() > deadline) throw new Error(`Redis Cluster node ${port} not ok (or its replica not synced) after ${timeoutMs} ms`)
        await sleep(100)
      }
    }
    return nodes
  } catch (err) {
    for (const n of nodes) n.child.kill('SIGKILL')
    throw err
  }
}

/** Whether the node at `port` sees its cluster as ok (every slot served). */
export async function clusterOk(port: number): Promise<boolean> {
  try {
    return (await runCommand('redis-cli', ['-p', String(port), 'cluster', 'info'], 5000)).includes('cluster_state:ok')
  } catch {
    return false
  }
}

/** A replica whose link to its master is up (has synced); a master counts as synced. */
export async function replicaSynced(port: number): Promise<boolean> {
  try {
    const info = await runCommand('redis-cli', ['-p', String(port), 'info', 'replication'], 5000)
    return info.includes('role:master') || info.includes('master_link_status:up')
  } catch {
    return false
  }
}

/** Runs a command to its end; its stdout, or an error with its output. */
export function runCommand(command: string, args: string[], timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] })
    let out = ''
    child.stdout?.on('data', (d: Buffer) => (out += d.toString()))
    child.stderr?.on('data', (d: Buffer) => (out += d.toString()))
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs)
    child.once('error', (err) => {
      clearTimeout(timer)
      reject(err)
    })
    child.once('exit', (code) => {
      clearTimeout(timer)
      if (code === 0) resolve(out)
      else reject(new Error(`${command} ${args.join(' ')} exited ${code}: ${out.trim().slice(-500)}`))
    })
  })
}

// ------------------------------------------------------------------ Kafka mock cluster

export function mockClusterSource(root = projectRoot()): string {
  return path.join(root, 'test', 'support', 'mock-cluster.c')
}

export function mockClusterBinary(root = projectRoot()): string {
  return path.join(root, 'test', 'support', 'bin', 'mock-cluster')
}

/** Compiles the launcher when the binary is missing or older than its source. Safe when run concurrently. */
export function ensureMockClusterBinary(root = projectRoot()): string {
  const source = mockClusterSource(root)
  const binary = mockClusterBinary(root)
  const fresh = fs.existsSync(binary) && fs.statSync(binary).mtimeMs >= fs.statSync(source).mtimeMs
  if (fresh) return binary
  fs.mkdirSync(path.dirname(binary), { recursive: true })
  // Build to a private name, then rename: parallel test files never see a half-written binary.
  const tmp = `${binary}.${process.pid}.tmp`
  try {
    execFileSync('gcc', ['-O2', '-Wall', '-o', tmp, source, '-lrdkafka'], { stdio: ['ignore', 'pipe', 'pipe'] })
  } catch (err) {
    const e = err as { stderr?: Buffer; message: string }
    throw new Error(
      `cannot build the Kafka mock cluster launcher (needs gcc and librdkafka-dev; \`make deps-system\` installs them): ${e.stderr?.toString().trim() || e.message}`,
      { cause: err }
    )
  }
  fs.renameSync(tmp, binary)
  return binary
}

export interface MockClusterOptions {
  brokers: number
  /** `name:partitions` of every topic to create; default: deploy/topics.json. */
  topics?: string[]
  /** Detached (make up): ignores stdin and runs until SIGTERM. Otherwise it is tied to this process. */
  detach: boolean
  logFd?: number
}

export interface LaunchedCluster extends Launched {
  bootstrap: string[]
}

export function deployTopicArgs(): string[] {
  return loadTopics().topics.map((t) => `${t.name}:${t.partitions}`)
}

/** Starts the launcher and resolves once it printed its bootstrap servers. */
export async function launchMockCluster(options: MockClusterOptions, timeoutMs = 10_000): Promise<LaunchedCluster> {
  const binary = ensureMockClusterBinary()
  const args = ['--brokers', String(options.brokers), ...(options.detach ? ['--detach'] : []), ...(options.topics ?? deployTopicArgs())]
  const stderrTarget = options.logFd ?? 'pipe'
  const launched = launch(binary, args, {
    tied: !options.detach,
    stdio: [options.detach ? 'ignore' : 'pipe', 'pipe', stderrTarget]
  })
  let stderr = ''
  launched.child.stderr?.on('data', (d: Buffer) => {
    stderr += d.toString()
  })
  const bootstrap = await new Promise<string[]>((resolve, reject) => {
    let out = ''
    const timer = setTimeout(() => {
      launched.child.kill('SIGKILL')
      reject(new Error(`mock cluster did not start within ${timeoutMs} ms: ${stderr.trim()}`))
    }, timeoutMs)
    const onData = (d: Buffer): void => {
      out += d.toString()
      const line = /^bootstrap (\S+)\n/m.exec(out)
      if (line) {
        clearTimeout(timer)
        launched.child.stdout?.off('data', onData)
        resolve((line[1] as string).split(','))
      }
    }
    launched.child.stdout?.on('data', onData)
    launched.child.once('error', (err) => {
      clearTimeout(timer)
      reject(err)
    })
    void launched.exited.then((code) => {
      clearTimeout(timer)
      reject(new Error(`mock cluster exited (${code}) before it was ready: ${stderr.trim()}`))
    })
  })
  return { ...launched, bootstrap }
}

/**
 * Line protocol of a tied launcher: one command, one `ok` / `error ...` answer,
 * answered in order.
 */
export class MockClusterControl {
  private pending: Array<{ resolve: () => void; reject: (err: Error) => void; command: string }> = []
  private buffer = ''

  constructor(private readonly child: ChildProcess) {
    child.stdout?.on('data', (d: Buffer) => {
      this.buffer += d.toString()
      let nl: number
      while ((nl = this.buffer.indexOf('\n')) >= 0) {
        const line = this.buffer.slice(0, nl).trim()
        this.buffer = this.buffer.slice(nl + 1)
        const waiter = this.pending.shift()
        if (!waiter) continue
        if (line === 'ok') waiter.resolve()
        else waiter.reject(new Error(`mock cluster refused "${waiter.command}": ${line}`))
      }
    })
    child.once('exit', () => {
      for (const w of this.pending.splice(0)) w.reject(new Error(`mock cluster exited before answering "${w.command}"`))
    })
  }

  send(command: string): Promise<void> {
    const stdin = this.child.stdin
    if (!stdin || stdin.destroyed || this.child.exitCode !== null) return Promise.reject(new Error('mock cluster is not running'))
    return new Promise((resolve, reject) => {
      this.pending.push({ resolve, reject, command })
      stdin.write(`${command}\n`)
    })
  }
}

/** Stops a child: SIGTERM, then SIGKILL after `graceMs`. */
export async function terminate(launched: Launched, graceMs = 5000): Promise<void> {
  const { child } = launched
  if (child.exitCode !== null || child.signalCode !== null) return
  child.kill('SIGTERM')
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs)
  await launched.exited
  clearTimeout(timer)
}
