import * as oauth from 'oauth4webapi'
import type { Test } from 'tap'
import type { App, User } from '../../services/common/auth/records'
import type { Runtime } from '../../services/common/runtime'
import { createApp, createUser } from '../../services/gateway/identity'
import { configureClient } from '../../services/gateway/oauth2/clients'
import { newSecret } from '../../services/common/ids'
import { startTestRuntime } from '../helper'
import { redisStore, startRedis } from '../support/infra'

/**
 * Shared by the OAuth 2.0 tests: the authorization server as the
 * `oauth4webapi` client library sees it (built by hand from the endpoints,
 * no discovery), clients and users, and the consent form driven over plain
 * HTTP for tests that are not about the browser.
 */

export const REDIRECT_URI = 'http://127.0.0.1:9/callback'
export const PASSWORD = 'correct horse battery'

/** oauth4webapi refuses http:// endpoints unless told this is a test server on loopback. */
export const INSECURE = { [oauth.allowInsecureRequests]: true } as const

export function authorizationServer(base: string): oauth.AuthorizationServer {
  return {
    issuer: base,
    authorization_endpoint: `${base}/i/oauth2/authorize`,
    token_endpoint: `${base}/2/oauth2/token`,
    revocation_endpoint: `${base}/2/oauth2/revoke`,
    code_challenge_methods_supported: ['S256']
  }
}

export interface Client {
  app: App
  client: oauth.Client
  auth: oauth.ClientAuth
  secret?: string
}

let counter = 0

/** The embedded runtime; with `redis`, its store is a real redis-server started for the test. */
export async function startServer(t: Test, env: Record<string, string> = {}, options: { redis?: boolean } = {}): Promise<Runtime> {
  const store = options.redis ? await redisStore(t, await startRedis(t)) : undefined
  return startTestRuntime(t, { env: { OPERATOR_TOKEN: 'operator-token-for-tests', ...env }, ...(store ? { store } : {}) })
}

export async function newClient(rt: Runtime, options: { confidential?: boolean; redirectUris?: string[] } = {}): Promise<Client> {
  counter++
  const app = await createApp(rt.ctx.store, { name: `oauth2 app ${counter}`, access_level: 'read-write-dm' })
  const configured = await configureClient(rt.ctx.store, app.id, { confidential: options.confidential ?? true, redirect_uris: options.redirectUris ?? [REDIRECT_URI] })
  const o2 = configured.oauth2 as NonNullable<App['oauth2']>
  const client: oauth.Client = { client_id: o2.client_id }
  if (o2.client_secret !== undefined) return { app: configured, client, auth: oauth.ClientSecretBasic(o2.client_secret), secret: o2.client_secret }
  return { app: configured, client, auth: oauth.None() }
}

export async function newUser(rt: Runtime): Promise<User> {
  return createUser(rt.ctx.store, `o2_${newSecret(6).replace(/[^A-Za-z0-9]/g, 'x')}`.slice(0, 15), PASSWORD)
}

export interface AuthorizationRequest {
  url: URL
  verifier: string
  state: string
}

/** An authorization URL with PKCE (S256) and state, as a client application builds it. */
export async function authorizationUrl(base: string, client: Client, scope: string, overrides: Record<string, string | null> = {}): Promise<AuthorizationRequest> {
  const verifier = oauth.generateRandomCodeVerifier()
  const state = oauth.generateRandomState()
  const url = new URL(authorizationServer(base).authorization_endpoint as string)
  const params: Record<string, string | null> = {
    response_type: 'code',
    client_id: client.client.client_id,
    redirect_uri: REDIRECT_URI,
    scope,
    state,
    code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
    code_challenge_method: 'S256',
    ...overrides
  }
  for (const [k, v] of Object.entries(params)) if (v !== null) url.searchParams.set(k, v)
  return { url, verifier, state }
}

export interface Reply {
  status: number
  headers: Headers
  text: string
}

export async function send(method: string, url: string | URL, headers: Record<string, string> = {}, body?: string): Promise<Reply> {
  const res = await fetch(url, { method, headers, body, redirect: 'manual', signal: AbortSignal.timeout(10_000) })
  return { status: res.status, headers: res.headers, text: await res.text() }
}

/** The cookies of one browser session, for driving the consent form without a browser. */
export class CookieJar {
  private readonly cookies = new Map<string, string>()
  header(): string {
    return [...this.cookies].map(([k, v]) => `${k}=${v}`).join('; ')
  }
  take(headers: Headers): void {
    for (const line of headers.getSetCookie()) {
      const pair = line.split(';')[0] as string
      const i = pair.indexOf('=')
      this.cookies.set(pair.slice(0, i).trim(), pair.slice(i + 1).trim())
    }
  }
}

export function hiddenField(html: string, name: string): string | undefined {
  return new RegExp(`name="${name}" value="([^"]*)"`).exec(html)?.[1]
}

/**
 * Opens the authorization URL and submits the consent form (with the
 * password the first time; later the jar's session signs in). Returns the
 * final answer: a redirect to the client, or a page.
 */
export async function submitConsent(url: URL, options: { jar: CookieJar; user?: User; password?: string; decision?: 'allow' | 'deny' }): Promise<Reply> {
  const page = await send('GET', url, { cookie: options.jar.header() })
  options.jar.take(page.headers)
  if (page.status !== 200) return page
  const form: Record<string, string> = {
    request_id: hiddenField(page.text, 'request_id') ?? '',
    csrf_token: hiddenField(page.text, 'csrf_token') ?? '',
    decision: options.decision ?? 'allow'
  }
  const signedInAs = hiddenField(page.text, 'signed_in_as')
  if (signedInAs !== undefined && options.user === undefined) form.signed_in_as = signedInAs
  if (options.user) {
    form.screen_name = options.user.screen_name
    form.password = options.password ?? PASSWORD
  }
  const action = new URL('authorize', url)
  const answer = await send('POST', action, { 'content-type': 'application/x-www-form-urlencoded', cookie: options.jar.header() }, new URLSearchParams(form).toString())
  options.jar.take(answer.headers)
  return answer
}

/** The callback URL a consent answer redirects to. */
export function callbackOf(reply: Reply): URL {
  const location = reply.headers.get('location')
  if (reply.status !== 303 || location === null) throw new Error(`expected a redirect to the client, got ${reply.status}: ${reply.text.slice(0, 300)}`)
  return new URL(location)
}

/** The whole front channel over HTTP: authorization URL, consent, and the validated callback parameters. */
export async function authorize(base: string, client: Client, scope: string, jar: CookieJar, user?: User): Promise<{ params: URLSearchParams; verifier: string }> {
  const request = await authorizationUrl(base, client, scope)
  const answer = await submitConsent(request.url, user ? { jar, user } : { jar })
  const params = oauth.validateAuthResponse(authorizationServer(base), client.client, callbackOf(answer), request.state)
  return { params, verifier: request.verifier }
}

/** Exchanges the code with the library and returns the processed token response. */
export async function exchange(base: string, client: Client, params: URLSearchParams, verifier: string): Promise<oauth.TokenEndpointResponse> {
  const as = authorizationServer(base)
  const response = await oauth.authorizationCodeGrantRequest(as, client.client, client.auth, params, REDIRECT_URI, verifier, INSECURE)
  return oauth.processAuthorizationCodeResponse(as, client.client, response)
}

/** Runs `fn` and returns the oauth4webapi error it throws (fails the test when it does not throw). */
export async function rejection<E extends Error>(t: Test, fn: () => Promise<unknown>, kind: new (...args: never[]) => E): Promise<E> {
  try {
    await fn()
  } catch (err) {
    if (err instanceof kind) return err
    t.fail(`expected ${kind.name}, got ${(err as Error).name}: ${(err as Error).message}`)
    throw err
  }
  t.fail(`expected ${kind.name}, but the call succeeded`)
  throw new Error('no error')
}

/** A v2 request with an OAuth 2.0 user access token. */
export async function withToken(method: string, url: string, token: string, json?: unknown): Promise<Reply & { json: <T = Record<string, unknown>>() => T }> {
  const headers: Record<string, string> = { authorization: `Bearer ${token}` }
  if (json !== undefined) headers['content-type'] = 'application/json'
  const reply = await send(method, url, headers, json === undefined ? undefined : JSON.stringify(json))
  return { ...reply, json: <T>() => JSON.parse(reply.text) as T }
}
