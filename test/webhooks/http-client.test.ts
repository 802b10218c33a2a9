import http from 'node:http'
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import { type HttpOutcome, WebhookClient } from '../../services/webhooks/http-client'
import { type Gate, gate } from '../support/receivers'
import { eventually } from '../support/util'

/**
 * The webhooks HTTP client on its own, against a loopback server that holds
 * requests until the test lets them go: lanes (one pool and cap per
 * webhook), the separate dispatcher for checks, queue time kept out of the
 * timeout, idle pools closed.
 */

interface HoldingServer {
  url: string
  /** Requests in flight per path. */
  inFlight: Map<string, number>
  maxInFlight: Map<string, number>
  /** Requests to paths starting with /held wait for this gate. */
  held: Gate
  /** Requests to exactly `path` wait for the returned gate. */
  hold(path: string): Gate
  userAgents: string[]
}

async function holdingServer(t: Test): Promise<HoldingServer> {
  const gates = new Map<string, Gate>()
  const hold = (path: string): Gate => {
    const g = gate()
    gates.set(path, g)
    return g
  }
  const state: HoldingServer = { url: '', inFlight: new Map(), maxInFlight: new Map(), held: gate(), hold, userAgents: [] }
  const server = http.createServer((req, res) => {
    const path = new URL(req.url ?? '/', 'http://x').pathname
    state.userAgents.push(req.headers['user-agent'] ?? '')
    const now = (state.inFlight.get(path) ?? 0) + 1
    state.inFlight.set(path, now)
    state.maxInFlight.set(path, Math.max(now, state.maxInFlight.get(path) ?? 0))
    const answer = (): void => {
      state.inFlight.set(path, (state.inFlight.get(path) ?? 1) - 1)
      res.end('{}')
    }
    req.resume()
    const waitFor = gates.get(path)?.promise ?? (path.startsWith('/held') ? state.held.promise : undefined)
    if (waitFor) void waitFor.then(answer)
    else answer()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    server.closeAllConnections()
    return new Promise<void>((resolve) => server.close(() => resolve()))
  })
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return state
}

function client(t: Test, options: Partial<ConstructorParameters<typeof WebhookClient>[0]> = {}): WebhookClient {
  const c = new WebhookClient({ policy: { allowInsecure: true }, timeoutMs: 5000, connectionsPerLane: 2, ...options })
  t.teardown(() => c.close())
  return c
}

const ok = (out: HttpOutcome) => out.kind === 'response' && out.status === 200

t.test('each lane has its own cap on a shared origin, and checks do not queue behind lanes', async (t) => {
  const server = await holdingServer(t)
  const c = client(t)
  const sends = ['a', 'b'].flatMap((lane) => Array.from({ length: 4 }, () => c.send('POST', `${server.url}/held-${lane}`, { body: '{}', lane })))
  await eventually(() => server.inFlight.get('/held-a') === 2 && server.inFlight.get('/held-b') === 2, 5000)
  t.pass('both lanes reached their cap of two on the one origin')
  t.ok(ok(await c.send('GET', `${server.url}/check`)), 'a check (no lane) is answered while both lanes are full')
  t.equal((server.inFlight.get('/held-a') ?? 0) + (server.inFlight.get('/held-b') ?? 0), 4, 'the lanes were still full')
  server.held.open()
  const outcomes = await Promise.all(sends)
  t.ok(outcomes.every(ok), 'every queued request went through')
  t.equal(server.maxInFlight.get('/held-a'), 2, 'never more than the cap per lane')
  t.equal(server.maxInFlight.get('/held-b'), 2)
  t.ok(server.userAgents.every((ua) => /^activity-gateway-webhooks\/\d+\.\d+\.\d+/.test(ua)), `User-Agent ${server.userAgents[0]}`)
  t.ok(server.userAgents.length === 9)
})

t.test('time spent waiting for a lane slot does not count against the timeout', async (t) => {
  const server = await holdingServer(t)
  const timeoutMs = 2000
  const c = client(t, { timeoutMs, connectionsPerLane: 1 })
  const first = server.hold('/one')
  const second = server.hold('/two')
  const sent = Date.now()
  const firstOut = c.send('POST', `${server.url}/one`, { body: '{}', lane: 'w' })
  const secondOut = c.send('POST', `${server.url}/two`, { body: '{}', lane: 'w' })
  await eventually(() => server.inFlight.get('/one') === 1, 5000)
  // Each request spends 1.2 s on the wire (within the 2 s timeout); the second also 1.2 s queued before that.
  await eventually(() => Date.now() - sent >= 1200, 5000)
  first.open()
  t.ok(ok(await firstOut))
  await eventually(() => server.inFlight.get('/two') === 1, 5000)
  await eventually(() => Date.now() - sent >= 2400, 5000)
  second.open()
  const out = await secondOut
  t.ok(ok(out), `answered ${Date.now() - sent} ms after send(), longer than the timeout, but well within it after getting the slot: ${JSON.stringify(out).slice(0, 120)}`)
})

t.test('idle lane pools are closed, and a forgotten lane at once', async (t) => {
  const server = await holdingServer(t)
  const c = client(t, { idlePoolMs: 100 })
  t.ok(ok(await c.send('POST', `${server.url}/x`, { body: '{}', lane: 'idle' })))
  t.equal(c.openLanes, 1)
  await eventually(() => c.openLanes === 0, 5000)
  t.pass('closed after being idle')
  const again = client(t)
  t.ok(ok(await again.send('POST', `${server.url}/x`, { body: '{}', lane: 'deleted' })))
  await again.forget('deleted')
  t.equal(again.openLanes, 0, 'forget closes the lane (a deleted webhook)')
  t.ok(ok(await again.send('POST', `${server.url}/x`, { body: '{}', lane: 'deleted' })), 'and a later request opens a new one')
})

t.test('WEBHOOK_TIMEOUT bounds the whole request: no answer, or an answer whose body trickles past it', async (t) => {
  const sockets = new Set<import('node:net').Socket>()
  const server = http.createServer((req, res) => {
    req.resume()
    if (req.url === '/silent') return // never answers
    if (req.url === '/trickle') {
      // Headers at once, then a byte every 100 ms: each chunk well inside any idle timeout.
      res.writeHead(200, { 'content-type': 'text/plain' })
      const timer = setInterval(() => res.write('x'), 100)
      res.on('close', () => clearInterval(timer))
      return
    }
    res.end('{}')
  })
  server.on('connection', (s) => {
    sockets.add(s)
    s.on('close', () => sockets.delete(s))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    for (const s of sockets) s.destroy()
    return new Promise<void>((resolve) => server.close(() => resolve()))
  })
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const timeoutMs = 600
  const c = client(t, { timeoutMs })
  for (const [path, lane] of [['/silent', 'w1'], ['/trickle', 'w2'], ['/silent', undefined]] as const) {
    const sent = Date.now()
    const out = await c.send('POST', `${url}${path}`, { body: '{}', ...(lane ? { lane } : {}), maxBodyBytes: 1024 })
    const took = Date.now() - sent
    t.same({ kind: out.kind, failure: out.kind === 'error' ? out.failure : undefined }, { kind: 'error', failure: 'timeout' }, `${path} (${lane ?? 'check'}): a timeout`)
    t.equal(out.kind === 'error' ? out.message : '', `no answer within ${timeoutMs} ms`)
    t.ok(took >= timeoutMs - 50 && took < timeoutMs + 1500, `after about the timeout: ${took} ms`)
  }
  // The lane still works after its request was cut off, and a quick answer leaves no timer behind to fire.
  const fine = await c.send('POST', `${url}/fine`, { body: '{}', lane: 'w1' })
  t.ok(ok(fine), 'the next request of the lane is answered')
  await new Promise((r) => setTimeout(r, timeoutMs + 200))
  t.ok(ok(fine), 'and stays a success after its deadline would have passed')
})
