import { execFile } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import type { Test } from 'tap'
import { KafkaBus } from '../../../services/common/bus/kafka'
import type { Bus } from '../../../services/common/bus/types'
import { projectRoot } from '../../../services/common/bus/topics'
import { RedisStore } from '../../../services/common/store/redis'
import type { Store } from '../../../services/common/store/types'
import type { ProcessRecord, RunState } from '../../../scripts/up'
import { processesFromLog } from '../../../scripts/supervisor'
import { createLogger } from '../../../services/common/logger'
import { TEST_KAFKA_TIMINGS } from '../../support/infra'
import { whenGone } from '../../support/sentinel'
import { alive, tempDir } from '../../support/util'
import { describeMockGroups } from './mock-groups'
import { cpuFacts, probeError, ReadinessLog } from './readiness-log'
import { SYSTEM_ENV, type SystemView } from './system'

/**
 * The system exactly as `make up` runs it (dist/scripts/up.js: Redis, the
 * Kafka mock cluster, supervisord running every instance and nginx), for the
 * fault tests that need the real supervisor and front proxy. The test holds
 * its own Redis store and Kafka bus on the same Redis and cluster.
 */

const root = projectRoot()
const upJs = path.join(root, 'dist', 'scripts', 'up.js')

function run(args: string[], env: NodeJS.ProcessEnv, timeoutMs: number): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [upJs, ...args], { env, timeout: timeoutMs, cwd: root }, (err, stdout, stderr) => {
      resolve({ code: err ? 1 : 0, out: `${stdout}${stderr}` })
    })
  })
}

export interface UpSystem extends SystemView {
  readonly bus: Bus
  readonly state: RunState
  /** nginx's api base URL: {base_url} of the whole system. */
  readonly proxyUrl: string
  /** Service instances (`activity-1` ...). */
  readonly instances: ProcessRecord[]
  /** The instance's current pid, as supervisord reports it (undefined while it is not RUNNING). */
  pidOf(name: string): Promise<number | undefined>
  /** kill -9 of the instance's current process; returns the killed pid. */
  kill9(name: string): Promise<number>
  /** Waits until supervisord runs the instance again under another pid (`restartedMs`) and it answers /readyz (`readyMs`). */
  waitBack(name: string, killedPid: number, timeoutMs?: number): Promise<{ restartedMs: number; readyMs: number }>
}

/** How long one readiness probe may take: a process that answers slower than this is not back yet. */
const PROBE_TIMEOUT_MS = 1000

export async function startUpSystem(t: Test, env: Record<string, string>): Promise<UpSystem> {
  if (!fs.existsSync(upJs)) throw new Error(`${path.relative(root, upJs)} is missing: run \`make build\` first (make test does)`)
  const runDir = tempDir(t, 'gw-up-faults-')
  // Not the test runner's NODE_OPTIONS (tap's process-info import): the services run as `make up` runs them.
  const { NODE_OPTIONS: _runnerOptions, ...runnerEnv } = process.env
  const upEnv: NodeJS.ProcessEnv = {
    ...runnerEnv,
    ...(process.env.FAULT_NODE_OPTIONS ? { NODE_OPTIONS: process.env.FAULT_NODE_OPTIONS } : {}),
    ...SYSTEM_ENV,
    RUN_DIR: runDir,
    DATA_DIR: path.join(runDir, 'data'),
    PORT: '0',
    SANDBOX_PORT: '0',
    DOWN_GRACE_MS: '5000',
    // The mock cluster logs its groups' states: a service that cannot rejoin is explained by them (mock-groups.ts).
    MOCK_CLUSTER_DEBUG: process.env.MOCK_CLUSTER_DEBUG ?? 'mock',
    ...env
  }
  const stateFile = path.join(runDir, 'state.json')
  // A tap timeout kills this process before any teardown runs: then the sentinel stops what `up` started.
  const cancelSentinel = whenGone(process.pid, [process.execPath, upJs, 'down'], upEnv)
  // Registered first, so it runs last: after the test's store and bus closed.
  t.teardown(async () => {
    if (fs.existsSync(stateFile)) await run(['down'], upEnv, 60_000)
    cancelSentinel()
  })
  const started = await run(['up'], upEnv, 120_000)
  if (started.code !== 0 || !fs.existsSync(stateFile)) throw new Error(`make up failed:\n${started.out}`)
  const state = JSON.parse(fs.readFileSync(stateFile, 'utf8')) as RunState
  const files = state.supervisor
  if (!files || !state.redisUrl || !state.kafkaBrokers || !state.proxy) throw new Error(`incomplete state: ${JSON.stringify(state)}`)

  const store: Store = state.redisClusterNodes
    ? await RedisStore.connectCluster(state.redisClusterNodes, createLogger('silent', 'up-faults-store'))
    : await RedisStore.connect(state.redisUrl, createLogger('silent', 'up-faults-store'))
  t.teardown(() => store.close())
  const bus: Bus = await KafkaBus.connect({ brokers: state.kafkaBrokers, clientId: `up-faults-${process.pid}`, log: createLogger('silent', 'up-faults-bus'), ...TEST_KAFKA_TIMINGS })
  t.teardown(() => bus.close())

  const instances = state.processes.filter((p) => p.kind === 'service')
  const kills = new Map<string, number>()
  const record = (name: string): ProcessRecord => {
    const p = instances.find((x) => x.name === name)
    if (!p) throw new Error(`no instance ${name}; have ${instances.map((x) => x.name).join(', ')}`)
    return p
  }
  const logTail = (file: string, lines: number): string => {
    try {
      return fs.readFileSync(file, 'utf8').split('\n').slice(-lines).join('\n')
    } catch {
      return '(no log)'
    }
  }
  const supervisorLog = (): string => {
    try {
      return fs.readFileSync(files.log, 'utf8')
    } catch {
      return ''
    }
  }
  // From supervisord's log, not supervisorctl: waiting for several victims at once, polling
  // supervisorctl (a Python start each time) took the CPU from the very processes awaited.
  const pidOf = async (name: string): Promise<number | undefined> => {
    const p = processesFromLog(supervisorLog()).get(name)
    return p?.state === 'RUNNING' ? p.pid : undefined
  }
  /** supervisord's lines about one program: when it exited, was spawned and counted as running. */
  const timeline = (name: string): string =>
    supervisorLog()
      .split('\n')
      .filter((l) => l.includes(`'${name}'`) || l.includes(` ${name} `))
      .slice(-6)
      .map((l) => l.replace(/^\d{4}-\d\d-\d\d /, '').replace(/ (INFO|WARN|CRIT) /, ' '))
      .join(' | ')
  const kafkaLog = state.processes.find((p) => p.kind === 'kafka')?.log
  // The mock cluster is not supervised: whether it is still alive is the first thing to know.
  const diagnostics = (lines = 25): string =>
    [...state.processes.filter((p) => p.supervised || p.kind === 'kafka'), { name: 'supervisord', kind: 'supervisor', pid: 0, log: files.log }]
      .map((p) => `== ${p.name}${p.kind === 'kafka' ? (alive(p.pid) ? ' (alive)' : ' (DEAD)') : ''}\n${logTail(p.log, lines)}`)
      .join('\n')
  return {
    state,
    store,
    bus,
    instances,
    proxyUrl: `http://127.0.0.1:${state.proxy.port}`,
    urls: (service) => instances.filter((p) => p.service === service).map((p) => `http://127.0.0.1:${p.port}`),
    pidOf,
    async kill9(name) {
      const pid = await pidOf(name)
      if (pid === undefined) throw new Error(`${name} is not running`)
      kills.set(name, (kills.get(name) ?? 0) + 1)
      process.kill(pid, 'SIGKILL')
      return pid
    },
    async waitBack(name, killedPid, timeoutMs = 60_000) {
      const from = Date.now()
      const p = record(name)
      const probes = new ReadinessLog()
      let pid: number | undefined
      let restartedMs: number | undefined
      while (Date.now() - from < timeoutMs) {
        pid = await pidOf(name)
        if (pid !== undefined && pid !== killedPid) {
          restartedMs ??= Date.now() - from
          const answer = await fetch(`http://127.0.0.1:${p.port}/readyz`, { signal: AbortSignal.timeout(PROBE_TIMEOUT_MS) }).then(
            async (r) => ({ ok: r.ok, text: `${r.status} ${((await r.json().catch(() => ({}))) as { reason?: string }).reason ?? ''}`.trim() }),
            (err: Error) => ({ ok: false, text: probeError(err, PROBE_TIMEOUT_MS) })
          )
          if (answer.ok) return { restartedMs, readyMs: Date.now() - from }
          probes.note(`pid ${pid}: ${answer.text}`)
        } else probes.note(pid === undefined ? 'not running' : 'still the killed pid')
        await new Promise((r) => setTimeout(r, 250))
      }
      // What CI shows of a failure is its start: the probes, the CPU the process got, supervisord, then the mock's groups.
      const groups = kafkaLog ? describeMockGroups(kafkaLog, { prefix: p.service }) : 'no mock cluster log'
      throw new Error(
        `${name} not back within ${timeoutMs} ms; readyz: ${probes.summary()}; ${cpuFacts(pid)}; supervisord: ${timeline(name)}; ${groups}; log:\n${logTail(p.log, 30)}\n${diagnostics(8)}`
      )
    },
    // Every exit supervisord saw that was not one of our kills.
    crashes() {
      const log = fs.existsSync(files.log) ? fs.readFileSync(files.log, 'utf8') : ''
      const exits = new Map<string, number>()
      for (const m of log.matchAll(/ exited: (\S+) \(([^)]*)\)/g)) exits.set(m[1] as string, (exits.get(m[1] as string) ?? 0) + 1)
      return [...exits].filter(([name, n]) => n > (kills.get(name) ?? 0)).map(([name, n]) => `${name} exited ${n - (kills.get(name) ?? 0)} time(s) on its own`)
    },
    diagnostics
  }
}
