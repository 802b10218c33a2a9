import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { Config } from '../config'
import { Classic, ClassicError, Problems } from '../errors'
import type { Store } from '../store/types'
import { formPairs, OAuthHeaderError, parseOAuthHeader, type ParamPair, safeEqual, sign } from './oauth1'
import { type AccessLevel, type AccessToken, allows, type App, AuthKeys, type BearerRecord } from './records'

/**
 * Request authentication shared by every service. A route declares what it
 * accepts in its config:
 *
 *   config: { auth: { schemes: ['oauth1-user', 'bearer-app'], access: 'write' } }
 *
 * and the preValidation hook below (after body parsing, before schema
 * validation, so an unauthenticated request is 401 rather than 400) sets
 * `request.auth`. Failures are classic errors (codes 32, 89, 135, 215) or the
 * unsupported-authentication Problem; each interface's error handler renders
 * them in its own shape.
 */

export type AuthScheme = 'oauth1-user' | 'bearer-app' | 'oauth2-user'

export const SCHEME_NAMES: Record<AuthScheme, string> = {
  'oauth1-user': 'OAuth 1.0a User Context',
  'bearer-app': 'OAuth 2.0 Application-Only',
  'oauth2-user': 'OAuth 2.0 User Context'
}

export interface AuthRequirement {
  schemes: AuthScheme[]
  /** What an OAuth 1.0a token's access level must allow. Default: read for GET/HEAD, write otherwise. */
  access?: 'read' | 'write' | 'dm'
  /** OAuth 2.0 user-context scopes needed (OAuth 1.0a permissions override scopes). */
  scopes?: string[]
}

export type AuthContext =
  | { scheme: 'oauth1-user'; app: App; userId: string; screenName: string; token: AccessToken; accessLevel: AccessLevel }
  | { scheme: 'bearer-app'; app: App; bearerToken: string }
  | { scheme: 'oauth2-user'; app: App; userId: string; scopes: string[]; bearerToken: string }

declare module 'fastify' {
  interface FastifyContextConfig {
    auth?: AuthRequirement
  }
  interface FastifyRequest {
    auth?: AuthContext
    /** The raw application/x-www-form-urlencoded body, kept for OAuth signatures. */
    rawForm?: string
  }
}

export class Authenticator {
  constructor(
    private readonly store: Store,
    private readonly config: Config
  ) {}

  async appByConsumerKey(consumerKey: string): Promise<App | undefined> {
    const appId = await this.store.get(AuthKeys.appByKey(consumerKey))
    return appId === undefined ? undefined : this.store.getJson<App>(AuthKeys.app(appId))
  }

  /** Authenticates `request` against `requirement`; throws the interface-neutral error on failure. */
  async authenticate(request: FastifyRequest, requirement: AuthRequirement, publicBase: string): Promise<AuthContext> {
    const header = request.headers.authorization
    const scheme = header === undefined ? undefined : header.trim().split(/\s+/, 1)[0]?.toLowerCase()
    if (scheme === 'oauth' || (scheme === undefined && hasOAuthQueryParams(request))) {
      if (!requirement.schemes.includes('oauth1-user')) throw unsupported('oauth1-user', requirement)
      const ctx = await this.verifyOAuth1(request, publicBase, true)
      if (ctx.scheme !== 'oauth1-user') throw Classic.invalidToken()
      const need = requirement.access ?? (request.method === 'GET' || request.method === 'HEAD' ? 'read' : 'write')
      if (!allows(ctx.accessLevel, need)) throw need === 'dm' ? Classic.dmPermission() : Classic.readOnlyApplication()
      return ctx
    }
    if (scheme === 'bearer') {
      const token = (header as string).trim().slice(6).trim()
      const record = token === '' ? undefined : await this.store.getJson<BearerRecord>(AuthKeys.bearer(token))
      if (!record) throw Classic.invalidToken()
      const app = await this.store.getJson<App>(AuthKeys.app(record.app_id))
      if (!app) throw Classic.invalidToken()
      if (record.kind === 'app') {
        if (!requirement.schemes.includes('bearer-app')) throw unsupported('bearer-app', requirement)
        return { scheme: 'bearer-app', app, bearerToken: token }
      }
      if (Date.parse(record.expires_at) <= Date.now()) throw Classic.invalidToken()
      if (!requirement.schemes.includes('oauth2-user')) throw unsupported('oauth2-user', requirement)
      const missing = (requirement.scopes ?? []).filter((s) => !record.scopes.includes(s))
      if (missing.length > 0) {
        throw Problems.clientForbidden(`Missing scopes: ${missing.join(', ')}. This endpoint requires the scopes ${(requirement.scopes ?? []).join(', ')}.`, 'client-not-enrolled')
      }
      return { scheme: 'oauth2-user', app, userId: record.user_id, scopes: record.scopes, bearerToken: token }
    }
    throw Problems.generic(401, 'Unauthorized')
  }

  /**
   * Verifies an OAuth 1.0a signed request. With `requireToken`, an access token
   * must be present and valid (user context); without it (request_token),
   * only the consumer is authenticated and `token` is absent.
   */
  async verifyOAuth1(request: FastifyRequest, publicBase: string, requireToken: boolean): Promise<AuthContext | { scheme: 'oauth1-consumer'; app: App; params: Map<string, string> }> {
    const pairs = collectParams(request)
    const params = new Map<string, string>()
    for (const [k, v] of pairs) {
      if (params.has(k)) throw Classic.badAuthData(`Duplicate parameter "${k}".`)
      params.set(k, v)
    }
    const consumerKey = params.get('oauth_consumer_key')
    const signature = params.get('oauth_signature')
    const timestamp = params.get('oauth_timestamp')
    const nonce = params.get('oauth_nonce')
    const method = params.get('oauth_signature_method')
    if (!consumerKey || !signature || !timestamp || !nonce) throw Classic.badAuthData()
    if (method !== 'HMAC-SHA1') throw Classic.couldNotAuthenticate('Unsupported signature method.')
    const version = params.get('oauth_version')
    if (version !== undefined && version !== '1.0') throw Classic.couldNotAuthenticate('Unsupported oauth_version.')
    // The nonce must be printable ASCII (service-spec: "oauth_nonce (ASCII only)").
    if (!/^[\x21-\x7e]{1,128}$/.test(nonce)) throw Classic.couldNotAuthenticate('Invalid oauth_nonce.')
    if (!/^\d{1,12}$/.test(timestamp)) throw Classic.timestampOutOfBounds()
    const skew = Math.abs(Date.now() / 1000 - Number(timestamp))
    if (skew > this.config.oauthTimestampWindowS) throw Classic.timestampOutOfBounds()

    const app = await this.appByConsumerKey(consumerKey)
    if (!app) throw Classic.couldNotAuthenticate()
    const tokenValue = params.get('oauth_token')
    let token: AccessToken | undefined
    if (requireToken) {
      if (!tokenValue) throw Classic.badAuthData()
      token = await this.store.getJson<AccessToken>(AuthKeys.token(tokenValue))
      if (!token || token.app_id !== app.id) throw Classic.invalidToken()
    }
    const url = publicBase + pathOf(request.url)
    const expected = sign(request.method, url, pairs, app.consumer_secret, token?.secret ?? '')
    if (!safeEqual(expected, signature)) throw Classic.couldNotAuthenticate()
    // The nonce is consumed only after the signature checks out, so forged requests cannot burn nonces.
    const fresh = await this.store.setIfAbsent(AuthKeys.nonce(consumerKey, nonce), '1', this.config.oauthTimestampWindowS * 2000)
    if (!fresh) throw Classic.couldNotAuthenticate('Nonce already used.')
    if (!token) return { scheme: 'oauth1-consumer', app, params }
    return { scheme: 'oauth1-user', app, userId: token.user_id, screenName: token.screen_name, token, accessLevel: lowerOf(app.access_level, token.access_level) }
  }
}

/** The token's level can never exceed the app's current level (an app downgraded later downgrades its tokens). */
function lowerOf(a: AccessLevel, b: AccessLevel): AccessLevel {
  const order: AccessLevel[] = ['read', 'read-write', 'read-write-dm']
  return order[Math.min(order.indexOf(a), order.indexOf(b))] as AccessLevel
}

function unsupported(used: AuthScheme, requirement: AuthRequirement): Error {
  return Problems.unsupportedAuthentication(SCHEME_NAMES[used], requirement.schemes.map((s) => SCHEME_NAMES[s]))
}

function pathOf(url: string): string {
  const q = url.indexOf('?')
  return q < 0 ? url : url.slice(0, q)
}

function hasOAuthQueryParams(request: FastifyRequest): boolean {
  return /[?&]oauth_signature=/.test(request.url)
}

/** Query + form body + Authorization header parameters, in that order (RFC 5849 §3.4.1.3.1). */
export function collectParams(request: FastifyRequest): ParamPair[] {
  try {
    const q = request.url.indexOf('?')
    const pairs = q < 0 ? [] : formPairs(request.url.slice(q + 1))
    if (request.rawForm !== undefined) pairs.push(...formPairs(request.rawForm))
    const header = parseOAuthHeader(request.headers.authorization)
    if (header) pairs.push(...header)
    return pairs
  } catch (err) {
    if (err instanceof OAuthHeaderError) throw Classic.badAuthData(err.message)
    throw err
  }
}

/** The public base URL a client signed against: PUBLIC_URL when configured, else the request's own host. */
export function requestBaseUrl(request: FastifyRequest, configured: string): string {
  if (configured !== '') return configured
  const host = request.headers.host ?? 'localhost'
  return `${request.protocol}://${host}`
}

/** Registers the preValidation hook that enforces each route's `config.auth`. */
export function registerAuthentication(app: FastifyInstance, authenticator: Authenticator, configuredBase: string): void {
  app.addHook('preValidation', async (request) => {
    const requirement = request.routeOptions.config.auth
    if (!requirement) return
    request.auth = await authenticator.authenticate(request, requirement, requestBaseUrl(request, configuredBase))
  })
}

export { ClassicError }
