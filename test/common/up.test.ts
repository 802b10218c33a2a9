import { execFile } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { projectRoot } from '../../services/common/bus/topics'
import { instanceCounts, selectedServices, serviceEnv } from '../../scripts/up'
import { tempDir } from '../support/util'

/**
 * `make up` / `make status` / `make down` for real: the compiled up script
 * (dist/, built by `make build` before the suite) starts Redis, the mock
 * cluster, every service process and the proxy; each answers /healthz; the
 * proxy routes path families; down leaves no process behind.
 */

const root = projectRoot()
const upJs = path.join(root, 'dist', 'scripts', 'up.js')

interface Record {
  name: string
  kind: string
  service?: string
  pid: number
  port?: number
}

function run(args: string[], env: NodeJS.ProcessEnv, timeoutMs: number): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [upJs, ...args], { env, timeout: timeoutMs, cwd: root }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? ((err as { code: number }).code) : 1) : 0
      resolve({ code, out: `${stdout}${stderr}` })
    })
  })
}

/** Gone, or a zombie waiting for init to reap it. */
function gone(pid: number): boolean {
  try {
    process.kill(pid, 0)
  } catch {
    return true
  }
  try {
    return /^\d+ \(.*\) Z/.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8'))
  } catch {
    return true
  }
}

t.test('instance counts come from ACTIVITY, WEBHOOKS, STREAM, GATEWAY, ACCOUNT_HISTORY', async (t) => {
  const defaults = Object.fromEntries(instanceCounts({}).map((s) => [s.name, s.instances]))
  t.same(defaults, { gateway: 1, webhooks: 1, activity: 2, stream: 2, 'account-history': 1 })
  const scaled = Object.fromEntries(instanceCounts({ ACTIVITY: '3', WEBHOOKS: '2', STREAM: '1', GATEWAY: '2', ACCOUNT_HISTORY: '0' }).map((s) => [s.name, s.instances]))
  t.same(scaled, { gateway: 2, webhooks: 2, activity: 3, stream: 1, 'account-history': 0 })
  t.same(selectedServices({ ACCOUNT_HISTORY: '0', UP_SERVICES: 'gateway,account-history' }).map((s) => s.name), ['gateway'], 'a count of 0 leaves a service out')
  t.throws(() => instanceCounts({ STREAM: 'two' }), /STREAM must be an instance count from 0 to 16, got "two"/)
  t.throws(() => instanceCounts({ ACTIVITY: '-1' }), /ACTIVITY must be an instance count/)
})

t.test('each instance gets the operator environment plus what up owns', async (t) => {
  const settings = { port: 9001, sandboxPort: 9002, kafkaBrokers: ['127.0.0.1:1', '127.0.0.1:2'], redisUrl: 'redis://127.0.0.1:3', operatorToken: 'tok', dataDir: '/run/data/stream-2' }
  const env = serviceEnv({ KAFKA_FETCH_MAX_WAIT: '20ms', LOG_LEVEL: 'debug', PORT: '8080', REDIS_URL: 'redis://elsewhere' }, { ...settings, service: 'stream', instance: 'stream-2' })
  t.equal(env.KAFKA_FETCH_MAX_WAIT, '20ms', 'configuration variables pass through')
  t.equal(env.LOG_LEVEL, 'debug')
  t.match(env, { STREAM_NODE_ID: 'stream-2', PORT: '9001', SANDBOX_PORT: '9002', HOST: '127.0.0.1', KAFKA_BROKERS: '127.0.0.1:1,127.0.0.1:2', REDIS_URL: 'redis://127.0.0.1:3', OPERATOR_TOKEN: 'tok', DATA_DIR: '/run/data/stream-2', KAFKA_SESSION_TIMEOUT: '10s' })
  const other = serviceEnv({ KAFKA_SESSION_TIMEOUT: '4s' }, { ...settings, service: 'activity', instance: 'activity-1' })
  t.equal(other.STREAM_NODE_ID, undefined, 'only stream nodes get a node identity')
  t.equal(other.KAFKA_SESSION_TIMEOUT, '4s')
})

t.test('up refuses an unknown service name before starting anything', async (t) => {
  if (!fs.existsSync(upJs)) {
    t.fail('dist/scripts/up.js is missing')
    return
  }
  const runDir = tempDir(t, 'gw-up-')
  const res = await run(['up'], { ...process.env, RUN_DIR: runDir, UP_SERVICES: 'gateway,nope' }, 20_000)
  t.equal(res.code, 1)
  t.match(res.out, /UP_SERVICES names unknown service\(s\): nope/)
  t.notOk(fs.existsSync(path.join(runDir, 'state.json')), 'nothing was started')
})

t.test('make up runs every service as its own process; make down stops exactly those', { timeout: 90_000 }, async (t) => {
  if (!fs.existsSync(upJs)) {
    t.fail(`${path.relative(root, upJs)} is missing: run \`make build\` first (make test does)`)
    return
  }
  const runDir = tempDir(t, 'gw-up-')
  const token = 'up-test-operator-token-0123456789'
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    RUN_DIR: runDir,
    DATA_DIR: path.join(runDir, 'data'),
    PORT: '0',
    SANDBOX_PORT: '0',
    LOG_LEVEL: 'warn',
    OPERATOR_TOKEN: token,
    UP_WAIT_MS: '30000',
    // Scaled differently from the defaults: counts come from these variables.
    ACTIVITY: '1',
    WEBHOOKS: '2',
    KAFKA_FETCH_MAX_WAIT: '123ms'
  }
  const stateFile = path.join(runDir, 'state.json')
  let pids: number[] = []
  t.teardown(async () => {
    // Whatever happened above, nothing may outlive the test.
    if (fs.existsSync(stateFile)) await run(['down'], { ...env, DOWN_GRACE_MS: '3000' }, 20_000)
    for (const pid of pids) if (!gone(pid)) process.kill(pid, 'SIGKILL')
  })

  const started = await run(['up'], env, 60_000)
  const state = fs.existsSync(stateFile) ? (JSON.parse(fs.readFileSync(stateFile, 'utf8')) as { processes: Record[]; proxy: { port: number } }) : undefined
  pids = state?.processes.map((p) => p.pid) ?? []
  t.equal(started.code, 0, 'up succeeded')
  if (!state) {
    t.fail(`no state file; up printed:\n${started.out}`)
    return
  }
  const services = state.processes.filter((p) => p.kind === 'service')
  // Every service, built or not: a service missing from dist/ is a failure here, not a smaller system.
  t.same(
    services.map((p) => p.name).sort(),
    ['account-history', 'activity', 'gateway', 'stream-1', 'stream-2', 'webhooks-1', 'webhooks-2'],
    'every service runs: ACTIVITY=1, WEBHOOKS=2, two stream nodes by default, one of each other service'
  )
  for (const p of services) {
    const environ = fs.readFileSync(`/proc/${p.pid}/environ`, 'utf8').split('\0')
    t.ok(environ.includes('KAFKA_FETCH_MAX_WAIT=123ms'), `${p.name} got KAFKA_FETCH_MAX_WAIT from the operator's environment`)
  }
  t.equal(new Set(state.processes.map((p) => p.pid)).size, state.processes.length, 'every instance is its own process')
  t.ok(services.every((p) => typeof p.port === 'number' && p.port > 0), 'each service reported the port it listens on')

  for (const p of services) {
    const res = await fetch(`http://127.0.0.1:${p.port}/healthz`)
    t.equal(res.status, 200, `${p.name} /healthz`)
    t.equal(((await res.json()) as { service: string }).service, p.service, `${p.name} is the ${p.service} service`)
  }

  const via = async (p: string): Promise<string | null> => {
    const res = await fetch(`http://127.0.0.1:${state.proxy.port}${p}`)
    await res.arrayBuffer()
    return res.headers.get('x-served-by')
  }
  t.equal(await via('/healthz'), 'gateway', 'the proxy on PORT answers')
  t.equal(await via('/2/webhooks'), 'webhooks')
  t.equal(await via('/2/activity/subscriptions'), 'activity')
  t.equal(await via('/12/accounts/abc/account_history'), 'account-history')

  // Each stream node has its own stable identity (STREAM_NODE_ID), hence its own consumer group.
  for (const node of services.filter((p) => p.service === 'stream')) {
    const res = await fetch(`http://127.0.0.1:${node.port}/admin/bus/lag`, { headers: { authorization: `Bearer ${token}` } })
    const groups = ((await res.json()) as { groups: Array<{ group: string }> }).groups.map((g) => g.group)
    t.ok(groups.includes(`stream-${node.name}`), `${node.name} consumes as group stream-${node.name} (has ${[...new Set(groups)].join(', ')})`)
  }

  const matcher = services.find((p) => p.service === 'activity')
  t.ok(matcher, 'a matcher runs')
  if (matcher) {
    const lag = await fetch(`http://127.0.0.1:${matcher.port}/admin/bus/lag`, { headers: { authorization: `Bearer ${token}` } })
    t.equal(lag.status, 200, 'every process serves the bus lag to operators')
    t.match(await lag.json(), { bus: 'kafka', service: 'activity' })
    const refused = await fetch(`http://127.0.0.1:${matcher.port}/admin/bus/lag`)
    t.equal(refused.status, 401, 'not without the operator token')
    await refused.arrayBuffer()
  }

  const status = await run(['status'], env, 20_000)
  t.equal(status.code, 0, 'status: everything healthy')
  for (const p of state.processes) t.match(status.out, p.name)

  const again = await run(['up'], env, 20_000)
  t.match(again.out, /already up/, 'a second up does not start a second system')

  // A process that died on its own: status reports it, down stops the rest and says so.
  const victim = services.find((p) => p.service === 'stream') ?? services[0]
  if (victim) {
    process.kill(victim.pid, 'SIGKILL')
    const deadline = Date.now() + 5000
    while (!gone(victim.pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 25))
    const degraded = await run(['status'], env, 20_000)
    t.equal(degraded.code, 1, `status reports ${victim.name} down`)
    t.match(degraded.out, new RegExp(`${victim.name}\\s+${victim.pid}\\s+\\d+\\s+NO`))
  }

  const stopped = await run(['down'], env, 40_000)
  t.equal(stopped.code, 0, 'down succeeded')
  if (victim) t.match(stopped.out, new RegExp(`${victim.name}\\s+was not running`))
  const deadline = Date.now() + 5000
  while (pids.some((pid) => !gone(pid)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50))
  t.same(pids.filter((pid) => !gone(pid)), [], 'no process of ours is left')
  t.notOk(fs.existsSync(stateFile), 'state file removed')
  const after = await run(['status'], env, 10_000)
  t.equal(after.code, 1, 'status after down reports not running')
})
