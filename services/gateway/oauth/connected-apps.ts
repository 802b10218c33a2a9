import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { AuthKeys, type SignInSession } from '../../common/auth/records'
import type { ServiceContext } from '../../common/context'
import type { Store } from '../../common/store/types'
import { getApp, revokeAppAccess } from '../identity'
import { revokeUserAppGrants, userGrants } from '../oauth2/grants'
import { describeScopes } from '../oauth2/scopes'
import { type ConnectedApp, formErrorPage, permissionsFor, renderAccountSignInPage, renderConnectedAppsPage, sendPage } from './page'
import { getGrant } from './request-tokens'
import { csrfToken, type SignInSessions } from './sessions'
import { checkSignInForm, signInFromForm, single } from './sign-in'

/**
 * GET/POST oauth/apps: where a user sees the applications they authorized
 * (OAuth 1.0a approvals and OAuth 2.0 grants) and revokes their access, as
 * the consent page promises. The browser signs in with the same session as
 * the sign-in page; posts are CSRF-protected like its form.
 */

const PATH = '/oauth/apps'

/** The user's apps with what each may do; apps with nothing left are dropped from the index. */
async function connectedApps(store: Store, userId: string): Promise<ConnectedApp[]> {
  const [indexed, oauth2] = await Promise.all([store.zrange(AuthKeys.userApps(userId), 0, -1, { reverse: true }), userGrants(store, userId)])
  const apps: ConnectedApp[] = []
  for (const { member: appId } of indexed) {
    const [app, oauth1] = await Promise.all([getApp(store, appId), getGrant(store, appId, userId)])
    const scopes = [...new Set(oauth2.filter((g) => g.app_id === appId).flatMap((g) => g.scopes))]
    if (!app || (!oauth1 && scopes.length === 0)) {
      await store.zrem(AuthKeys.userApps(userId), appId)
      continue
    }
    const access = [...(oauth1 ? permissionsFor(oauth1.access_level).can : []), ...describeScopes(scopes).map((s) => s.text)]
    apps.push({ id: app.id, name: app.name, access: [...new Set(access)] })
  }
  return apps
}

/** Revokes both kinds of access the user gave the app. */
async function revokeApp(store: Store, userId: string, appId: string): Promise<void> {
  await revokeAppAccess(store, appId, userId)
  await revokeUserAppGrants(store, userId, appId)
  await store.zrem(AuthKeys.userApps(userId), appId)
}

export function registerConnectedAppsPage(app: FastifyInstance, ctx: ServiceContext, sessions: SignInSessions): void {
  const { store } = ctx

  async function list(request: FastifyRequest, reply: FastifyReply, session: SignInSession): Promise<FastifyReply> {
    const apps = await connectedApps(store, session.user_id)
    return sendPage(reply, 200, renderConnectedAppsPage({ screenName: session.screen_name, apps, csrf: csrfToken(request, reply) }))
  }

  function signInPage(request: FastifyRequest, reply: FastifyReply, status: number, options: { screenName?: string; error?: string } = {}): FastifyReply {
    return sendPage(reply, status, renderAccountSignInPage({ csrf: csrfToken(request, reply), ...options }))
  }

  /** Back to the list after a post (a reload does not post again). */
  function backToList(reply: FastifyReply): FastifyReply {
    return reply.code(303).header('location', 'apps').header('cache-control', 'no-store').send()
  }

  app.get(PATH, async (request, reply) => {
    const session = await sessions.current(request)
    return session ? list(request, reply, session) : signInPage(request, reply, 200)
  })

  app.post(PATH, { errorHandler: formErrorPage }, async (request, reply) => {
    const form = checkSignInForm(request, reply, 'Open the connected apps page again.')
    if (!form.ok) return form.reply
    const appId = single(form.body.app_id)
    if (appId === undefined) {
      const signedIn = await signInFromForm(request, reply, store, sessions, form.body)
      if (!signedIn.ok) return signInPage(request, reply, signedIn.refusal.status, signedIn.refusal)
      return backToList(reply)
    }
    const session = await sessions.current(request)
    if (!session) return signInPage(request, reply, 401, { error: 'Sign in to continue.' })
    if (/^\d{1,20}$/.test(appId)) await revokeApp(store, session.user_id, appId)
    return backToList(reply)
  })
}
