import { spawn } from 'node:child_process'
import net from 'node:net'
import path from 'node:path'
import t, { type Test } from 'tap'
import { activityService } from '../../services/activity/service'
import { MemoryStore } from '../../services/common/store/memory'
import { gatewayService } from '../../services/gateway/service'
import { ConnectionRegistry } from '../../services/stream/registry'
import { streamService } from '../../services/stream/service'
import { bearerRequest } from '../support/http'
import { scrapedValue } from '../support/metrics'
import { createIdentity, startTestRuntime } from '../support/runtime'
import { eventually, tempDir } from '../support/util'
import { ingest, nextUserId, openApiErrors, openHttpStream, openWsStream, OPERATOR_TOKEN, problemErrors, sampleEvent, subscribe } from '../support/fixtures/activity'

/** Connection limit, SlowReader, ForceDisconnect (runtime close and SIGTERM), keep-alives, the shared registry. */

const services = [gatewayService, activityService, streamService]
const WAIT = 15_000

/**
 * The module loader this test runs under (tsx, @tapjs/typescript, ...), for a
 * child that runs a .ts entry point: every --import/--require/--loader flag of
 * this process, in either spelling (`--import=x` or `--import x`), plus source
 * maps. Without one, tsx (a dev dependency) is the loader.
 */
function loaderArgs(execArgv: string[] = process.execArgv): string[] {
  const LOADER = /^--(import|require|loader|experimental-loader)$/
  const out: string[] = []
  for (let i = 0; i < execArgv.length; i++) {
    const arg = execArgv[i] as string
    const name = arg.split('=', 1)[0] as string
    if (LOADER.test(name)) {
      out.push(arg)
      if (!arg.includes('=') && i + 1 < execArgv.length) out.push(execArgv[++i] as string)
    } else if (arg === '--enable-source-maps') {
      out.push(arg)
    }
  }
  return out.length > 0 ? out : ['--import=tsx']
}

/** Decodes an HTTP/1.1 chunked body (as far as it goes). */
function dechunk(body: string): string {
  let out = ''
  let rest = body
  for (;;) {
    const i = rest.indexOf('\r\n')
    if (i < 0) return out
    const size = parseInt(rest.slice(0, i), 16)
    if (!Number.isFinite(size) || size === 0) return out
    out += rest.slice(i + 2, i + 2 + size)
    rest = rest.slice(i + 2 + size + 2)
  }
}

t.test('connections per app are limited; one more gets TooManyConnections over HTTP and WebSocket', async (t) => {
  const rt = await startTestRuntime(t, { services, env: { OPERATOR_TOKEN, STREAM_CONNECTIONS_PER_APP: '2' } })
  const id = await createIdentity(rt.ctx.store)
  const other = await createIdentity(rt.ctx.store)
  const first = await openHttpStream(rt.baseUrl, id.bearer)
  t.teardown(() => first.close())
  const second = await openWsStream(rt.baseUrl, id.bearer)
  t.teardown(() => second.close())

  const third = await bearerRequest('GET', `${rt.baseUrl}/2/activity/stream`, id.bearer)
  t.equal(third.status, 429)
  t.equal(third.headers.get('content-type'), 'application/problem+json; charset=utf-8')
  t.match(third.json(), { type: 'https://api.twitter.com/2/problems/streaming-connection', title: 'ConnectionException', connection_issue: 'TooManyConnections', status: 429 })
  t.equal(openApiErrors('ConnectionExceptionProblem', third.json()), undefined)
  const thirdWs = await openWsStream(rt.baseUrl, id.bearer).catch((e: { status: number; body: string }) => e)
  t.match(thirdWs, { status: 429, body: /TooManyConnections/ })

  const otherApp = await openHttpStream(rt.baseUrl, other.bearer)
  t.teardown(() => otherApp.close())
  t.equal(otherApp.status, 200, 'the limit is per application')

  first.close()
  const again = await eventually(async () => {
    const s = await openHttpStream(rt.baseUrl, id.bearer)
    if (s.status === 200) return s
    s.close()
    return undefined
  }, WAIT)
  t.teardown(() => again.close())
  t.equal(again.status, 200, 'a closed connection frees its place')
  t.equal(await scrapedValue(rt.baseUrl, 'stream_connections_refused_total', { reason: 'too-many-connections' }), 2)
})

t.test('a client that stops reading gets SlowReader and is closed; the others keep up', async (t) => {
  const rt = await startTestRuntime(t, { services, env: { OPERATOR_TOKEN, STREAM_SLOW_READER_BYTES: '262144' } })
  const id = await createIdentity(rt.ctx.store)
  const userId = nextUserId()
  await subscribe(rt.baseUrl, id.bearer, { event_type: 'post.create', filter: { user_id: userId } })
  const healthy = await openHttpStream(rt.baseUrl, id.bearer)
  t.teardown(() => healthy.close())

  const port = Number(new URL(rt.baseUrl).port)
  const sock = net.connect(port, '127.0.0.1')
  t.teardown(() => sock.destroy())
  let received = ''
  const onData = (chunk: Buffer): void => {
    received += chunk.toString('utf8')
  }
  sock.on('data', onData)
  sock.write(`GET /2/activity/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${id.bearer}\r\n\r\n`)
  await eventually(() => received.includes('\r\n\r\n'), WAIT)
  t.match(received, /^HTTP\/1\.1 200/)
  sock.pause() // from now on the client reads nothing: the kernel buffers fill, then the server's

  const sent = await floodUntilSlowReader(t, rt.baseUrl, userId, healthy, 'client')

  const ended = new Promise<void>((resolve) => sock.once('close', () => resolve()))
  sock.resume()
  await ended
  const body = dechunk(received.slice(received.indexOf('\r\n\r\n') + 4))
  const lines = body.split('\r\n').filter((l) => l !== '')
  const last = JSON.parse(lines[lines.length - 1] as string) as { errors: Array<Record<string, unknown>> }
  t.match(last, { errors: [{ type: 'https://api.twitter.com/2/problems/operational-disconnect', title: 'Operational Disconnect', disconnect_type: 'SlowReader' }] })
  t.equal(openApiErrors('OperationalDisconnectProblem', last.errors[0]), undefined)
  const events = lines.slice(0, -1)
  t.ok(events.length > 0 && events.length < sent, `the slow client got ${events.length} of ${sent} events before the disconnect`)
  t.ok(events.every((l) => (JSON.parse(l) as { data?: unknown }).data), 'every line before the error is a whole event')
  await eventually(async () => (await scrapedValue(rt.baseUrl, 'stream_connections', { transport: 'http' })) === 1, WAIT)
})

t.test('a WebSocket client that stops reading gets SlowReader and close code 1008; the others keep up', async (t) => {
  const rt = await startTestRuntime(t, { services, env: { OPERATOR_TOKEN, STREAM_SLOW_READER_BYTES: '262144' } })
  const id = await createIdentity(rt.ctx.store)
  const userId = nextUserId()
  await subscribe(rt.baseUrl, id.bearer, { event_type: 'post.create', filter: { user_id: userId } })
  const healthy = await openWsStream(rt.baseUrl, id.bearer)
  t.teardown(() => healthy.close())
  const stalled = await openWsStream(rt.baseUrl, id.bearer)
  t.teardown(() => stalled.close())
  stalled.ws.pause() // the client reads nothing more: the kernel buffers fill, then the server's bufferedAmount grows

  const sent = await floodUntilSlowReader(t, rt.baseUrl, userId, healthy, 'WebSocket')

  stalled.ws.resume()
  t.equal(await stalled.closeCode, 1008, 'closed with policy violation')
  const last = stalled.messages.at(-1) as { errors: Array<Record<string, unknown>> }
  t.match(last, { errors: [{ type: 'https://api.twitter.com/2/problems/operational-disconnect', title: 'Operational Disconnect', disconnect_type: 'SlowReader', detail: /not reading fast enough/ }] })
  t.equal(problemErrors(last.errors[0]), undefined)
  const events = stalled.messages.slice(0, -1)
  t.ok(events.length > 0 && events.length < sent, `the slow client got ${events.length} of ${sent} events before the disconnect`)
  t.ok(events.every((m) => m.data), 'every message before the error is a whole event')
  await eventually(async () => (await scrapedValue(rt.baseUrl, 'stream_connections', { transport: 'websocket' })) === 1, WAIT)
})

t.test('closing the runtime sends ForceDisconnect to every stream and refuses new ones', async (t) => {
  // SHUTDOWN_GRACE 20s: a stream that does not answer the close handshake holds shutdown open for up to 5 s.
  const rt = await startTestRuntime(t, { services, env: { OPERATOR_TOKEN, SHUTDOWN_GRACE: '20s', STREAM_CONNECTIONS_PER_APP: '10' } })
  const id = await createIdentity(rt.ctx.store)
  const viaHttp = await openHttpStream(rt.baseUrl, id.bearer)
  const viaWs = await openWsStream(rt.baseUrl, id.bearer)
  // This client stops reading: it never acknowledges the close, so the server keeps listening while it waits.
  const stalled = await openWsStream(rt.baseUrl, id.bearer)
  stalled.ws.pause()
  const closing = rt.close()
  await viaHttp.ended
  await viaWs.ended

  // Shutdown is under way (two streams got their goodbye) and the server still answers: new streams are refused.
  const refused = await bearerRequest('GET', `${rt.baseUrl}/2/activity/stream`, id.bearer)
  t.equal(refused.status, 503, refused.text)
  t.match(refused.json(), { type: 'about:blank', status: 503, detail: /shutting down/ })
  t.equal(problemErrors(refused.json()), undefined)
  const refusedWs = await openWsStream(rt.baseUrl, id.bearer).catch((e: { status: number; body: string }) => e)
  t.match(refusedWs, { status: 503, body: /shutting down/ }, 'the WebSocket upgrade is refused too')
  t.ok((await scrapedValue(rt.baseUrl, 'stream_connections_refused_total', { reason: 'shutting-down' })) >= 2, 'counted as refused while shutting down')
  stalled.ws.resume()
  await closing
  await stalled.ended
  t.match(stalled.messages.at(-1), { errors: [{ disconnect_type: 'ForceDisconnect' }] }, 'the stalled client gets its goodbye once it reads')
  for (const [name, client] of [['http', viaHttp], ['websocket', viaWs]] as const) {
    const last = client.messages[client.messages.length - 1]
    t.match(last, { errors: [{ type: 'https://api.twitter.com/2/problems/operational-disconnect', disconnect_type: 'ForceDisconnect' }] }, name)
  }
  t.match(viaHttp.raw(), /\r\n$/, 'the error line is a whole line')
  t.equal(await viaWs.closeCode, 1001, 'WebSocket closes with going-away')
})

t.test('SIGTERM: a stream process sends ForceDisconnect and exits cleanly', async (t) => {
  const dir = tempDir(t)
  const store = await MemoryStore.open(path.join(dir, 'state'))
  const id = await createIdentity(store)
  await store.close()
  t.same(loaderArgs(['--import', 'tsx', '--inspect=0', '--enable-source-maps']), ['--import', 'tsx', '--enable-source-maps'], 'both spellings of a loader flag are kept')
  t.same(loaderArgs(['--import=@tapjs/processinfo/import', '--loader=@tapjs/typescript']), ['--import=@tapjs/processinfo/import', '--loader=@tapjs/typescript'])
  const child = spawn(process.execPath, [...loaderArgs(), path.resolve(__dirname, '../../services/stream/main.ts')], {
    env: { ...process.env, DATA_DIR: dir, PORT: '0', SANDBOX_PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent', OPERATOR_TOKEN, KAFKA_BROKERS: '', REDIS_URL: '', SHUTDOWN_GRACE: '5s' },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  t.teardown(() => {
    if (child.exitCode === null) child.kill('SIGKILL')
  })
  let out = ''
  let err = ''
  child.stdout.on('data', (c: Buffer) => (out += c.toString()))
  child.stderr.on('data', (c: Buffer) => (err += c.toString()))
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
  // A child that dies while starting (a missing loader, a crash) fails the test at once, with its stderr.
  const diedEarly = exited.then((code) => {
    throw new Error(`the stream process exited (${String(code)}) before it listened:\n${err}`)
  })
  const listening = eventually(() => /\{base_url\} and \{ads_url\}: (http:\/\/\S+)/.exec(out)?.[1], 60_000, 50)
  const baseUrl = await Promise.race([listening, diedEarly])
  diedEarly.catch(() => undefined)
  const viaHttp = await openHttpStream(baseUrl, id.bearer)
  const viaWs = await openWsStream(baseUrl, id.bearer)
  child.kill('SIGTERM')
  await Promise.all([viaHttp.ended, viaWs.ended])
  t.match(viaHttp.messages.at(-1), { errors: [{ disconnect_type: 'ForceDisconnect' }] })
  t.match(viaWs.messages.at(-1), { errors: [{ disconnect_type: 'ForceDisconnect' }] })
  t.equal(await exited, 0, 'the process exits 0 after its graceful shutdown')
})

/**
 * The mean interval between observed keep-alives. The server sends one when a
 * stream has been idle for 3/4 of the interval, checking every quarter of it,
 * so the true gaps lie in [0.75, 1] x interval plus timer delay; the mean
 * over several gaps damps the delay of any single delivery.
 */
function meanGap(at: number[]): number {
  return ((at.at(-1) as number) - (at[0] as number)) / (at.length - 1)
}

t.test('idle streams get keep-alives: bare \\r\\n over HTTP, pings over WebSocket', async (t) => {
  const interval = 200
  const rt = await startTestRuntime(t, { services, env: { OPERATOR_TOKEN, STREAM_KEEPALIVE: `${interval}ms` } })
  const id = await createIdentity(rt.ctx.store)
  const viaHttp = await openHttpStream(rt.baseUrl, id.bearer)
  t.teardown(() => viaHttp.close())
  const viaWs = await openWsStream(rt.baseUrl, id.bearer)
  t.teardown(() => viaWs.close())
  const wanted = 8
  await eventually(() => viaHttp.keepAlives.length >= wanted && viaWs.keepAlives.length >= wanted, WAIT)
  for (const [name, at] of [['http', viaHttp.keepAlives.slice(0, wanted)], ['websocket', viaWs.keepAlives.slice(0, wanted)]] as const) {
    const mean = meanGap(at)
    // Never more often than the idle threshold allows; the upper bound leaves room for a loaded machine.
    t.ok(mean >= interval * 0.6, `${name}: mean gap ${mean.toFixed(0)} ms is not shorter than the idle threshold`)
    t.ok(mean <= interval * 2.5, `${name}: mean gap ${mean.toFixed(0)} ms follows the ${interval} ms interval`)
  }
  t.equal(viaHttp.messages.length, 0, 'keep-alives are bare \\r\\n, not JSON')
  t.match(viaHttp.raw(), /^(\r\n)+$/)
})

t.test('the registry counts connections across nodes; a dead node\'s expire', async (t) => {
  const store = await MemoryStore.open(path.join(tempDir(t), 'state'))
  t.teardown(() => store.close())
  const nodeA = new ConnectionRegistry(store, 'node-a', 2, 300)
  const nodeB = new ConnectionRegistry(store, 'node-b', 2, 300)
  const a1 = await nodeA.acquire('app', 'c1')
  const b1 = await nodeB.acquire('app', 'c2')
  t.ok(a1 && b1)
  t.equal(await nodeB.acquire('app', 'c3'), undefined, 'the limit holds across nodes')
  t.ok(await nodeB.acquire('other-app', 'c4'), 'per application')
  // node-a keeps renewing its connection; node-b dies (stops renewing).
  const renew = setInterval(() => void nodeA.renew([a1 as NonNullable<typeof a1>]), 100)
  t.teardown(() => clearInterval(renew))
  // node-b's entry lives 300 ms; node-a renews every 100 ms, so once the count drops it is node-b's that went.
  await eventually(async () => (await nodeA.count('app')) === 1, WAIT)
  t.equal(await nodeA.count('app'), 1, 'node-b\'s entry expired, node-a\'s was renewed')
  const a2 = await nodeA.acquire('app', 'c5')
  t.ok(a2, 'the dead node\'s place is free again')
  t.equal(await nodeA.acquire('app', 'c6'), undefined)
  await nodeA.release(a2 as NonNullable<typeof a2>)
  t.equal(await nodeA.count('app'), 1)
})

/**
 * Ingests bursts of large events until the stalled client is cut off as a
 * SlowReader, then one more batch, checking the healthy client got every
 * event. Bursts of 600 KB: above the 256 KB threshold, below the immediate
 * cut-off (4x), so the healthy client (in this same process) drains each
 * burst within the grace time while the stalled one cannot. Returns how many
 * events were sent.
 */
async function floodUntilSlowReader(t: Test, baseUrl: string, userId: string, healthy: { messages: unknown[] }, stalled: string): Promise<number> {
  const text = 'x'.repeat(20_000)
  let sent = 0
  for (let batch = 0; batch < 100 && (await scrapedValue(baseUrl, 'stream_disconnects_total', { reason: 'SlowReader' })) === 0; batch++) {
    const res = await ingest(baseUrl, Array.from({ length: 30 }, () => sampleEvent('post.create', userId, { text })))
    if (res.status !== 200) t.fail(res.text)
    sent += 30
    await eventually(() => healthy.messages.length >= sent, WAIT)
  }
  t.equal(await scrapedValue(baseUrl, 'stream_disconnects_total', { reason: 'SlowReader' }), 1, `the stalled ${stalled} was disconnected (after ${sent} events)`)
  // One more batch after the disconnect: the healthy client gets it, the slow one's stream has ended.
  await ingest(baseUrl, Array.from({ length: 5 }, () => sampleEvent('post.create', userId, { text })))
  sent += 5
  await eventually(() => healthy.messages.length >= sent, WAIT)
  t.equal(healthy.messages.length, sent, 'the healthy client received every event')
  return sent
}
