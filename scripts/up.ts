import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { loadConfig } from '../services/common/config'
import { down } from './down'
import { instanceEnv, selectedServices, sharedEnv } from './instances'
import { canBind, freeClusterPort, freePort, launchMockCluster, launchRedis, launchRedisCluster, portHolder } from './local-infra'
import { loadRoutes, nginxConfig, servicesOf } from './nginx'
import { answers, fileSize, isOurs, logDir, logSince, NAME_WIDTH, type ProcessRecord, readState, root, type RunState, runDir, say, shortPath, stateFile, waitFor, writeState } from './run-state'
import { programStatus, supervisorConfig, supervisorctl, type Program, type SupervisorFiles } from './supervisor'

export { LOCAL_SERVICES, instanceCounts, instanceEnv, printedPorts, selectedServices, serviceEnv, sharedEnv, streamNodeEnv } from './instances'
export { isOurs, runDir, stateFile, type ProcessRecord, type RunState } from './run-state'

/**
 * `make up` / `make down` / `make status`: the distributed system on this
 * machine. Redis and the Kafka mock cluster (3 brokers, topics of
 * deploy/topics.json) as detached processes; then supervisord (Debian's
 * `supervisor`), which runs every service instance (counts from GATEWAY,
 * WEBHOOKS, ACTIVITY, STREAM, ACCOUNT_HISTORY) and nginx in front of them on
 * PORT (default 8080) and SANDBOX_PORT (8081), routing path families per
 * deploy/routes.json (scripts/nginx.ts). Each instance gets a fixed loopback
 * port, so a restarted one comes back where nginx expects it. Everything
 * started is recorded in RUN_DIR/state.json (default .run/) the moment it
 * starts (run-state.ts), so `down` (down.ts) stops exactly those processes,
 * even after a failed `up`.
 *
 *   node dist/scripts/up.js up | down | status
 */

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

/**
 * Ports handed out by this `up`. A probed port is released before its process
 * binds it, so the kernel may offer it again to the next probe: each port is
 * given to one process only (two instances once got the same one).
 */
const givenPorts = new Set<number>()

async function distinctFreePort(): Promise<number> {
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = await freePort()
    if (!givenPorts.has(port)) {
      givenPorts.add(port)
      return port
    }
  }
  throw new Error('no free loopback port distinct from those already given')
}

/** A port setting; 0 = a free port probed now (nginx and Redis cannot report one they chose). */
async function portSetting(name: string, fallback: number): Promise<number> {
  const raw = process.env[name]
  const n = raw === undefined || raw === '' ? fallback : Number(raw)
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new Error(`${name} must be a port number, got "${raw}"`)
  if (n !== 0) givenPorts.add(n)
  return n === 0 ? distinctFreePort() : n
}

/** REDIS=cluster: a Redis Cluster of six nodes instead of one Redis (REDIS=single, the default). */
function redisMode(): 'single' | 'cluster' {
  const mode = process.env.REDIS ?? ''
  if (mode === '' || mode === 'single') return 'single'
  if (mode === 'cluster') return 'cluster'
  throw new Error(`REDIS must be single or cluster, got "${mode}"`)
}

/**
 * How long a cluster master may be silent before its replica takes over (REDIS_CLUSTER_NODE_TIMEOUT ms,
 * default 5000): shorter, a busy 2-core machine running make up took masters for dead and failed
 * them over while nothing had failed (bench/PROFILES.md "Redis Cluster node timeout").
 */
function clusterNodeTimeoutMs(): number {
  const n = Number(process.env.REDIS_CLUSTER_NODE_TIMEOUT ?? 5000)
  if (!Number.isInteger(n) || n < 100) throw new Error(`REDIS_CLUSTER_NODE_TIMEOUT must be a number of ms (>= 100), got "${process.env.REDIS_CLUSTER_NODE_TIMEOUT}"`)
  return n
}

/** Redis on REDIS_PORT, or on a free port: a probed port taken before Redis binds it is retried with another. */
async function startRedis(logFile: string): Promise<{ redis: Awaited<ReturnType<typeof launchRedis>>; port: number }> {
  const fixed = process.env.REDIS_PORT !== undefined && process.env.REDIS_PORT !== '' && process.env.REDIS_PORT !== '0'
  for (let attempt = 0; ; attempt++) {
    const port = await portSetting('REDIS_PORT', 0)
    try {
      return { redis: await launchRedis({ port, dir: path.join(runDir, 'redis'), tied: false, logFile }), port }
    } catch (err) {
      if (fixed || attempt >= 4) throw err
    }
  }
}

/** nginx from PATH or /usr/sbin (not on a non-root user's PATH on Debian). */
function nginxBinary(): string {
  const dirs = [...(process.env.PATH ?? '').split(':'), '/usr/sbin', '/usr/local/sbin'].filter((d) => d !== '')
  for (const d of dirs) if (fs.existsSync(path.join(d, 'nginx'))) return path.join(d, 'nginx')
  throw new Error('nginx is not installed: `make deps-system` installs Debian\'s nginx')
}

/** Checks a config with `nginx -t`; throws nginx's own complaint. */
function nginxTest(binary: string, prefix: string, config: string, errorLog: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(binary, ['-t', '-q', '-p', prefix, '-c', config, '-e', errorLog], { stdio: ['ignore', 'ignore', 'pipe'] })
    let err = ''
    child.stderr.on('data', (d: Buffer) => (err += d.toString()))
    child.on('error', reject)
    child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`nginx -t refused ${config}: ${err.trim()}`))))
  })
}

/** When nginx starts as root, its workers run as the owner of the run directory (who can write its temp files). */
function nginxUser(): string | undefined {
  if (typeof process.geteuid !== 'function' || process.geteuid() !== 0) return undefined
  const uid = fs.statSync(runDir).uid
  if (uid === 0) return 'root'
  const line = fs.readFileSync('/etc/passwd', 'utf8').split('\n').find((l) => l.split(':')[2] === String(uid))
  return line?.split(':')[0] ?? 'nobody'
}

async function up(): Promise<number> {
  const existing = readState()
  if (existing && existing.processes.some((p) => isOurs(p))) {
    say(`already up (state: ${shortPath(stateFile)}); \`make down\` stops it. Current status:`)
    return status()
  }
  const selection = selectedServices()
  const nginx = nginxBinary()
  const proxyPort = await portSetting('PORT', 8080)
  const proxySandboxPort = await portSetting('SANDBOX_PORT', 8081)
  // A port given is checked before anything starts: nginx would fail to bind it only after the rest is up.
  const fixed = [
    ['PORT', proxyPort],
    ['SANDBOX_PORT', proxySandboxPort],
    ...(process.env.REDIS_PORT && process.env.REDIS_PORT !== '0' && redisMode() === 'single' ? [['REDIS_PORT', Number(process.env.REDIS_PORT)] as const] : [])
  ] as const
  for (const [name, port] of fixed) {
    if (await canBind(port)) continue
    const holder = portHolder(port)
    say(`up refused: port ${port} (${name}) is already taken${holder ? ` by ${holder}` : ''}; nothing was started. Stop it, or choose another port: make up ${name}=<port> (0: a free one).`)
    return 1
  }
  const token = operatorToken()
  const state: RunState = { startedAt: new Date().toISOString(), root, processes: [] }
  writeState(state)
  const record = (r: ProcessRecord): void => {
    state.processes.push(r)
    writeState(state)
  }
  fs.mkdirSync(logDir, { recursive: true })

  try {
    if (redisMode() === 'cluster') {
      // Six nodes (three masters, a replica each), persisted (AOF) under RUN_DIR/redis-cluster.
      const ports: number[] = []
      const taken = new Set<number>(givenPorts)
      for (let i = 0; i < 6; i++) {
        const port = await freeClusterPort(taken)
        taken.add(port).add(port + 10_000)
        givenPorts.add(port).add(port + 10_000)
        ports.push(port)
      }
      say(`${'redis-cluster'.padEnd(NAME_WIDTH)}starting six nodes on ${ports.join(', ')} (redis-cli --cluster create, cluster-node-timeout ${clusterNodeTimeoutMs()} ms)`)
      const nodes = await launchRedisCluster({ ports, dir: path.join(runDir, 'redis-cluster'), tied: false, nodeTimeoutMs: clusterNodeTimeoutMs(), logDir }, 60_000)
      nodes.forEach((n, i) => {
        n.child.unref()
        const port = ports[i] as number
        record({ name: `redis-${i + 1}`, kind: 'redis', pid: n.child.pid as number, signature: 'redis-server', port, log: path.join(logDir, `redis-${port}.log`) })
      })
      state.redisClusterNodes = ports.map((p) => `127.0.0.1:${p}`)
      state.redisUrl = `redis://127.0.0.1:${ports[0]}`
      say(`${'redis-cluster'.padEnd(NAME_WIDTH)}${state.redisClusterNodes.join(',')} (3 masters, 1 replica each)`)
    } else {
      // Redis, persisted (AOF) under RUN_DIR so a Redis restart keeps the data.
      const redisLog = path.join(logDir, 'redis.log')
      const { redis, port: redisPort } = await startRedis(redisLog)
      redis.child.unref()
      record({ name: 'redis', kind: 'redis', pid: redis.child.pid as number, signature: 'redis-server', port: redisPort, log: redisLog })
      state.redisUrl = `redis://127.0.0.1:${redisPort}`
      say(`${'redis'.padEnd(NAME_WIDTH)}${state.redisUrl}`)
    }

    const kafkaLog = path.join(logDir, 'kafka.log')
    const kafkaFd = fs.openSync(kafkaLog, 'a')
    const kafka = await launchMockCluster({ brokers: 3, detach: true, logFd: kafkaFd })
    fs.closeSync(kafkaFd)
    kafka.child.unref()
    kafka.child.stdout?.destroy()
    record({ name: 'kafka', kind: 'kafka', pid: kafka.child.pid as number, signature: 'mock-cluster', log: kafkaLog })
    state.kafkaBrokers = kafka.bootstrap
    say(`${'kafka'.padEnd(NAME_WIDTH)}${kafka.bootstrap.join(',')} (librdkafka mock cluster, 3 brokers)`)

    // Every instance on a port fixed now: supervisord restarts it there and nginx's upstream names it.
    const programs: Program[] = []
    const supervised: ProcessRecord[] = []
    const upstreams: Record<string, string[]> = {}
    const grace = Math.ceil(Number(process.env.DOWN_GRACE_MS ?? 15_000) / 1000)
    for (const { name, instances } of selection) {
      const main = path.join(root, 'dist', 'services', name, 'main.js')
      if (!fs.existsSync(main)) throw new Error(`${path.relative(root, main)} is missing: \`make build\` first`)
      for (let i = 1; i <= instances; i++) {
        const instance = instances > 1 ? `${name}-${i}` : name
        const port = await distinctFreePort()
        const sandboxPort = name === 'gateway' ? await distinctFreePort() : 0
        const log = path.join(logDir, `${instance}.log`)
        programs.push({ name: instance, command: [process.execPath, main], directory: root, env: instanceEnv({ service: name, instance, port, sandboxPort, dataDir: path.join(runDir, 'data', instance) }), log, priority: 100, stopWaitSecs: grace })
        supervised.push({ name: instance, kind: 'service', service: name, pid: 0, signature: main, supervised: true, port, ...(sandboxPort ? { sandboxPort } : {}), log })
        upstreams[name] = [...(upstreams[name] ?? []), `127.0.0.1:${port}`]
        if (sandboxPort) upstreams['gateway-sandbox'] = [...(upstreams['gateway-sandbox'] ?? []), `127.0.0.1:${sandboxPort}`]
      }
    }

    const nginxDir = path.join(runDir, 'nginx')
    fs.mkdirSync(path.join(nginxDir, 'temp'), { recursive: true })
    const nginxConf = path.join(nginxDir, 'nginx.conf')
    const nginxErrors = path.join(logDir, 'nginx-error.log')
    const config = loadConfig()
    const table = loadRoutes()
    for (const service of servicesOf(table)) upstreams[service] ??= []
    const sandboxHosts = config.sandboxPublicUrl !== '' ? [new URL(config.sandboxPublicUrl).hostname.toLowerCase()] : []
    const listenHost = process.env.HOST && process.env.HOST !== '' ? process.env.HOST : '127.0.0.1'
    fs.writeFileSync(
      nginxConf,
      nginxConfig(
        table,
        { upstreams, listen: { api: `${listenHost}:${proxyPort}`, sandbox: `${listenHost}:${proxySandboxPort}` }, sandboxHosts, problemBase: config.problemBase, bodyLimitBytes: config.bodyLimit, streamKeepAliveMs: config.streamKeepAliveMs },
        { pidFile: path.join(nginxDir, 'nginx.pid'), errorLog: nginxErrors, accessLog: path.join(logDir, 'nginx-access.log'), tempDir: path.join(nginxDir, 'temp'), user: nginxUser() }
      )
    )
    await nginxTest(nginx, nginxDir, nginxConf, nginxErrors)
    const nginxLog = path.join(logDir, 'nginx.log')
    // Started last and stopped first (highest priority number): no request reaches a stopping service through it.
    programs.push({ name: 'nginx', command: [nginx, '-p', nginxDir, '-c', nginxConf, '-e', nginxErrors], directory: nginxDir, env: {}, log: nginxLog, priority: 900, stopSignal: 'QUIT', stopWaitSecs: grace })
    supervised.push({ name: 'nginx', kind: 'nginx', pid: 0, signature: nginxConf, supervised: true, port: proxyPort, sandboxPort: proxySandboxPort, log: nginxLog })
    state.proxy = { port: proxyPort, sandboxPort: proxySandboxPort }

    const files: SupervisorFiles = { config: path.join(runDir, 'supervisord.conf'), socket: path.join(runDir, 'supervisor.sock'), pidFile: path.join(runDir, 'supervisord.pid'), log: path.join(logDir, 'supervisord.log') }
    // Restart counts are read from this log: a new system starts a new one.
    fs.rmSync(files.log, { force: true })
    fs.writeFileSync(files.config, supervisorConfig(files, root, programs), { mode: 0o600 })
    const from = new Map(supervised.map((p) => [p.name, fileSize(p.log)]))
    const out = fs.openSync(path.join(logDir, 'supervisord.out'), 'a')
    const supervisord = spawn('supervisord', ['-c', files.config], {
      cwd: runDir,
      detached: true,
      stdio: ['ignore', out, out],
      env: sharedEnv(process.env, { kafkaBrokers: kafka.bootstrap, redisUrl: state.redisUrl, ...(state.redisClusterNodes ? { redisClusterNodes: state.redisClusterNodes } : {}), operatorToken: token })
    })
    fs.closeSync(out)
    supervisord.unref()
    state.supervisor = files
    record({ name: 'supervisord', kind: 'supervisor', pid: supervisord.pid as number, signature: files.config, log: files.log })
    for (const p of supervised) record(p)

    // A service is up once it printed its ready line (its consumers joined their groups) and answers /healthz.
    const waitMs = Number(process.env.UP_WAIT_MS ?? 60_000)
    const ready = async (p: ProcessRecord): Promise<boolean> => {
      if (p.kind === 'service' && !(await waitFor(() => logSince(p.log, from.get(p.name) ?? 0).includes(`${p.service ?? ''} ready (`), waitMs))) return false
      return waitFor(async () => (await answers(`http://127.0.0.1:${p.port}/healthz`, 1000)) === '200', p.kind === 'service' ? 10_000 : waitMs)
    }
    const health = await Promise.all(supervised.map(async (p) => [p, await ready(p)] as const))
    const programs_ = new Map((await programStatus(files)).map((s) => [s.name, s]))
    for (const p of supervised) p.pid = programs_.get(p.name)?.pid ?? 0
    writeState(state)
    for (const [p, ok] of health) say(`${p.name.padEnd(NAME_WIDTH)}${ok ? 'up  ' : 'DOWN'} http://127.0.0.1:${p.port ?? '?'}${p.kind === 'nginx' ? ` and :${p.sandboxPort} (nginx)` : ''}   log: ${shortPath(p.log)}`)
    const failed = health.filter(([, ok]) => !ok)
    say('')
    say(`{base_url} and {ads_url}: http://127.0.0.1:${proxyPort}    {ads_sandbox_url}: http://127.0.0.1:${proxySandboxPort}`)
    say(`state: ${stateFile}    processes: make status    stop everything: make down`)
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

async function status(): Promise<number> {
  const state = readState()
  if (!state) {
    say('not running (no state file): `make up` starts it')
    return 1
  }
  const supervisor = state.processes.find((p) => p.kind === 'supervisor')
  const programs = new Map(state.supervisor && supervisor && isOurs(supervisor) ? (await programStatus(state.supervisor)).map((s) => [s.name, s]) : [])
  let bad = 0
  say(`${'process'.padEnd(NAME_WIDTH)}${'pid'.padEnd(9)}${'port'.padEnd(7)}${'state'.padEnd(10)}${'restarts'.padEnd(10)}${'healthz'.padEnd(10)}readyz`)
  for (const p of state.processes) {
    const program = programs.get(p.name)
    const pid = p.supervised ? program?.pid : p.pid
    const running = p.supervised ? program?.state === 'RUNNING' : isOurs(p)
    const st = p.supervised ? (program?.state ?? 'UNKNOWN') : running ? 'RUNNING' : 'DOWN'
    let health = '-'
    let ready = '-'
    if (running && p.port !== undefined && p.kind !== 'redis') {
      health = await answers(`http://127.0.0.1:${p.port}/healthz`)
      if (p.kind === 'service') ready = await answers(`http://127.0.0.1:${p.port}/readyz`)
    }
    if (!running || (health !== '-' && health !== '200')) bad++
    say(`${p.name.padEnd(NAME_WIDTH)}${String(pid ?? '-').padEnd(9)}${String(p.port ?? '').padEnd(7)}${st.padEnd(10)}${String(p.supervised ? (program?.restarts ?? 0) : '-').padEnd(10)}${health.padEnd(10)}${ready}`)
  }
  if (state.proxy) say(`{base_url} and {ads_url}: http://127.0.0.1:${state.proxy.port}    {ads_sandbox_url}: http://127.0.0.1:${state.proxy.sandboxPort}`)
  if (state.kafkaBrokers) say(`kafka brokers: ${state.kafkaBrokers.join(',')}`)
  if (state.redisClusterNodes) say(`redis cluster: ${state.redisClusterNodes.join(',')}`)
  else if (state.redisUrl) say(`redis: ${state.redisUrl}`)
  if (state.supervisor) say(`supervisorctl -c ${shortPath(state.supervisor.config)} (restart one: ... restart activity-1)`)
  return bad === 0 ? 0 : 1
}

async function main(): Promise<number> {
  const command = process.argv[2]
  if (command === 'up') return up()
  if (command === 'down') return down()
  if (command === 'status') return status()
  if (command === 'ctl') {
    const state = readState()
    if (!state?.supervisor) throw new Error('not running (no state file)')
    const res = await supervisorctl(state.supervisor.config, process.argv.slice(3))
    process.stdout.write(res.out)
    return res.code
  }
  process.stderr.write('usage: up.js up|down|status|ctl <supervisorctl args>\n')
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

