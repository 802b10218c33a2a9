import { createHash } from 'node:crypto'

/**
 * The authentication keyspace shared by every service (design.md: "a
 * documented shared key (tokens, for authentication)"). The gateway service
 * writes these; every service reads them to authenticate requests.
 *
 *   auth:app:{app_id}              App (JSON)
 *   auth:app-key:{consumer_key}    app_id
 *   auth:user:{user_id}            User (JSON)
 *   auth:user-name:{screen_name}   user_id (lowercased screen name)
 *   auth:token:{oauth_token}       AccessToken (JSON): OAuth 1.0a access token
 *   auth:bearer:{sha256(token)}    BearerRecord (JSON): OAuth 2.0 app-only or user token
 *   auth:nonce:{key}:{nonce}       "1" with a TTL of twice the timestamp window
 */

export type AccessLevel = 'read' | 'read-write' | 'read-write-dm'

export interface App {
  id: string
  name: string
  consumer_key: string
  consumer_secret: string
  access_level: AccessLevel
  callback_urls: string[]
  /** "Sign in with" enabled: /oauth/authenticate skips re-approval. */
  sign_in_with: boolean
  created_at: string
  /** OAuth 2.0 client (issue 10): client id, optional secret, redirect URIs. */
  oauth2?: { client_id: string; client_secret?: string; redirect_uris: string[]; confidential: boolean }
}

export interface User {
  id: string
  screen_name: string
  /** scrypt$N$r$p$salt$hash */
  password_hash: string
  created_at: string
}

export interface AccessToken {
  token: string
  secret: string
  app_id: string
  user_id: string
  screen_name: string
  access_level: AccessLevel
  created_at: string
}

export type BearerRecord =
  | { kind: 'app'; app_id: string; created_at: string }
  | { kind: 'user'; app_id: string; user_id: string; scopes: string[]; created_at: string; expires_at: string }

export const AuthKeys = {
  app: (id: string) => `auth:app:${id}`,
  appByKey: (consumerKey: string) => `auth:app-key:${consumerKey}`,
  apps: () => 'auth:apps',
  user: (id: string) => `auth:user:${id}`,
  userByName: (screenName: string) => `auth:user-name:${screenName.toLowerCase()}`,
  users: () => 'auth:users',
  token: (token: string) => `auth:token:${token}`,
  bearer: (token: string) => `auth:bearer:${sha256Hex(token)}`,
  nonce: (consumerKey: string, nonce: string) => `auth:nonce:${consumerKey}:${nonce}`
}

export function sha256Hex(s: string): string {
  return createHash('sha256').update(s).digest('hex')
}

/** Whether a token of level `have` may perform an operation needing `need`. */
export function allows(have: AccessLevel, need: 'read' | 'write' | 'dm'): boolean {
  if (need === 'read') return true
  if (need === 'write') return have === 'read-write' || have === 'read-write-dm'
  return have === 'read-write-dm'
}
