import { createHmac, randomBytes, scrypt as scryptCb, timingSafeEqual } from 'node:crypto'
import { promisify } from 'node:util'
import { ACCESS_LEVELS, type AccessLevel, type AccessToken, type App, AuthKeys, type BearerRecord, lowerLevel, type User } from '../common/auth/records'
import { newNumericId, newSecret } from '../common/ids'
import type { Store, StoreOp } from '../common/store/types'

/**
 * Applications, users and their credentials, kept in the shared `auth:`
 * keyspace (records.ts documents it). The OAuth routes, the operator API and
 * the tests all create and revoke credentials through these functions.
 */

const scrypt = promisify(scryptCb) as (password: string, salt: Buffer, keylen: number, options: { N: number; r: number; p: number }) => Promise<Buffer>
const SCRYPT = { N: 16384, r: 8, p: 1 }

/** Invalid input for an app or user; `parameter` names the offending field. */
export class IdentityError extends Error {
  constructor(
    message: string,
    readonly parameter?: string
  ) {
    super(message)
  }
}

/** The screen name is taken. */
export class IdentityConflictError extends IdentityError {}

export const MAX_CALLBACK_URLS = 10

export interface NewApp {
  name: string
  access_level?: AccessLevel
  callback_urls?: string[]
  sign_in_with?: boolean
}

function checkedName(raw: string): string {
  const name = raw.trim()
  if (name === '' || name.length > 32) throw new IdentityError('app name must be 1 to 32 characters', 'name')
  return name
}

function checkedLevel(level: string): AccessLevel {
  if (!(ACCESS_LEVELS as readonly string[]).includes(level)) throw new IdentityError(`access level must be one of ${ACCESS_LEVELS.join(', ')}`, 'access_level')
  return level as AccessLevel
}

function checkedCallbacks(urls: string[]): string[] {
  if (urls.length > MAX_CALLBACK_URLS) throw new IdentityError(`at most ${MAX_CALLBACK_URLS} callback URLs`, 'callback_urls')
  for (const url of urls) assertCallbackUrl(url)
  return [...new Set(urls)]
}

export async function createApp(store: Store, input: NewApp): Promise<App> {
  const app: App = {
    id: newNumericId(),
    name: checkedName(input.name),
    consumer_key: newSecret(18),
    consumer_secret: newSecret(36),
    access_level: checkedLevel(input.access_level ?? 'read-write'),
    callback_urls: checkedCallbacks(input.callback_urls ?? []),
    sign_in_with: input.sign_in_with ?? true,
    created_at: new Date().toISOString()
  }
  await store.batch([
    { op: 'set', key: AuthKeys.app(app.id), value: JSON.stringify(app) },
    { op: 'set', key: AuthKeys.appByKey(app.consumer_key), value: app.id },
    { op: 'zadd', key: AuthKeys.apps(), score: Date.now(), member: app.id }
  ])
  return app
}

/**
 * A callback URL: absolute, at most 2048 characters, no fragment. Custom
 * schemes (`myapp://callback`) are allowed for mobile and desktop apps;
 * `oob` is not a URL and needs no registration.
 */
export function assertCallbackUrl(url: string): void {
  let u: URL
  if (url.length > 2048) throw new IdentityError('a callback URL must be at most 2048 characters', 'callback_urls')
  try {
    u = new URL(url)
  } catch {
    throw new IdentityError(`callback URL "${url.slice(0, 100)}" is not an absolute URL`, 'callback_urls')
  }
  if (/^(javascript|data|vbscript|file|blob):$/i.test(u.protocol)) throw new IdentityError(`callback URL scheme ${u.protocol} is not allowed`, 'callback_urls')
  if (u.hash !== '' || url.includes('#')) throw new IdentityError(`callback URL "${url.slice(0, 100)}" must not have a fragment`, 'callback_urls')
}

export interface AppChanges {
  name?: string
  access_level?: AccessLevel
  callback_urls?: string[]
  sign_in_with?: boolean
}

/** Changes an app's settings (not its credentials: see rotateSecret). */
export async function changeApp(store: Store, id: string, changes: AppChanges): Promise<App | undefined> {
  const app = await getApp(store, id)
  if (!app) return undefined
  const changed: App = {
    ...app,
    ...(changes.name !== undefined ? { name: checkedName(changes.name) } : {}),
    ...(changes.access_level !== undefined ? { access_level: checkedLevel(changes.access_level) } : {}),
    ...(changes.callback_urls !== undefined ? { callback_urls: checkedCallbacks(changes.callback_urls) } : {}),
    ...(changes.sign_in_with !== undefined ? { sign_in_with: changes.sign_in_with } : {})
  }
  await updateApp(store, changed)
  return changed
}

export async function getApp(store: Store, id: string): Promise<App | undefined> {
  return store.getJson<App>(AuthKeys.app(id))
}

export async function listApps(store: Store): Promise<App[]> {
  const ids = await store.zrange(AuthKeys.apps(), 0, -1)
  const apps = await store.mgetJson<App>(ids.map((m) => AuthKeys.app(m.member)))
  return apps.filter((a): a is App => a !== undefined)
}

export async function updateApp(store: Store, app: App): Promise<void> {
  await store.setJson(AuthKeys.app(app.id), app)
}

/** New consumer secret; the app's bearer token (derived from the secret) stops working. */
export async function rotateSecret(store: Store, id: string): Promise<App> {
  const app = await getApp(store, id)
  if (!app) throw new IdentityError(`no application ${id}`)
  await invalidateBearer(store, app)
  const rotated = { ...app, consumer_secret: newSecret(36) }
  await updateApp(store, rotated)
  return rotated
}

// ------------------------------------------------------------------ users

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16)
  const hash = await scrypt(password, salt, 32, SCRYPT)
  return `scrypt$${SCRYPT.N}$${SCRYPT.r}$${SCRYPT.p}$${salt.toString('base64')}$${hash.toString('base64')}`
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const [kind, n, r, p, salt, hash] = stored.split('$')
  if (kind !== 'scrypt' || !salt || !hash) return false
  const expected = Buffer.from(hash, 'base64')
  const actual = await scrypt(password, Buffer.from(salt, 'base64'), expected.length, { N: Number(n), r: Number(r), p: Number(p) })
  return timingSafeEqual(actual, expected)
}

export async function createUser(store: Store, screenName: string, password: string): Promise<User> {
  if (!/^[A-Za-z0-9_]{1,15}$/.test(screenName)) throw new IdentityError('screen name must be 1 to 15 letters, digits or underscores', 'screen_name')
  if (password.length < 8 || password.length > 1024) throw new IdentityError('password must be 8 to 1024 characters', 'password')
  const user: User = { id: newNumericId(), screen_name: screenName, password_hash: await hashPassword(password), created_at: new Date().toISOString() }
  const claimed = await store.setIfAbsent(AuthKeys.userByName(screenName), user.id)
  if (!claimed) throw new IdentityConflictError(`screen name ${screenName} is taken`, 'screen_name')
  await store.batch([
    { op: 'set', key: AuthKeys.user(user.id), value: JSON.stringify(user) },
    { op: 'zadd', key: AuthKeys.users(), score: Date.now(), member: user.id }
  ])
  return user
}

export async function getUser(store: Store, id: string): Promise<User | undefined> {
  return store.getJson<User>(AuthKeys.user(id))
}

export async function listUsers(store: Store): Promise<User[]> {
  const ids = await store.zrange(AuthKeys.users(), 0, -1)
  const users = await store.mgetJson<User>(ids.map((m) => AuthKeys.user(m.member)))
  return users.filter((u): u is User => u !== undefined)
}

export async function findUserByScreenName(store: Store, screenName: string): Promise<User | undefined> {
  const id = await store.get(AuthKeys.userByName(screenName))
  return id === undefined ? undefined : getUser(store, id)
}

/** The user when the password matches; undefined otherwise (same time either way for unknown names). */
export async function checkCredentials(store: Store, screenName: string, password: string): Promise<User | undefined> {
  const user = /^@?[A-Za-z0-9_]{1,15}$/.test(screenName) && password.length <= 1024 ? await findUserByScreenName(store, screenName.replace(/^@/, '')) : undefined
  if (!user) {
    await hashPassword(password.slice(0, 1024))
    return undefined
  }
  return (await verifyPassword(password, user.password_hash)) ? user : undefined
}

// ------------------------------------------------------------------ OAuth 1.0a access tokens

/** Issues an access token of `level` (never above the app's) for `user` on `app`. */
export async function issueAccessToken(store: Store, app: App, user: User, level: AccessLevel = app.access_level): Promise<AccessToken> {
  const effective = lowerLevel(level, app.access_level)
  const token: AccessToken = {
    // The public platform's access tokens start with the user id.
    token: `${user.id}-${newSecret(24)}`,
    secret: newSecret(33),
    app_id: app.id,
    user_id: user.id,
    screen_name: user.screen_name,
    access_level: effective,
    created_at: new Date().toISOString()
  }
  await store.setJson(AuthKeys.token(token.token), token)
  return token
}

/**
 * The access token of the three-legged flow: like the public platform, a
 * user who authorizes the same app again gets the same token back (until it
 * is invalidated); a different access level replaces it.
 */
export async function accessTokenFor(store: Store, app: App, user: User, level: AccessLevel): Promise<AccessToken> {
  const indexKey = AuthKeys.userToken(app.id, user.id)
  const current = await store.get(indexKey)
  const existing = current === undefined ? undefined : await store.getJson<AccessToken>(AuthKeys.token(current))
  if (existing && existing.access_level === lowerLevel(level, app.access_level)) return existing
  if (existing) await store.del(AuthKeys.token(existing.token))
  const token = await issueAccessToken(store, app, user, level)
  await store.set(indexKey, token.token)
  return token
}

/**
 * Invalidates an access token. The user's approval of the app goes with it:
 * otherwise oauth/authenticate would silently approve the app again, and
 * invalidating would not take its access away.
 */
export async function revokeAccessToken(store: Store, token: string): Promise<boolean> {
  const record = await store.getJson<AccessToken>(AuthKeys.token(token))
  if (!record) return false
  const indexKey = AuthKeys.userToken(record.app_id, record.user_id)
  const ops: StoreOp[] = [
    { op: 'del', key: AuthKeys.token(token) },
    { op: 'del', key: AuthKeys.grant(record.app_id, record.user_id) }
  ]
  if ((await store.get(indexKey)) === token) ops.push({ op: 'del', key: indexKey })
  await store.batch(ops)
  return true
}

/**
 * The user takes an app's OAuth 1.0a access away (connected apps page): the
 * access token the three-legged flow issued is invalidated and the approval
 * forgotten, so the app has to ask again.
 */
export async function revokeAppAccess(store: Store, appId: string, userId: string): Promise<void> {
  const token = await store.get(AuthKeys.userToken(appId, userId))
  if (token !== undefined) await revokeAccessToken(store, token)
  await store.batch([
    { op: 'del', key: AuthKeys.grant(appId, userId) },
    { op: 'del', key: AuthKeys.userToken(appId, userId) }
  ])
}

// ------------------------------------------------------------------ OAuth 2.0 app-only bearer

/**
 * The app's bearer token is derived from its consumer secret and a
 * generation counter: the same token comes back until it is invalidated,
 * yet only its hash is stored (the secret is presented by the caller).
 */
function deriveBearer(app: App, generation: number): string {
  const mac = createHmac('sha256', app.consumer_secret).update(`bearer:${app.id}:${generation}`).digest('base64url')
  return `AAAAAAAAAAAAAAAAAAAAA${mac}`
}

export async function issueBearer(store: Store, app: App): Promise<{ token: string; created: boolean }> {
  for (;;) {
    const generation = Number((await store.get(AuthKeys.bearerGeneration(app.id))) ?? '0')
    const token = deriveBearer(app, generation)
    const record: BearerRecord = { kind: 'app', app_id: app.id, created_at: new Date().toISOString() }
    const created = await store.setJsonIfAbsent(AuthKeys.bearer(token), record)
    // An invalidation between the read and the write would otherwise bring the old token back.
    const now = Number((await store.get(AuthKeys.bearerGeneration(app.id))) ?? '0')
    if (now === generation) return { token, created }
    if (created) await store.del(AuthKeys.bearer(token))
  }
}

/** Invalidates the app's outstanding bearer token; the next issue yields a different one. */
export async function invalidateBearer(store: Store, app: App): Promise<string | undefined> {
  const generation = Number((await store.get(AuthKeys.bearerGeneration(app.id))) ?? '0')
  const token = deriveBearer(app, generation)
  const existed = await store.exists(AuthKeys.bearer(token))
  await store.batch([
    { op: 'del', key: AuthKeys.bearer(token) },
    { op: 'incr', key: AuthKeys.bearerGeneration(app.id), by: 1 }
  ])
  return existed ? token : undefined
}

/** The app's current bearer token if one is outstanding. */
export async function currentBearer(store: Store, app: App): Promise<string | undefined> {
  const generation = Number((await store.get(AuthKeys.bearerGeneration(app.id))) ?? '0')
  const token = deriveBearer(app, generation)
  return (await store.exists(AuthKeys.bearer(token))) ? token : undefined
}
