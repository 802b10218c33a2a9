import { EventEmitter } from 'node:events'
import fs from 'node:fs'
import path from 'node:path'
import { Agent, type Dispatcher, Pool, request } from 'undici'
import { projectRoot } from '../common/bus/topics'
import { guardedConnector, UnsafeUrlError, type UrlPolicy } from './url-safety'

/**
 * The one HTTP client of the webhooks service (CRC checks, deliveries,
 * replays). Every connection goes through the guarded connector, which
 * re-checks the address it connects to (url-safety.ts). Redirects are never
 * followed (a 3xx is an answer, and for the CRC an immediate failure).
 * Failures come back as values, classified the way the CRC and retry rules
 * need them, never as exceptions.
 *
 * Dispatchers:
 *  - one Pool per webhook lane (a webhook id) with WEBHOOK_CONCURRENCY
 *    connections. The cap belongs to the webhook, not to its origin: two
 *    webhooks on one host (two apps behind one gateway, say) each get their
 *    own connections and cannot starve each other. Requests beyond the cap
 *    wait here for a slot, and WEBHOOK_TIMEOUT starts only once they have
 *    one, so time spent queueing is never mistaken for a slow receiver.
 *    A lane's pool is closed after it has been idle for a while.
 *  - one Agent for CRC checks (no lane), so a challenge never queues behind
 *    a webhook's busy deliveries (a CRC that timed out in a queue would count
 *    as a transient failure of a healthy receiver).
 */

export type RequestFailure = 'timeout' | 'tls' | 'unsafe' | 'connection'

export type HttpOutcome =
  | { kind: 'response'; status: number; headers: Record<string, string | string[] | undefined>; body: string; ms: number }
  | { kind: 'error'; failure: RequestFailure; message: string; ms: number }

export interface ClientOptions {
  policy: UrlPolicy
  timeoutMs: number
  /** Requests in flight per lane (WEBHOOK_CONCURRENCY, the per-webhook cap). */
  connectionsPerLane: number
  /** Sent as User-Agent on every request; default `activity-gateway-webhooks/<package version>`. */
  userAgent?: string
  /** A lane's pool is closed after this long without requests. */
  idlePoolMs?: number
}

export interface SendOptions {
  headers?: Record<string, string>
  body?: string
  /** Bytes of the response body kept (the rest is discarded). */
  maxBodyBytes?: number
  /**
   * The webhook this request belongs to: it shares that webhook's pool and
   * concurrency cap. Without a lane the request is a check (CRC) and uses
   * the separate check dispatcher.
   */
  lane?: string
}

const DEFAULT_IDLE_POOL_MS = 60_000
const KEEP_ALIVE = { keepAliveTimeout: 30_000, keepAliveMaxTimeout: 60_000 }

/** `activity-gateway-webhooks/<version>`, the version read from the checkout's package.json. */
export function defaultUserAgent(): string {
  let version = '0'
  try {
    const pkg = JSON.parse(fs.readFileSync(path.join(projectRoot(), 'package.json'), 'utf8')) as { version?: unknown }
    if (typeof pkg.version === 'string') version = pkg.version
  } catch {
    // No package.json next to the code (an unusual install): the name alone still identifies the sender.
  }
  return `activity-gateway-webhooks/${version}`
}

const TLS_CODES = /^(ERR_TLS_|ERR_SSL_|CERT_|UNABLE_TO_|DEPTH_ZERO_SELF_SIGNED_CERT|SELF_SIGNED_CERT_IN_CHAIN|HOSTNAME_MISMATCH|EPROTO)/
const TIMEOUT_CODES = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'UND_ERR_CONNECT_TIMEOUT', 'ETIMEDOUT'])

/** Walks `cause` chains: undici sometimes wraps the socket's error. */
function causes(err: unknown): Array<Error & { code?: string }> {
  const out: Array<Error & { code?: string }> = []
  let current: unknown = err
  for (let i = 0; i < 5 && current instanceof Error; i++) {
    out.push(current as Error & { code?: string })
    current = (current as Error & { cause?: unknown }).cause
  }
  return out
}

export function classifyFailure(err: unknown): RequestFailure {
  const chain = causes(err)
  if (chain.some((e) => e instanceof UnsafeUrlError || e.code === 'WEBHOOK_UNSAFE_URL')) return 'unsafe'
  if (chain.some((e) => e.name === 'TimeoutError' || e.name === 'AbortError' || (e.code !== undefined && TIMEOUT_CODES.has(e.code)))) return 'timeout'
  if (chain.some((e) => (e.code !== undefined && TLS_CODES.test(e.code)) || /\b(SSL|TLS) routines\b|certificate/i.test(e.message))) return 'tls'
  return 'connection'
}

function describe(err: unknown, failure: RequestFailure, timeoutMs: number): string {
  if (failure === 'timeout') return `no answer within ${timeoutMs} ms`
  const chain = causes(err)
  const specific = chain[chain.length - 1]
  if (!specific) return String(err)
  return specific.code ? `${specific.code}: ${specific.message}` : specific.message
}

/** One webhook's pool and the requests waiting for one of its slots. */
interface LanePool {
  pool: Pool
  active: number
  waiting: Array<() => void>
  idleSince: number
}

export class WebhookClient {
  private readonly checks: Agent
  private readonly lanes = new Map<string, LanePool>()
  private readonly connector: ReturnType<typeof guardedConnector>
  private readonly userAgent: string
  private readonly idlePoolMs: number
  private readonly sweeper: NodeJS.Timeout

  constructor(private readonly options: ClientOptions) {
    this.connector = guardedConnector(options.policy, options.timeoutMs)
    this.userAgent = options.userAgent ?? defaultUserAgent()
    this.idlePoolMs = options.idlePoolMs ?? DEFAULT_IDLE_POOL_MS
    this.checks = new Agent({ connect: this.connector, pipelining: 1, ...KEEP_ALIVE, headersTimeout: options.timeoutMs, bodyTimeout: options.timeoutMs })
    this.sweeper = setInterval(() => this.closeIdlePools(), Math.max(10, Math.floor(this.idlePoolMs / 2)))
    this.sweeper.unref()
  }

  get timeoutMs(): number {
    return this.options.timeoutMs
  }

  /** Lane pools currently open (for tests and diagnostics). */
  get openLanes(): number {
    return this.lanes.size
  }

  async send(method: 'GET' | 'POST', url: string, options: SendOptions = {}): Promise<HttpOutcome> {
    const started = performance.now()
    let release: (() => void) | undefined
    try {
      let dispatcher: Dispatcher = this.checks
      if (options.lane !== undefined) {
        const lane = await this.acquire(options.lane, new URL(url).origin)
        release = () => this.release(lane)
        dispatcher = lane.pool
      }
      return await this.dispatch(method, url, options, dispatcher, started)
    } catch (err) {
      const failure = classifyFailure(err)
      return { kind: 'error', failure, message: describe(err, failure, this.options.timeoutMs), ms: performance.now() - started }
    } finally {
      release?.()
    }
  }

  /** One request on `dispatcher`, bounded by WEBHOOK_TIMEOUT from here (a lane slot is already held), body included. */
  private async dispatch(method: 'GET' | 'POST', url: string, options: SendOptions, dispatcher: Dispatcher, started: number): Promise<HttpOutcome> {
    const headers: Record<string, string> = { 'user-agent': this.userAgent, ...(options.headers ?? {}) }
    const deadline = new Deadline(this.options.timeoutMs)
    try {
      const res = await request(url, { method, headers, body: options.body, dispatcher, signal: deadline })
      const body = await readCapped(res.body, options.maxBodyBytes ?? 0)
      return { kind: 'response', status: res.statusCode, headers: res.headers, body, ms: performance.now() - started }
    } finally {
      deadline.clear()
    }
  }

  /** A slot in the lane's pool, waiting for one when the lane is at its cap. */
  private async acquire(laneId: string, origin: string): Promise<LanePool> {
    // Keyed by origin too: the pool serves one origin, should a lane's URL ever change.
    const key = `${laneId} ${origin}`
    let lane = this.lanes.get(key)
    if (!lane) {
      lane = {
        pool: new Pool(origin, {
          connect: this.connector,
          connections: this.options.connectionsPerLane,
          pipelining: 1,
          ...KEEP_ALIVE,
          headersTimeout: this.options.timeoutMs,
          bodyTimeout: this.options.timeoutMs
        }),
        active: 0,
        waiting: [],
        idleSince: Date.now()
      }
      this.lanes.set(key, lane)
    }
    if (lane.active < this.options.connectionsPerLane) lane.active++
    else await new Promise<void>((resolve) => (lane as LanePool).waiting.push(resolve))
    return lane
  }

  /** Hands the slot to the next waiting request, or frees it. */
  private release(lane: LanePool): void {
    const next = lane.waiting.shift()
    if (next) {
      next()
      return
    }
    lane.active--
    if (lane.active === 0) lane.idleSince = Date.now()
  }

  private closeIdlePools(now = Date.now()): void {
    for (const [key, lane] of this.lanes) {
      if (lane.active === 0 && lane.waiting.length === 0 && now - lane.idleSince >= this.idlePoolMs) {
        this.lanes.delete(key)
        lane.pool.close().catch(() => undefined)
      }
    }
  }

  /** Closes the pools of a lane that is gone (a deleted webhook); requests in flight finish first. */
  async forget(laneId: string): Promise<void> {
    const closing: Array<Promise<void>> = []
    for (const [key, lane] of this.lanes) {
      if (key.startsWith(`${laneId} `)) {
        this.lanes.delete(key)
        closing.push(lane.pool.close().catch(() => undefined))
      }
    }
    await Promise.all(closing)
  }

  async close(): Promise<void> {
    clearInterval(this.sweeper)
    const pools = [...this.lanes.values()].map((l) => l.pool.close())
    this.lanes.clear()
    await Promise.allSettled([this.checks.close(), ...pools])
  }
}

/**
 * A request's deadline, as the signal undici takes (an EventEmitter with `aborted` and `reason`
 * will do): one timer, cleared when the request ends. AbortSignal.timeout cost every delivery an
 * EventTarget, a timer and weak references (bench/PROFILES.md "Webhook burst").
 */
class Deadline extends EventEmitter {
  aborted = false
  reason: Error | undefined
  private readonly timer: NodeJS.Timeout

  constructor(ms: number) {
    super()
    this.timer = setTimeout(() => {
      this.reason = Object.assign(new Error(`no answer within ${ms} ms`), { name: 'TimeoutError' })
      this.aborted = true
      this.emit('abort')
    }, ms)
  }

  clear(): void {
    clearTimeout(this.timer)
  }
}

/** Reads at most `limit` bytes of the body and discards the rest, leaving the connection reusable. */
async function readCapped(body: AsyncIterable<Buffer> & { dump?: (opts?: { limit: number }) => Promise<void> }, limit: number): Promise<string> {
  if (limit <= 0) {
    if (body.dump) await body.dump({ limit: 64 * 1024 })
    return ''
  }
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of body) {
    if (size < limit) chunks.push(chunk.subarray(0, limit - size))
    size += chunk.length
    if (size > 4 * limit) break
  }
  return Buffer.concat(chunks).toString('utf8')
}
