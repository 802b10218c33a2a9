import { Agent, request } from 'undici'
import { guardedConnector, UnsafeUrlError, type UrlPolicy } from './url-safety'

/**
 * The one HTTP client of the webhooks service (CRC checks, deliveries,
 * replays): an undici Agent with pooled keep-alive connections per origin,
 * whose connector re-checks every address it connects to (url-safety.ts).
 * Redirects are never followed (a 3xx is an answer, and for the CRC an
 * immediate failure). Every request is bounded by WEBHOOK_TIMEOUT end to end.
 * Failures come back as values, classified the way the CRC and retry rules
 * need them, never as exceptions.
 */

export type RequestFailure = 'timeout' | 'tls' | 'unsafe' | 'connection'

export type HttpOutcome =
  | { kind: 'response'; status: number; headers: Record<string, string | string[] | undefined>; body: string; ms: number }
  | { kind: 'error'; failure: RequestFailure; message: string; ms: number }

export interface ClientOptions {
  policy: UrlPolicy
  timeoutMs: number
  /** Sockets per origin (the per-webhook concurrency cap). */
  connectionsPerOrigin: number
  userAgent?: string
}

export interface SendOptions {
  headers?: Record<string, string>
  body?: string
  /** Bytes of the response body kept (the rest is discarded). */
  maxBodyBytes?: number
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

export class WebhookClient {
  private readonly agent: Agent

  constructor(private readonly options: ClientOptions) {
    this.agent = new Agent({
      connect: guardedConnector(options.policy, options.timeoutMs),
      connections: options.connectionsPerOrigin,
      pipelining: 1,
      keepAliveTimeout: 30_000,
      keepAliveMaxTimeout: 60_000,
      headersTimeout: options.timeoutMs,
      bodyTimeout: options.timeoutMs
    })
  }

  get timeoutMs(): number {
    return this.options.timeoutMs
  }

  async send(method: 'GET' | 'POST', url: string, options: SendOptions = {}): Promise<HttpOutcome> {
    const started = performance.now()
    const headers: Record<string, string> = { 'user-agent': this.options.userAgent ?? 'activity-gateway-webhooks/1', ...(options.headers ?? {}) }
    try {
      const res = await request(url, {
        method,
        headers,
        body: options.body,
        dispatcher: this.agent,
        signal: AbortSignal.timeout(this.options.timeoutMs)
      })
      const body = await readCapped(res.body, options.maxBodyBytes ?? 0)
      return { kind: 'response', status: res.statusCode, headers: res.headers, body, ms: performance.now() - started }
    } catch (err) {
      const failure = classifyFailure(err)
      return { kind: 'error', failure, message: describe(err, failure, this.options.timeoutMs), ms: performance.now() - started }
    }
  }

  async close(): Promise<void> {
    await this.agent.close()
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
