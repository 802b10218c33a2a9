/**
 * bench/auth: what request authentication costs. Requests per second of a
 * GET signed with OAuth 1.0a user context against the very same route
 * handler without authentication (the baseline), in the same run, plus an
 * app-only bearer GET and GET 1.1/account/verify_credentials (signature,
 * nonce, rate-limit window and user lookup).
 *
 *   node dist/bench/auth.js                       (after `make build`)
 *   BENCH_AUTH_N=50000 BENCH_AUTH_CONCURRENCY=32 node dist/bench/auth.js
 *   REDIS_URL=redis://127.0.0.1:6379 node dist/bench/auth.js   (nonces and windows in Redis)
 *
 * The server runs as in `make run` (memory store journaled to a temporary
 * data directory: every nonce is on disk before the answer) unless REDIS_URL
 * is set. Requests are signed before the clock starts, each with its own
 * nonce, so the client's HMAC does not count against the server.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Pool } from 'undici'
import { authorizationHeader } from '../services/common/auth/oauth1'
import type { AccessToken, App } from '../services/common/auth/records'
import { loadConfig } from '../services/common/config'
import { createContext } from '../services/common/context'
import { newSecret } from '../services/common/ids'
import { startRuntime } from '../services/common/runtime'
import type { ServiceDefinition } from '../services/common/service'
import { createApp, createUser, issueAccessToken, issueBearer } from '../services/gateway/identity'
import { gatewayService } from '../services/gateway/service'

const N = Number(process.env.BENCH_AUTH_N ?? 20_000)
const CONCURRENCY = Number(process.env.BENCH_AUTH_CONCURRENCY ?? 16)
const WARMUP = Math.min(2000, Math.floor(N / 10))

/** One handler, mounted with and without authentication. */
const benchService: ServiceDefinition = {
  name: 'gateway',
  routes: async (app) => {
    const handler = async (): Promise<{ data: { ok: boolean } }> => ({ data: { ok: true } })
    app.get('/2/bench/open', handler)
    app.get('/2/bench/signed', { config: { auth: { schemes: ['oauth1-user', 'bearer-app'] } } }, handler)
  }
}

function oauthHeader(method: string, url: string, app: App, token: AccessToken): string {
  return authorizationHeader(method, url, { key: app.consumer_key, secret: app.consumer_secret }, { key: token.token, secret: token.secret })
}

interface Result {
  perSecond: number
  p50: number
  p99: number
  failures: number
}

function percentile(sorted: number[], p: number): number {
  return sorted.length === 0 ? Number.NaN : (sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number)
}

/** Sends every request (path + headers) with CONCURRENCY in flight; the first WARMUP are not timed. */
async function drive(pool: Pool, requests: Array<{ path: string; headers: Record<string, string> }>): Promise<Result> {
  let next = 0
  let failures = 0
  const latencies: number[] = []
  let started = 0
  const worker = async (): Promise<void> => {
    for (;;) {
      const i = next++
      if (i >= requests.length) return
      if (i === WARMUP) started = performance.now()
      const r = requests[i] as { path: string; headers: Record<string, string> }
      const t0 = performance.now()
      const res = await pool.request({ method: 'GET', path: r.path, headers: r.headers })
      await res.body.dump()
      if (res.statusCode !== 200) failures++
      if (i >= WARMUP) latencies.push(performance.now() - t0)
    }
  }
  await Promise.all(Array.from({ length: CONCURRENCY }, worker))
  const seconds = (performance.now() - started) / 1000
  latencies.sort((a, b) => a - b)
  return { perSecond: latencies.length / seconds, p50: percentile(latencies, 50), p99: percentile(latencies, 99), failures }
}

async function main(): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-auth-'))
  const config = loadConfig({
    PORT: '0',
    SANDBOX_PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'silent',
    DATA_DIR: dir,
    REDIS_URL: process.env.REDIS_URL ?? '',
    // verify_credentials keeps the public platform's 75 per 15 minutes; the bench measures cost, not the limit.
    RATE_LIMITS: 'account-verify-credentials=100000000'
  })
  const ctx = await createContext({ serviceName: 'bench-auth', config })
  const runtime = await startRuntime({ services: [gatewayService, benchService], ctx })
  const pool = new Pool(runtime.baseUrl, { connections: CONCURRENCY, pipelining: 1 })
  try {
    const app = await createApp(ctx.store, { name: 'bench app', access_level: 'read-write' })
    const user = await createUser(ctx.store, `bench_${newSecret(4).replace(/[^A-Za-z0-9]/g, 'x')}`, 'bench password')
    const token = await issueAccessToken(ctx.store, app, user)
    const { token: bearer } = await issueBearer(ctx.store, app)
    const signedFor = (p: string): Array<{ path: string; headers: Record<string, string> }> =>
      Array.from({ length: N }, () => ({ path: p, headers: { authorization: oauthHeader('GET', `${runtime.baseUrl}${p}`, app, token) } }))
    const same = (p: string, headers: Record<string, string>): Array<{ path: string; headers: Record<string, string> }> => Array.from({ length: N }, () => ({ path: p, headers }))

    const open = await drive(pool, same('/2/bench/open', {}))
    const signed = await drive(pool, signedFor('/2/bench/signed'))
    const viaBearer = await drive(pool, same('/2/bench/signed', { authorization: `Bearer ${bearer}` }))
    const verify = await drive(pool, signedFor('/1.1/account/verify_credentials.json'))

    const row = (name: string, r: Result): string => `| ${name} | ${r.perSecond.toFixed(0)} | ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)} | ${r.failures} |`
    const lines = [
      `bench/auth: ${N - WARMUP} timed GETs per row (after ${WARMUP} warm-up), ${CONCURRENCY} connections, store: ${ctx.store.kind}${ctx.store.kind === 'memory' ? ' (journaled to disk)' : ''}`,
      '',
      '| request | requests/s | p50 ms | p99 ms | non-200 |',
      '|---|---|---|---|---|',
      row('same handler, no authentication (baseline)', open),
      row('OAuth 1.0a user context (HMAC-SHA1, token lookup, nonce write)', signed),
      row('OAuth 2.0 app-only bearer (hash lookup)', viaBearer),
      row('GET 1.1/account/verify_credentials (signed + rate-limit window + user)', verify),
      '',
      `ratio signed/unauthenticated: ${(signed.perSecond / open.perSecond).toFixed(2)}`,
      `ratio bearer/unauthenticated: ${(viaBearer.perSecond / open.perSecond).toFixed(2)}`
    ]
    process.stdout.write(`${lines.join('\n')}\n`)
    if (open.failures + signed.failures + viaBearer.failures + verify.failures > 0) process.exitCode = 1
  } finally {
    await pool.close()
    await runtime.close()
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench/auth failed: ${(err as Error).stack ?? String(err)}\n`)
  process.exit(1)
})
