import { randomInt } from 'node:crypto'
import { ACCESS_LEVELS, type AccessLevel, type App, AuthKeys, type Grant, lowerLevel, type RequestToken } from '../../common/auth/records'
import { newSecret } from '../../common/ids'
import type { Store } from '../../common/store/types'

/**
 * OAuth 1.0a request tokens: created by POST oauth/request_token, approved
 * (or denied) once on the sign-in page, exchanged once by POST
 * oauth/access_token. They expire after OAUTH_REQUEST_TOKEN_TTL.
 */
export class RequestTokens {
  constructor(
    private readonly store: Store,
    private readonly ttlMs: number
  ) {}

  async create(app: App, callback: string, level: AccessLevel): Promise<RequestToken> {
    const now = Date.now()
    const record: RequestToken = {
      token: newSecret(24),
      secret: newSecret(30),
      app_id: app.id,
      callback,
      access_level: lowerLevel(level, app.access_level),
      created_at: new Date(now).toISOString(),
      expires_at: new Date(now + this.ttlMs).toISOString()
    }
    await this.store.setJson(AuthKeys.requestToken(record.token), record, this.ttlMs)
    return record
  }

  async get(token: string): Promise<RequestToken | undefined> {
    if (token === '' || token.length > 200) return undefined
    const record = await this.store.getJson<RequestToken>(AuthKeys.requestToken(token))
    return record && Date.parse(record.expires_at) > Date.now() ? record : undefined
  }

  /** Claims the one decision a request token gets; false when it was already decided. */
  async decide(record: RequestToken, decision: 'allow' | 'deny'): Promise<boolean> {
    return this.store.setIfAbsent(AuthKeys.requestDecision(record.token), decision, this.remaining(record))
  }

  /** Records the approving user and the verifier the client must present. */
  async approve(record: RequestToken, userId: string): Promise<RequestToken> {
    const approved: RequestToken = { ...record, user_id: userId, verifier: newVerifier(record.callback) }
    await this.store.setJson(AuthKeys.requestToken(record.token), approved, this.remaining(record))
    return approved
  }

  /** Removes the token; true only for the one caller that removed it (single use). */
  async consume(token: string): Promise<boolean> {
    return (await this.store.del(AuthKeys.requestToken(token))) > 0
  }

  private remaining(record: RequestToken): number {
    return Math.max(1, Date.parse(record.expires_at) - Date.now())
  }
}

/** A 7-digit PIN for out-of-band clients (typed by a person), otherwise a long random verifier. */
export function newVerifier(callback: string): string {
  return callback === 'oob' ? String(randomInt(0, 10_000_000)).padStart(7, '0') : newSecret(24)
}

export type CallbackCheck = 'ok' | 'not-approved' | 'oob-only'

/**
 * Whether `callback` may be used by `app`: `oob`, or a registered URL. A
 * registered URL without a query string also accepts the same URL with any
 * query added (apps carry their own state there); one with a query must
 * match exactly. Scheme and host compare case-insensitively, the path
 * exactly. An app with no registered URL is a desktop app: `oob` only.
 */
export function checkCallback(app: App, callback: string): CallbackCheck {
  if (callback === 'oob') return 'ok'
  if (app.callback_urls.length === 0) return 'oob-only'
  let asked: URL
  try {
    asked = new URL(callback)
  } catch {
    return 'not-approved'
  }
  if (asked.hash !== '' || callback.includes('#')) return 'not-approved'
  for (const registered of app.callback_urls) {
    let r: URL
    try {
      r = new URL(registered)
    } catch {
      continue
    }
    const sameBase = r.protocol === asked.protocol && r.host === asked.host && r.pathname === asked.pathname && r.username === asked.username && r.password === asked.password
    if (sameBase && (r.search === '' || r.search === asked.search)) return 'ok'
  }
  return 'not-approved'
}

/** Appends the OAuth result to the app's callback URL, keeping its own query. */
export function callbackWith(callback: string, params: Record<string, string>): string {
  const u = new URL(callback)
  for (const [k, v] of Object.entries(params)) u.searchParams.append(k, v)
  return u.toString()
}

// ------------------------------------------------------------------ grants

export async function getGrant(store: Store, appId: string, userId: string): Promise<Grant | undefined> {
  return store.getJson<Grant>(AuthKeys.grant(appId, userId))
}

/** Remembers that the user approved the app at `level` (kept at the highest level ever approved). */
export async function recordGrant(store: Store, appId: string, userId: string, level: AccessLevel): Promise<void> {
  const previous = await getGrant(store, appId, userId)
  const highest = previous && ACCESS_LEVELS.indexOf(previous.access_level) > ACCESS_LEVELS.indexOf(level) ? previous.access_level : level
  const grant: Grant = { app_id: appId, user_id: userId, access_level: highest, granted_at: new Date().toISOString() }
  await store.batch([
    { op: 'set', key: AuthKeys.grant(appId, userId), value: JSON.stringify(grant) },
    // The connected apps page lists the user's apps from here.
    { op: 'zadd', key: AuthKeys.userApps(userId), score: Date.now(), member: appId }
  ])
}

/** Whether a grant already covers `level` (oauth/authenticate then skips the consent page). */
export function grantCovers(grant: Grant | undefined, level: AccessLevel): boolean {
  return grant !== undefined && ACCESS_LEVELS.indexOf(grant.access_level) >= ACCESS_LEVELS.indexOf(level)
}
