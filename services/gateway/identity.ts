import { createHmac, randomBytes, scrypt as scryptCb, timingSafeEqual } from 'node:crypto'
import { promisify } from 'node:util'
import { type AccessLevel, type AccessToken, type App, AuthKeys, type BearerRecord, type User } from '../common/auth/records'
import { newNumericId, newSecret } from '../common/ids'
import type { Store } from '../common/store/types'

/**
 * Applications, users and their credentials, kept in the shared `auth:`
 * keyspace (records.ts documents it). The OAuth routes, the operator API and
 * the tests all create and revoke credentials through these functions.
 */

const scrypt = promisify(scryptCb) as (password: string, salt: Buffer, keylen: number, options: { N: number; r: number; p: number }) => Promise<Buffer>
const SCRYPT = { N: 16384, r: 8, p: 1 }

export class IdentityError extends Error {}

export interface NewApp {
  name: string
  access_level?: AccessLevel
  callback_urls?: string[]
  sign_in_with?: boolean
}

export async function createApp(store: Store, input: NewApp): Promise<App> {
  const name = input.name.trim()
  if (name === '' || name.length > 32) throw new IdentityError('app name must be 1 to 32 characters')
  for (const url of input.callback_urls ?? []) assertCallbackUrl(url)
  const app: App = {
    id: newNumericId(),
    name,
    consumer_key: newSecret(18),
    consumer_secret: newSecret(36),
    access_level: input.access_level ?? 'read-write',
    callback_urls: input.callback_urls ?? [],
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

export function assertCallbackUrl(url: string): void {
  let u: URL
  try {
    u = new URL(url)
  } catch {
    throw new IdentityError(`callback URL "${url}" is not a URL`)
  }
  if (u.hash !== '') throw new IdentityError(`callback URL "${url}" must not have a fragment`)
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
  if (!/^[A-Za-z0-9_]{1,15}$/.test(screenName)) throw new IdentityError('screen name must be 1 to 15 letters, digits or underscores')
  if (password.length < 8) throw new IdentityError('password must be at least 8 characters')
  const user: User = { id: newNumericId(), screen_name: screenName, password_hash: await hashPassword(password), created_at: new Date().toISOString() }
  const claimed = await store.setIfAbsent(AuthKeys.userByName(screenName), user.id)
  if (!claimed) throw new IdentityError(`screen name ${screenName} is taken`)
  await store.batch([
    { op: 'set', key: AuthKeys.user(user.id), value: JSON.stringify(user) },
    { op: 'zadd', key: AuthKeys.users(), score: Date.now(), member: user.id }
  ])
  return user
}

export async function getUser(store: Store, id: string): Promise<User | undefined> {
  return store.getJson<User>(AuthKeys.user(id))
}

export async function findUserByScreenName(store: Store, screenName: string): Promise<User | undefined> {
  const id = await store.get(AuthKeys.userByName(screenName))
  return id === undefined ? undefined : getUser(store, id)
}

/** The user when the password matches; undefined otherwise (same time either way for unknown names). */
export async function checkCredentials(store: Store, screenName: string, password: string): Promise<User | undefined> {
  const user = await findUserByScreenName(store, screenName)
  if (!user) {
    await hashPassword(password)
    return undefined
  }
  return (await verifyPassword(password, user.password_hash)) ? user : undefined
}

// ------------------------------------------------------------------ OAuth 1.0a access tokens

/** Issues an access token of `level` (never above the app's) for `user` on `app`. */
export async function issueAccessToken(store: Store, app: App, user: User, level: AccessLevel = app.access_level): Promise<AccessToken> {
  const order: AccessLevel[] = ['read', 'read-write', 'read-write-dm']
  const effective = order[Math.min(order.indexOf(level), order.indexOf(app.access_level))] as AccessLevel
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

export async function revokeAccessToken(store: Store, token: string): Promise<boolean> {
  return (await store.del(AuthKeys.token(token))) > 0
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

function bearerGenerationKey(appId: string): string {
  return `auth:bearer-generation:${appId}`
}

export async function issueBearer(store: Store, app: App): Promise<{ token: string; created: boolean }> {
  const generation = Number((await store.get(bearerGenerationKey(app.id))) ?? '0')
  const token = deriveBearer(app, generation)
  const record: BearerRecord = { kind: 'app', app_id: app.id, created_at: new Date().toISOString() }
  const created = await store.setJsonIfAbsent(AuthKeys.bearer(token), record)
  return { token, created }
}

/** Invalidates the app's outstanding bearer token; the next issue yields a different one. */
export async function invalidateBearer(store: Store, app: App): Promise<string | undefined> {
  const generation = Number((await store.get(bearerGenerationKey(app.id))) ?? '0')
  const token = deriveBearer(app, generation)
  const existed = (await store.del(AuthKeys.bearer(token))) > 0
  await store.incr(bearerGenerationKey(app.id))
  return existed ? token : undefined
}

/** The app's current bearer token if one is outstanding. */
export async function currentBearer(store: Store, app: App): Promise<string | undefined> {
  const generation = Number((await store.get(bearerGenerationKey(app.id))) ?? '0')
  const token = deriveBearer(app, generation)
  return (await store.exists(AuthKeys.bearer(token))) ? token : undefined
}
