import path from 'node:path'
import OAuth from 'oauth-1.0a'
import { createHmac } from 'node:crypto'
import type { Test } from 'tap'
import { MemoryBus } from '../services/common/bus/memory'
import type { Bus } from '../services/common/bus/types'
import { type Config, loadConfig } from '../services/common/config'
import { createContext } from '../services/common/context'
import { createLogger } from '../services/common/logger'
import { startRuntime, type Runtime } from '../services/common/runtime'
import type { ServiceDefinition } from '../services/common/service'
import { MemoryStore } from '../services/common/store/memory'
import type { Store } from '../services/common/store/types'
import type { AccessLevel, AccessToken, App, User } from '../services/common/auth/records'
import { createApp, createUser, issueAccessToken, issueBearer } from '../services/gateway/identity'
import { ALL_SERVICES } from '../services/embedded/services'
import { eventually, tempDir } from './support/util'

/**
 * Builds the gateway for tests the way `make run` does (embedded: every
 * service, memory bus, journaled memory store) on free loopback ports, or
 * with the services, bus and store a test passes (real Kafka / Redis from
 * test/support). The runtime is closed when the test ends.
 */

export { eventually, tempDir }

export function testConfig(t: Test, env: Record<string, string> = {}): Config {
  return loadConfig({
    PORT: '0',
    SANDBOX_PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    DATA_DIR: tempDir(t),
    WEBHOOK_ALLOW_INSECURE: 'true',
    ...env
  })
}

export interface StartOptions {
  services?: ServiceDefinition[]
  env?: Record<string, string>
  bus?: Bus
  store?: Store
  serviceName?: string
}

export async function startTestRuntime(t: Test, options: StartOptions = {}): Promise<Runtime> {
  const config = testConfig(t, options.env)
  const log = createLogger(config.logLevel, options.serviceName ?? 'test')
  const store = options.store ?? (await MemoryStore.open(path.join(config.dataDir, 'state')))
  const bus = options.bus ?? new MemoryBus(config.busPartitions, log)
  const ctx = await createContext({ serviceName: options.serviceName ?? 'test', config, bus, store, log })
  const runtime = await startRuntime({ services: options.services ?? ALL_SERVICES, ctx })
  t.teardown(() => runtime.close())
  return runtime
}

export interface TestIdentity {
  app: App
  user: User
  password: string
  token: AccessToken
  bearer: string
}

let counter = 0

/** An app, a user with an access token on it, and the app's bearer token. */
export async function createIdentity(store: Store, options: { access?: AccessLevel; screenName?: string; app?: App } = {}): Promise<TestIdentity> {
  counter++
  const app = options.app ?? (await createApp(store, { name: `test app ${counter}`, access_level: options.access ?? 'read-write-dm', callback_urls: ['http://127.0.0.1/callback'] }))
  const password = 'correct horse battery'
  const user = await createUser(store, options.screenName ?? `user_${process.pid % 10000}_${counter}`, password)
  const token = await issueAccessToken(store, app, user, options.access ?? app.access_level)
  const { token: bearer } = await issueBearer(store, app)
  return { app, user, password, token, bearer }
}

export interface RequestOptions {
  query?: Record<string, string>
  /** Sent as application/x-www-form-urlencoded (signed). */
  form?: Record<string, string>
  json?: unknown
  headers?: Record<string, string>
}

export interface TestResponse {
  status: number
  headers: Headers
  text: string
  json: <T = Record<string, unknown>>() => T
}

/**
 * Appends the query with RFC 3986 encoding (space as %20), as OAuth clients
 * send it: URLSearchParams would write spaces as "+", which the oauth-1.0a
 * library signs literally while servers (RFC 5849 §3.4.1.3.1) decode it as a space.
 */
function buildUrl(url: string, query?: Record<string, string>): string {
  if (!query || Object.keys(query).length === 0) return url
  const encoded = Object.entries(query)
    .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`)
    .join('&')
  return `${url}${url.includes('?') ? '&' : '?'}${encoded}`
}

async function send(method: string, url: string, headers: Record<string, string>, body: string | undefined): Promise<TestResponse> {
  const res = await fetch(url, { method, headers, body, redirect: 'manual' })
  const text = await res.text()
  return { status: res.status, headers: res.headers, text, json: <T>() => JSON.parse(text) as T }
}

function formBody(form: Record<string, string>): string {
  return new URLSearchParams(form).toString()
}

/**
 * Sends a request signed with OAuth 1.0a user context by the independent
 * `oauth-1.0a` client library (so the server is checked against a real
 * client, not against its own signing code).
 */
export async function oauth1Request(method: string, url: string, id: { app: App; token: AccessToken }, options: RequestOptions = {}): Promise<TestResponse> {
  const oauth = new OAuth({
    consumer: { key: id.app.consumer_key, secret: id.app.consumer_secret },
    signature_method: 'HMAC-SHA1',
    hash_function: (base, key) => createHmac('sha1', key).update(base).digest('base64')
  })
  const full = buildUrl(url, options.query)
  const data = options.form ?? {}
  const auth = oauth.authorize({ url: full, method, data }, { key: id.token.token, secret: id.token.secret })
  const headers: Record<string, string> = { ...oauth.toHeader(auth), ...(options.headers ?? {}) }
  let body: string | undefined
  if (options.form) {
    headers['content-type'] = 'application/x-www-form-urlencoded'
    body = formBody(options.form)
  } else if (options.json !== undefined) {
    headers['content-type'] = 'application/json'
    body = JSON.stringify(options.json)
  }
  return send(method, full, headers, body)
}

export async function bearerRequest(method: string, url: string, bearer: string, options: RequestOptions = {}): Promise<TestResponse> {
  const headers: Record<string, string> = { authorization: `Bearer ${bearer}`, ...(options.headers ?? {}) }
  let body: string | undefined
  if (options.json !== undefined) {
    headers['content-type'] = 'application/json'
    body = JSON.stringify(options.json)
  } else if (options.form) {
    headers['content-type'] = 'application/x-www-form-urlencoded'
    body = formBody(options.form)
  }
  return send(method, buildUrl(url, options.query), headers, body)
}

export async function plainRequest(method: string, url: string, options: RequestOptions = {}): Promise<TestResponse> {
  const headers: Record<string, string> = { ...(options.headers ?? {}) }
  let body: string | undefined
  if (options.json !== undefined) {
    headers['content-type'] = 'application/json'
    body = JSON.stringify(options.json)
  } else if (options.form) {
    headers['content-type'] = 'application/x-www-form-urlencoded'
    body = formBody(options.form)
  }
  return send(method, buildUrl(url, options.query), headers, body)
}
