import { AuthKeys, type BearerRecord } from '../../common/auth/records'
import type { Config } from '../../common/config'
import { newSecret, newUuid } from '../../common/ids'
import type { Store } from '../../common/store/types'
import { OAuth2Keys } from './keys'

/**
 * Authorization codes, grants and the tokens issued under them.
 *
 * A grant is one user's approval of one client for a set of scopes. The
 * code it starts with is single-use; the access tokens (BearerRecord kind
 * 'user' under AuthKeys.bearer, so every service authenticates them) and,
 * with offline.access, the refresh token all belong to it. Presenting a
 * used code or a rotated refresh token a second time revokes the whole
 * grant (RFC 6749 §4.1.2, OAuth 2.0 Security BCP §4.14): whoever holds the
 * copy cannot tell which party is the legitimate one, so neither keeps it.
 */

export interface CodeRecord {
  app_id: string
  client_id: string
  user_id: string
  redirect_uri: string
  scopes: string[]
  code_challenge: string
  code_challenge_method: 'S256' | 'plain'
  created_at: string
}

export interface Grant {
  grant_id: string
  app_id: string
  client_id: string
  user_id: string
  scopes: string[]
  created_at: string
}

export interface RefreshRecord {
  grant_id: string
  app_id: string
  client_id: string
  user_id: string
  scopes: string[]
  created_at: string
  expires_at: string
}

export interface IssuedTokens {
  access_token: string
  expires_in: number
  scopes: string[]
  refresh_token?: string
}

/**
 * Opaque tokens in the platform's form: base64url text carrying random
 * bytes, the issue time and a kind marker (`ac` code, `at` access, `rt` refresh).
 */
function newToken(kind: 'ac' | 'at' | 'rt'): string {
  return Buffer.from(`${newSecret(32)}:${Date.now()}:1:1:${kind}:1`).toString('base64url')
}

export async function issueCode(store: Store, config: Config, record: Omit<CodeRecord, 'created_at'>): Promise<string> {
  const code = newToken('ac')
  await store.setJson(OAuth2Keys.code(code), { ...record, created_at: new Date().toISOString() } satisfies CodeRecord, config.oauth2CodeTtlMs)
  return code
}

export async function findCode(store: Store, code: string): Promise<CodeRecord | undefined> {
  return store.getJson<CodeRecord>(OAuth2Keys.code(code))
}

export type CodeClaim = { ok: true } | { ok: false; replayed: boolean }

/**
 * Consumes `code` for the grant about to be created. Exactly one caller
 * wins; a code that was already exchanged has its grant revoked.
 */
export async function claimCode(store: Store, config: Config, code: string, grantId: string): Promise<CodeClaim> {
  // The marker outlives the code so a replay after expiry is still recognised.
  const markerTtl = Math.max(config.oauth2CodeTtlMs, 10 * 60_000)
  const won = await store.setIfAbsent(OAuth2Keys.codeUsed(code), grantId, markerTtl)
  if (!won) {
    await revokeReplayed(store, await store.get(OAuth2Keys.codeUsed(code)))
    return { ok: false, replayed: true }
  }
  await store.del(OAuth2Keys.code(code))
  return { ok: true }
}

/** A code that no longer exists: was it used (then its grant is revoked) or never valid / expired? */
export async function codeWasUsed(store: Store, code: string): Promise<boolean> {
  const grantId = await store.get(OAuth2Keys.codeUsed(code))
  if (grantId === undefined) return false
  await revokeReplayed(store, grantId)
  return true
}

async function revokeReplayed(store: Store, grantId: string | undefined): Promise<void> {
  if (grantId !== undefined && grantId !== '') await revokeGrant(store, grantId)
}

export function newGrantId(): string {
  return newUuid()
}

/**
 * Records the grant and issues its first tokens. A replay of the code can
 * land between its claim and this call, when there are no tokens yet for
 * it to revoke: it leaves the grant's revocation marker, so once the
 * tokens are written (before the marker is read, while the replay sets the
 * marker before reading the token keys: one of the two sees the other)
 * they are revoked here. The caller still gets them, dead: exactly one
 * exchange of a code succeeds, and a replay always kills its tokens.
 */
export async function createGrant(store: Store, config: Config, grant: Omit<Grant, 'created_at'>): Promise<IssuedTokens> {
  const record: Grant = { ...grant, created_at: new Date().toISOString() }
  await store.setJson(OAuth2Keys.grant(grant.grant_id), record)
  const issued = await issueTokens(store, config, record)
  if (await store.exists(OAuth2Keys.grantRevoked(grant.grant_id))) await revokeGrant(store, grant.grant_id)
  return issued
}

export async function getGrant(store: Store, grantId: string): Promise<Grant | undefined> {
  return store.getJson<Grant>(OAuth2Keys.grant(grantId))
}

/** An access token, and a refresh token when the grant includes offline.access. */
async function issueTokens(store: Store, config: Config, grant: Grant): Promise<IssuedTokens> {
  const now = Date.now()
  const accessToken = newToken('at')
  const bearer: BearerRecord = {
    kind: 'user',
    app_id: grant.app_id,
    user_id: grant.user_id,
    scopes: grant.scopes,
    created_at: new Date(now).toISOString(),
    expires_at: new Date(now + config.oauth2AccessTokenTtlMs).toISOString()
  }
  const keys = [AuthKeys.bearer(accessToken)]
  const ops: Parameters<Store['batch']>[0] = [
    { op: 'set', key: AuthKeys.bearer(accessToken), value: JSON.stringify(bearer), ttlMs: config.oauth2AccessTokenTtlMs }
  ]
  let refreshToken: string | undefined
  let lifetime = config.oauth2AccessTokenTtlMs
  if (grant.scopes.includes('offline.access')) {
    refreshToken = newToken('rt')
    lifetime = Math.max(lifetime, config.oauth2RefreshTokenTtlMs)
    const refresh: RefreshRecord = {
      grant_id: grant.grant_id,
      app_id: grant.app_id,
      client_id: grant.client_id,
      user_id: grant.user_id,
      scopes: grant.scopes,
      created_at: bearer.created_at,
      expires_at: new Date(now + config.oauth2RefreshTokenTtlMs).toISOString()
    }
    keys.push(OAuth2Keys.refresh(refreshToken))
    ops.push({ op: 'set', key: OAuth2Keys.refresh(refreshToken), value: JSON.stringify(refresh), ttlMs: config.oauth2RefreshTokenTtlMs })
  }
  // The grant lives as long as its longest-lived token; the app's index lets a disabled client revoke them all.
  ops.push(
    { op: 'sadd', key: OAuth2Keys.grantKeys(grant.grant_id), members: keys },
    { op: 'pexpire', key: OAuth2Keys.grantKeys(grant.grant_id), ttlMs: lifetime },
    { op: 'pexpire', key: OAuth2Keys.grant(grant.grant_id), ttlMs: lifetime },
    { op: 'zadd', key: OAuth2Keys.appGrants(grant.app_id), score: now + lifetime, member: grant.grant_id },
    { op: 'zadd', key: OAuth2Keys.userGrants(grant.user_id), score: now + lifetime, member: grant.grant_id },
    { op: 'zadd', key: AuthKeys.userApps(grant.user_id), score: now, member: grant.app_id }
  )
  await store.batch(ops)
  // Forget grants of this app and of this user that have expired on their own.
  await store.zpopByScore(OAuth2Keys.appGrants(grant.app_id), now, 100)
  await store.zpopByScore(OAuth2Keys.userGrants(grant.user_id), now, 100)
  const issued: IssuedTokens = { access_token: accessToken, expires_in: Math.round(config.oauth2AccessTokenTtlMs / 1000), scopes: grant.scopes }
  if (refreshToken !== undefined) issued.refresh_token = refreshToken
  return issued
}

export async function findRefresh(store: Store, token: string): Promise<RefreshRecord | undefined> {
  const record = await store.getJson<RefreshRecord>(OAuth2Keys.refresh(token))
  if (record && Date.parse(record.expires_at) <= Date.now()) return undefined
  return record
}

/** A refresh token that no longer exists: was it rotated away (then its grant is revoked)? */
export async function refreshWasUsed(store: Store, token: string): Promise<boolean> {
  const grantId = await store.get(OAuth2Keys.refreshUsed(token))
  if (grantId === undefined) return false
  await revokeReplayed(store, grantId)
  return true
}

/**
 * Rotation: the presented refresh token stops working and a new access
 * token and refresh token are issued under the same grant, with `scopes`
 * (the grant's or a subset the client asked for). Undefined when another
 * request rotated the same token first.
 */
export async function rotateRefresh(store: Store, config: Config, token: string, record: RefreshRecord, scopes: string[]): Promise<IssuedTokens | undefined> {
  const grant = await getGrant(store, record.grant_id)
  if (!grant) return undefined
  const claimed = (await store.del(OAuth2Keys.refresh(token))) > 0
  if (!claimed) return undefined
  await store.set(OAuth2Keys.refreshUsed(token), record.grant_id, config.oauth2RefreshTokenTtlMs)
  // A narrowed refresh keeps offline.access only if it was asked for; without it no new refresh token comes back.
  return issueTokens(store, config, { ...grant, scopes })
}

/** How long a revoked grant id is remembered: longer than any exchange of a code can take. */
const REVOKED_MARKER_TTL_MS = 10 * 60_000

/** Deletes every token of the grant and the grant itself; tokens still being issued for it are revoked when written (createGrant). */
export async function revokeGrant(store: Store, grantId: string): Promise<void> {
  await store.set(OAuth2Keys.grantRevoked(grantId), '1', REVOKED_MARKER_TTL_MS)
  const keys = await store.smembers(OAuth2Keys.grantKeys(grantId))
  const grant = await getGrant(store, grantId)
  const ops: Parameters<Store['batch']>[0] = keys.map((key) => ({ op: 'del' as const, key }))
  ops.push({ op: 'del', key: OAuth2Keys.grantKeys(grantId) }, { op: 'del', key: OAuth2Keys.grant(grantId) })
  if (grant) {
    ops.push({ op: 'zrem', key: OAuth2Keys.appGrants(grant.app_id), members: [grantId] }, { op: 'zrem', key: OAuth2Keys.userGrants(grant.user_id), members: [grantId] })
  }
  await store.batch(ops)
}

/** The user's live grants (all apps), for the connected apps page. */
export async function userGrants(store: Store, userId: string): Promise<Grant[]> {
  await store.zpopByScore(OAuth2Keys.userGrants(userId), Date.now(), 100)
  const ids = await store.zrange(OAuth2Keys.userGrants(userId), 0, -1)
  const grants = await store.mgetJson<Grant>(ids.map((m) => OAuth2Keys.grant(m.member)))
  return grants.filter((g): g is Grant => g !== undefined)
}

/** Revokes every grant the user gave the app (the user revoked its access); how many there were. */
export async function revokeUserAppGrants(store: Store, userId: string, appId: string): Promise<number> {
  const grants = (await userGrants(store, userId)).filter((g) => g.app_id === appId)
  for (const grant of grants) await revokeGrant(store, grant.grant_id)
  return grants.length
}

/** Revokes every grant of an app (its OAuth 2.0 client was removed). */
export async function revokeAppGrants(store: Store, appId: string): Promise<number> {
  const grants = await store.zrange(OAuth2Keys.appGrants(appId), 0, -1)
  for (const { member } of grants) await revokeGrant(store, member)
  await store.del(OAuth2Keys.appGrants(appId))
  return grants.length
}

/** Revokes one access token (it must belong to `appId`); false when it does not exist or is another app's. */
export async function revokeAccessToken(store: Store, appId: string, token: string): Promise<boolean> {
  const record = await store.getJson<BearerRecord>(AuthKeys.bearer(token))
  if (!record || record.kind !== 'user' || record.app_id !== appId) return false
  return (await store.del(AuthKeys.bearer(token))) > 0
}

/** Revokes a refresh token and, with it, every token of its grant (RFC 7009 §2.1). */
export async function revokeRefreshToken(store: Store, appId: string, token: string): Promise<boolean> {
  const record = await store.getJson<RefreshRecord>(OAuth2Keys.refresh(token))
  if (!record || record.app_id !== appId) return false
  await revokeGrant(store, record.grant_id)
  return true
}
