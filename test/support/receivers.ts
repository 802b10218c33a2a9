import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { createHmac, timingSafeEqual } from 'node:crypto'
import type { Test } from 'tap'

/**
 * Webhook receivers for tests: a real server on loopback (node:http) that
 * answers CRC checks the way docs/webhooks.md describes (or breaks the rules
 * on purpose) and verifies the signature of every POST with its own HMAC
 * code, independent of the service's signing code.
 */

export type CrcMode = 'correct' | 'wrong' | 'redirect' | 'error' | 'hang' | 'not-json'

export interface Reply {
  status?: number
  headers?: Record<string, string>
  body?: string
  /** Wait before answering (longer than WEBHOOK_TIMEOUT: a timeout). */
  delayMs?: number
  /** Answer only once this settles: holds the request in flight until the test lets it go. */
  release?: Promise<unknown>
}

export interface ReceivedPost {
  body: string
  json: Record<string, unknown>
  signature: string | undefined
  signatureValid: boolean
  at: number
  /** Status this POST was answered with. */
  status: number
  /** Request path (several webhooks can share one receiver). */
  path: string
  userAgent: string | undefined
  /** Every request header as received (lower-case names). */
  headers: http.IncomingHttpHeaders
}

/** A promise the test resolves itself (a barrier, or the release of held requests). */
export interface Gate {
  promise: Promise<void>
  open(): void
}

export function gate(): Gate {
  let open = (): void => undefined
  const promise = new Promise<void>((resolve) => (open = resolve))
  return { promise, open }
}

/** The receiver's own HMAC: independent of the service's signing code. */
export function expectedSignature(secret: string, message: string): string {
  return `sha256=${createHmac('sha256', Buffer.from(secret, 'utf8')).update(Buffer.from(message, 'utf8')).digest('base64')}`
}

/** Constant-time comparison, as a receiver checks a signature. */
export function sameString(a: string, b: string): boolean {
  const x = Buffer.from(a)
  const y = Buffer.from(b)
  return x.length === y.length && timingSafeEqual(x, y)
}

export class Receiver {
  crcMode: CrcMode = 'correct'
  crcCount = 0
  /** User-Agent of every CRC request, in order. */
  readonly crcUserAgents: Array<string | undefined> = []
  /** When set, a CRC is answered only once the returned promise settles (`n` counts CRCs from 1). */
  crcHold: ((n: number) => Promise<unknown>) | undefined
  /** How a POST is answered; `n` counts POSTs from 1. Default: 200. */
  onPost: (post: ReceivedPost, n: number) => Reply = () => ({ status: 200 })
  readonly posts: ReceivedPost[] = []
  inFlight = 0
  maxInFlight = 0
  /** POSTs in flight and their maximum, per request path. */
  readonly inFlightByPath = new Map<string, number>()
  readonly maxInFlightByPath = new Map<string, number>()
  url = ''
  private readonly server: http.Server
  private readonly timers = new Set<NodeJS.Timeout>()

  constructor(public secret: string) {
    this.server = http.createServer((req, res) => this.handle(req, res))
  }

  async listen(pathname = '/hook'): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve))
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}${pathname}`
    return this
  }

  /** POSTs answered 2xx. */
  get accepted(): ReceivedPost[] {
    return this.posts.filter((p) => p.status >= 200 && p.status < 300)
  }

  private later(ms: number, fn: () => void): void {
    const timer = setTimeout(() => {
      this.timers.delete(timer)
      fn()
    }, ms)
    this.timers.add(timer)
  }

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://receiver')
      if (req.method === 'GET') this.answerCrc(url, req, res)
      else if (req.method === 'POST') this.answerPost(Buffer.concat(chunks).toString('utf8'), req, res)
      else res.writeHead(405).end()
    })
  }

  private answerCrc(url: URL, req: http.IncomingMessage, res: http.ServerResponse): void {
    const n = ++this.crcCount
    this.crcUserAgents.push(req.headers['user-agent'])
    const hold = this.crcHold?.(n)
    if (hold) {
      void hold.then(() => this.answerCrcNow(url, res))
      return
    }
    this.answerCrcNow(url, res)
  }

  private answerCrcNow(url: URL, res: http.ServerResponse): void {
    if (res.destroyed) return
    const token = url.searchParams.get('crc_token')
    if (token === null) {
      res.writeHead(400).end('missing crc_token')
      return
    }
    const send = (status: number, body: string, headers: Record<string, string> = { 'content-type': 'application/json' }): void => {
      res.writeHead(status, headers).end(body)
    }
    switch (this.crcMode) {
      case 'correct': return send(200, JSON.stringify({ response_token: expectedSignature(this.secret, token) }))
      case 'wrong': return send(200, JSON.stringify({ response_token: expectedSignature(`${this.secret}x`, token) }))
      case 'not-json': return send(200, 'ok', { 'content-type': 'text/plain' })
      case 'redirect': return send(302, '', { location: 'https://example.com/elsewhere' })
      case 'error': return send(500, '{"error":"boom"}')
      case 'hang': return this.later(5000, () => send(200, JSON.stringify({ response_token: expectedSignature(this.secret, token) })))
    }
  }

  private answerPost(body: string, req: http.IncomingMessage, res: http.ServerResponse): void {
    const signature = req.headers['x-twitter-webhooks-signature'] as string | undefined
    let json: Record<string, unknown>
    try {
      json = JSON.parse(body) as Record<string, unknown>
    } catch {
      json = {}
    }
    const post: ReceivedPost = {
      body,
      json,
      signature,
      signatureValid: signature !== undefined && sameString(signature, expectedSignature(this.secret, body)),
      at: Date.now(),
      status: 0,
      path: new URL(req.url ?? '/', 'http://receiver').pathname,
      userAgent: req.headers['user-agent'],
      headers: req.headers
    }
    this.posts.push(post)
    const reply = this.onPost(post, this.posts.length)
    post.status = reply.status ?? 200
    this.countInFlight(post.path, +1)
    const finish = (): void => {
      this.countInFlight(post.path, -1)
      if (!res.destroyed) res.writeHead(post.status, { 'content-type': 'application/json', ...(reply.headers ?? {}) }).end(reply.body ?? '{}')
    }
    if (reply.release) void reply.release.then(() => (reply.delayMs ? this.later(reply.delayMs, finish) : finish()))
    else if (reply.delayMs) this.later(reply.delayMs, finish)
    else finish()
  }

  private countInFlight(path: string, delta: number): void {
    this.inFlight += delta
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight)
    const now = (this.inFlightByPath.get(path) ?? 0) + delta
    this.inFlightByPath.set(path, now)
    this.maxInFlightByPath.set(path, Math.max(this.maxInFlightByPath.get(path) ?? 0, now))
  }

  /** POSTs to `path` in flight right now. */
  inFlightAt(path: string): number {
    return this.inFlightByPath.get(path) ?? 0
  }

  /** The receiver's URL with another path (a second webhook on the same origin). */
  urlFor(pathname: string): string {
    return new URL(pathname, this.url).href
  }

  async close(): Promise<void> {
    for (const timer of this.timers) clearTimeout(timer)
    this.timers.clear()
    this.server.closeAllConnections()
    await new Promise<void>((resolve) => this.server.close(() => resolve()))
  }
}

export async function startReceiver(t: Test, secret: string, pathname = '/hook'): Promise<Receiver> {
  const r = await new Receiver(secret).listen(pathname)
  t.teardown(() => r.close())
  return r
}

/** An app's OAuth callback (redirect URI) on loopback: records each URL the browser is sent back to. */
export interface CallbackReceiver {
  /** http://127.0.0.1:<port> */
  origin: string
  /** The callback URL: `${origin}/callback`. */
  url: string
  /** The next URL the browser brings back to the callback (15 s at most). */
  next(): Promise<URL>
}

export async function startCallbackReceiver(t: Test): Promise<CallbackReceiver> {
  const waiting: Array<(u: URL) => void> = []
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', `http://${req.headers.host}`)
    if (url.pathname !== '/callback') {
      res.writeHead(404).end()
      return
    }
    waiting.shift()?.(url)
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end('<!doctype html><html lang="en"><title>Back in the app</title><p id="back">Back in the app</p></html>')
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(
    () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve())
        // The browser outlives the test and would keep its keep-alive socket open.
        server.closeAllConnections()
      })
  )
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return {
    origin,
    url: `${origin}/callback`,
    next: () =>
      new Promise<URL>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('the browser did not come back to the callback within 15 s')), 15_000)
        waiting.push((u) => {
          clearTimeout(timer)
          resolve(u)
        })
      })
  }
}
