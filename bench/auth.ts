/**
 * bench/auth: what request authentication costs. Requests per second of a
 * GET signed with OAuth 1.0a user context against the very same route
 * handler without authentication (the baseline), in the same run, plus an
 * app-only bearer GET and GET 1.1/account/verify_credentials (signature,
 * nonce, rate-limit window and user lookup). Every row is warmed up first,
 * then the rows are timed in rounds whose order rotates, so the baseline
 * runs under the same conditions as the rows compared with it.
 *
 *   node dist/bench/auth.js                       (after `make build`)
 *   BENCH_AUTH_N=50000 BENCH_AUTH_CONCURRENCY=32 BENCH_AUTH_ROUNDS=5 node dist/bench/auth.js
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
import { loadConfig } from '../services/common/config'
import { createContext } from '../services/common/context'
import { newSecret } from '../services/common/ids'
import { startRuntime } from '../services/common/runtime'
import type { ServiceDefinition } from '../services/common/service'
import { createApp, createUser, issueAccessToken, issueBearer } from '../services/gateway/identity'
import { gatewayService } from '../services/gateway/service'
import { percentile } from './support/stats'
import { oauthHeader } from './support/oauth1'

const N = Number(process.env.BENCH_AUTH_N ?? 20_000)
const CONCURRENCY = Number(process.env.BENCH_AUTH_CONCURRENCY ?? 16)
/** Untimed requests of every row before any row is timed (JIT, connections, store paths). */
const WARMUP = Number(process.env.BENCH_AUTH_WARMUP ?? Math.min(3000, Math.max(500, Math.floor(N / 5))))
/** Timed rounds; each runs every row (N / ROUNDS requests) in a rotated order. */
const ROUNDS = Math.max(1, Number(process.env.BENCH_AUTH_ROUNDS ?? 4))
const PER_ROUND = Math.ceil(N / ROUNDS)

/** One handler, mounted with and without authentication. */
const benchService: ServiceDefinition = {
  name: 'gateway',
  routes: async (app) => {
    const handler = async (): Promise<{ data: { ok: boolean } }> => ({ data: { ok: true } })
    app.get('/2/bench/open', handler)
    app.get('/2/bench/signed', { config: { auth: { schemes: ['oauth1-user', 'bearer-app'] } } }, handler)
  }
}

type Request = { path: string; headers: Record<string, string> }

/** What one drive of a row measured. */
interface Sample {
  seconds: number
  latencies: number[]
  failures: number
}

interface Result {
  perSecond: number
  p50: number
  p99: number
  failures: number
  /** Requests per second of each round, to show how steady the row was. */
  rounds: number[]
}

interface Row {
  name: string
  /** `count` fresh requests (signed ones each with its own nonce), built before the clock starts. */
  build: (count: number) => Request[]
  samples: Sample[]
}


/** Sends every request with CONCURRENCY in flight and times them all. */
async function drive(pool: Pool, requests: Request[]): Promise<Sample> {
  let next = 0
  let failures = 0
  const latencies: number[] = []
  const worker = async (): Promise<void> => {
    for (;;) {
      const i = next++
      if (i >= requests.length) return
      const r = requests[i] as Request
      const t0 = performance.now()
      const res = await pool.request({ method: 'GET', path: r.path, headers: r.headers })
      await res.body.dump()
      if (res.statusCode !== 200) failures++
      latencies.push(performance.now() - t0)
    }
  }
  const started = performance.now()
  await Promise.all(Array.from({ length: CONCURRENCY }, worker))
  return { seconds: (performance.now() - started) / 1000, latencies, failures }
}

function summarize(samples: Sample[]): Result {
  const latencies = samples.flatMap((s) => s.latencies).sort((a, b) => a - b)
  const seconds = samples.reduce((sum, s) => sum + s.seconds, 0)
  return {
    perSecond: latencies.length / seconds,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    failures: samples.reduce((sum, s) => sum + s.failures, 0),
    rounds: samples.map((s) => s.latencies.length / s.seconds)
  }
}

/**
 * Warms every row up, then runs ROUNDS rounds of every row, rotating the
 * order so that no row (the unauthenticated baseline in particular) always
 * runs first or last: each row is measured under the same conditions.
 */
async function measure(pool: Pool, rows: Row[]): Promise<void> {
  for (const row of rows) await drive(pool, row.build(WARMUP))
  for (let round = 0; round < ROUNDS; round++) {
    const order = rows.map((_, i) => rows[(i + round) % rows.length] as Row)
    for (const row of order) row.samples.push(await drive(pool, row.build(PER_ROUND)))
  }
}

/** a/b overall, and its lowest and highest value over the rounds. */
function ratio(a: Result, b: Result): string {
  const perRound = a.rounds.map((x, i) => x / (b.rounds[i] as number))
  return `${(a.perSecond / b.perSecond).toFixed(2)} (rounds ${Math.min(...perRound).toFixed(2)} to ${Math.max(...perRound).toFixed(2)})`
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
    // Every authenticated route is rate limited (verify_credentials at the public platform's 75 per 15
    // minutes); the bench measures what a window costs, so no window may run out.
    RATE_LIMIT_DEFAULT: '10000000',
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
    const signedFor =
      (p: string) =>
      (count: number): Request[] =>
        Array.from({ length: count }, () => ({ path: p, headers: { authorization: oauthHeader('GET', `${runtime.baseUrl}${p}`, app, token) } }))
    const same =
      (p: string, headers: Record<string, string>) =>
      (count: number): Request[] =>
        Array.from({ length: count }, () => ({ path: p, headers }))
    const rows: Row[] = [
      { name: 'same handler, no authentication (baseline)', build: same('/2/bench/open', {}), samples: [] },
      { name: 'OAuth 1.0a user context (HMAC-SHA1, token lookup, nonce write, rate-limit window)', build: signedFor('/2/bench/signed'), samples: [] },
      { name: 'OAuth 2.0 app-only bearer (hash lookup, rate-limit window)', build: same('/2/bench/signed', { authorization: `Bearer ${bearer}` }), samples: [] },
      { name: 'GET 1.1/account/verify_credentials (signed + rate-limit window + user)', build: signedFor('/1.1/account/verify_credentials.json'), samples: [] }
    ]
    await measure(pool, rows)
    const [open, signed, viaBearer, verify] = rows.map((r) => summarize(r.samples)) as [Result, Result, Result, Result]

    const line = (row: Row, r: Result): string => `| ${row.name} | ${r.perSecond.toFixed(0)} | ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)} | ${r.failures} |`
    const lines = [
      `bench/auth: ${PER_ROUND * ROUNDS} timed GETs per row in ${ROUNDS} rounds of rotated row order, after ${WARMUP} warm-up GETs of every row; ${CONCURRENCY} connections, store: ${ctx.store.kind}${ctx.store.kind === 'memory' ? ' (journaled to disk)' : ''}`,
      '',
      '| request | requests/s | p50 ms | p99 ms | non-200 |',
      '|---|---|---|---|---|',
      ...rows.map((row, i) => line(row, [open, signed, viaBearer, verify][i] as Result)),
      '',
      `ratio signed/unauthenticated: ${ratio(signed, open)}`,
      `ratio bearer/unauthenticated: ${ratio(viaBearer, open)}`
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
