import { sha256Hex } from '../../common/auth/records'

/**
 * The OAuth 2.0 part of the shared `auth:` keyspace (records.ts documents
 * the rest). Codes and refresh tokens are stored under their SHA-256 like
 * access tokens (AuthKeys.bearer), so a copy of the store yields no usable
 * credential.
 *
 *   auth:oauth2-client:{client_id}             app_id
 *   auth:oauth2-request:{id}                   PendingAuthorization (JSON), TTL 15 min
 *   auth:oauth2-code:{sha256(code)}            CodeRecord (JSON), TTL OAUTH2_CODE_TTL
 *   auth:oauth2-code-used:{sha256(code)}       grant_id of the code's tokens (replay detection)
 *   auth:oauth2-grant:{grant_id}               Grant (JSON)
 *   auth:oauth2-grant-revoked:{grant_id}       "1": the grant was revoked, possibly before its tokens were written
 *   auth:oauth2-grant-keys:{grant_id}          set of the grant's token keys (revocation)
 *   auth:oauth2-app-grants:{app_id}            sorted set grant_id -> expiry ms
 *   auth:oauth2-user-grants:{user_id}          sorted set grant_id -> expiry ms (the connected apps page)
 *   auth:oauth2-refresh:{sha256(token)}        RefreshRecord (JSON), TTL OAUTH2_REFRESH_TOKEN_TTL
 *   auth:oauth2-refresh-used:{sha256(token)}   grant_id of a rotated refresh token (replay detection)
 */
export const OAuth2Keys = {
  client: (clientId: string) => `auth:oauth2-client:${clientId}`,
  request: (id: string) => `auth:oauth2-request:${id}`,
  code: (code: string) => `auth:oauth2-code:${sha256Hex(code)}`,
  codeUsed: (code: string) => `auth:oauth2-code-used:${sha256Hex(code)}`,
  grant: (grantId: string) => `auth:oauth2-grant:${grantId}`,
  grantKeys: (grantId: string) => `auth:oauth2-grant-keys:${grantId}`,
  grantRevoked: (grantId: string) => `auth:oauth2-grant-revoked:${grantId}`,
  appGrants: (appId: string) => `auth:oauth2-app-grants:${appId}`,
  userGrants: (userId: string) => `auth:oauth2-user-grants:${userId}`,
  refresh: (token: string) => `auth:oauth2-refresh:${sha256Hex(token)}`,
  refreshUsed: (token: string) => `auth:oauth2-refresh-used:${sha256Hex(token)}`
}
