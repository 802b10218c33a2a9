import { createHash } from 'node:crypto'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { safeEqual } from '../../common/auth/oauth1'
import type { ServiceContext } from '../../common/context'
import {
  claimCode,
  codeWasUsed,
  createGrant,
  findCode,
  findRefresh,
  getGrant,
  type IssuedTokens,
  newGrantId,
  refreshWasUsed,
  revokeAccessToken,
  revokeRefreshToken,
  rotateRefresh
} from './grants'
import { PKCE_VALUE, PKCE_VALUE_RULE } from './pkce'
import { authenticateClient, formParams, installOAuth2ErrorHandler, OAuth2Errors, sendOAuth2Json } from './protocol'
import { formatScope, parseScope } from './scopes'

/**
 * POST /2/oauth2/token (authorization_code with PKCE, refresh_token) and
 * POST /2/oauth2/revoke (RFC 7009). Errors are RFC 6749 JSON, so they are
 * registered in their own scope with their own error handler.
 */


export function s256(verifier: string): string {
  return createHash('sha256').update(verifier, 'ascii').digest('base64url')
}

function tokenResponse(issued: IssuedTokens): Record<string, unknown> {
  const body: Record<string, unknown> = {
    token_type: 'bearer',
    expires_in: issued.expires_in,
    access_token: issued.access_token,
    scope: formatScope(issued.scopes)
  }
  if (issued.refresh_token !== undefined) body.refresh_token = issued.refresh_token
  return body
}

function required(params: Map<string, string>, name: string): string {
  const value = params.get(name)
  if (value === undefined || value === '') throw OAuth2Errors.invalidRequest(`Missing required parameter ${name}.`)
  return value
}

async function authorizationCodeGrant(ctx: ServiceContext, request: FastifyRequest, params: Map<string, string>): Promise<IssuedTokens> {
  const client = await authenticateClient(ctx.store, request, params)
  const code = required(params, 'code')
  const redirectUri = required(params, 'redirect_uri')
  const verifier = required(params, 'code_verifier')
  if (code.length > 512) throw OAuth2Errors.invalidGrant('The authorization code is invalid, expired, or was already used.')
  const record = await findCode(ctx.store, code)
  if (!record) {
    if (await codeWasUsed(ctx.store, code)) {
      throw OAuth2Errors.invalidGrant('The authorization code was already used; the tokens issued for it are revoked.')
    }
    throw OAuth2Errors.invalidGrant('The authorization code is invalid or expired.')
  }
  if (record.client_id !== client.clientId) throw OAuth2Errors.invalidGrant('The authorization code was issued to another client.')
  if (record.redirect_uri !== redirectUri) throw OAuth2Errors.invalidGrant('redirect_uri does not match the one of the authorization request.')
  if (!PKCE_VALUE.test(verifier)) throw OAuth2Errors.invalidGrant(`code_verifier must be ${PKCE_VALUE_RULE}.`)
  const expected = record.code_challenge_method === 'S256' ? s256(verifier) : verifier
  if (!safeEqual(expected, record.code_challenge)) throw OAuth2Errors.invalidGrant('code_verifier does not match the code_challenge.')

  const grantId = newGrantId()
  const claim = await claimCode(ctx.store, ctx.config, code, grantId)
  if (!claim.ok) throw OAuth2Errors.invalidGrant('The authorization code was already used; the tokens issued for it are revoked.')
  return createGrant(ctx.store, ctx.config, { grant_id: grantId, app_id: client.app.id, client_id: client.clientId, user_id: record.user_id, scopes: record.scopes })
}

async function refreshTokenGrant(ctx: ServiceContext, request: FastifyRequest, params: Map<string, string>): Promise<IssuedTokens> {
  const client = await authenticateClient(ctx.store, request, params)
  const token = required(params, 'refresh_token')
  const record = token.length > 512 ? undefined : await findRefresh(ctx.store, token)
  if (!record) {
    if (await refreshWasUsed(ctx.store, token)) {
      throw OAuth2Errors.invalidGrant('The refresh token was already used (rotated); every token of this authorization is revoked.')
    }
    throw OAuth2Errors.invalidGrant('The refresh token is invalid, expired or revoked.')
  }
  if (record.client_id !== client.clientId) throw OAuth2Errors.invalidGrant('The refresh token was issued to another client.')
  const grant = await getGrant(ctx.store, record.grant_id)
  // Refresh tokens are issued only under grants that include offline.access (grants.ts issueTokens).
  if (!grant) throw OAuth2Errors.invalidGrant('The authorization behind this refresh token was revoked.')

  let scopes = grant.scopes
  const asked = params.get('scope')
  if (asked !== undefined) {
    const parsed = parseScope(asked)
    if (!parsed.ok) throw OAuth2Errors.invalidScope('empty' in parsed ? 'scope is empty.' : `Unknown scope: ${parsed.unknown.join(', ')}.`)
    const extra = parsed.scopes.filter((s) => !grant.scopes.includes(s))
    if (extra.length > 0) throw OAuth2Errors.invalidScope(`Scopes not granted by the user: ${extra.join(', ')}.`)
    scopes = parsed.scopes
  }
  const issued = await rotateRefresh(ctx.store, ctx.config, token, record, scopes)
  if (!issued) throw OAuth2Errors.invalidGrant('The refresh token was already used.')
  return issued
}

async function token(ctx: ServiceContext, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const params = formParams(request)
  const grantType = required(params, 'grant_type')
  let issued: IssuedTokens
  if (grantType === 'authorization_code') issued = await authorizationCodeGrant(ctx, request, params)
  else if (grantType === 'refresh_token') issued = await refreshTokenGrant(ctx, request, params)
  else {
    throw OAuth2Errors.unsupportedGrantType(
      grantType === 'client_credentials'
        ? 'client_credentials is served by POST /oauth2/token (app-only bearer); this endpoint takes authorization_code and refresh_token.'
        : `grant_type ${grantType.slice(0, 60)} is not supported: use authorization_code or refresh_token.`
    )
  }
  return sendOAuth2Json(reply, tokenResponse(issued))
}

/**
 * RFC 7009. The client authenticates as on the token endpoint. An unknown,
 * expired or already revoked token, or one issued to another client, is
 * answered 200 all the same: the answer tells nobody whether a token exists.
 * Revoking a refresh token revokes every token of its authorization.
 */
async function revoke(ctx: ServiceContext, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const params = formParams(request)
  const client = await authenticateClient(ctx.store, request, params)
  const value = required(params, 'token')
  const hint = params.get('token_type_hint')
  if (value.length <= 512) {
    // The hint decides which kind is tried first; the other is tried when it does not match (§2.1).
    const order = hint === 'refresh_token' ? ['refresh_token', 'access_token'] : ['access_token', 'refresh_token']
    for (const kind of order) {
      const done = kind === 'access_token' ? await revokeAccessToken(ctx.store, client.app.id, value) : await revokeRefreshToken(ctx.store, client.app.id, value)
      if (done) break
    }
  }
  return sendOAuth2Json(reply, { revoked: true })
}

export async function registerTokenRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  await app.register(async (scope) => {
    installOAuth2ErrorHandler(scope)
    // "OAuth operations: rate limited" (docs/conformance.md Limits): per client address, RATE_LIMIT_DEFAULT unless RATE_LIMITS says otherwise.
    const config = { rateLimit: { family: 'oauth2-token' } }
    scope.post('/2/oauth2/token', { config }, (request, reply) => token(ctx, request, reply))
    scope.post('/2/oauth2/revoke', { config }, (request, reply) => revoke(ctx, request, reply))
  })
}
