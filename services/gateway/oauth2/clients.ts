import { type App, AuthKeys } from '../../common/auth/records'
import { newSecret } from '../../common/ids'
import type { Store } from '../../common/store/types'
import { IdentityError } from '../identity'
import { revokeAppGrants } from './grants'
import { OAuth2Keys } from './keys'

/**
 * OAuth 2.0 client registration of an application (App.oauth2): a client
 * id, a client secret for confidential clients (public clients rely on PKCE
 * alone), and the redirect URIs the authorize endpoint matches exactly.
 */

export type OAuth2Client = NonNullable<App['oauth2']>

export interface ClientSettings {
  confidential?: boolean
  redirect_uris?: string[]
}

/**
 * The platform's client ids are base64url text ending in `:1:ci`; ours
 * follow the same form so they look familiar in client configuration.
 */
function newClientId(): string {
  return Buffer.from(`${newSecret(15)}:1:ci`).toString('base64url')
}

function newClientSecret(): string {
  return newSecret(37)
}

/** A redirect URI must be an absolute URL without a fragment (RFC 6749 §3.1.2). */
export function assertRedirectUri(uri: string): void {
  let u: URL
  try {
    u = new URL(uri)
  } catch {
    throw new IdentityError(`redirect URI "${uri}" is not an absolute URL`)
  }
  if (u.hash !== '' || uri.includes('#')) throw new IdentityError(`redirect URI "${uri}" must not have a fragment`)
  if (uri.length > 2000) throw new IdentityError('a redirect URI is at most 2000 characters')
  if (['javascript:', 'data:', 'vbscript:', 'file:'].includes(u.protocol)) throw new IdentityError(`redirect URI scheme ${u.protocol} is not allowed`)
}

function checkRedirectUris(uris: string[]): string[] {
  if (uris.length > 10) throw new IdentityError('at most 10 redirect URIs')
  for (const uri of uris) assertRedirectUri(uri)
  return [...new Set(uris)]
}

async function requireApp(store: Store, appId: string): Promise<App> {
  const app = await store.getJson<App>(AuthKeys.app(appId))
  if (!app) throw new IdentityError(`no application ${appId}`)
  return app
}

/** The app owning `clientId`, when it is still an OAuth 2.0 client. */
export async function appByClientId(store: Store, clientId: string): Promise<App | undefined> {
  if (clientId === '' || clientId.length > 200) return undefined
  const appId = await store.get(OAuth2Keys.client(clientId))
  if (appId === undefined) return undefined
  const app = await store.getJson<App>(AuthKeys.app(appId))
  return app?.oauth2?.client_id === clientId ? app : undefined
}

/**
 * Turns OAuth 2.0 on for an app, or updates its settings when it is on.
 * Switching a client from public to confidential issues a secret;
 * the other way removes it.
 */
export async function configureClient(store: Store, appId: string, settings: ClientSettings): Promise<App> {
  const app = await requireApp(store, appId)
  const current = app.oauth2
  const confidential = settings.confidential ?? current?.confidential ?? true
  const redirectUris = settings.redirect_uris !== undefined ? checkRedirectUris(settings.redirect_uris) : (current?.redirect_uris ?? [])
  const clientId = current?.client_id ?? newClientId()
  const oauth2: OAuth2Client = { client_id: clientId, redirect_uris: redirectUris, confidential }
  if (confidential) oauth2.client_secret = current?.client_secret ?? newClientSecret()
  const updated: App = { ...app, oauth2 }
  await store.batch([
    { op: 'set', key: AuthKeys.app(app.id), value: JSON.stringify(updated) },
    { op: 'set', key: OAuth2Keys.client(clientId), value: app.id }
  ])
  return updated
}

/** New client secret for a confidential client; the old one stops working at once. Tokens already issued stay valid. */
export async function rotateClientSecret(store: Store, appId: string): Promise<App> {
  const app = await requireApp(store, appId)
  if (!app.oauth2) throw new IdentityError(`application ${appId} is not an OAuth 2.0 client`)
  if (!app.oauth2.confidential) throw new IdentityError(`application ${appId} is a public client: it has no client secret`)
  const updated: App = { ...app, oauth2: { ...app.oauth2, client_secret: newClientSecret() } }
  await store.setJson(AuthKeys.app(app.id), updated)
  return updated
}

/** Turns OAuth 2.0 off: the client id is forgotten and every token issued to it is revoked. */
export async function removeClient(store: Store, appId: string): Promise<App> {
  const app = await requireApp(store, appId)
  if (!app.oauth2) return app
  const { oauth2, ...rest } = app
  const updated: App = rest
  await store.batch([
    { op: 'set', key: AuthKeys.app(app.id), value: JSON.stringify(updated) },
    { op: 'del', key: OAuth2Keys.client(oauth2.client_id) }
  ])
  await revokeAppGrants(store, app.id)
  return updated
}

/** What the operator API shows of a client (the secret only to the operator). */
export function clientView(app: App): Record<string, unknown> {
  return {
    app_id: app.id,
    name: app.name,
    enabled: app.oauth2 !== undefined,
    ...(app.oauth2
      ? {
          client_id: app.oauth2.client_id,
          client_type: app.oauth2.confidential ? 'confidential' : 'public',
          ...(app.oauth2.client_secret !== undefined ? { client_secret: app.oauth2.client_secret } : {}),
          redirect_uris: app.oauth2.redirect_uris
        }
      : {})
  }
}
