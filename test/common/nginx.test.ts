import fs from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import path from 'node:path'
import t, { type Test } from 'tap'
import WebSocket, { WebSocketServer } from 'ws'
import { composeConfigPath, composeNginxConfig, loadRoutes, nginxConfig, routeFor, servicesOf, type NginxSite } from '../../scripts/nginx'
import { freePort, launch, terminate } from '../../scripts/local-infra'
import { tempDir } from '../support/util'

/**
 * The front proxy of `make up` and the compose stack: Debian's nginx run on
 * the configuration scripts/nginx.ts generates from deploy/routes.json,
 * against real upstream servers on loopback. Failover is checked the way it
 * happens to a killed instance: a closed port, and an instance that takes a
 * request and dies before answering.
 */

const routes = loadRoutes()
const NGINX = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => fs.existsSync(p))

interface Upstream {
  name: string
  address: string
  requests: Array<{ method: string; url: string; headers: http.IncomingHttpHeaders; body: string }>
  server: http.Server
  /** Stops listening and cuts every connection: a killed instance. */
  kill(): Promise<void>
}

type Behaviour = 'answer' | 'die-after-reading'

/** An upstream that answers JSON naming itself, or ('die-after-reading') reads the whole request and resets the connection. */
async function upstream(t: Test, name: string, behaviour: Behaviour = 'answer', handle?: http.RequestListener): Promise<Upstream> {
  const requests: Upstream['requests'] = []
  const server = http.createServer(
    handle ??
      ((req, res) => {
        let body = ''
        req.on('data', (c: Buffer) => (body += c.toString()))
        req.on('end', () => {
          requests.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body })
          if (behaviour === 'die-after-reading') return void req.socket.resetAndDestroy()
          res.writeHead(201, { 'content-type': 'application/json' })
          res.end(JSON.stringify({ upstream: name, url: req.url }))
        })
      })
  )
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()))
  const kill = (): Promise<void> =>
    new Promise((r) => {
      server.close(() => r())
      server.closeAllConnections()
    })
  t.teardown(() => (server.listening ? kill() : undefined))
  return { name, address: `127.0.0.1:${(server.address() as net.AddressInfo).port}`, requests, server, kill }
}

function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect({ port, host: '127.0.0.1' })
    s.once('connect', () => (s.destroy(), resolve(true)))
    s.once('error', () => resolve(false))
  })
}

/** Runs nginx on the generated config with `upstreams`; returns its api and sandbox base URLs and the config text. */
async function nginxWith(t: Test, upstreams: Record<string, string[]>, extra: Partial<NginxSite> = {}) {
  const dir = tempDir(t, 'gw-nginx-')
  const [api, sandbox] = [await freePort(), await freePort()]
  const site: NginxSite = {
    upstreams,
    listen: { api: `127.0.0.1:${api}`, sandbox: `127.0.0.1:${sandbox}` },
    sandboxHosts: ['sandbox.example.test'],
    problemBase: 'https://api.example.com/2/problems',
    bodyLimitBytes: 5 * 1024 * 1024,
    streamKeepAliveMs: 20_000,
    ...extra
  }
  const text = nginxConfig(routes, site, { pidFile: path.join(dir, 'nginx.pid'), errorLog: path.join(dir, 'error.log'), accessLog: path.join(dir, 'access.log'), tempDir: dir, ...(process.geteuid?.() === 0 ? { user: 'root' } : {}) })
  const conf = path.join(dir, 'nginx.conf')
  fs.writeFileSync(conf, text)
  const nginx = launch(NGINX as string, ['-p', dir, '-c', conf, '-e', path.join(dir, 'error.log')], { tied: true })
  let stderr = ''
  nginx.child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()))
  t.teardown(() => terminate(nginx, 3000))
  const deadline = Date.now() + 10_000
  while (!(await listening(api)) || !(await listening(sandbox))) {
    if (Date.now() > deadline || nginx.child.exitCode !== null) throw new Error(`nginx did not start: ${stderr}${fs.existsSync(path.join(dir, 'error.log')) ? fs.readFileSync(path.join(dir, 'error.log'), 'utf8') : ''}`)
    await new Promise((r) => setTimeout(r, 50))
  }
  return { base: `http://127.0.0.1:${api}`, sandbox: `http://127.0.0.1:${sandbox}`, text, accessLog: path.join(dir, 'access.log') }
}

/** One upstream per service of the table, each answering its own name. */
async function oneEach(t: Test): Promise<Record<string, Upstream>> {
  const out: Record<string, Upstream> = {}
  for (const service of servicesOf(routes)) out[service] = await upstream(t, service)
  return out
}

const addresses = (ups: Record<string, Upstream | Upstream[]>): Record<string, string[]> =>
  Object.fromEntries(Object.entries(ups).map(([k, v]) => [k, (Array.isArray(v) ? v : [v]).map((u) => u.address)]))

async function servedBy(url: string, init?: RequestInit): Promise<{ status: number; upstream?: string; type: string | null; body: string }> {
  const res = await fetch(url, init)
  const body = await res.text()
  let upstreamName: string | undefined
  try {
    upstreamName = (JSON.parse(body) as { upstream?: string }).upstream
  } catch {
    // not one of ours
  }
  return { status: res.status, type: res.headers.get('content-type'), body, ...(upstreamName ? { upstream: upstreamName } : {}) }
}

t.test('nginx is installed (make deps-system)', async (t) => {
  t.ok(NGINX, 'Debian nginx at /usr/sbin/nginx')
})

t.test('each path family reaches the service the route table names, with the client Host and X-Forwarded-For', { skip: !NGINX }, async (t) => {
  const ups = await oneEach(t)
  const proxy = await nginxWith(t, addresses(ups))
  const cases = [
    '/oauth/request_token', '/oauth2/token', '/1.1/account/verify_credentials.json', '/2/oauth2/token', '/2/media/upload', '/12/accounts/18ce54d4x5t/campaigns?count=5',
    '/5/accounts', '/12/accounts/18ce54d4x5t/account_history?entity_type=CAMPAIGN', '/2/webhooks', '/2/webhooks/123/crc', '/2/account_activity/webhooks/1/subscriptions/all',
    '/admin/webhooks/1/deliveries', '/2/activity/subscriptions', '/admin/activity/events', '/admin/activity/stats', '/admin/apps', '/healthz', '/2/webhooksfoo', '/oauthx/whatever', '/1x1/a'
  ]
  for (const p of cases) {
    const res = await servedBy(`${proxy.base}${p}`)
    t.equal(res.upstream, routeFor(routes, 'api', p), `${p} -> ${routeFor(routes, 'api', p)}`)
  }
  t.equal((await servedBy(`${proxy.sandbox}/12/accounts/abc/campaigns`)).upstream, 'gateway-sandbox', 'sandbox listener: the gateway sandbox')
  t.equal((await servedBy(`${proxy.sandbox}/12/accounts/abc/account_history`)).upstream, 'account-history', 'sandbox listener: account history')
  // fetch() will not send another Host: a plain request does.
  const onApiPort = await new Promise<string>((resolve, reject) => {
    const req = http.get(`${proxy.base}/12/accounts/abc/campaigns`, { headers: { host: 'sandbox.example.test' } }, (res) => {
      let body = ''
      res.on('data', (c: Buffer) => (body += c.toString()))
      res.on('end', () => resolve(body))
    })
    req.on('error', reject)
  })
  t.equal((JSON.parse(onApiPort) as { upstream: string }).upstream, 'gateway-sandbox', 'the sandbox host on the api port uses the sandbox table')

  const seen = ups.gateway?.requests.find((r) => r.url === '/1.1/account/verify_credentials.json')
  t.equal(seen?.headers.host, new URL(proxy.base).host, 'the Host the client sent reaches the service (OAuth 1.0a signs it)')
  t.equal(seen?.headers['x-forwarded-for'], '127.0.0.1')
  t.equal(seen?.headers['x-forwarded-host'], new URL(proxy.base).host)
  t.match(fs.readFileSync(proxy.accessLog, 'utf8'), /"GET \/2\/webhooks HTTP\/1.1" 201 \d+ [\d.]+ upstream=127\.0\.0\.1:\d+/, 'the access log names the instance that answered')
})

t.test('a killed instance costs no request: refused connections fail over on every route, POST included', { skip: !NGINX }, async (t) => {
  const ups = await oneEach(t)
  const second = { activity: await upstream(t, 'activity-2'), gateway: await upstream(t, 'gateway-2'), webhooks: await upstream(t, 'webhooks-2') }
  const proxy = await nginxWith(t, addresses({ ...ups, activity: [ups.activity as Upstream, second.activity], gateway: [ups.gateway as Upstream, second.gateway], webhooks: [ups.webhooks as Upstream, second.webhooks] }))
  await Promise.all([ups.activity?.kill(), ups.gateway?.kill(), ups.webhooks?.kill()])
  const statuses: number[] = []
  for (let i = 0; i < 6; i++) {
    for (const [method, p] of [['POST', '/admin/activity/events'], ['POST', '/2/activity/subscriptions'], ['POST', '/12/accounts/a/campaigns'], ['GET', '/2/webhooks'], ['DELETE', '/2/webhooks/1']] as const) {
      const res = await servedBy(`${proxy.base}${p}`, { method, ...(method === 'POST' ? { body: `{"n":${i}}`, headers: { 'content-type': 'application/json' } } : {}) })
      statuses.push(res.status)
      if (res.status !== 201) t.fail(`${method} ${p}: ${res.status} ${res.body}`)
    }
  }
  t.same([...new Set(statuses)], [201], `all ${statuses.length} requests answered by the surviving instances`)
  t.ok(second.activity.requests.every((r) => r.body.startsWith('{"n":')), 'bodies arrive whole after a failover')
})

t.test('an instance that dies holding a request: only event ingest (idempotent) is replayed elsewhere', { skip: !NGINX }, async (t) => {
  const ups = await oneEach(t)
  const dying = await upstream(t, 'activity-1', 'die-after-reading')
  const alive = ups.activity as Upstream
  const proxy = await nginxWith(t, addresses({ ...ups, activity: [dying, alive] }))
  // nginx takes a failed instance out for fail_timeout (2 s, counted in whole seconds): wait that out so
  // the dying instance gets a request of each route.
  const outcomes: Record<string, number[]> = { '/admin/activity/events': [], '/2/activity/subscriptions': [] }
  for (const p of Object.keys(outcomes)) {
    for (let i = 0; i < 10 && !dying.requests.some((r) => r.url === p); i++) {
      const res = await servedBy(`${proxy.base}${p}`, { method: 'POST', body: `{"event_uuid":"e${i}"}`, headers: { 'content-type': 'application/json' } })
      outcomes[p]?.push(res.status)
      if (res.status === 502) {
        t.equal(res.type, 'application/problem+json', 'a failure nginx reports itself has the interface shape')
        t.match(JSON.parse(res.body), { status: 502, title: 'Bad Gateway', type: 'about:blank' })
      }
    }
    if (p === '/admin/activity/events') await new Promise((r) => setTimeout(r, 3200))
  }
  const saw = (p: string): number => dying.requests.filter((r) => r.url === p).length
  const replayed = alive.requests.filter((r) => r.url === '/admin/activity/events').map((r) => r.body)
  t.equal(saw('/admin/activity/events'), 1, 'the dying instance took an ingest POST')
  t.equal(outcomes['/admin/activity/events']?.at(-1), 201, 'that POST was answered: replayed on the other instance')
  t.ok(replayed.includes(dying.requests[0]?.body ?? '-'), 'the other instance received the same body')
  t.equal(saw('/2/activity/subscriptions'), 1, 'the dying instance took a subscription POST')
  t.equal(outcomes['/2/activity/subscriptions']?.at(-1), 502, 'not replayed (not idempotent): 502 for the client to decide')
  t.equal(alive.requests.filter((r) => r.url === '/2/activity/subscriptions').length, outcomes['/2/activity/subscriptions']!.length - 1, 'the other instance never saw it')
})

t.test("ingest backpressure (503 + Retry-After, the same from every instance) reaches the publisher and takes no instance out", { skip: !NGINX }, async (t) => {
  const ups = await oneEach(t)
  const full: http.RequestListener = (req, res) => {
    req.resume()
    req.on('end', () => {
      res.writeHead(503, { 'content-type': 'application/problem+json', 'retry-after': '2' })
      res.end(JSON.stringify({ type: 'about:blank', title: 'Service Unavailable', status: 503, detail: 'backlog full' }))
    })
  }
  const first = await upstream(t, 'activity-1', 'answer', full)
  const second = await upstream(t, 'activity-2', 'answer', full)
  const proxy = await nginxWith(t, addresses({ ...ups, activity: [first, second] }))
  const answers: Array<{ status: number; retryAfter: string | null }> = []
  for (let i = 0; i < 6; i++) {
    const res = await fetch(`${proxy.base}/admin/activity/events`, { method: 'POST', body: `{"event_uuid":"b${i}"}`, headers: { 'content-type': 'application/json' } })
    await res.text()
    answers.push({ status: res.status, retryAfter: res.headers.get('retry-after') })
  }
  t.same(answers.map((a) => a.status), [503, 503, 503, 503, 503, 503], `every publisher sees the 503, none a 502 of nginx's (${JSON.stringify(answers)})`)
  t.ok(answers.every((a) => a.retryAfter === '2'), 'with its Retry-After')
})

t.test('no instance left: the error has the shape of the path\'s interface', { skip: !NGINX }, async (t) => {
  const ups = await oneEach(t)
  const proxy = await nginxWith(t, addresses(ups))
  for (const u of Object.values(ups)) await u.kill()
  const ads = await servedBy(`${proxy.base}/12/accounts/abc/campaigns`)
  t.equal(ads.status, 502)
  t.match(JSON.parse(ads.body), { errors: [{ code: 'SERVICE_UNAVAILABLE' }], request: { params: {} } }, 'ads shape')
  const classic = await servedBy(`${proxy.base}/1.1/account/verify_credentials.json`)
  t.match(JSON.parse(classic.body), { errors: [{ code: 130, message: 'Over capacity' }] }, 'classic shape')
  const v2 = await servedBy(`${proxy.base}/2/webhooks`)
  t.equal(v2.type, 'application/problem+json')
  t.match(JSON.parse(v2.body), { status: 502, type: 'about:blank' }, 'Problem shape')
  const big = await servedBy(`${proxy.base}/2/media/upload`, { method: 'POST', body: Buffer.alloc(5 * 1024 * 1024 + 70_000) })
  t.equal(big.status, 413, 'a body over BODY_LIMIT_BYTES is refused by nginx')
  t.match(JSON.parse(big.body), { status: 413, detail: 'The request body is too large.' })
})

t.test('streams pass unbuffered, WebSocket upgrades pass, idle timeouts outlast the keep-alive', { skip: !NGINX }, async (t) => {
  const ups = await oneEach(t)
  let ended = false
  const stream = await upstream(t, 'stream', 'answer', (req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.write('{"first":true}\r\n')
    // The rest comes much later: a buffering proxy would hold the first line back.
    const timer = setTimeout(() => {
      ended = true
      res.end('{"last":true}\r\n')
    }, 1500)
    req.on('close', () => clearTimeout(timer))
  })
  const wss = new WebSocketServer({ server: stream.server })
  wss.on('connection', (ws, req) => ws.on('message', (m: Buffer) => ws.send(`echo ${m.toString()} ${req.headers.host}`)))
  t.teardown(() => wss.close())
  const proxy = await nginxWith(t, addresses({ ...ups, stream }), { streamKeepAliveMs: 30 * 60_000 })

  const res = await fetch(`${proxy.base}/2/activity/stream`)
  const reader = (res.body as ReadableStream<Uint8Array>).getReader()
  const first = await reader.read()
  t.equal(Buffer.from(first.value ?? []).toString(), '{"first":true}\r\n', 'the first line arrives')
  t.notOk(ended, 'before the upstream finished the response')
  await reader.cancel()

  const ws = new WebSocket(`${proxy.base.replace('http', 'ws')}/2/activity/stream`)
  const echoed = await new Promise<string>((resolve, reject) => {
    ws.once('open', () => ws.send('ping'))
    ws.once('message', (m: Buffer) => resolve(m.toString()))
    ws.once('error', reject)
  })
  ws.close()
  t.equal(echoed, `echo ping ${new URL(proxy.base).host}`, 'the WebSocket upgrade reaches the stream node with the client Host')

  const streamBlock = proxy.text.slice(proxy.text.indexOf('location = /2/activity/stream'))
  const read = Number(/proxy_read_timeout (\d+)s/.exec(streamBlock)?.[1])
  t.ok(read >= 3 * 30 * 60, `stream read timeout ${read} s: three 30-minute keep-alives fit`)
  t.match(streamBlock, /proxy_buffering off;/)
})

t.test('deploy/nginx/nginx.conf is the generated compose configuration', async (t) => {
  t.equal(fs.readFileSync(composeConfigPath(), 'utf8'), composeNginxConfig(), 'up to date (`make nginx-conf` rewrites it)')
  t.match(composeNginxConfig(), /server activity:8080 max_fails=1 fail_timeout=2s resolve;/, 'compose service names, re-resolved while running')
})
