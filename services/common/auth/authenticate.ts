import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { Config } from '../config'
import { Classic, ClassicError, ProblemError, Problems } from '../errors'
import type { Store } from '../store/types'
import { formPairs, OAuthHeaderError, parseOAuthHeader, type ParamPair, safeEqual, sign } from './oauth1'
import { type AccessLevel, type AccessToken, allows, type App, AuthKeys, type BearerRecord, lowerLevel } from './records'
import { targetPath } from '../request-target'

/**
 * Request authentication shared by every service. A route declares what it
 * accepts in its config:
 *
 *   config: { auth: { schemes: ['oauth1-user', 'bearer-app'], access: 'write' } }
 *
 * and the preValidation hook below (after body parsing, before schema
 * validation, so an unauthenticated request is 401 rather than 400) sets
 * `request.auth`. Failures are classic errors (codes 32, 89, 93, 135, 215,
 * 220) or, on v2 and ads paths, the unsupported-authentication Problem; each
 * interface's error handler renders them in its own shape.
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

/** A verified OAuth 1.0a request. */
export interface VerifiedOAuth1 {
  app: App
  /** Every signed parameter (query, form body, Authorization header), one value per name. */
  params: Map<string, string>
  /** The access token, when the request was verified in user context. */
  token?: AccessToken
}

/**
 * Which token secret signs the request:
 *  - 'access': an OAuth 1.0a access token is required (user context);
 *  - 'none': the consumer alone (POST oauth/request_token);
 *  - a resolver: the secret of some other token (the request token of POST
 *    oauth/access_token); `unknown` is the error when it has none.
 */
export type TokenMode = 'access' | 'none' | { secretOf: (token: string, app: App) => Promise<string | undefined>; unknown: () => Error }

/** The lowest-cost answer to "are there OAuth 1.0a parameters in this request?" */
function carriesOAuth1(request: FastifyRequest): boolean {
  return /[?&]oauth_signature=/.test(request.url) || (request.rawForm !== undefined && /(^|&)oauth_signature=/.test(request.rawForm))
}

function classicPath(request: FastifyRequest): boolean {
  const shape = request.routeOptions?.config?.errorShape
  return shape === 'classic' || (shape === undefined && /^\/(oauth|oauth2|1\.1)\//.test(targetPath(request.url)))
}

/** Read-only tokens cannot write (403 code 220); direct messages need the dm level (403 code 93). */
function insufficientAccess(need: 'read' | 'write' | 'dm'): ClassicError {
  if (need === 'dm') return Classic.dmPermission()
  return new ClassicError(403, { code: 220, message: 'Your credentials do not allow access to this resource. This token has read-only access.' })
}

/**
 * Callers whose credential checked out but does not open the route (another
 * kind of credential, a missing scope, a lower access level). The platform
 * still counts such a request against the caller's rate limits and reports
 * them (`x-rate-limit-*`) on the 403: services/common/ratelimit.ts reads the
 * caller from here. A request whose credential failed has no caller.
 */
const refusedCallers = new WeakMap<FastifyRequest, AuthContext>()

export function refusedCaller(request: FastifyRequest): AuthContext | undefined {
  return refusedCallers.get(request)
}

function refuse(request: FastifyRequest, caller: AuthContext, err: Error): Error {
  refusedCallers.set(request, caller)
  return err
}

function oauth1Context(app: App, token: AccessToken): AuthContext & { accessLevel: AccessLevel } {
  return { scheme: 'oauth1-user', app, userId: token.user_id, screenName: token.screen_name, token, accessLevel: lowerLevel(app.access_level, token.access_level) }
}

/** Consumer keys remembered per process (bench/http: one Redis round trip of five per signed request). */
const APP_ID_CACHE_SIZE = 10_000

export class Authenticator {
  /**
   * consumer key -> app id. The mapping never changes once an app exists (a
   * secret rotation keeps the key), and the app record itself is still read
   * on every request and must carry the same key, so a stale entry can only
   * cost a lookup, never accept a request.
   */
  private readonly appIds = new Map<string, string>()

  constructor(
    private readonly store: Store,
    private readonly config: Config
  ) {}

  async appByConsumerKey(consumerKey: string): Promise<App | undefined> {
    const cached = this.appIds.get(consumerKey)
    if (cached !== undefined) {
      const app = await this.store.getJson<App>(AuthKeys.app(cached))
      if (app && app.consumer_key === consumerKey) return app
      this.appIds.delete(consumerKey)
    }
    const appId = await this.store.get(AuthKeys.appByKey(consumerKey))
    if (appId === undefined) return undefined
    const app = await this.store.getJson<App>(AuthKeys.app(appId))
    if (app && app.consumer_key === consumerKey) {
      if (this.appIds.size >= APP_ID_CACHE_SIZE) this.appIds.delete(this.appIds.keys().next().value as string)
      this.appIds.set(consumerKey, appId)
    }
    return app
  }

  /** Authenticates `request` against `requirement`; throws the interface-neutral error on failure. */
  async authenticate(request: FastifyRequest, requirement: AuthRequirement, publicBase: string): Promise<AuthContext> {
    const header = request.headers.authorization
    const scheme = header === undefined ? undefined : header.trim().split(/\s+/, 1)[0]?.toLowerCase()
    if (scheme === 'oauth' || (scheme === undefined && carriesOAuth1(request))) {
      if (!requirement.schemes.includes('oauth1-user')) {
        const refusal = unsupported(request, 'oauth1-user', requirement)
        // The signature is still checked: a genuine caller is counted against its limits (refusedCaller), a forged one is not.
        const verified = await this.verifyOAuth1(request, publicBase, 'access').catch(() => undefined)
        if (verified?.token) throw refuse(request, oauth1Context(verified.app, verified.token), refusal)
        throw refusal
      }
      const verified = await this.verifyOAuth1(request, publicBase, 'access')
      const caller = oauth1Context(verified.app, verified.token as AccessToken)
      const need = requirement.access ?? (request.method === 'GET' || request.method === 'HEAD' ? 'read' : 'write')
      if (!allows(caller.accessLevel, need)) throw refuse(request, caller, insufficientAccess(need))
      return caller
    }
    if (scheme === 'bearer') {
      const token = (header as string).trim().slice(6).trim()
      const record = token === '' ? undefined : await this.store.getJson<BearerRecord>(AuthKeys.bearer(token))
      if (!record) throw Classic.invalidToken()
      const app = await this.store.getJson<App>(AuthKeys.app(record.app_id))
      if (!app) throw Classic.invalidToken()
      if (record.kind === 'app') {
        const caller: AuthContext = { scheme: 'bearer-app', app, bearerToken: token }
        if (!requirement.schemes.includes('bearer-app')) throw refuse(request, caller, unsupported(request, 'bearer-app', requirement))
        return caller
      }
      // A user token dies with its expiry, and with the app's OAuth 2.0 client.
      if (Date.parse(record.expires_at) <= Date.now() || !app.oauth2) throw Classic.invalidToken()
      const caller: AuthContext = { scheme: 'oauth2-user', app, userId: record.user_id, scopes: record.scopes, bearerToken: token }
      if (!requirement.schemes.includes('oauth2-user')) throw refuse(request, caller, unsupported(request, 'oauth2-user', requirement))
      const missing = (requirement.scopes ?? []).filter((s) => !record.scopes.includes(s))
      if (missing.length > 0) throw refuse(request, caller, new InsufficientScopeError(requirement.scopes ?? [], missing))
      return caller
    }
    // No credentials the route understands. The 1.1 and OAuth interfaces answer 400 code 215.
    if (classicPath(request)) throw Classic.badAuthData()
    throw Problems.generic(401, 'Unauthorized')
  }

  /**
   * Verifies an OAuth 1.0a signed request (RFC 5849 §3.4, HMAC-SHA1) in the
   * order the public platform reports problems: malformed or missing
   * parameters (215), timestamp (135), consumer (32), token (89), signature
   * (32), nonce replay (32). The nonce is consumed only after the signature
   * checks out, so forged requests cannot burn a client's nonces.
   */
  async verifyOAuth1(request: FastifyRequest, publicBase: string, tokens: TokenMode): Promise<VerifiedOAuth1> {
    const { pairs, params, collapsed } = uniqueParams(collectParams(request))
    const consumerKey = params.get('oauth_consumer_key')
    const signature = params.get('oauth_signature')
    const timestamp = params.get('oauth_timestamp')
    const nonce = params.get('oauth_nonce')
    const method = params.get('oauth_signature_method')
    const missing = (['oauth_consumer_key', 'oauth_signature', 'oauth_signature_method', 'oauth_timestamp', 'oauth_nonce'] as const).filter((k) => !params.get(k))
    if (missing.length > 0) throw Classic.badAuthData(`Missing ${missing.join(', ')}.`)
    if (method !== 'HMAC-SHA1') throw Classic.couldNotAuthenticate(`Unsupported oauth_signature_method "${String(method).slice(0, 40)}"; use HMAC-SHA1.`)
    const version = params.get('oauth_version')
    // "1.0A" is what the npm `oauth` package (and other 1.0a-era clients) send; the public platform accepts it.
    if (version !== undefined && !/^1\.0a?$/i.test(version)) throw Classic.badAuthData('oauth_version must be 1.0.')
    // The public platform accepts only ASCII nonces.
    if (!/^[\x21-\x7e]{1,255}$/.test(nonce as string)) throw Classic.badAuthData('oauth_nonce must be 1 to 255 printable ASCII characters.')
    if (!/^\d{1,12}$/.test(timestamp as string)) throw Classic.badAuthData('oauth_timestamp must be a number of seconds since the epoch.')
    if (Math.abs(Date.now() / 1000 - Number(timestamp)) > this.config.oauthTimestampWindowS) throw Classic.timestampOutOfBounds()

    const app = await this.appByConsumerKey(consumerKey as string)
    if (!app) throw Classic.couldNotAuthenticate()

    const tokenValue = params.get('oauth_token')
    let token: AccessToken | undefined
    let tokenSecret = ''
    if (tokens === 'access') {
      if (!tokenValue) throw Classic.badAuthData('oauth_token is required: this endpoint needs user context.')
      token = await this.store.getJson<AccessToken>(AuthKeys.token(tokenValue))
      if (!token || token.app_id !== app.id) throw Classic.invalidToken()
      tokenSecret = token.secret
    } else if (tokens !== 'none') {
      const secret = tokenValue ? await tokens.secretOf(tokenValue, app) : undefined
      if (secret === undefined) throw tokens.unknown()
      tokenSecret = secret
    }

    let url: string
    try {
      url = new URL(publicBase + targetPath(request.url)).toString()
    } catch {
      throw Classic.couldNotAuthenticate('The request URL cannot be reconstructed.')
    }
    if (!signatureVariants(request, pairs, collapsed).some((c) => safeEqual(sign(request.method, url, c, app.consumer_secret, tokenSecret), signature as string))) {
      throw Classic.couldNotAuthenticate()
    }
    const fresh = await this.store.setIfAbsent(AuthKeys.nonce(consumerKey as string, nonce as string), '1', this.config.oauthTimestampWindowS * 2000)
    if (!fresh) throw Classic.couldNotAuthenticate('The oauth_nonce was already used.')
    return token ? { app, params, token } : { app, params }
  }
}

/**
 * A credential of a kind the route does not take: the v2 unsupported-authentication
 * Problem, or on the 1.1 and OAuth interfaces (which have no Problems) their
 * classic 403 code 220.
 */
function unsupported(request: FastifyRequest, used: AuthScheme, requirement: AuthRequirement): Error {
  if (classicPath(request)) return Classic.forbidden()
  return Problems.unsupportedAuthentication(SCHEME_NAMES[used], requirement.schemes.map((s) => SCHEME_NAMES[s]))
}

/**
 * One value per protocol parameter name (a repeated oauth_* is 215). A
 * protocol parameter repeated with the same value in two places
 * (twitter-api-v2 sends oauth_token and oauth_verifier both in the header and
 * in the body) counts once; the signature is then accepted over either form.
 * A request parameter may repeat (RFC 5849 §3.4.1.3.2 sorts the copies by
 * value): the Python ads SDK sends a list property as repeated keys.
 */
export function uniqueParams(all: ParamPair[]): { pairs: ParamPair[]; params: Map<string, string>; collapsed: boolean } {
  const params = new Map<string, string>()
  const pairs: ParamPair[] = []
  let collapsed = false
  for (const [k, v] of all) {
    const seen = params.get(k)
    if (seen === undefined) {
      params.set(k, v)
      pairs.push([k, v])
    } else if (seen === v && k.startsWith('oauth_')) {
      collapsed = true
    } else if (!k.startsWith('oauth_')) {
      pairs.push([k, v])
    } else {
      throw Classic.badAuthData(`Duplicate parameter "${k.slice(0, 60)}".`)
    }
  }
  return { pairs, params, collapsed }
}

/**
 * The parameter lists a client may have signed: the normalized one first;
 * with protocol parameters repeated in two places, the list with both
 * copies; with a `+` in the query, the list reading it literally (some
 * client libraries sign `+` as a plus sign, RFC 5849 reads it as a space).
 */
function signatureVariants(request: FastifyRequest, pairs: ParamPair[], collapsed: boolean): ParamPair[][] {
  const variants = [pairs]
  if (collapsed) variants.push(collectParams(request))
  const q = request.url.indexOf('?')
  if (q >= 0 && request.url.includes('+', q)) {
    try {
      variants.push(uniqueParams(collectParams(request, false)).pairs)
    } catch {
      // Not a different reading after all.
    }
  }
  return variants
}

/** Query + form body + Authorization header parameters, in that order (RFC 5849 §3.4.1.3.1). */
export function collectParams(request: FastifyRequest, queryPlusIsSpace = true): ParamPair[] {
  try {
    const q = request.url.indexOf('?')
    const pairs = q < 0 ? [] : formPairs(request.url.slice(q + 1), queryPlusIsSpace)
    if (request.rawForm !== undefined) pairs.push(...formPairs(request.rawForm))
    const header = parseOAuthHeader(request.headers.authorization)
    if (header) pairs.push(...header)
    return pairs
  } catch (err) {
    if (err instanceof OAuthHeaderError) throw Classic.badAuthData(err.message)
    throw err
  }
}

/** The public base URL a client signed against: PUBLIC_URL when configured, else the request's own scheme and host. */
export function requestBaseUrl(request: FastifyRequest, configured: string): string {
  if (configured !== '') return configured
  const host = request.headers.host ?? 'localhost'
  return `${request.protocol}://${host}`
}

/** Registers the preValidation hook that enforces each route's `config.auth`. */
export function registerAuthentication(app: FastifyInstance, authenticator: Authenticator, configuredBase: string): void {
  app.decorate('authenticator', authenticator)
  app.decorate('publicBase', configuredBase)
  app.addHook('preValidation', async (request) => {
    const requirement = request.routeOptions.config.auth
    if (!requirement) return
    request.auth = await authenticator.authenticate(request, requirement, requestBaseUrl(request, configuredBase))
  })
}

/**
 * A valid OAuth 2.0 user token without a scope the route needs: 403 with the
 * missing scopes named, and RFC 6750's `insufficient_scope` challenge.
 */
export class InsufficientScopeError extends ProblemError {
  constructor(
    readonly required: string[],
    readonly missing: string[]
  ) {
    super(403, 'about:blank', `Missing OAuth 2.0 scopes: ${missing.join(', ')}. This endpoint requires the scopes ${required.join(', ')}.`, { required_scopes: required, missing_scopes: missing })
  }

  challenge(): string {
    return `Bearer error="insufficient_scope", scope="${this.required.join(' ')}"`
  }
}

/**
 * For operations on one user's private data (e.g. activity subscriptions to
 * direct-message events): the caller must act for `userId` itself, with an
 * OAuth 1.0a token whose access level allows `access` (the level overrides
 * scopes), or an OAuth 2.0 user token holding `scopes`. App-only tokens and
 * other users' tokens are refused. Routes call it once they know the user.
 */
export function assertUserContextFor(auth: AuthContext | undefined, userId: string, need: { access: 'read' | 'write' | 'dm'; scopes: string[] }, parameter = 'user_id'): void {
  if (!auth || auth.scheme === 'bearer-app') {
    const supported = [SCHEME_NAMES['oauth1-user'], SCHEME_NAMES['oauth2-user']].join(', ')
    throw new ProblemError(403, 'unsupported-authentication', `Authenticating with ${SCHEME_NAMES['bearer-app']} is forbidden for a user's private activity.  Supported authentication types are [${supported}], with a token of that user.`)
  }
  if (auth.userId !== userId) {
    throw Problems.notAuthorizedForResource(`Only the user ${userId} can authorize access to this user's private activity: use a token of that user.`, {
      value: userId,
      resource_id: userId,
      resource_type: 'user',
      section: 'data',
      parameter
    })
  }
  if (auth.scheme === 'oauth1-user') {
    if (!allows(auth.accessLevel, need.access)) throw insufficientAccess(need.access)
    return
  }
  const missing = need.scopes.filter((s) => !auth.scopes.includes(s))
  if (missing.length > 0) throw new InsufficientScopeError(need.scopes, missing)
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The server's authenticator (routes that verify credentials themselves, like the OAuth steps, use it). */
    authenticator: Authenticator
    /** PUBLIC_URL of this server ('' = the request's own host). */
    publicBase: string
  }
}

export { ClassicError }
