import { execFile } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import t, { type Test } from 'tap'
import { projectRoot } from '../../services/common/bus/topics'
import { instanceCounts, selectedServices, serviceEnv } from '../../scripts/up'
import { runLag } from '../../services/cli/ops'
import { eventually, tempDir } from '../support/util'
import { whenGone } from '../support/sentinel'
import { createApp, issueBearer } from '../../services/gateway/identity'
import { createLogger } from '../../services/common/logger'
import { RedisStore } from '../../services/common/store/redis'
import WebSocket from 'ws'
import { nextUserId, openHttpStream, sampleEvent, subscribe } from '../support/fixtures/activity'

/**
 * `make up` / `make status` / `make down` for real: the compiled up script
 * (dist/, built by `make build` before the suite) starts Redis, the mock
 * cluster, and supervisord running every service instance and nginx; each
 * answers /healthz; nginx routes path families; a process killed with
 * SIGKILL comes back by itself; down leaves no process behind.
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

/** What `up` runs with in these tests: a run directory of the test's own, ports picked by the system. */
function upEnv(runDir: string, settings: { [name: string]: string }): NodeJS.ProcessEnv {
  return { ...process.env, RUN_DIR: runDir, DATA_DIR: path.join(runDir, 'data'), PORT: '0', SANDBOX_PORT: '0', OPERATOR_TOKEN: 'up-test-operator-token-0123456789', ...settings }
}

t.test('instance counts come from ACTIVITY, WEBHOOKS, STREAM, GATEWAY, ACCOUNT_HISTORY', async (t) => {
  const defaults = Object.fromEntries(instanceCounts({}).map((s) => [s.name, s.instances]))
  t.same(defaults, { gateway: 2, webhooks: 2, activity: 2, stream: 2, 'account-history': 2 })
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
  t.match(env, { STREAM_NODE_ID: 'stream-2', PORT: '9001', SANDBOX_PORT: '9002', HOST: '127.0.0.1', KAFKA_BROKERS: '127.0.0.1:1,127.0.0.1:2', REDIS_URL: 'redis://127.0.0.1:3', OPERATOR_TOKEN: 'tok', DATA_DIR: '/run/data/stream-2', KAFKA_SESSION_TIMEOUT: '5s' })
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

t.test('up refuses a port another process holds, naming the port and the process, and starts nothing', async (t) => {
  if (!fs.existsSync(upJs)) {
    t.fail('dist/scripts/up.js is missing')
    return
  }
  const { freePort } = await import('../../scripts/local-infra')
  const net = await import('node:net')
  const port = await freePort()
  const holder = net.createServer()
  await new Promise<void>((resolve) => holder.listen(port, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => holder.close(() => resolve())))
  const runDir = tempDir(t, 'gw-up-')
  const res = await run(['up'], upEnv(runDir, { PORT: String(port) }), 20_000)
  t.equal(res.code, 1, 'up exits 1')
  t.match(res.out, new RegExp(`port ${port} \\(PORT\\) is already taken by pid ${process.pid} \\(`), 'the message names the port and the process holding it')
  t.notMatch(res.out, /\bup +http/, 'no process was reported up')
  t.notOk(fs.existsSync(path.join(runDir, 'state.json')), 'nothing was started (no run state)')
})

t.test('up with a setting the services would refuse fails at once, naming it, and leaves nothing running', { timeout: 90_000 }, async (t) => {
  if (!fs.existsSync(upJs)) {
    t.fail('dist/scripts/up.js is missing')
    return
  }
  const runDir = tempDir(t, 'gw-up-bad-')
  const env = upEnv(runDir, { UP_WAIT_MS: '60000', GATEWAY: '1', ACTIVITY: '1', WEBHOOKS: '1', STREAM: '1', ACCOUNT_HISTORY: '1', WEBHOOK_TIMEOUT: 'banana' })
  t.teardown(async () => {
    if (fs.existsSync(path.join(runDir, 'state.json'))) await run(['down'], env, 60_000)
  })
  const started = Date.now()
  const res = await run(['up'], env, 80_000)
  const took = Date.now() - started
  t.equal(res.code, 1, 'up exits 1')
  t.ok(took < 30_000, `it gave up in ${took} ms, not after UP_WAIT_MS (60 s) of crash-looping services`)
  t.match(res.out, /up failed: invalid configuration:\s+WEBHOOK_TIMEOUT must be a duration/, 'the refusal names the setting and what it takes')
  t.match(res.out, /kafka\s+stopped[\s\S]*redis\s+stopped/, 'what it had started is stopped')
  t.notOk(fs.existsSync(path.join(runDir, 'state.json')), 'no state left behind: nothing runs')
})

t.test('make up: services and nginx under supervisord; a killed process comes back; make down stops exactly those', { timeout: 120_000 }, async (t) => {
  if (!fs.existsSync(upJs)) {
    t.fail(`${path.relative(root, upJs)} is missing: run \`make build\` first (make test does)`)
    return
  }
  const runDir = tempDir(t, 'gw-up-')
  const token = 'up-test-operator-token-0123456789'
  const env = upEnv(runDir, {
    LOG_LEVEL: 'warn',
    OPERATOR_TOKEN: token,
    UP_WAIT_MS: '45000',
    // Scaled differently from the defaults: counts come from these variables.
    GATEWAY: '1',
    ACTIVITY: '1',
    WEBHOOKS: '2',
    STREAM: '2',
    ACCOUNT_HISTORY: '1',
    KAFKA_FETCH_MAX_WAIT: '123ms'
  })
  const stateFile = path.join(runDir, 'state.json')
  const pids = new Set<number>()
  const readState = (): { processes: Record[]; proxy: { port: number; sandboxPort: number }; redisUrl?: string } | undefined => (fs.existsSync(stateFile) ? JSON.parse(fs.readFileSync(stateFile, 'utf8')) : undefined)
  // Killed by a tap timeout, this process runs no teardown: the sentinel stops what `up` started then.
  const cancelSentinel = whenGone(process.pid, [process.execPath, upJs, 'down'], { ...env, DOWN_GRACE_MS: '3000' })
  t.teardown(async () => {
    // Whatever happened above, nothing may outlive the test.
    if (fs.existsSync(stateFile)) await run(['down'], { ...env, DOWN_GRACE_MS: '3000' }, 30_000)
    for (const pid of pids) if (!gone(pid)) process.kill(pid, 'SIGKILL')
    cancelSentinel()
  })

  const started = await run(['up'], env, 90_000)
  const state = readState()
  for (const p of state?.processes ?? []) if (p.pid) pids.add(p.pid)
  t.equal(started.code, 0, 'up succeeded')
  if (!state) {
    t.fail(`no state file; up printed:\n${started.out}`)
    return
  }
  t.same(state.processes.filter((p) => !p.service).map((p) => `${p.kind}:${p.name}`), ['redis:redis', 'kafka:kafka', 'supervisor:supervisord', 'nginx:nginx'], 'Redis, Kafka, supervisord and nginx are processes of their own')
  const supervisord = state.processes.find((p) => p.kind === 'supervisor') as Record
  t.match(fs.readFileSync(`/proc/${supervisord.pid}/cmdline`, 'utf8'), /supervisord/, 'supervisord is Debian\'s supervisor')
  const nginx = state.processes.find((p) => p.kind === 'nginx') as Record
  t.match(fs.readFileSync(`/proc/${nginx.pid}/cmdline`, 'utf8'), /^nginx: master process/, 'nginx runs (its master renames itself)')
  t.equal(nginx.port, state.proxy.port, 'nginx listens on the reported port')
  const services = state.processes.filter((p) => p.kind === 'service')
  t.same(
    services.map((p) => p.name).sort(),
    ['account-history', 'activity', 'gateway', 'stream-1', 'stream-2', 'webhooks-1', 'webhooks-2'],
    'every service runs: GATEWAY=1 ACTIVITY=1 WEBHOOKS=2 STREAM=2 ACCOUNT_HISTORY=1'
  )
  t.equal(new Set(state.processes.map((p) => p.pid)).size, state.processes.length, 'every instance is its own process')
  for (const p of services) {
    t.equal(Number(fs.readFileSync(`/proc/${p.pid}/stat`, 'utf8').split(' ')[3]), supervisord.pid, `${p.name} is a child of supervisord`)
    const environ = fs.readFileSync(`/proc/${p.pid}/environ`, 'utf8').split('\0')
    t.ok(environ.includes('KAFKA_FETCH_MAX_WAIT=123ms'), `${p.name} got KAFKA_FETCH_MAX_WAIT from the operator's environment`)
    const res = await fetch(`http://127.0.0.1:${p.port}/healthz`)
    t.equal(((await res.json()) as { service: string }).service, p.service, `${p.name} answers /healthz on its port as the ${p.service} service`)
  }

  // Through nginx: the access log names the instance that answered each path family.
  const proxy = `http://127.0.0.1:${state.proxy.port}`
  for (const p of ['/healthz', '/2/webhooks', '/2/activity/subscriptions', '/12/accounts/abc/account_history']) await (await fetch(`${proxy}${p}`)).arrayBuffer()
  const access = fs.readFileSync(path.join(runDir, 'logs', 'nginx-access.log'), 'utf8')
  const byPort = new Map(services.map((p) => [p.port, p.service]))
  const answeredBy = (p: string): string | undefined => byPort.get(Number(new RegExp(`"GET ${p.replace(/\//g, '\\/')} HTTP/1.1" \\d+ \\d+ [\\d.]+ upstream=127\\.0\\.0\\.1:(\\d+)`).exec(access)?.[1]))
  t.equal(answeredBy('/healthz'), 'gateway')
  t.equal(answeredBy('/2/webhooks'), 'webhooks')
  t.equal(answeredBy('/2/activity/subscriptions'), 'activity')
  t.equal(answeredBy('/12/accounts/abc/account_history'), 'account-history')

  await t.test('through nginx: a batch retried with its Idempotency-Key is delivered once; a stream ticket issued by one node opens the stream on another, once', (t) =>
    idempotentIngestAndTickets(t, proxy, state.redisUrl, services.filter((p) => p.service === 'stream'), token))

  // Each stream node has its own stable identity (STREAM_NODE_ID), hence its own consumer group.
  for (const node of services.filter((p) => p.service === 'stream')) {
    const res = await fetch(`http://127.0.0.1:${node.port}/admin/bus/lag`, { headers: { authorization: `Bearer ${token}` } })
    const groups = ((await res.json()) as { groups: Array<{ group: string }> }).groups.map((g) => g.group)
    t.ok(groups.includes(`stream-${node.name}`), `${node.name} consumes as group stream-${node.name} (has ${[...new Set(groups)].join(', ')})`)
  }

  // WEBHOOKS=2: the two processes are one consumer group and share activity.deliveries out between them.
  const webhooks = services.filter((p) => p.service === 'webhooks')
  const held = async (p: Record): Promise<number[]> => {
    const res = await fetch(`http://127.0.0.1:${p.port}/admin/bus/lag?group=webhooks-delivery`, { headers: { authorization: `Bearer ${token}` } })
    const report = (await res.json()) as { assigned: Array<{ group: string; topic: string; partitions: number[] }> }
    return report.assigned.filter((a) => a.topic === 'activity.deliveries').flatMap((a) => a.partitions)
  }
  const deliveriesPartitions = Array.from({ length: 12 }, (_, i) => i)
  let shares: number[][] = []
  // A group that just formed may still be rebalancing: a share is read while it settles.
  const split = await eventually(async () => {
    shares = await Promise.all(webhooks.map(held))
    return shares.every((s) => s.length > 0) && JSON.stringify(shares.flat().sort((a, b) => a - b)) === JSON.stringify(deliveriesPartitions)
  }, 30_000).then(() => true, () => false)
  t.ok(split && webhooks.length === 2, `WEBHOOKS=2: each process holds a share of activity.deliveries' 12 partitions, none twice (${JSON.stringify(shares)})`)

  // make lag under make up: every group of every process, one total line each, and the line for the whole system.
  const lag = { lines: [] as string[], errors: [] as string[] }
  const lagCode = await runLag([], { out: (l = '') => void lag.lines.push(l), err: (l) => void lag.errors.push(l), env: { RUN_DIR: runDir, OPERATOR_TOKEN: token } })
  t.equal(lagCode, 0, `make lag: every process answered ${lag.errors.join('; ')}`)
  const groups = ['account-history', 'activity-matcher', 'gateway-audience-targeting', 'gateway-keyword-insights', 'stream-stream-1', 'stream-stream-2', 'webhooks-account-activity', 'webhooks-delivery']
  for (const group of groups) t.match(lag.lines.join('\n'), new RegExp(`^(caught up|BEHIND)\\s+${group}: \\d+ message\\(s\\) behind`, 'm'), `make lag shows ${group}`)
  t.match(lag.lines.join('\n'), /^(all 8 group\(s\) caught up|\d+ of 8 group\(s\) behind: .*)$/m)
  const status = await run(['status'], env, 20_000)
  t.equal(status.code, 0, 'status: everything healthy')
  for (const p of state.processes) t.match(status.out, new RegExp(`^${p.name}\\s+\\d+\\s+\\d*\\s+RUNNING`, 'm'), `status: ${p.name} RUNNING`)
  t.match(status.out, /^stream-1\s+\d+\s+\d+\s+RUNNING\s+0\s+200\s+200/m, 'status shows restarts, /healthz and /readyz')

  const again = await run(['up'], env, 20_000)
  t.match(again.out, /already up/, 'a second up does not start a second system')

  // kill -9: supervisord starts it again on its port, by itself; status counts the restart.
  const victim = services.find((p) => p.name === 'stream-1') as Record
  process.kill(victim.pid, 'SIGKILL')
  const killedAt = Date.now()
  let back = false
  while (!back && Date.now() - killedAt < 30_000) {
    await new Promise((r) => setTimeout(r, 200))
    back = await fetch(`http://127.0.0.1:${victim.port}/readyz`).then((r) => r.ok, () => false)
  }
  t.ok(back, `${victim.name} killed with SIGKILL is back on its port after ${Date.now() - killedAt} ms`)
  const after = await run(['status'], env, 20_000)
  const line = new RegExp(`^${victim.name}\\s+(\\d+)\\s+\\d+\\s+RUNNING\\s+1\\s`, 'm').exec(after.out)
  t.ok(line, `status: ${victim.name} RUNNING with 1 restart\n${after.out}`)
  if (line) {
    t.not(Number(line[1]), victim.pid, 'under a new pid')
    pids.add(Number(line[1]))
  }
  for (const p of (await run(['status'], env, 20_000)).out.matchAll(/^\S+\s+(\d+)\s/gm)) pids.add(Number(p[1]))

  const stopped = await run(['down'], env, 60_000)
  t.equal(stopped.code, 0, `down succeeded\n${stopped.out}`)
  const deadline = Date.now() + 5000
  while ([...pids].some((pid) => !gone(pid)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50))
  t.same([...pids].filter((pid) => !gone(pid)), [], 'no process of ours is left: services, nginx, supervisord, Kafka, Redis')
  t.notOk(fs.existsSync(stateFile), 'state file removed')
  const finally_ = await run(['status'], env, 10_000)
  t.equal(finally_.code, 1, 'status after down reports not running')
})

/**
 * Under make up: the app's stream (any node, through nginx) gets exactly one
 * line per event of a batch posted twice plus twice at once with one
 * Idempotency-Key (through nginx, any activity instance); a ticket asked of
 * one stream node opens a WebSocket on the other, and is spent there.
 */
async function idempotentIngestAndTickets(t: Test, proxy: string, redisUrl: string | undefined, streams: Record[], token: string): Promise<void> {
  if (redisUrl === undefined || streams.length < 2) {
    t.fail(`needs Redis and two stream nodes (${redisUrl}, ${streams.length})`)
    return
  }
  const store = await RedisStore.connect(redisUrl, createLogger('silent', 'up-test'))
  t.teardown(() => store.close())
  const app = await createApp(store, { name: 'up test app', access_level: 'read-write-dm', callback_urls: ['http://127.0.0.1/callback'] })
  const { token: bearer } = await issueBearer(store, app)
  const userId = nextUserId()
  await subscribe(proxy, bearer, { event_type: 'post.create', filter: { user_id: userId }, tag: 'up' })
  const stream = await openHttpStream(proxy, bearer)
  t.teardown(() => stream.close())

  const post = async (events: unknown[], key?: string): Promise<{ status: number; text: string }> => {
    const res = await fetch(`${proxy}/admin/activity/events`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/x-ndjson', ...(key !== undefined ? { 'idempotency-key': key } : {}) },
      body: events.map((e) => JSON.stringify(e)).join('\n')
    })
    return { status: res.status, text: await res.text() }
  }
  const batch = [1, 2, 3].map((n) => sampleEvent('post.create', userId, { text: `up ${n}` }))
  const key = randomUUID()
  const first = await post(batch, key)
  const retried = [await post(batch, key), ...(await Promise.all([post(batch, key), post(batch, key)]))]
  t.equal(first.status, 200, first.text)
  t.same(retried.map((r) => r.text), [first.text, first.text, first.text], 'every retry gets the first answer')
  const barrier = await post([sampleEvent('post.create', userId, { text: 'barrier' })])
  const uuidsOf = (text: string): string[] => (JSON.parse(text) as { data: { event_uuids: string[] } }).data.event_uuids
  const [barrierUuid] = uuidsOf(barrier.text)
  await stream.waitFor((m) => m.some((e) => e.data?.event_uuid === barrierUuid), 30_000)
  t.same(stream.messages.map((m) => m.data?.event_uuid).slice(0, -1), uuidsOf(first.text), 'one stream line per event')

  const [issuer, other] = streams as [Record, Record]
  const asked = await fetch(`http://127.0.0.1:${issuer.port}/2/activity/stream/ticket`, { method: 'POST', headers: { authorization: `Bearer ${bearer}` } })
  const { ticket } = ((await asked.json()) as { data: { ticket: string } }).data
  const open = (node: Record): Promise<{ opened: boolean; code: number; message: string }> =>
    new Promise((resolve, reject) => {
      const ws = new WebSocket(`ws://127.0.0.1:${node.port}/2/activity/stream`, [`ticket.${ticket}`])
      let opened = false
      let message = ''
      ws.on('open', () => {
        opened = true
        // Held a moment: a refusal comes as a message and a close right after the handshake.
        setTimeout(() => ws.close(), 300)
      })
      ws.on('message', (m) => (message = String(m)))
      ws.on('close', (code) => resolve({ opened, code, message }))
      ws.on('error', reject)
    })
  // Accepted: open and closed by us (1005), no error message (an event line the node delivers meanwhile is fine).
  const used = await open(other)
  t.same({ opened: used.opened, code: used.code }, { opened: true, code: 1005 }, `issued by ${issuer.name}, used on ${other.name}`)
  t.notMatch(used.message, /"errors"|Invalid or expired/, `and not refused (${used.message.slice(0, 80) || 'no message'})`)
  t.match(await open(issuer), { code: 4401, message: /Invalid or expired token/ }, `then spent, also for ${issuer.name}`)
}
