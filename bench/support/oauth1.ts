import { authorizationHeader } from '../../services/common/auth/oauth1'
import type { AccessToken, App } from '../../services/common/auth/records'

/**
 * The Authorization header of a request signed with OAuth 1.0a user context,
 * for the benches. They measure the server, not the client, so they sign with
 * the product's own signer (the tests sign with an independent library).
 */
export function oauthHeader(method: string, url: string, app: App, token: AccessToken): string {
  return authorizationHeader(method, url, { key: app.consumer_key, secret: app.consumer_secret }, { key: token.token, secret: token.secret })
}
