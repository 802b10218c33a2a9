/**
 * bench/webhooks: signed webhook deliveries per second to a loopback
 * receiver, against a raw undici POST loop to the same receiver in the same
 * run (the ceiling: HTTP alone, no bus, no store, no signature), and
 * end-to-end delivery latency (publish on activity.deliveries -> the
 * receiver has the body) at a fixed rate.
 *
 *   node dist/bench/webhooks.js        (after `make build`)
 *   BENCH_WEBHOOK_N=20000 BENCH_WEBHOOK_RATE=500 node dist/bench/webhooks.js
 *
 * The webhooks service runs as in `make run`: memory bus, memory store
 * journaled to a temporary data directory (every write is on disk before it
 * is acknowledged), WEBHOOK_CONCURRENCY sockets per webhook.
 */
import { createHmac, randomUUID } from 'node:crypto'
import fs from 'node:fs'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { Agent, request } from 'undici'
import { TOPICS } from '../services/common/bus/types'
import { loadConfig } from '../services/common/config'
import { createContext } from '../services/common/context'
import { startRuntime } from '../services/common/runtime'
import { createApp, issueBearer } from '../services/gateway/identity'
import { webhooksService } from '../services/webhooks/service'
import { percentile } from './support/stats'

const N = Number(process.env.BENCH_WEBHOOK_N ?? 5000)
const CONCURRENCY = Number(process.env.BENCH_WEBHOOK_CONCURRENCY ?? 8)
const RATE = Number(process.env.BENCH_WEBHOOK_RATE ?? 300)
const PACED_SECONDS = Number(process.env.BENCH_WEBHOOK_PACED_SECONDS ?? 5)

// ---------------------------------------------------------------- receiver

interface Receiver {
  url: string
  secret: string
  count: number
  badSignatures: number
  /** Arrival time (performance.now()) per event_uuid. */
  arrivals: Map<string, number>
  waitFor(n: number, timeoutMs: number): Promise<void>
  close(): Promise<void>
}

async function startReceiver(): Promise<Receiver> {
  const waiters: Array<{ n: number; resolve: () => void }> = []
  const r: Receiver = {
    url: '',
    secret: '',
    count: 0,
    badSignatures: 0,
    arrivals: new Map(),
    waitFor(n, timeoutMs) {
      if (r.count >= n) return Promise.resolve()
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`only ${r.count} of ${n} deliveries within ${timeoutMs} ms`)), timeoutMs)
        waiters.push({ n, resolve: () => (clearTimeout(timer), resolve()) })
      })
    },
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections()
      server.close(() => resolve())
    })
  }
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x')
    const token = url.searchParams.get('crc_token')
    if (req.method === 'GET' && token !== null) {
      const responseToken = `sha256=${createHmac('sha256', r.secret).update(token).digest('base64')}`
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ response_token: responseToken }))
      return
    }
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const body = Buffer.concat(chunks)
      const signature = req.headers['x-twitter-webhooks-signature']
      // A receiver that does its job: every signed body is verified (the raw baseline sends none).
      if (signature !== undefined && signature !== `sha256=${createHmac('sha256', r.secret).update(body).digest('base64')}`) r.badSignatures++
      const uuid = /"event_uuid":"(\d+)"/.exec(body.toString('utf8'))?.[1]
      if (uuid) r.arrivals.set(uuid, performance.now())
      r.count++
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
      for (let i = waiters.length - 1; i >= 0; i--) {
        const w = waiters[i]
        if (w && r.count >= w.n) {
          waiters.splice(i, 1)
          w.resolve()
        }
      }
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  r.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`
  return r
}

// ---------------------------------------------------------------- payloads

let seq = 0
function eventUuid(): string {
  seq++
  return `${Date.now()}${String(seq).padStart(6, '0')}`.slice(-19)
}

function envelope(uuid: string): Record<string, unknown> {
  return {
    data: {
      event_uuid: uuid,
      filter: { user_id: '2244994945' },
      event_type: 'post.create',
      tag: 'bench',
      payload: { id: uuid, text: 'The quick brown fox jumps over the lazy dog. '.repeat(4), author_id: '2244994945', created_at: new Date().toISOString() },
      includes: {}
    }
  }
}


// ---------------------------------------------------------------- baseline

async function rawLoop(receiver: Receiver, n: number): Promise<{ perSecond: number; p50: number; p99: number }> {
  const agent = new Agent({ connections: CONCURRENCY, keepAliveTimeout: 30_000 })
  const latencies: number[] = []
  const start = receiver.count
  let next = 0
  const t0 = performance.now()
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < n) {
        next++
        const body = JSON.stringify(envelope(eventUuid()))
        const s = performance.now()
        const res = await request(receiver.url, { method: 'POST', body, headers: { 'content-type': 'application/json' }, dispatcher: agent })
        await res.body.dump()
        latencies.push(performance.now() - s)
      }
    })
  )
  const seconds = (performance.now() - t0) / 1000
  await agent.close()
  if (receiver.count - start !== n) throw new Error('the raw loop lost requests')
  latencies.sort((a, b) => a - b)
  return { perSecond: n / seconds, p50: percentile(latencies, 50), p99: percentile(latencies, 99) }
}

// ---------------------------------------------------------------- the webhooks service

async function main(): Promise<void> {
  const receiver = await startReceiver()
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-webhooks-'))
  const config = loadConfig({
    PORT: '0',
    SANDBOX_PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'silent',
    DATA_DIR: dir,
    WEBHOOK_ALLOW_INSECURE: 'true',
    WEBHOOK_CONCURRENCY: String(CONCURRENCY)
  })
  const ctx = await createContext({ serviceName: 'bench', config })
  const runtime = await startRuntime({ services: [webhooksService], ctx })
  try {
    const app = await createApp(ctx.store, { name: 'bench app', access_level: 'read-write-dm' })
    const { token } = await issueBearer(ctx.store, app)
    receiver.secret = app.consumer_secret
    const created = await fetch(`${runtime.baseUrl}/2/webhooks`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ url: receiver.url })
    })
    if (created.status !== 200) throw new Error(`registration failed: ${created.status} ${await created.text()}`)
    const webhookId = ((await created.json()) as { data: { id: string } }).data.id

    const message = (uuid: string) => ({
      key: app.id,
      value: { delivery_id: randomUUID(), app_id: app.id, subscription_id: eventUuid(), webhook_id: webhookId, created_at: new Date().toISOString(), envelope: envelope(uuid) }
    })

    // Warm-up: connections, JIT.
    const warm = Math.min(500, N)
    await ctx.bus.publishMany(TOPICS.activityDeliveries, Array.from({ length: warm }, () => message(eventUuid())))
    await receiver.waitFor(warm, 60_000)
    const raw = await rawLoop(receiver, N)

    // Burst: N deliveries published at once; throughput until the receiver has them all.
    const before = receiver.count
    const t0 = performance.now()
    for (let i = 0; i < N; i += 500) {
      await ctx.bus.publishMany(TOPICS.activityDeliveries, Array.from({ length: Math.min(500, N - i) }, () => message(eventUuid())))
    }
    await receiver.waitFor(before + N, 300_000)
    const burstSeconds = (performance.now() - t0) / 1000
    const signedPerSecond = N / burstSeconds

    // Paced: a fixed rate; latency from publish to the receiver having the body.
    const published = new Map<string, number>()
    const total = RATE * PACED_SECONDS
    const pacedStart = receiver.count
    const tick = 20
    const perTick = RATE / (1000 / tick)
    let sent = 0
    const t1 = performance.now()
    while (sent < total) {
      const due = Math.min(total, Math.floor(((performance.now() - t1) / tick + 1) * perTick))
      const batch: Array<ReturnType<typeof message>> = []
      for (; sent < due; sent++) {
        const uuid = eventUuid()
        published.set(uuid, performance.now())
        batch.push(message(uuid))
      }
      if (batch.length > 0) await ctx.bus.publishMany(TOPICS.activityDeliveries, batch)
      await new Promise((r) => setTimeout(r, tick))
    }
    await receiver.waitFor(pacedStart + total, 120_000)
    const latencies = [...published].map(([uuid, at]) => (receiver.arrivals.get(uuid) ?? Number.NaN) - at).filter((x) => Number.isFinite(x)).sort((a, b) => a - b)

    const lines = [
      `bench/webhooks: ${N} deliveries, ${CONCURRENCY} connections per webhook, loopback receiver verifying every signature`,
      '',
      '| path | deliveries/s | p50 ms | p99 ms |',
      '|---|---|---|---|',
      `| raw undici POST loop (baseline: HTTP only) | ${raw.perSecond.toFixed(0)} | ${raw.p50.toFixed(2)} | ${raw.p99.toFixed(2)} |`,
      `| webhooks service, burst (bus -> durable record -> signed POST) | ${signedPerSecond.toFixed(0)} | - | - |`,
      `| webhooks service, paced at ${RATE}/s for ${PACED_SECONDS} s (publish -> received) | ${(latencies.length / PACED_SECONDS).toFixed(0)} | ${percentile(latencies, 50).toFixed(2)} | ${percentile(latencies, 99).toFixed(2)} |`,
      '',
      `ratio signed/raw: ${(signedPerSecond / raw.perSecond).toFixed(2)}`,
      `bad signatures seen by the receiver: ${receiver.badSignatures}`
    ]
    process.stdout.write(`${lines.join('\n')}\n`)
    if (receiver.badSignatures > 0) process.exitCode = 1
  } finally {
    await runtime.close()
    await receiver.close()
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench/webhooks failed: ${(err as Error).stack ?? String(err)}\n`)
  process.exit(1)
})
