import { createHmac } from 'node:crypto'
import OAuth from 'oauth-1.0a'
import type { AccessToken, App } from '../../services/common/auth/records'

/**
 * HTTP for tests: plain, bearer and OAuth 1.0a signed requests, the one
 * OAuth 1.0a signer every test that signs by hand uses, and a cookie jar
 * for driving sign-in forms without a browser. The signer is the independent
 * `oauth-1.0a` client library, so the server is checked against a real
 * client, not against its own signing code.
 */

export interface RequestOptions {
  query?: Record<string, string>
  /** Sent as application/x-www-form-urlencoded (signed). */
  form?: Record<string, string>
  json?: unknown
  /** Sent as it is, with the content-type of `headers` (a form body is signed, as with `form`). */
  body?: string
  headers?: Record<string, string>
}

export interface TestResponse {
  status: number
  headers: Headers
  text: string
  json: <T = Record<string, unknown>>() => T
}

/** Who signs: the app (consumer) and, for user context, its access token. */
export interface Signer {
  app: Pick<App, 'consumer_key' | 'consumer_secret'>
  token?: Pick<AccessToken, 'token' | 'secret'>
}

export interface SignOptions {
  /** Overrides the library's timestamp (seconds). */
  timestamp?: number
  nonce?: string
  /** Signs with this consumer secret instead of the app's. */
  consumerSecret?: string
  /** Parameters signed as form body or query (the caller puts them there); a repeated key has its values in an array. */
  data?: Record<string, string | string[]>
  /** Sign without a token (consumer only). */
  noToken?: boolean
}

/** OAuth 1.0a parameters (oauth_signature included) for a request, computed by the oauth-1.0a library. */
export function oauthParams(method: string, url: string, id: Signer, options: SignOptions = {}): OAuth.Authorization {
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

/** The Authorization header of `oauthParams`: its oauth_* parameters sorted and percent-encoded (RFC 5849 §3.5.1). */
export function oauthHeader(method: string, url: string, id: Signer, options: SignOptions = {}): string {
  const params = oauthParams(method, url, id, options)
  const enc = (s: string): string => encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
  const pairs = Object.entries(params)
    .filter(([k]) => k.startsWith('oauth_'))
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
  return 'OAuth ' + pairs.map(([k, v]) => `${enc(k)}="${enc(String(v))}"`).join(', ')
}

/**
 * Appends the query with RFC 3986 encoding (space as %20), as OAuth clients
 * send it: URLSearchParams would write spaces as "+", which the oauth-1.0a
 * library signs literally while servers (RFC 5849 §3.4.1.3.1) decode it as a space.
 */
export function buildUrl(url: string, query?: Record<string, string>): string {
  if (!query || Object.keys(query).length === 0) return url
  const encoded = Object.entries(query)
    .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`)
    .join('&')
  return `${url}${url.includes('?') ? '&' : '?'}${encoded}`
}

async function request(method: string, url: string | URL, headers: Record<string, string>, body: string | FormData | undefined, signal?: AbortSignal): Promise<TestResponse> {
  const res = await fetch(url, { method, headers, body, redirect: 'manual', ...(signal ? { signal } : {}) })
  const text = await res.text()
  return { status: res.status, headers: res.headers, text, json: <T>() => JSON.parse(text) as T }
}

/** One request as given (redirects not followed), bounded to 10 s. */
export function send(method: string, url: string | URL, headers: Record<string, string> = {}, body?: string | FormData): Promise<TestResponse> {
  return request(method, url, headers, body, AbortSignal.timeout(10_000))
}

/** The body of `options` and its content-type (added to `headers`). */
function bodyOf(options: RequestOptions, headers: Record<string, string>, formFirst: boolean): string | undefined {
  if (options.body !== undefined) return options.body
  if (options.form && (formFirst || options.json === undefined)) {
    headers['content-type'] = 'application/x-www-form-urlencoded'
    return new URLSearchParams(options.form).toString()
  }
  if (options.json !== undefined) {
    headers['content-type'] = 'application/json'
    return JSON.stringify(options.json)
  }
  return undefined
}

/** The parameters of a body that OAuth 1.0a signs: a form's (RFC 5849 §3.4.1.3.1), none for any other. */
function signedData(options: RequestOptions): Record<string, string> {
  if (options.form) return options.form
  const type = Object.entries(options.headers ?? {}).find(([k]) => k.toLowerCase() === 'content-type')?.[1]
  if (options.body !== undefined && type === 'application/x-www-form-urlencoded') return Object.fromEntries(new URLSearchParams(options.body))
  return {}
}

/** Sends a request signed with OAuth 1.0a user context (the one signer, `oauthHeader`). */
export async function oauth1Request(method: string, url: string, id: Required<Signer>, options: RequestOptions = {}): Promise<TestResponse> {
  const full = buildUrl(url, options.query)
  const headers: Record<string, string> = { Authorization: oauthHeader(method, full, id, { data: signedData(options) }), ...(options.headers ?? {}) }
  return request(method, full, headers, bodyOf(options, headers, true))
}

export async function bearerRequest(method: string, url: string, bearer: string, options: RequestOptions = {}): Promise<TestResponse> {
  const headers: Record<string, string> = { authorization: `Bearer ${bearer}`, ...(options.headers ?? {}) }
  return request(method, buildUrl(url, options.query), headers, bodyOf(options, headers, false))
}

export async function plainRequest(method: string, url: string, options: RequestOptions = {}): Promise<TestResponse> {
  const headers: Record<string, string> = { ...(options.headers ?? {}) }
  return request(method, buildUrl(url, options.query), headers, bodyOf(options, headers, false))
}

/** The cookies of one browser session, for driving the sign-in and consent forms without a browser. */
export class CookieJar {
  readonly cookies = new Map<string, string>()
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

/** The value of a hidden form field of a page. */
export function hiddenField(html: string, name: string): string | undefined {
  return new RegExp(`name="${name}" value="([^"]*)"`).exec(html)?.[1]
}
