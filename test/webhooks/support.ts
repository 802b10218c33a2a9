import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { createHmac, randomUUID, timingSafeEqual } from 'node:crypto'
import type { Test } from 'tap'
import type { Delivery } from '../../services/activity/deliveries'
import { deliveryKey } from '../../services/activity/matcher'
import { TOPICS } from '../../services/common/bus/types'
import type { Runtime } from '../../services/common/runtime'
import { MemoryStore } from '../../services/common/store/memory'
import type { Store } from '../../services/common/store/types'
import { webhooksService } from '../../services/webhooks/service'
import { openApiValidators, productResourceTypes } from '../support/openapi'
import { bearerRequest, createIdentity, eventually, startTestRuntime, tempDir, type StartOptions, type TestIdentity } from '../helper'
import { sleep } from '../support/util'

/**
 * Test support of the webhooks tests: a real receiver on loopback (node:http)
 * that answers CRC checks the way docs/webhooks.md describes (or breaks the
 * rules on purpose) and verifies the signature of every POST with its own
 * HMAC code; OpenAPI validation; publishing deliveries and events.
 */

// ---------------------------------------------------------------- receiver

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
function expectedSignature(secret: string, message: string): string {
  return `sha256=${createHmac('sha256', Buffer.from(secret, 'utf8')).update(Buffer.from(message, 'utf8')).digest('base64')}`
}

function sameString(a: string, b: string): boolean {
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

// ---------------------------------------------------------------- runtime

/** Settings every webhooks test starts from: short timeout and retry schedule. */
export const FAST_ENV: Record<string, string> = {
  WEBHOOK_TIMEOUT: '1500ms',
  WEBHOOK_RETRY_SCHEDULE: '0,200ms,400ms',
  WEBHOOK_CRC_INTERVAL: '1h',
  OPERATOR_TOKEN: 'operator-secret-for-tests'
}

export async function startWebhooks(t: Test, options: StartOptions = {}): Promise<Runtime> {
  return startTestRuntime(t, { services: [webhooksService], ...options, env: { ...FAST_ENV, ...(options.env ?? {}) } })
}

export interface Registered {
  id: TestIdentity
  receiver: Receiver
  webhookId: string
}

/** An identity, a receiver answering CRC with its consumer secret, and the webhook registered on it. */
export async function registerWebhook(t: Test, rt: Runtime, id?: TestIdentity): Promise<Registered> {
  const identity = id ?? (await createIdentity(rt.ctx.store))
  const receiver = await startReceiver(t, identity.app.consumer_secret)
  const res = await bearerRequest('POST', `${rt.baseUrl}/2/webhooks`, identity.bearer, { json: { url: receiver.url } })
  if (res.status !== 200) throw new Error(`webhook registration failed: ${res.status} ${res.text}`)
  return { id: identity, receiver, webhookId: res.json<{ data: { id: string } }>().data.id }
}

/** `store` with one of its methods answered `ms` late (the others as they are): a slow round trip where a test needs one. */
export function withLateMethod(store: Store, method: 'batch' | 'setIfAbsent', ms: number): Store {
  return new Proxy(store, {
    get(target, prop, receiver) {
      if (prop === method) return async (...args: unknown[]) => (await sleep(ms), (target[method] as (...a: unknown[]) => Promise<unknown>).apply(target, args))
      const value = Reflect.get(target, prop, receiver) as unknown
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value
    }
  })
}

/**
 * The webhooks service with one slot per webhook on a memory store that `slow` wraps, one webhook
 * registered, and its receiver noting when each POST arrived (answering 200).
 */
export async function oneSlotWebhook(t: Test, slow: (store: Store) => Store, env: Record<string, string>): Promise<Registered & { rt: Runtime; memory: MemoryStore; arrivals: number[] }> {
  const memory = await MemoryStore.open(tempDir(t, 'gw-slot-'))
  t.teardown(() => memory.close())
  const rt = await startWebhooks(t, { store: slow(memory), env: { WEBHOOK_CONCURRENCY: '1', ...env } })
  const registered = await registerWebhook(t, rt)
  const arrivals: number[] = []
  registered.receiver.onPost = () => {
    arrivals.push(Date.now())
    return { status: 200 }
  }
  return { ...registered, rt, memory, arrivals }
}

/** One identity and one receiver with two webhooks on it, at `first` and `second` (the receiver answers CRC on both). */
export async function registerTwoWebhooks(t: Test, rt: Runtime, first: string, second: string): Promise<{ id: TestIdentity; receiver: Receiver; webhookIds: [string, string] }> {
  const id = await createIdentity(rt.ctx.store)
  const receiver = await startReceiver(t, id.app.consumer_secret, first)
  const webhookIds: string[] = []
  for (const url of [receiver.url, receiver.urlFor(second)]) {
    const res = await bearerRequest('POST', `${rt.baseUrl}/2/webhooks`, id.bearer, { json: { url } })
    t.equal(res.status, 200, res.text)
    webhookIds.push(res.json<{ data: { id: string } }>().data.id)
  }
  return { id, receiver, webhookIds: webhookIds as [string, string] }
}

// ---------------------------------------------------------------- bus

let sequence = 0

export function numericId(): string {
  sequence++
  return `${Date.now()}${String(sequence).padStart(6, '0')}`.slice(-19)
}

export interface DeliveryInput {
  appId: string
  webhookId?: string
  userId?: string
  createdAt?: string
  text?: string
  eventUuid?: string
}

/** One activity.deliveries message exactly as the activity matcher produces it (schema-checked at publish). */
export function deliveryMessage(input: DeliveryInput): Record<string, unknown> {
  const eventUuid = input.eventUuid ?? numericId()
  const userId = input.userId ?? '2244994945'
  const message: Record<string, unknown> = {
    delivery_id: randomUUID(),
    app_id: input.appId,
    subscription_id: numericId(),
    created_at: input.createdAt ?? new Date().toISOString(),
    envelope: {
      data: {
        event_uuid: eventUuid,
        filter: { user_id: userId },
        event_type: 'post.create',
        tag: 'webhooks-test',
        payload: { id: numericId(), text: input.text ?? 'hello from the test', author_id: userId },
        includes: {}
      }
    }
  }
  if (input.webhookId !== undefined) message.webhook_id = input.webhookId
  return message
}

/** Published as the matcher publishes them: keyed app_id:user_id (deliveryKey), so one app and user share a partition. */
export async function publishDeliveries(rt: Runtime, messages: Array<Record<string, unknown>>): Promise<void> {
  await rt.ctx.bus.publishMany(TOPICS.activityDeliveries, messages.map((m) => ({ key: deliveryKey(m as unknown as Delivery), value: m })))
}

/** Subscribes a test consumer to webhook.dead-letter and collects what arrives. */
export async function collectDeadLetters(t: Test, rt: Runtime): Promise<Array<Record<string, unknown>>> {
  const seen: Array<Record<string, unknown>> = []
  const consumer = await rt.ctx.bus.subscribe({
    groupId: `test-dead-letter-${randomUUID()}`,
    topics: [TOPICS.webhookDeadLetter],
    handler: async (m) => {
      seen.push(m.value as Record<string, unknown>)
    }
  })
  t.teardown(() => consumer.close())
  return seen
}

export async function metricsText(rt: Runtime): Promise<string> {
  return rt.ctx.metrics.metrics()
}

/**
 * Sum of the samples of `name` whose labels include `labels`, read from the
 * Prometheus text, e.g. metricValue(text, 'webhook_deliveries_total', { outcome: 'delivered' }).
 */
export function metricValue(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line)
    if (!m || m[1] !== name) continue
    const have: Record<string, string> = {}
    for (const pair of (m[2] ?? '').matchAll(/([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"/g)) have[pair[1] as string] = pair[2] as string
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) sum += Number(m[3])
  }
  return sum
}

export { eventually }

// ---------------------------------------------------------------- OpenAPI

/** resource-not-found names webhooks and subscriptions (the documented deviation, productResourceTypes). */
const validators = openApiValidators(productResourceTypes)

/** Validator of a public OpenAPI component schema. */
export const openApi = validators.validator

/** undefined when `value` matches the component schema, else ajv's description of why not. */
export const openApiErrors = validators.errors
