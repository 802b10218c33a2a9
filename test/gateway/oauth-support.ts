import { createHmac } from 'node:crypto'
import tap, { type Test } from 'tap'
import OAuth from 'oauth-1.0a'
import { OAuth as OAuthLibrary } from 'oauth'
import type { AccessToken, App } from '../../services/common/auth/records'
import type { Runtime } from '../../services/common/runtime'
import type { ServiceDefinition } from '../../services/common/service'
import { gatewayService } from '../../services/gateway/service'
import { startTestRuntime } from '../helper'
import { redisStore, startRedis, type RedisServer } from '../support/infra'

/**
 * Shared by the authentication tests: the two store backends every test runs
 * against (memory, and a real redis-server started once per test file), a
 * small service with authenticated routes of each kind, and a signer built on
 * the independent `oauth-1.0a` library whose timestamp and nonce a test can
 * choose.
 */

export type Backend = 'memory' | 'redis'
export const BACKENDS: Backend[] = ['memory', 'redis']

let sharedRedis: Promise<RedisServer> | undefined

/** One redis-server per test file, stopped when the file's tests end. */
function redisForFile(): Promise<RedisServer> {
  sharedRedis ??= startRedis(tap)
  return sharedRedis
}

/** Authenticated routes of every kind, to exercise the shared request authentication and rate limits. */
export const probeService: ServiceDefinition = {
  name: 'gateway',
  routes: async (app) => {
    app.get('/2/probe/whoami', { config: { auth: { schemes: ['oauth1-user', 'bearer-app'] } } }, async (request) => {
      const auth = request.auth
      return { data: { scheme: auth?.scheme, app_id: auth?.app.id, user_id: auth && auth.scheme !== 'bearer-app' ? auth.userId : null } }
    })
    app.post('/2/probe/echo', { config: { auth: { schemes: ['oauth1-user'] } } }, async (request) => ({ data: { body: request.body ?? null } }))
    app.post('/2/probe/dm', { config: { auth: { schemes: ['oauth1-user'], access: 'dm' } } }, async () => ({ data: { sent: true } }))
    app.get('/2/probe/limited', { config: { auth: { schemes: ['oauth1-user', 'bearer-app'] }, rateLimit: { family: 'probe', limit: 3 } } }, async () => ({ data: { ok: true } }))
    app.get('/12/probe/accounts', { config: { auth: { schemes: ['oauth1-user'] } } }, async () => ({ data: [], data_type: 'account', request: { params: {} } }))
    app.get('/12/probe/limited', { config: { auth: { schemes: ['oauth1-user'] }, rateLimit: { family: 'probe-ads', limit: 2 } } }, async () => ({ data: [], data_type: 'account', request: { params: {} } }))
  }
}

export async function startBackend(t: Test, backend: Backend, env: Record<string, string> = {}, services: ServiceDefinition[] = [gatewayService, probeService]): Promise<Runtime> {
  const store = backend === 'redis' ? await redisStore(t, await redisForFile()) : undefined
  return startTestRuntime(t, { services, env, ...(store ? { store } : {}) })
}

export interface SignOptions {
  /** Overrides the library's timestamp (seconds). */
  timestamp?: number
  nonce?: string
  /** Signs with this consumer secret instead of the app's. */
  consumerSecret?: string
  /** Parameters signed as form body or query (the caller puts them there). */
  data?: Record<string, string>
  /** Sign without a token (consumer only). */
  noToken?: boolean
}

/** OAuth 1.0a parameters for a request, computed by the oauth-1.0a library. */
export function oauthParams(method: string, url: string, id: { app: App; token?: Pick<AccessToken, 'token' | 'secret'> }, options: SignOptions = {}): OAuth.Authorization {
  const oauth = new OAuth({
    consumer: { key: id.app.consumer_key, secret: options.consumerSecret ?? id.app.consumer_secret },
    signature_method: 'HMAC-SHA1',
    hash_function: (base, key) => createHmac('sha1', key).update(base).digest('base64')
  })
  if (options.timestamp !== undefined) oauth.getTimeStamp = () => options.timestamp as number
  if (options.nonce !== undefined) oauth.getNonce = () => options.nonce as string
  const token = options.noToken || !id.token ? undefined : { key: id.token.token, secret: id.token.secret }
  return oauth.authorize({ url, method, data: options.data ?? {} }, token)
}

/** The Authorization header of `oauthParams`. */
export function oauthHeader(method: string, url: string, id: { app: App; token?: Pick<AccessToken, 'token' | 'secret'> }, options: SignOptions = {}): string {
  const params = oauthParams(method, url, id, options)
  const enc = (s: string): string => encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
  return 'OAuth ' + Object.entries(params).filter(([k]) => k.startsWith('oauth_')).map(([k, v]) => `${enc(k)}="${enc(String(v))}"`).join(', ')
}

export interface Reply {
  status: number
  headers: Headers
  text: string
  json: <T = Record<string, unknown>>() => T
}

export async function send(method: string, url: string, headers: Record<string, string> = {}, body?: string): Promise<Reply> {
  const res = await fetch(url, { method, headers, body, redirect: 'manual', signal: AbortSignal.timeout(10_000) })
  const text = await res.text()
  return { status: res.status, headers: res.headers, text, json: <T>() => JSON.parse(text) as T }
}

export const FORM = { 'content-type': 'application/x-www-form-urlencoded' }

/** The single classic error of a response body. */
export function classic(reply: Reply): { code: number; message: string } {
  const body = reply.json<{ errors: Array<{ code: number; message: string }> }>()
  return body.errors[0] as { code: number; message: string }
}

// ------------------------------------------------------------------ the npm `oauth` client, promisified

export interface OAuthClient {
  requestToken(extra?: Record<string, string>): Promise<{ token: string; secret: string; results: Record<string, unknown> }>
  accessToken(token: string, secret: string, verifier: string): Promise<{ token: string; secret: string; results: Record<string, unknown> }>
  get(url: string, token: string, secret: string): Promise<{ status: number; body: string }>
  post(url: string, token: string, secret: string, form?: Record<string, string>): Promise<{ status: number; body: string }>
}

export class OAuthClientError extends Error {
  constructor(
    readonly statusCode: number,
    readonly data: string
  ) {
    super(`HTTP ${statusCode}: ${data}`)
  }
}

function clientError(err: unknown): Error {
  const e = err as { statusCode?: number; data?: string }
  return typeof e?.statusCode === 'number' ? new OAuthClientError(e.statusCode, String(e.data ?? '')) : (err as Error)
}

/** The npm `oauth` package's OAuth class pointed at the test server (a client the server did not write). */
export function oauthClient(base: string, app: App, callback: string | undefined): OAuthClient {
  const client = new OAuthLibrary(`${base}/oauth/request_token`, `${base}/oauth/access_token`, app.consumer_key, app.consumer_secret, '1.0A', callback ?? null, 'HMAC-SHA1')
  const call = <T>(fn: (cb: (err: unknown, ...rest: unknown[]) => void) => void, map: (...rest: unknown[]) => T): Promise<T> =>
    new Promise((resolve, reject) => fn((err, ...rest) => (err ? reject(clientError(err)) : resolve(map(...rest)))))
  return {
    requestToken: (extra = {}) =>
      call(
        (cb) => client.getOAuthRequestToken(extra, cb as never),
        (token, secret, results) => ({ token: token as string, secret: secret as string, results: results as Record<string, unknown> })
      ),
    accessToken: (token, secret, verifier) =>
      call(
        (cb) => client.getOAuthAccessToken(token, secret, verifier, cb as never),
        (t, s, results) => ({ token: t as string, secret: s as string, results: results as Record<string, unknown> })
      ),
    get: (url, token, secret) =>
      new Promise((resolve, reject) =>
        client.get(url, token, secret, (err, body, res) => {
          const e = err as { statusCode?: number; data?: string } | null
          if (e && typeof e.statusCode === 'number') resolve({ status: e.statusCode, body: String(e.data ?? '') })
          else if (e) reject(e as unknown as Error)
          else resolve({ status: res?.statusCode ?? 0, body: String(body) })
        })
      ),
    post: (url, token, secret, form = {}) =>
      new Promise((resolve, reject) =>
        client.post(url, token, secret, form, 'application/x-www-form-urlencoded', (err, body, res) => {
          const e = err as { statusCode?: number; data?: string } | null
          if (e && typeof e.statusCode === 'number') resolve({ status: e.statusCode, body: String(e.data ?? '') })
          else if (e) reject(e as unknown as Error)
          else resolve({ status: res?.statusCode ?? 0, body: String(body) })
        })
      )
  }
}

// ------------------------------------------------------------------ the sign-in form over plain HTTP

/** A minimal cookie jar for driving the sign-in form without a browser. */
export class CookieJar {
  readonly cookies = new Map<string, string>()
  header(): string {
    return [...this.cookies].map(([k, v]) => `${k}=${v}`).join('; ')
  }
  take(headers: Headers): void {
    for (const line of headers.getSetCookie()) {
      const [pair] = line.split(';')
      const i = (pair as string).indexOf('=')
      this.cookies.set((pair as string).slice(0, i).trim(), (pair as string).slice(i + 1).trim())
    }
  }
}

export function hiddenField(html: string, name: string): string | undefined {
  return new RegExp(`name="${name}" value="([^"]*)"`).exec(html)?.[1]
}

/**
 * Opens the sign-in page for `token` and submits it: with credentials when
 * given, else as the signed-in account. Returns the answer to the post.
 */
export async function submitSignIn(
  base: string,
  token: string,
  options: { mode?: 'authorize' | 'authenticate'; screenName?: string; password?: string; decision?: 'allow' | 'deny'; jar?: CookieJar } = {}
): Promise<Reply> {
  const jar = options.jar ?? new CookieJar()
  const mode = options.mode ?? 'authorize'
  const page = await send('GET', `${base}/oauth/${mode}?oauth_token=${encodeURIComponent(token)}`, { cookie: jar.header() })
  jar.take(page.headers)
  if (page.status !== 200) return page
  const form: Record<string, string> = { oauth_token: token, csrf_token: hiddenField(page.text, 'csrf_token') ?? '', decision: options.decision ?? 'allow' }
  const signedInAs = hiddenField(page.text, 'signed_in_as')
  if (signedInAs) form.signed_in_as = signedInAs
  if (options.screenName !== undefined) form.screen_name = options.screenName
  if (options.password !== undefined) form.password = options.password
  const answer = await send('POST', `${base}/oauth/${mode}`, { ...FORM, cookie: jar.header() }, new URLSearchParams(form).toString())
  jar.take(answer.headers)
  return answer
}

/** The verifier of a callback redirect. */
export function verifierOf(reply: Reply): string {
  const location = reply.headers.get('location')
  if (reply.status !== 303 || !location) throw new Error(`expected a redirect to the callback, got ${reply.status}: ${reply.text.slice(0, 300)}`)
  const v = new URL(location).searchParams.get('oauth_verifier')
  if (!v) throw new Error(`no oauth_verifier in ${location}`)
  return v
}
