import type { FastifyInstance, FastifyReply } from 'fastify'
import { requestBaseUrl } from '../../common/auth/authenticate'
import { percentEncode, safeEqual } from '../../common/auth/oauth1'
import { type AccessLevel, type App, type RequestToken } from '../../common/auth/records'
import type { ServiceContext } from '../../common/context'
import { Classic, OAuthTextError } from '../../common/errors'
import { enforceRateLimit } from '../../common/ratelimit'
import { accessTokenFor, getUser, revokeAccessToken } from '../identity'
import { checkCallback, type RequestTokens } from './request-tokens'

/**
 * The OAuth 1.0a endpoints a client application calls (the browser step is
 * in authorize.ts): request_token, access_token and invalidate_token.
 * Their successes are form-encoded like the public platform's.
 */

function sendForm(reply: FastifyReply, fields: Record<string, string>): FastifyReply {
  const body = Object.entries(fields)
    .map(([k, v]) => `${k}=${percentEncode(v)}`)
    .join('&')
  return reply.header('cache-control', 'no-store').type('application/x-www-form-urlencoded').send(body)
}

/** `x_auth_access_type` / `svc_auth_access_type`: `read` or `write` lower the level the app registered. */
function requestedLevel(app: App, params: Map<string, string>): AccessLevel {
  let level = app.access_level
  for (const name of ['x_auth_access_type', 'svc_auth_access_type']) {
    const value = params.get(name)
    if (value === undefined) continue
    if (value === 'read') level = 'read'
    else if (value === 'write') level = level === 'read' ? 'read' : 'read-write'
    else throw Classic.badAuthData(`${name} must be "read" or "write".`)
  }
  return level
}

const invalidVerifier = (): OAuthTextError => new OAuthTextError(401, 'Error processing your OAuth request: Invalid oauth_verifier parameter')
const invalidRequestToken = (): OAuthTextError => new OAuthTextError(401, 'Error processing your OAuth request: Invalid request token')

export function registerOAuth1Routes(app: FastifyInstance, ctx: ServiceContext, tokens: RequestTokens): void {
  const { store } = ctx

  app.post('/oauth/request_token', async (request, reply) => {
    const { app: client, params } = await app.authenticator.verifyOAuth1(request, requestBaseUrl(request, app.publicBase), 'none')
    await enforceRateLimit(request, reply, { family: 'oauth' }, `app:${client.id}`)
    const callback = params.get('oauth_callback')
    if (!callback) throw Classic.badAuthData('oauth_callback is required: an approved callback URL, or "oob" for PIN mode.')
    const check = checkCallback(client, callback)
    if (check === 'not-approved') throw Classic.callbackNotApproved()
    if (check === 'oob-only') throw Classic.desktopMustUseOob()
    const record = await tokens.create(client, callback, requestedLevel(client, params))
    return sendForm(reply, { oauth_token: record.token, oauth_token_secret: record.secret, oauth_callback_confirmed: 'true' })
  })

  app.post('/oauth/access_token', async (request, reply) => {
    let record: RequestToken | undefined
    const { app: client, params } = await app.authenticator.verifyOAuth1(request, requestBaseUrl(request, app.publicBase), {
      secretOf: async (token, signer) => {
        record = await tokens.get(token)
        return record && record.app_id === signer.id ? record.secret : undefined
      },
      unknown: invalidRequestToken
    })
    await enforceRateLimit(request, reply, { family: 'oauth' }, `app:${client.id}`)
    const rt = record as RequestToken
    const verifier = params.get('oauth_verifier')
    if (!verifier) throw new OAuthTextError(401, 'Error processing your OAuth request: Missing oauth_verifier parameter')
    // Not approved yet: no verifier exists that could match; the user may still be on the page.
    if (rt.verifier === undefined || rt.user_id === undefined) throw invalidVerifier()
    // Single use, and strict: a wrong verifier burns the request token, so a PIN cannot be guessed.
    if (!(await tokens.consume(rt.token))) throw invalidRequestToken()
    if (!safeEqual(verifier, rt.verifier)) throw invalidVerifier()
    const user = await getUser(store, rt.user_id)
    if (!user) throw invalidRequestToken()
    const token = await accessTokenFor(store, client, user, rt.access_level)
    return sendForm(reply, { oauth_token: token.token, oauth_token_secret: token.secret, user_id: user.id, screen_name: user.screen_name })
  })

  // Revocation signs with the token being revoked; a read-only token may revoke itself.
  for (const path of ['/1.1/oauth/invalidate_token', '/1.1/oauth/invalidate_token.json']) {
    app.post(path, { config: { auth: { schemes: ['oauth1-user'], access: 'read' }, rateLimit: { family: 'oauth' } } }, async (request, reply) => {
      const auth = request.auth
      if (auth?.scheme !== 'oauth1-user') throw Classic.invalidToken()
      if (!(await revokeAccessToken(store, auth.token.token))) throw Classic.invalidToken()
      return reply.header('cache-control', 'no-store').send({ access_token: auth.token.token })
    })
  }
}
