import { createHash } from 'node:crypto'

/**
 * The authentication keyspace shared by every service (docs/architecture.md: "a
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
 *   auth:bearer-generation:{app_id} counter: bumped when the app's bearer token is invalidated
 *   auth:bearer-last:{app_id}      "1" while oauth2/token calls are too frequent (OAUTH2_TOKEN_MIN_INTERVAL)
 *   auth:request-token:{token}     RequestToken (JSON) with a TTL of OAUTH_REQUEST_TOKEN_TTL
 *   auth:request-decision:{token}  "allow" | "deny": set once, so a request token is decided once
 *   auth:grant:{app_id}:{user_id}  Grant (JSON): the user approved the app (authenticate skips re-approval)
 *   auth:user-token:{app_id}:{user_id} the access token the three-legged flow issued (re-issued while valid)
 *   auth:user-apps:{user_id}       sorted set app_id -> ms of the last approval (OAuth 1.0a or 2.0): the connected apps page
 *   auth:session:{sha256(id)}      SignInSession (JSON): a browser signed in on the sign-in page
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
  /** OAuth 2.0 client: client id, optional secret, redirect URIs. */
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

/** OAuth 1.0a request token (step 1), authorized on the sign-in page (step 2), exchanged once (step 3). */
export interface RequestToken {
  token: string
  secret: string
  app_id: string
  /** An approved callback URL or `oob`. */
  callback: string
  /** What the app asked for: its level, possibly lowered by x_auth_access_type. */
  access_level: AccessLevel
  created_at: string
  expires_at: string
  /** Set when the user approves. */
  user_id?: string
  verifier?: string
}

export interface Grant {
  app_id: string
  user_id: string
  access_level: AccessLevel
  granted_at: string
}

export interface SignInSession {
  user_id: string
  screen_name: string
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
  nonce: (consumerKey: string, nonce: string) => `auth:nonce:${consumerKey}:${nonce}`,
  bearerGeneration: (appId: string) => `auth:bearer-generation:${appId}`,
  bearerLast: (appId: string) => `auth:bearer-last:${appId}`,
  requestToken: (token: string) => `auth:request-token:${token}`,
  requestDecision: (token: string) => `auth:request-decision:${token}`,
  grant: (appId: string, userId: string) => `auth:grant:${appId}:${userId}`,
  userToken: (appId: string, userId: string) => `auth:user-token:${appId}:${userId}`,
  userApps: (userId: string) => `auth:user-apps:${userId}`,
  session: (id: string) => `auth:session:${sha256Hex(id)}`
}

export const ACCESS_LEVELS: readonly AccessLevel[] = ['read', 'read-write', 'read-write-dm']

/** The lower of two access levels (a token never exceeds its app's current level). */
export function lowerLevel(a: AccessLevel, b: AccessLevel): AccessLevel {
  return ACCESS_LEVELS[Math.min(ACCESS_LEVELS.indexOf(a), ACCESS_LEVELS.indexOf(b))] as AccessLevel
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
