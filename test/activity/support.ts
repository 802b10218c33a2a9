import http from 'node:http'
import WebSocket from 'ws'
import type { EventType } from '../../services/activity/event-types'
import { openApiValidators, productResourceTypes } from '../support/openapi'
import { bearerRequest, eventually, oauth1Request, type TestIdentity, type TestResponse } from '../helper'

/**
 * Shared by the activity and stream tests: sample events of every kind,
 * ingest and subscription helpers, real stream clients (node:http and ws)
 * and validators compiled from the public OpenAPI description.
 */

export const OPERATOR_TOKEN = 'operator-token-for-activity-tests'

let seq = 0
export function nextUserId(): string {
  seq++
  return `${1000 + (process.pid % 1000)}${String(Date.now() % 1e6).padStart(6, '0')}${String(seq).padStart(4, '0')}`
}

/** A valid payload of every event kind (schemas/events/activity/<kind>.json). */
export function samplePayload(type: EventType, userId: string, options: { text?: string; other?: string; sent?: boolean } = {}): Record<string, unknown> {
  const other = options.other ?? '2244994945'
  const sender = options.sent === false ? other : userId
  const recipient = options.sent === false ? userId : other
  const text = options.text ?? `hello from ${type}`
  switch (type) {
    case 'post.create':
      return { id: '1445880548472328192', text, author_id: userId, created_at: '2021-10-06T22:43:21.000Z', edit_history_tweet_ids: ['1445880548472328192'] }
    case 'post.delete':
      return { id: '1445880548472328192', author_id: userId }
    case 'dm.sent':
    case 'dm.received':
      return {
        direct_message_events: [
          {
            type: 'message_create',
            id: '1445880548472328193',
            created_timestamp: '1633560201000',
            message_create: { target: { recipient_id: recipient }, sender_id: sender, message_data: { text } }
          }
        ]
      }
    case 'dm.read':
      return { direct_message_mark_read_events: [{ created_timestamp: '1633560201000', sender_id: sender, target: { recipient_id: recipient }, last_read_event_id: '1445880548472328193' }] }
    case 'dm.indicate_typing':
      return { direct_message_indicate_typing_events: [{ created_timestamp: '1633560201000', sender_id: sender, target: { recipient_id: recipient } }] }
    case 'spaces.start':
    case 'spaces.end':
      return { user: { data: { id: userId, username: 'host' } }, broadcast_id: '1qxvvvyLLdnxB', event_type: type === 'spaces.start' ? 'spaces_start' : 'spaces_end', title: text }
    default:
      return { before: 'old value', after: text }
  }
}

export function sampleEvent(type: EventType, userId: string, options: { text?: string; other?: string; sent?: boolean; uuid?: string } = {}): Record<string, unknown> {
  return {
    ...(options.uuid !== undefined ? { event_uuid: options.uuid } : {}),
    event_type: type,
    user_id: userId,
    created_at: new Date().toISOString(),
    payload: samplePayload(type, userId, options),
    includes: { users: [{ id: userId, name: 'Example User', username: `u${userId.slice(-4)}` }] }
  }
}

export async function ingest(baseUrl: string, events: unknown[], token = OPERATOR_TOKEN): Promise<TestResponse> {
  const body = events.map((e) => JSON.stringify(e)).join('\n') + '\n'
  const res = await fetch(`${baseUrl}/admin/activity/events`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/x-ndjson' },
    body
  })
  const text = await res.text()
  return { status: res.status, headers: res.headers, text, json: <T>() => JSON.parse(text) as T }
}

export interface SubscriptionBody {
  event_type: string
  filter: { user_id: string; keyword?: string; direction?: string }
  tag?: string
  webhook_id?: string
}

/**
 * Creates a subscription with the app's bearer token, or in user context with
 * an identity's OAuth 1.0a token (needed for private dm.* events, which only
 * the filtered user can authorize).
 */
export async function subscribe(baseUrl: string, credential: string | TestIdentity, body: SubscriptionBody): Promise<string> {
  const url = `${baseUrl}/2/activity/subscriptions`
  const res = typeof credential === 'string' ? await bearerRequest('POST', url, credential, { json: body }) : await oauth1Request('POST', url, credential, { json: body })
  if (res.status !== 200) throw new Error(`subscription refused: ${res.status} ${res.text}`)
  return res.json<{ data: { subscription: { subscription_id: string } } }>().data.subscription.subscription_id
}

// ---------------------------------------------------------------- stream clients

export interface StreamEnvelope {
  data?: { event_uuid: string; filter: Record<string, unknown>; event_type: string; tag?: string; payload: Record<string, unknown>; includes: Record<string, unknown> }
  errors?: Array<Record<string, unknown>>
}

export interface StreamClient {
  status: number
  headers: Record<string, string | string[] | undefined>
  /** Parsed JSON lines / messages, in order. */
  messages: StreamEnvelope[]
  keepAlives: number[]
  /** The raw text received (HTTP only). */
  raw(): string
  ended: Promise<void>
  waitFor(predicate: (messages: StreamEnvelope[]) => boolean, timeoutMs?: number): Promise<StreamEnvelope[]>
  close(): void
}

/** An HTTP stream read with node:http, splitting on \r\n exactly as a client must. */
export function openHttpStream(baseUrl: string, bearer: string, query: Record<string, string> = {}): Promise<StreamClient> {
  const url = new URL(`${baseUrl}/2/activity/stream`)
  for (const [k, v] of Object.entries(query)) url.searchParams.set(k, v)
  return new Promise((resolve, reject) => {
    const req = http.get(url, { headers: { authorization: `Bearer ${bearer}` }, agent: false }, (res) => {
      res.setEncoding('utf8')
      let raw = ''
      let pending = ''
      const messages: StreamEnvelope[] = []
      const keepAlives: number[] = []
      res.on('data', (chunk: string) => {
        raw += chunk
        pending += chunk
        let i: number
        while ((i = pending.indexOf('\r\n')) >= 0) {
          const line = pending.slice(0, i)
          pending = pending.slice(i + 2)
          if (line === '') keepAlives.push(Date.now())
          else messages.push(JSON.parse(line) as StreamEnvelope)
        }
      })
      const ended = new Promise<void>((done) => {
        res.on('end', done)
        res.on('close', done)
        res.on('error', () => done())
      })
      resolve({
        status: res.statusCode ?? 0,
        headers: res.headers,
        messages,
        keepAlives,
        raw: () => raw,
        ended,
        waitFor: (predicate, timeoutMs = 5000) => eventually(() => (predicate(messages) ? messages : undefined), timeoutMs),
        close: () => req.destroy()
      })
    })
    req.on('error', reject)
  })
}

/** The same stream over WebSocket (the `ws` client, bearer in the Authorization header). */
export function openWsStream(baseUrl: string, bearer: string, query: Record<string, string> = {}): Promise<StreamClient & { ws: WebSocket; closeCode: Promise<number> }> {
  const url = new URL(`${baseUrl.replace(/^http/, 'ws')}/2/activity/stream`)
  for (const [k, v] of Object.entries(query)) url.searchParams.set(k, v)
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers: { authorization: `Bearer ${bearer}` } })
    const messages: StreamEnvelope[] = []
    const keepAlives: number[] = []
    let status = 0
    let closeCodeResolve: (code: number) => void = () => undefined
    const closeCode = new Promise<number>((r) => (closeCodeResolve = r))
    const ended = new Promise<void>((done) => ws.on('close', (code) => {
      closeCodeResolve(code)
      done()
    }))
    ws.on('ping', () => keepAlives.push(Date.now()))
    ws.on('message', (data) => messages.push(JSON.parse(String(data)) as StreamEnvelope))
    ws.on('unexpected-response', (_req, res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (c: string) => (body += c))
      res.on('end', () => reject(Object.assign(new Error(`upgrade refused: ${res.statusCode}`), { status: res.statusCode, body, headers: res.headers })))
    })
    ws.on('upgrade', (res) => (status = res.statusCode ?? 0))
    ws.on('open', () =>
      resolve({
        ws,
        status,
        headers: {},
        messages,
        keepAlives,
        raw: () => '',
        ended,
        closeCode,
        waitFor: (predicate, timeoutMs = 5000) => eventually(() => (predicate(messages) ? messages : undefined), timeoutMs),
        close: () => ws.terminate()
      })
    )
    ws.on('error', (err) => reject(err))
  })
}

// ---------------------------------------------------------------- OpenAPI validation

/**
 * Validators of the public OpenAPI component schemas. One documented
 * deviation where docs/architecture.md wins: filter.direction is stored and
 * returned as the contract spells it (sent/received). Problems are checked
 * against the OpenAPI, resource-not-found with the product's resource types
 * (productResourceTypes).
 */
let problemSchemas: Record<string, string> = {}
const openApi = openApiValidators((schemas) => {
  productResourceTypes(schemas)
  const filter = schemas.ActivitySubscriptionFilter as { properties: { direction: { enum: string[] } } }
  filter.properties.direction.enum = ['sent', 'received']
  // The streaming payload is a oneOf that several kinds satisfy at once; the envelope is checked with the
  // payload left open, and the payload against its kind's schema (OPENAPI_PAYLOADS).
  const envelope = JSON.parse(JSON.stringify(schemas.ActivityStreamingResponse)) as { properties: { data: { properties: Record<string, unknown> } } }
  envelope.properties.data.properties.payload = { type: 'object' }
  schemas.ActivityStreamingEnvelope = envelope as unknown as Record<string, unknown>
  const mapping = (schemas.Problem as { discriminator: { mapping: Record<string, string> } }).discriminator.mapping
  problemSchemas = Object.fromEntries(Object.entries(mapping).map(([type, ref]) => [type, ref.split('/').pop() as string]))
})

export const openApiValidator = openApi.validator
export const openApiErrors = openApi.errors

/**
 * undefined when `problem` is valid for the schema its `type` selects in the
 * OpenAPI's Problem discriminator (an unknown type is itself an error).
 */
export function problemErrors(problem: unknown): string | undefined {
  openApi.validator('Problem') // compiles the document, which fills problemSchemas
  const type = (problem as { type?: unknown } | undefined)?.type
  const schema = typeof type === 'string' ? problemSchemas[type] : undefined
  if (schema === undefined) return `no OpenAPI Problem schema for type ${JSON.stringify(type)}`
  return openApi.errors(schema, problem)
}

/** The OpenAPI payload schema of an event kind (its streaming discriminator), where the description has one. */
export const OPENAPI_PAYLOADS: Partial<Record<EventType, string>> = {
  'post.create': 'Tweet',
  'post.delete': 'PostDeleteActivityResponsePayload',
  'profile.update.bio': 'ProfileUpdateActivityResponsePayload',
  'profile.update.profile_picture': 'ProfileUpdateActivityResponsePayload',
  'profile.update.banner_picture': 'ProfileUpdateActivityResponsePayload',
  'profile.update.geo': 'ProfileUpdateActivityResponsePayload',
  'profile.update.url': 'ProfileUpdateActivityResponsePayload',
  'profile.update.screenname': 'ProfileUpdateActivityResponsePayload',
  'profile.update.verified': 'ProfileUpdateActivityResponsePayload',
  'profile.update.affiliate': 'ProfileUpdateActivityResponsePayload'
}
