/**
 * bench/http: requests per second and p99 of a signed ads read
 * (GET /12/accounts/:account_id, OAuth 1.0a user context: signature check,
 * token and nonce in the store, account ownership, ads envelope) on
 *  - the embedded runtime of `make run` (every service in one process, memory
 *    store journaled to disk),
 *  - the gateway with the Redis store (as a `make up` gateway process),
 * next to a fastify hello-world (the baseline: the same HTTP stack doing
 * nothing), all measured in the same run with autocannon over loopback.
 *
 *   node dist/bench/http.js            (after `make build`; `make bench` runs it)
 *   BENCH_HTTP_SECONDS=10 BENCH_HTTP_CONNECTIONS=16 node dist/bench/http.js
 *   BENCH_HTTP_PROFILE=/tmp/prof node dist/bench/http.js   (a CPU profile per server)
 *   BENCH_HTTP_ROUNDS=3 node dist/bench/http.js             (best of 3 interleaved rounds)
 *
 * Each server runs in its own child process (this file, `serve <kind>`), so
 * autocannon and the client-side signing (every request gets a fresh nonce,
 * as a real client's would) do not share an event loop with the server.
 * Bounded: BENCH_HTTP_SECONDS per row (default 10) plus start-up.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import readline from 'node:readline'
import autocannon from 'autocannon'
import Fastify from 'fastify'
import type { AccessToken, App } from '../services/common/auth/records'
import { loadConfig } from '../services/common/config'
import { createContext } from '../services/common/context'
import { newSecret } from '../services/common/ids'
import { startRuntime } from '../services/common/runtime'
import { ALL_SERVICES } from '../services/embedded/services'
import { createAccount } from '../services/gateway/ads/accounts'
import { createApp, createUser, issueAccessToken } from '../services/gateway/identity'
import { gatewayService } from '../services/gateway/service'
import { freePort, launchRedis, terminate } from '../scripts/local-infra'
import { oauthHeader } from './support/oauth1'

const SECONDS = Number(process.env.BENCH_HTTP_SECONDS ?? 10)
const CONNECTIONS = Number(process.env.BENCH_HTTP_CONNECTIONS ?? 16)
const WARMUP_SECONDS = 2

type Kind = 'hello' | 'embedded' | 'redis'

/** What a server child prints (one JSON line) once it listens. */
interface Served {
  url: string
  path: string
  app?: App
  token?: AccessToken
}

// ---------------------------------------------------------------- server side (child)

async function serve(kind: Kind): Promise<void> {
  if (kind === 'hello') {
    const app = Fastify({ logger: false })
    app.get('/hello', async () => ({ hello: 'world' }))
    await app.listen({ port: 0, host: '127.0.0.1' })
    const address = app.server.address()
    const port = typeof address === 'object' && address ? address.port : 0
    process.stdout.write(`${JSON.stringify({ url: `http://127.0.0.1:${port}`, path: '/hello' } satisfies Served)}\n`)
    return
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-http-'))
  process.once('exit', () => fs.rmSync(dir, { recursive: true, force: true }))
  const config = loadConfig({
    PORT: '0',
    SANDBOX_PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'silent',
    DATA_DIR: dir,
    REDIS_URL: kind === 'redis' ? (process.env.BENCH_REDIS_URL ?? '') : '',
    OPERATOR_TOKEN: newSecret(24),
    // The bench measures throughput from one caller: lift the per-caller windows every authenticated route has.
    RATE_LIMIT_DEFAULT: '10000000',
    RATE_LIMITS: 'ads-account=10000000'
  })
  const ctx = await createContext({ serviceName: kind === 'embedded' ? 'embedded' : 'gateway', config })
  const runtime = await startRuntime({ services: kind === 'embedded' ? ALL_SERVICES : [gatewayService], ctx })
  const app = await createApp(ctx.store, { name: 'bench http', access_level: 'read-write' })
  const user = await createUser(ctx.store, `bench_${newSecret(6).replace(/[^A-Za-z0-9]/g, 'x')}`, 'bench password')
  const token = await issueAccessToken(ctx.store, app, user)
  const account = await createAccount(ctx, user.id, { name: 'bench account' })
  process.stdout.write(`${JSON.stringify({ url: runtime.baseUrl, path: `/12/accounts/${account.id}`, app, token } satisfies Served)}\n`)
  process.once('SIGTERM', () => {
    void runtime.close().finally(() => process.exit(0))
  })
}

// ---------------------------------------------------------------- client side (parent)

interface Child {
  served: Served
  proc: ChildProcess
}

async function startChild(kind: Kind, env: Record<string, string> = {}): Promise<Child> {
  // BENCH_HTTP_PROFILE=<dir>: each server writes a V8 CPU profile there (open it in Chrome DevTools).
  const profile = process.env.BENCH_HTTP_PROFILE ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_HTTP_PROFILE}`, `--cpu-prof-name=http-${kind}.cpuprofile`] : []
  const proc = spawn(process.execPath, [...process.execArgv, ...profile, __filename, 'serve', kind], { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, ...env } })
  const lines = readline.createInterface({ input: proc.stdout as NodeJS.ReadableStream })
  const served = await new Promise<Served>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${kind} server did not start within 60 s`)), 60_000)
    lines.once('line', (line) => {
      clearTimeout(timer)
      resolve(JSON.parse(line) as Served)
    })
    proc.once('exit', (code) => reject(new Error(`${kind} server exited (${code}) before it listened`)))
  })
  return { served, proc }
}

async function stopChild(child: Child): Promise<void> {
  if (child.proc.exitCode !== null) return
  const exited = new Promise((r) => child.proc.once('exit', r))
  child.proc.kill('SIGTERM')
  const timer = setTimeout(() => child.proc.kill('SIGKILL'), 10_000)
  await exited
  clearTimeout(timer)
}

interface Row {
  perSecond: number
  p50: number
  p99: number
  non2xx: number
  errors: number
}

function cannon(served: Served, seconds: number): Promise<Row> {
  const { app, token } = served
  // Without PUBLIC_URL the server checks signatures against the request's own Host.
  const signedUrl = `${served.url}${served.path}`
  const options: autocannon.Options = {
    url: served.url,
    connections: CONNECTIONS,
    duration: seconds,
    requests: [
      app && token
        ? { method: 'GET', path: served.path, setupRequest: (req) => ({ ...req, headers: { ...req.headers, authorization: oauthHeader('GET', signedUrl, app, token) } }) }
        : { method: 'GET', path: served.path }
    ]
  }
  return new Promise((resolve, reject) => {
    autocannon(options, (err, result) => {
      if (err) return reject(err)
      resolve({ perSecond: result.requests.average, p50: result.latency.p50, p99: result.latency.p99, non2xx: result.non2xx, errors: result.errors + result.timeouts })
    })
  })
}

async function measure(kind: Kind, env: Record<string, string> = {}): Promise<Row> {
  const child = await startChild(kind, env)
  try {
    await cannon(child.served, WARMUP_SECONDS)
    return await cannon(child.served, SECONDS)
  } finally {
    await stopChild(child)
  }
}

async function main(): Promise<void> {
  const redisDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-http-redis-'))
  const redisPort = await freePort()
  const redis = await launchRedis({ port: redisPort, dir: redisDir, tied: true })
  try {
    // Interleaved rounds, best of each: other load on the machine hits every server alike.
    const rounds = Math.max(1, Number(process.env.BENCH_HTTP_ROUNDS ?? 1))
    const best = (a: Row | undefined, b: Row): Row => (a === undefined || b.perSecond > a.perSecond ? b : a)
    let hello: Row | undefined
    let embedded: Row | undefined
    let withRedis: Row | undefined
    for (let i = 0; i < rounds; i++) {
      hello = best(hello, await measure('hello'))
      embedded = best(embedded, await measure('embedded'))
      withRedis = best(withRedis, await measure('redis', { BENCH_REDIS_URL: `redis://127.0.0.1:${redisPort}` }))
    }
    if (!hello || !embedded || !withRedis) throw new Error('no round ran')
    const base = hello.perSecond
    const row = (name: string, r: Row): string =>
      `| ${name} | ${r.perSecond.toFixed(0)} | ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)} | ${(r.perSecond / base).toFixed(3)}x | ${r.non2xx + r.errors} |`
    const lines = [
      `bench/http: autocannon, ${CONNECTIONS} connections, ${SECONDS} s per row after ${WARMUP_SECONDS} s of warm-up, loopback, each server in its own process${rounds > 1 ? `, best of ${rounds} interleaved rounds` : ''}`,
      `node ${process.version}, ${os.cpus().length} cpu(s) (${os.cpus()[0]?.model ?? 'unknown'})`,
      '',
      '| server | requests/s | p50 ms | p99 ms | vs hello-world | non-2xx + errors |',
      '|---|---|---|---|---|---|',
      row('fastify hello-world (baseline)', hello),
      row('signed GET /12/accounts/:id, embedded (memory store journaled to disk)', embedded),
      row('signed GET /12/accounts/:id, gateway on Redis', withRedis),
      '',
      `ratio embedded / hello-world: ${(embedded.perSecond / hello.perSecond).toFixed(3)}`,
      `ratio Redis / hello-world:    ${(withRedis.perSecond / hello.perSecond).toFixed(3)}`
    ]
    process.stdout.write(`${lines.join('\n')}\n`)
    if (embedded.non2xx + embedded.errors + withRedis.non2xx + withRedis.errors + hello.non2xx + hello.errors > 0) {
      process.stderr.write('bench/http: some requests failed (see non-2xx + errors)\n')
      process.exitCode = 1
    }
  } finally {
    await terminate(redis)
    fs.rmSync(redisDir, { recursive: true, force: true })
  }
}

if (process.argv[2] === 'serve') {
  serve(process.argv[3] as Kind).catch((err: unknown) => {
    process.stderr.write(`bench/http server failed: ${(err as Error).stack ?? String(err)}\n`)
    process.exit(1)
  })
} else {
  main().catch((err: unknown) => {
    process.stderr.write(`bench/http failed: ${(err as Error).stack ?? String(err)}\n`)
    process.exit(1)
  })
}
