import type { FastifyInstance, FastifyRequest } from 'fastify'
import { requestBaseUrl } from '../../common/auth/authenticate'
import { formPairs, safeEqual } from '../../common/auth/oauth1'
import { AuthKeys, type App } from '../../common/auth/records'
import type { ServiceContext } from '../../common/context'
import { Classic, ClassicError } from '../../common/errors'
import { enforceRateLimit } from '../../common/ratelimit'
import { currentBearer, invalidateBearer, issueBearer } from '../identity'

/**
 * OAuth 2.0 app-only: POST oauth2/token issues the app's bearer token (one
 * outstanding per app: the same token comes back until it is invalidated)
 * and POST oauth2/invalidate_token revokes it. Credentials are the consumer
 * key and secret, by HTTP Basic (`enc(key):enc(secret)`) or as
 * `client_id`/`client_secret` form fields. Any credential problem, a grant
 * other than client_credentials, or too frequent calls get 403 code 99, as
 * on the public platform, which asks clients to cache their bearer token
 * (docs/contract.md "OAuth 2.0 app-only"): past the app's window of the
 * `oauth2-app-token` family (x-rate-limit-* headers as on every limited
 * route), or closer together than OAUTH2_TOKEN_MIN_INTERVAL when set.
 */

/** oauth2/token's own window, per app; its overflow is "too frequent", 403 code 99. */
const TOKEN_FAMILY = { family: 'oauth2-app-token' }

/** Form fields of the body (only an application/x-www-form-urlencoded body counts) and of the query. */
function fields(request: FastifyRequest): Map<string, string[]> {
  const out = new Map<string, string[]>()
  const q = request.url.indexOf('?')
  const pairs = [...(q < 0 ? [] : formPairs(request.url.slice(q + 1))), ...(request.rawForm !== undefined ? formPairs(request.rawForm) : [])]
  for (const [k, v] of pairs) out.set(k, [...(out.get(k) ?? []), v])
  return out
}

function one(values: Map<string, string[]>, name: string): string | undefined {
  const list = values.get(name)
  if (list === undefined) return undefined
  if (list.length > 1) throw Classic.unableToVerify()
  return list[0]
}

function decodeComponent(s: string): string | undefined {
  try {
    return decodeURIComponent(s.replace(/\+/g, ' '))
  } catch {
    return undefined
  }
}

/** The client credentials presented, or undefined when none are; malformed or doubled ones are refused. */
function clientCredentials(request: FastifyRequest, values: Map<string, string[]>): { key: string; secret: string } | undefined {
  const header = request.headers.authorization
  const formId = one(values, 'client_id')
  const formSecret = one(values, 'client_secret')
  if (header !== undefined && /^basic\s/i.test(header)) {
    // RFC 6749 §2.3: a client uses one authentication method per request.
    if (formId !== undefined || formSecret !== undefined) throw Classic.unableToVerify()
    const decoded = Buffer.from(header.trim().slice(6).trim(), 'base64').toString('utf8')
    const colon = decoded.indexOf(':')
    if (colon < 0) throw Classic.unableToVerify()
    const key = decodeComponent(decoded.slice(0, colon))
    const secret = decodeComponent(decoded.slice(colon + 1))
    if (key === undefined || secret === undefined) throw Classic.unableToVerify()
    return { key, secret }
  }
  if (formId !== undefined || formSecret !== undefined) {
    if (!formId || !formSecret) throw Classic.unableToVerify()
    return { key: formId, secret: formSecret }
  }
  return undefined
}

export function registerOAuth2Routes(app: FastifyInstance, ctx: ServiceContext): void {
  const { store, config } = ctx

  async function appFor(credentials: { key: string; secret: string }): Promise<App> {
    const client = await app.authenticator.appByConsumerKey(credentials.key)
    // Compare even for an unknown key, so timing does not tell which keys exist.
    const expected = client?.consumer_secret ?? 'x'.repeat(Math.max(1, credentials.secret.length))
    if (!safeEqual(credentials.secret, expected) || !client) throw Classic.unableToVerify()
    return client
  }

  app.post('/oauth2/token', async (request, reply) => {
    const values = fields(request)
    const credentials = clientCredentials(request, values)
    if (!credentials) throw Classic.unableToVerify()
    const client = await appFor(credentials)
    await enforceRateLimit(request, reply, TOKEN_FAMILY, `app:${client.id}`, Classic.unableToVerify)
    if (one(values, 'grant_type') !== 'client_credentials') throw Classic.unableToVerify()
    if (config.bearerMinIntervalMs > 0 && !(await store.setIfAbsent(AuthKeys.bearerLast(client.id), '1', config.bearerMinIntervalMs))) {
      throw Classic.unableToVerify()
    }
    const { token } = await issueBearer(store, client)
    return reply.header('cache-control', 'no-store').send({ token_type: 'bearer', access_token: token })
  })

  app.post('/oauth2/invalidate_token', async (request, reply) => {
    const values = fields(request)
    let client: App
    const header = request.headers.authorization
    if (header !== undefined && /^oauth\s/i.test(header)) {
      // The newer public documentation signs this call with OAuth 1.0a (the app's keys and an owner's token).
      client = (await app.authenticator.verifyOAuth1(request, requestBaseUrl(request, app.publicBase), 'access')).app
    } else {
      const credentials = clientCredentials(request, values)
      if (!credentials) throw Classic.unableToVerify()
      client = await appFor(credentials)
    }
    await enforceRateLimit(request, reply, { family: 'oauth2' }, `app:${client.id}`)
    const presented = one(values, 'access_token')
    if (!presented) throw new ClassicError(400, { code: 38, message: 'access_token parameter is missing.' })
    const current = await currentBearer(store, client)
    if (current === undefined || !safeEqual(presented, current)) {
      throw new ClassicError(403, { code: 348, message: 'Client application is not permitted to invalidate this token.' })
    }
    await invalidateBearer(store, client)
    return reply.header('cache-control', 'no-store').send({ access_token: current })
  })
}
