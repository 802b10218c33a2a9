import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { App, RequestToken, SignInSession } from '../../common/auth/records'
import type { ServiceContext } from '../../common/context'
import { getApp } from '../identity'
import { formErrorPage, permissionsFor, renderConsentPage, renderNoticePage, renderPinPage, sendPage } from './page'
import { callbackWith, getGrant, grantCovers, recordGrant, type RequestTokens } from './request-tokens'
import { csrfToken, type SignInSessions } from './sessions'
import { checkSignInForm, decisionOf, signInFromForm, single } from './sign-in'

/**
 * GET/POST oauth/authorize and oauth/authenticate: the browser step of the
 * three-legged flow. The user signs in (or is already signed in), sees the
 * app and what it asks for, and approves or denies; the browser then goes to
 * `<callback>?oauth_token=&oauth_verifier=` (or `?denied=`), or an `oob`
 * client's user is shown the PIN. oauth/authenticate skips the page for a
 * signed-in user who already granted the app, when the app has "sign in
 * with" enabled.
 */

type Mode = 'authorize' | 'authenticate'

interface Pending {
  rt: RequestToken
  client: App
}

interface ConsentOptions {
  mode: Mode
  signedIn?: SignInSession
  screenName?: string
  error?: string
  status?: number
}

function isTrue(value: unknown): boolean {
  return value === 'true' || value === '1' || value === 'yes'
}

/** A plausible screen name from the query (prefill), else undefined. */
function screenNameParam(value: unknown): string | undefined {
  const s = single(value)?.trim().replace(/^@/, '')
  return s !== undefined && /^[A-Za-z0-9_]{1,15}$/.test(s) ? s : undefined
}

export function registerAuthorizePages(app: FastifyInstance, ctx: ServiceContext, tokens: RequestTokens, sessions: SignInSessions): void {
  const { store } = ctx

  async function pending(token: string | undefined): Promise<Pending | undefined> {
    if (!token) return undefined
    const rt = await tokens.get(token)
    if (!rt || rt.verifier !== undefined) return undefined
    const client = await getApp(store, rt.app_id)
    return client ? { rt, client } : undefined
  }

  function notice(reply: FastifyReply, status: number, title: string, message: string): FastifyReply {
    return sendPage(reply, status, renderNoticePage(title, message))
  }

  function expired(reply: FastifyReply): FastifyReply {
    return notice(
      reply,
      400,
      'This sign-in link is no longer valid',
      'It expired or was already used. Go back to the application and start signing in again.'
    )
  }

  function consent(request: FastifyRequest, reply: FastifyReply, { rt, client }: Pending, options: ConsentOptions): FastifyReply {
    const { can, cannot } = permissionsFor(rt.access_level)
    const hiddenFields: Record<string, string> = { oauth_token: rt.token, csrf_token: csrfToken(request, reply) }
    if (options.signedIn) hiddenFields.signed_in_as = options.signedIn.user_id
    const html = renderConsentPage({
      appName: client.name,
      permissions: can,
      restrictions: cannot,
      manageHref: 'apps',
      action: options.mode,
      hiddenFields,
      ...(options.signedIn
        ? { signedInAs: options.signedIn.screen_name, switchAccountHref: `${options.mode}?oauth_token=${encodeURIComponent(rt.token)}&force_login=true` }
        : {}),
      ...(options.screenName !== undefined ? { screenName: options.screenName } : {}),
      ...(options.error !== undefined ? { error: options.error } : {})
    })
    return sendPage(reply, options.status ?? 200, html, rt.callback === 'oob' ? [] : [rt.callback])
  }

  function redirect(reply: FastifyReply, location: string): FastifyReply {
    return reply.code(303).header('location', location).header('cache-control', 'no-store').header('referrer-policy', 'no-referrer').send()
  }

  function alreadyHandled(reply: FastifyReply): FastifyReply {
    return notice(reply, 409, 'This request was already answered', 'Go back to the application to continue.')
  }

  /** Approves the request token for `userId`: verifier to the callback, or the PIN page. */
  async function approve(reply: FastifyReply, { rt, client }: Pending, userId: string): Promise<FastifyReply> {
    if (!(await tokens.decide(rt, 'allow'))) return alreadyHandled(reply)
    const approved = await tokens.approve(rt, userId)
    await recordGrant(store, client.id, userId, rt.access_level)
    const verifier = approved.verifier as string
    if (rt.callback === 'oob') return sendPage(reply, 200, renderPinPage(client.name, verifier))
    return redirect(reply, callbackWith(rt.callback, { oauth_token: rt.token, oauth_verifier: verifier }))
  }

  async function deny(reply: FastifyReply, { rt, client }: Pending): Promise<FastifyReply> {
    if (!(await tokens.decide(rt, 'deny'))) return alreadyHandled(reply)
    await tokens.consume(rt.token)
    if (rt.callback === 'oob') return notice(reply, 200, `You did not authorize ${client.name}`, 'No access was granted. You can close this page.')
    return redirect(reply, callbackWith(rt.callback, { denied: rt.token }))
  }

  async function show(request: FastifyRequest, reply: FastifyReply, mode: Mode): Promise<FastifyReply> {
    const query = (request.query ?? {}) as Record<string, unknown>
    const token = single(query.oauth_token)
    if (!token) {
      return notice(reply, 400, 'Missing request token', 'This page needs the oauth_token the application received. Go back to the application and start signing in again.')
    }
    const found = await pending(token)
    if (!found) return expired(reply)
    const screenName = screenNameParam(query.screen_name)
    const session = isTrue(query.force_login) ? undefined : await sessions.current(request)
    // A screen_name naming someone else than the signed-in account asks for that account's credentials.
    const signedIn = session && (screenName === undefined || screenName.toLowerCase() === session.screen_name.toLowerCase()) ? session : undefined
    if (mode === 'authenticate' && signedIn && found.client.sign_in_with) {
      const grant = await getGrant(store, found.client.id, signedIn.user_id)
      if (grantCovers(grant, found.rt.access_level)) return approve(reply, found, signedIn.user_id)
    }
    return consent(request, reply, found, { mode, ...(signedIn ? { signedIn } : {}), ...(screenName !== undefined ? { screenName } : {}) })
  }

  async function decide(request: FastifyRequest, reply: FastifyReply, mode: Mode): Promise<FastifyReply> {
    const form = checkSignInForm(request, reply, 'Go back to the application and start signing in again.')
    if (!form.ok) return form.reply
    const found = await pending(single(form.body.oauth_token))
    if (!found) return expired(reply)
    const decision = decisionOf(form.body)
    if (decision === 'deny') return deny(reply, found)
    if (decision !== 'allow') return notice(reply, 400, 'Unexpected request', 'Choose Authorize or Cancel on the sign-in page.')
    const approver = await signInFromForm(request, reply, store, sessions, form.body)
    if (!approver.ok) return consent(request, reply, found, { mode, ...approver.refusal })
    return approve(reply, found, approver.userId)
  }

  for (const mode of ['authorize', 'authenticate'] as const) {
    app.get(`/oauth/${mode}`, (request, reply) => show(request, reply, mode))
    app.post(`/oauth/${mode}`, { errorHandler: formErrorPage }, (request, reply) => decide(request, reply, mode))
  }
}
