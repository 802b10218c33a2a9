import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import t, { type Test } from 'tap'
import WebSocket, { WebSocketServer } from 'ws'
import { createLogger } from '../../services/common/logger'
import { loadRoutes, routeFor, servicesOf, startProxy, upstreamEnvName, type RouteTable } from '../../scripts/proxy'
import { freePort } from '../../scripts/local-infra'
import { tempDir } from '../support/util'

/** The reverse proxy of `make up` and the compose stack, against real upstream servers on loopback. */

const routes = loadRoutes()

interface Upstream {
  url: string
  requests: Array<{ method: string; url: string; headers: http.IncomingHttpHeaders; body: string }>
}

/** An upstream that answers JSON describing the request, or runs `handle` when given. */
async function upstream(t: Test, name: string, handle?: http.RequestListener): Promise<Upstream> {
  const requests: Upstream['requests'] = []
  const server = http.createServer(
    handle ??
      ((req, res) => {
        let body = ''
        req.on('data', (c: Buffer) => (body += c.toString()))
        req.on('end', () => {
          requests.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body })
          res.writeHead(201, { 'content-type': 'application/json', 'x-upstream': name })
          res.end(JSON.stringify({ upstream: name, url: req.url, body }))
        })
      })
  )
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()))
  t.teardown(() => new Promise<void>((r) => server.close(() => r())))
  const address = server.address() as { port: number }
  return { url: `http://127.0.0.1:${address.port}`, requests }
}

async function proxyWith(t: Test, upstreams: Record<string, string[]>, table: RouteTable = routes) {
  const running = await startProxy({
    routes: table,
    upstreams,
    problemBase: 'https://api.example.com/2/problems',
    sandboxHosts: ['sandbox.example.test'],
    log: createLogger('silent', 'proxy'),
    host: '127.0.0.1',
    port: 0,
    sandboxPort: 0
  })
  t.teardown(() => running.close())
  return { base: `http://127.0.0.1:${running.ports.api}`, sandbox: `http://127.0.0.1:${running.ports.sandbox}` }
}

t.test('the route table sends each path family to its owner', async (t) => {
  const cases: Array<[string, string]> = [
    ['/oauth/request_token', 'gateway'],
    ['/oauth2/token', 'gateway'],
    ['/1.1/account/verify_credentials.json', 'gateway'],
    ['/2/oauth2/token', 'gateway'],
    ['/2/media/upload', 'gateway'],
    ['/12/accounts/18ce54d4x5t/campaigns?count=5', 'gateway'],
    ['/5/accounts', 'gateway'],
    ['/12/accounts/18ce54d4x5t/account_history?entity_type=CAMPAIGN', 'account-history'],
    ['/2/webhooks', 'webhooks'],
    ['/2/webhooks/123/crc', 'webhooks'],
    ['/2/account_activity/webhooks/1/subscriptions/all', 'webhooks'],
    ['/admin/webhooks/1/deliveries', 'webhooks'],
    ['/2/activity/subscriptions', 'activity'],
    ['/admin/activity/events', 'activity'],
    ['/2/activity/stream?backfill_minutes=1', 'stream'],
    ['/admin/apps', 'gateway'],
    ['/healthz', 'gateway'],
    // Prefixes match whole segments only.
    ['/2/webhooksfoo', 'gateway'],
    ['/oauthx/whatever', 'gateway']
  ]
  for (const [p, service] of cases) t.equal(routeFor(routes, 'api', p), service, `${p} -> ${service}`)
  t.equal(routeFor(routes, 'sandbox', '/12/accounts/abc/campaigns'), 'gateway-sandbox')
  t.equal(routeFor(routes, 'sandbox', '/12/accounts/abc/account_history'), 'account-history')
  t.same(servicesOf(routes), ['account-history', 'activity', 'gateway', 'gateway-sandbox', 'stream', 'webhooks'])
  t.equal(upstreamEnvName('gateway-sandbox'), 'GATEWAY_SANDBOX_UPSTREAM', 'the variable names the compose file uses')
})

t.test('a malformed route table is refused', async (t) => {
  const dir = tempDir(t)
  const file = path.join(dir, 'routes.json')
  fs.writeFileSync(file, JSON.stringify({ hosts: { api: { default: 'gateway', routes: [{ prefix: '/a', pattern: '^/a', service: 'x' }] }, sandbox: { default: 'g', routes: [] } } }))
  t.throws(() => loadRoutes(file), /exactly one of prefix or pattern/)
  fs.writeFileSync(file, JSON.stringify({ hosts: { api: { default: 'gateway', routes: [] } } }))
  t.throws(() => loadRoutes(file), /hosts.sandbox needs/)
})

t.test('requests reach the owning service with method, path, query, headers and body', async (t) => {
  const gateway = await upstream(t, 'gateway')
  const webhooks = await upstream(t, 'webhooks')
  const { base } = await proxyWith(t, { gateway: [gateway.url], webhooks: [webhooks.url] })
  const res = await fetch(`${base}/2/webhooks?url=https%3A%2F%2Fx.test%2Fhook`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer abc' },
    body: JSON.stringify({ hello: 'world' })
  })
  t.equal(res.status, 201)
  t.equal(res.headers.get('x-served-by'), 'webhooks')
  t.equal(res.headers.get('x-upstream'), 'webhooks')
  t.same(await res.json(), { upstream: 'webhooks', url: '/2/webhooks?url=https%3A%2F%2Fx.test%2Fhook', body: '{"hello":"world"}' })
  const seen = webhooks.requests[0]
  t.equal(seen?.method, 'POST')
  t.equal(seen?.headers.authorization, 'Bearer abc', 'credentials pass through for the service to verify')
  t.match(seen?.headers.host, /^127\.0\.0\.1:\d+$/, 'the client Host is kept (OAuth signatures cover it)')
  t.equal(seen?.headers['x-forwarded-for'], '127.0.0.1')
  t.equal(gateway.requests.length, 0)
})

t.test('streamed responses are relayed chunk by chunk', async (t) => {
  let finish: (() => void) | undefined
  const stream = await upstream(t, 'stream', (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.write('{"data":1}\r\n')
    finish = () => res.end('{"data":2}\r\n')
  })
  const { base } = await proxyWith(t, { stream: [stream.url] })
  const res = await fetch(`${base}/2/activity/stream`)
  const reader = (res.body as ReadableStream<Uint8Array>).getReader()
  const first = await reader.read()
  t.equal(new TextDecoder().decode(first.value), '{"data":1}\r\n', 'the first chunk arrives while the upstream is still open')
  finish?.()
  let rest = ''
  for (;;) {
    const { value, done } = await reader.read()
    if (done) break
    rest += new TextDecoder().decode(value)
  }
  t.equal(rest, '{"data":2}\r\n')
})

t.test('a stream whose upstream dies mid-response is cut off at the client, so it can reconnect', async (t) => {
  let kill: (() => void) | undefined
  const stream = await upstream(t, 'stream', (req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.write('{"data":1}\r\n')
    // What kill -9 of a stream node does to its sockets: they close with the response unfinished.
    kill = () => req.socket.destroy()
  })
  const { base } = await proxyWith(t, { stream: [stream.url] })
  const res = await fetch(`${base}/2/activity/stream`)
  const reader = (res.body as ReadableStream<Uint8Array>).getReader()
  const first = await reader.read()
  t.equal(new TextDecoder().decode(first.value), '{"data":1}\r\n')
  kill?.()
  // Without the fix the read below never settles; tap's timeout would fail the test, this bounds it sooner.
  const ended = await Promise.race([
    reader.read().then(
      (r) => (r.done ? 'ended' : 'more data'),
      () => 'failed'
    ),
    new Promise<string>((resolve) => setTimeout(() => resolve('still open after 5 s'), 5000).unref())
  ])
  t.equal(ended, 'failed', 'the client sees its response fail (not a clean end it would take for the stream closing normally)')
})

t.test('a refusing upstream is skipped; with none left the answer is a 502 in the path’s interface shape', async (t) => {
  const live = await upstream(t, 'stream-2')
  const dead = `http://127.0.0.1:${await freePort()}`
  const { base } = await proxyWith(t, { stream: [dead, live.url], gateway: [dead] })
  for (let i = 0; i < 4; i++) {
    const res = await fetch(`${base}/2/activity/stream`)
    t.equal(res.status, 201, `request ${i} served by the live node`)
    await res.arrayBuffer()
  }
  const v2 = await fetch(`${base}/2/oauth2/token`)
  t.equal(v2.status, 502)
  t.equal(v2.headers.get('content-type'), 'application/problem+json')
  t.match(await v2.json(), { type: 'about:blank', status: 502, detail: 'The gateway service is unavailable.' })
  const ads = await fetch(`${base}/12/accounts/x/campaigns?count=1`)
  t.equal(ads.status, 502)
  t.match(await ads.json(), { errors: [{ message: 'The gateway service is unavailable.' }], request: { params: {} } })
  const classic = await fetch(`${base}/oauth/request_token`, { method: 'POST' })
  t.equal(classic.status, 502)
  t.same(await classic.json(), { errors: [{ code: 130, message: 'Over capacity' }] })
})

t.test('a service without upstream gets 503, and the sandbox host has its own table', async (t) => {
  const sandboxGateway = await upstream(t, 'gateway-sandbox')
  const { base, sandbox } = await proxyWith(t, { 'gateway-sandbox': [sandboxGateway.url] })
  const missing = await fetch(`${base}/2/webhooks`)
  t.equal(missing.status, 503)
  t.match(await missing.json(), { detail: 'No upstream configured for service webhooks.' })
  const viaPort = await fetch(`${sandbox}/12/accounts/abc/campaigns`)
  t.equal(viaPort.headers.get('x-served-by'), 'gateway-sandbox')
  await viaPort.arrayBuffer()
  const viaHost = await new Promise<http.IncomingMessage>((resolve, reject) => {
    http.get(`${base}/12/accounts/abc/campaigns`, { headers: { host: 'sandbox.example.test' } }, resolve).on('error', reject)
  })
  viaHost.resume()
  t.equal(viaHost.headers['x-served-by'], 'gateway-sandbox', 'the sandbox public host on the api port uses the sandbox table')
})

t.test('WebSocket upgrades are piped through', async (t) => {
  const server = http.createServer()
  const wss = new WebSocketServer({ server })
  wss.on('connection', (ws, req) => {
    ws.send(`hello ${req.url}`)
    ws.on('message', (m) => ws.send(`echo ${m.toString()}`))
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()))
  t.teardown(() => {
    for (const c of wss.clients) c.terminate()
    wss.close()
    return new Promise<void>((r) => server.close(() => r()))
  })
  const { base } = await proxyWith(t, { stream: [`http://127.0.0.1:${(server.address() as { port: number }).port}`] })
  const ws = new WebSocket(`${base.replace('http', 'ws')}/2/activity/stream?x=1`)
  const messages: string[] = []
  await new Promise<void>((resolve, reject) => {
    ws.on('message', (m) => {
      messages.push(m.toString())
      if (messages.length === 1) ws.send('ping')
      if (messages.length === 2) resolve()
    })
    ws.on('error', reject)
  })
  ws.close()
  t.same(messages, ['hello /2/activity/stream?x=1', 'echo ping'])
})
