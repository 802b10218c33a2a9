import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Store } from '../../common/store/types'
import { checkCredentials } from '../identity'
import { renderNoticePage, sendPage } from './page'
import { csrfValid, type SignInSessions } from './sessions'

/**
 * The posted sign-in and consent form, shared by the OAuth 1.0a pages
 * (oauth/authorize, oauth/authenticate) and the OAuth 2.0 one
 * (i/oauth2/authorize): the form checks before anything else is read, and
 * who approves, either the account whose credentials were typed (password
 * attempts limited per client address) or the signed-in account the page
 * showed.
 */

export type FormCheck = { ok: true; body: Record<string, unknown> } | { ok: false; reply: FastifyReply }

export function single(value: unknown): string | undefined {
  return typeof value === 'string' ? value : undefined
}

/**
 * A form post of the page itself: a form body, and a CSRF field matching the
 * browser's cookie. Otherwise a notice page is sent; `restart` tells the
 * user how to start again.
 */
export function checkSignInForm(request: FastifyRequest, reply: FastifyReply, restart: string): FormCheck {
  if (request.rawForm === undefined) return { ok: false, reply: sendPage(reply, 400, renderNoticePage('Unexpected request', 'Use the form on the sign-in page.')) }
  const body = (request.body ?? {}) as Record<string, unknown>
  if (!csrfValid(request, single(body.csrf_token))) {
    return { ok: false, reply: sendPage(reply, 403, renderNoticePage('This form has expired', `For your security the form could not be accepted. ${restart}`)) }
  }
  return { ok: true, body }
}

/** The user's answer on the page: allow, deny, or undefined for anything else. */
export function decisionOf(body: Record<string, unknown>): 'allow' | 'deny' | undefined {
  const decision = single(body.decision)
  return decision === 'allow' || decision === 'deny' ? decision : undefined
}

/** Sent back to the consent page: the status, the alert, and the screen name to keep in the box. */
export interface SignInRefusal {
  status: 401 | 429
  error: string
  screenName?: string
}

export type SignInOutcome = { ok: true; userId: string } | { ok: false; refusal: SignInRefusal }

/**
 * Who approves. With credentials typed: that account, once the password
 * matches (within the `oauth-login` window of the client address), and the
 * browser is signed in as it. Without: the signed-in account, which must
 * still be the one the page showed (`signed_in_as`).
 */
export async function signInFromForm(request: FastifyRequest, reply: FastifyReply, store: Store, sessions: SignInSessions, body: Record<string, unknown>): Promise<SignInOutcome> {
  const screenName = single(body.screen_name)?.trim() ?? ''
  const password = single(body.password) ?? ''
  if (screenName !== '' || password !== '') {
    const attempt = await request.server.rateLimiter.consume('oauth-login', `ip:${request.ip}`)
    if (attempt.exceeded) {
      const minutes = Math.max(1, Math.ceil((attempt.resetAt * 1000 - Date.now()) / 60_000))
      return { ok: false, refusal: { screenName, status: 429, error: `Too many sign-in attempts. Try again in ${minutes} minute${minutes === 1 ? '' : 's'}.` } }
    }
    const user = screenName !== '' && password !== '' ? await checkCredentials(store, screenName, password) : undefined
    if (!user) return { ok: false, refusal: { screenName, status: 401, error: 'The username and password you entered did not match our records.' } }
    await sessions.start(request, reply, user)
    return { ok: true, userId: user.id }
  }
  const session = await sessions.current(request)
  if (!session || session.user_id !== single(body.signed_in_as)) return { ok: false, refusal: { status: 401, error: 'Sign in to continue.' } }
  return { ok: true, userId: session.user_id }
}
