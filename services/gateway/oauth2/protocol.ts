import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { safeEqual } from '../../common/auth/oauth1'
import type { App } from '../../common/auth/records'
import { messageText } from '../../common/echo'
import { ClassicError, PROBLEM_DETAIL_MAX_CHARS } from '../../common/errors'
import type { Store } from '../../common/store/types'
import { appByClientId } from './clients'

/**
 * The RFC 6749 side of the token and revocation endpoints: the JSON error
 * shape (§5.2), form parameters that may appear at most once (§3.2), and
 * client authentication (§2.3: HTTP Basic for confidential clients, the
 * `client_id` parameter alone for public ones).
 */

export type OAuth2ErrorCode =
  | 'invalid_request'
  | 'invalid_client'
  | 'invalid_grant'
  | 'unsupported_grant_type'
  | 'invalid_scope'
  | 'server_error'

export class OAuth2Error extends Error {
  constructor(
    readonly statusCode: number,
    readonly error: OAuth2ErrorCode,
    readonly description: string,
    readonly headers: Record<string, string> = {}
  ) {
    super(description)
    // A description quoting the request never grows with it.
    this.description = messageText(description, PROBLEM_DETAIL_MAX_CHARS)
  }
}

export const OAuth2Errors = {
  invalidRequest: (description: string) => new OAuth2Error(400, 'invalid_request', description),
  invalidGrant: (description: string) => new OAuth2Error(400, 'invalid_grant', description),
  invalidScope: (description: string) => new OAuth2Error(400, 'invalid_scope', description),
  unsupportedGrantType: (description: string) => new OAuth2Error(400, 'unsupported_grant_type', description),
  /** 401 with a Basic challenge (§5.2), whether or not the client tried the header. */
  invalidClient: (description: string) =>
    new OAuth2Error(401, 'invalid_client', description, { 'www-authenticate': 'Basic realm="oauth2", charset="UTF-8"' })
}

/** No caching of anything the token endpoints answer (§5.1). */
function noStore(reply: FastifyReply): FastifyReply {
  return reply.header('cache-control', 'no-store').header('pragma', 'no-cache')
}

export function sendOAuth2Error(reply: FastifyReply, err: OAuth2Error): FastifyReply {
  noStore(reply).code(err.statusCode).type('application/json; charset=utf-8')
  for (const [k, v] of Object.entries(err.headers)) reply.header(k, v)
  return reply.send({ error: err.error, error_description: err.description })
}

export function sendOAuth2Json(reply: FastifyReply, body: unknown): FastifyReply {
  return noStore(reply).code(200).type('application/json; charset=utf-8').send(body)
}

/**
 * Renders every failure of the token endpoints, including the framework's
 * own (unparseable body, wrong content type, body too large), as an
 * RFC 6749 error; nothing a client sends becomes a 500.
 */
export function installOAuth2ErrorHandler(scope: FastifyInstance): void {
  scope.setErrorHandler((err: FastifyError | OAuth2Error, request: FastifyRequest, reply: FastifyReply) => {
    if (err instanceof OAuth2Error) return sendOAuth2Error(reply, err)
    // The shared rate limiter refuses with a classic 429; the x-rate-limit-* headers are already set.
    if (err instanceof ClassicError && err.statusCode === 429) {
      return sendOAuth2Error(reply, new OAuth2Error(429, 'invalid_request', 'Rate limit exceeded: retry after the time in x-rate-limit-reset.'))
    }
    const status = typeof err.statusCode === 'number' && err.statusCode >= 400 && err.statusCode < 500 ? err.statusCode : 500
    if (status === 500) {
      request.log.error({ err, reqId: request.id }, 'token endpoint failed')
      return sendOAuth2Error(reply, new OAuth2Error(500, 'server_error', 'The authorization server could not complete the request.'))
    }
    const message =
      err.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE'
        ? 'The body must be application/x-www-form-urlencoded.'
        : err.code === 'FST_ERR_CTP_BODY_TOO_LARGE'
          ? 'The request body is too large.'
          : 'The request body could not be parsed.'
    return sendOAuth2Error(reply, new OAuth2Error(status === 415 ? 400 : status, 'invalid_request', message))
  })
}

/**
 * A JSON object body of string parameters, as twitter-api-v2 sends to the
 * token and revoke endpoints (its body-type detection picks JSON for every
 * /2/ path); null members are parameters not given. Anything else in JSON
 * is refused like any other non-form body.
 */
function jsonParams(body: unknown): Map<string, string> | undefined {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return undefined
  const params = new Map<string, string>()
  for (const [name, value] of Object.entries(body)) {
    if (value === null) continue
    if (typeof value !== 'string') throw OAuth2Errors.invalidRequest(`The parameter ${name.slice(0, 60)} must be a string.`)
    params.set(name, value)
  }
  return params
}

/** The form parameters, each at most once; a body that is neither a form nor a JSON object of strings is refused. */
export function formParams(request: FastifyRequest): Map<string, string> {
  const json = request.rawForm === undefined && /^application\/json\b/i.test(request.headers['content-type'] ?? '') ? jsonParams(request.body) : undefined
  if (request.rawForm === undefined && json === undefined) {
    const hasBody = request.body !== undefined && request.body !== null
    throw OAuth2Errors.invalidRequest(hasBody ? 'The body must be application/x-www-form-urlencoded.' : 'The request has no form body.')
  }
  const params = json ?? new Map<string, string>()
  for (const [name, value] of Object.entries(json ? {} : ((request.body ?? {}) as Record<string, string | string[]>))) {
    if (Array.isArray(value)) throw OAuth2Errors.invalidRequest(`The parameter ${name.slice(0, 60)} is repeated.`)
    params.set(name, value)
  }
  // Parameters belong in the body; a query string would end up in logs and caches.
  const q = request.url.indexOf('?')
  if (q >= 0 && request.url.length > q + 1) throw OAuth2Errors.invalidRequest('Send the parameters in the form body, not in the query string.')
  return params
}

interface BasicCredentials {
  id: string
  secret: string
}

/** RFC 6749 §2.3.1: base64 of form-encoded `client_id:client_secret`. */
function parseBasic(header: string): BasicCredentials {
  const m = /^Basic\s+([A-Za-z0-9+/=_-]+)\s*$/i.exec(header)
  if (!m) throw OAuth2Errors.invalidClient('The Authorization header is not valid HTTP Basic credentials.')
  const decoded = Buffer.from(m[1] as string, 'base64').toString('utf8')
  const colon = decoded.indexOf(':')
  if (colon < 0) throw OAuth2Errors.invalidClient('The Basic credentials have no client secret part.')
  try {
    const decode = (s: string): string => decodeURIComponent(s.replace(/\+/g, ' '))
    return { id: decode(decoded.slice(0, colon)), secret: decode(decoded.slice(colon + 1)) }
  } catch {
    throw OAuth2Errors.invalidClient('The Basic credentials are not correctly encoded.')
  }
}

export interface AuthenticatedClient {
  app: App
  clientId: string
}

/**
 * Identifies and authenticates the client. A confidential client must send
 * HTTP Basic with its secret; a public client names itself with
 * `client_id` (in the body, or Basic with an empty secret). One method only.
 */
export async function authenticateClient(store: Store, request: FastifyRequest, params: Map<string, string>): Promise<AuthenticatedClient> {
  const header = request.headers.authorization
  const basic = header !== undefined && header.trim() !== '' ? parseBasic(header.trim()) : undefined
  const bodyId = params.get('client_id')
  // twitter-api-v2 sends the secret in HTTP Basic and repeats it in the body: the same secret twice is one method.
  const bodySecret = params.get('client_secret')
  if (bodySecret !== undefined && !(basic !== undefined && safeEqual(bodySecret, basic.secret))) {
    throw OAuth2Errors.invalidClient('client_secret in the body is not accepted: confidential clients authenticate with HTTP Basic.')
  }
  if (basic && bodyId !== undefined && bodyId !== basic.id) throw OAuth2Errors.invalidRequest('client_id in the body differs from the Basic credentials.')
  const clientId = basic?.id ?? bodyId
  if (clientId === undefined || clientId === '') throw OAuth2Errors.invalidClient('Client authentication is missing: send HTTP Basic credentials or client_id.')
  const app = await appByClientId(store, clientId)
  if (!app?.oauth2) throw OAuth2Errors.invalidClient('Unknown client.')
  if (app.oauth2.confidential) {
    if (!basic) throw OAuth2Errors.invalidClient('This confidential client must authenticate with HTTP Basic (client id and client secret).')
    if (app.oauth2.client_secret === undefined || !safeEqual(basic.secret, app.oauth2.client_secret)) {
      throw OAuth2Errors.invalidClient('Client authentication failed.')
    }
  } else if (basic && basic.secret !== '') {
    throw OAuth2Errors.invalidClient('This is a public client: it has no client secret.')
  }
  return { app, clientId }
}
