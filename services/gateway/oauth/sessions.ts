import type { FastifyReply, FastifyRequest } from 'fastify'
import { requestBaseUrl } from '../../common/auth/authenticate'
import { safeEqual } from '../../common/auth/oauth1'
import { AuthKeys, type SignInSession, type User } from '../../common/auth/records'
import { newSecret } from '../../common/ids'
import { parseCookies } from '../../common/cookies'
import type { Store } from '../../common/store/types'

/**
 * The browser side of the sign-in page: a session cookie that remembers the
 * signed-in account (so oauth/authenticate can skip the password), and a
 * CSRF token. The CSRF token is double-submitted: a cookie (SameSite=Lax,
 * `__Host-` prefixed over HTTPS so a sibling host cannot plant one) and a
 * hidden form field must carry the same value, so a page on another site
 * cannot post the consent form with the victim's session.
 */

export { parseCookies }

function isSecure(request: FastifyRequest): boolean {
  return requestBaseUrl(request, request.server.publicBase).startsWith('https:')
}

function cookieName(request: FastifyRequest, base: string): string {
  return isSecure(request) ? `__Host-${base}` : base
}

function setCookie(request: FastifyRequest, reply: FastifyReply, name: string, value: string, maxAgeS: number): void {
  const attributes = [`${name}=${value}`, 'Path=/', `Max-Age=${maxAgeS}`, 'HttpOnly', 'SameSite=Lax']
  if (isSecure(request)) attributes.push('Secure')
  const previous = reply.getHeader('set-cookie')
  const list = previous === undefined ? [] : Array.isArray(previous) ? previous.map(String) : [String(previous)]
  reply.header('set-cookie', [...list, attributes.join('; ')])
}

export class SignInSessions {
  constructor(
    private readonly store: Store,
    private readonly ttlMs: number
  ) {}

  /** The account this browser is signed in as, if any. */
  async current(request: FastifyRequest): Promise<SignInSession | undefined> {
    const id = parseCookies(request.headers.cookie).get(cookieName(request, 'gw_session'))
    if (!id || !/^[A-Za-z0-9_-]{20,100}$/.test(id)) return undefined
    return this.store.getJson<SignInSession>(AuthKeys.session(id))
  }

  /** Signs the browser in as `user` with a fresh session id (never reusing one an attacker could have planted). */
  async start(request: FastifyRequest, reply: FastifyReply, user: User): Promise<SignInSession> {
    const previous = parseCookies(request.headers.cookie).get(cookieName(request, 'gw_session'))
    if (previous && /^[A-Za-z0-9_-]{20,100}$/.test(previous)) await this.store.del(AuthKeys.session(previous))
    const id = newSecret(32)
    const session: SignInSession = { user_id: user.id, screen_name: user.screen_name, created_at: new Date().toISOString() }
    await this.store.setJson(AuthKeys.session(id), session, this.ttlMs)
    setCookie(request, reply, cookieName(request, 'gw_session'), id, Math.floor(this.ttlMs / 1000))
    return session
  }
}

const CSRF_COOKIE = 'gw_csrf'
const CSRF_MAX_AGE_S = 24 * 3600

/** The browser's CSRF token, creating (and setting) one when it has none. */
export function csrfToken(request: FastifyRequest, reply: FastifyReply): string {
  const existing = parseCookies(request.headers.cookie).get(cookieName(request, CSRF_COOKIE))
  if (existing && /^[A-Za-z0-9_-]{32,100}$/.test(existing)) return existing
  const token = newSecret(32)
  setCookie(request, reply, cookieName(request, CSRF_COOKIE), token, CSRF_MAX_AGE_S)
  return token
}

function sameHostOrigin(origin: string, host: string | undefined): boolean {
  try {
    return host !== undefined && new URL(origin).host === host
  } catch {
    return false
  }
}

/**
 * Whether a form post is the browser's own: the field matches the cookie, and
 * an Origin header, when the browser sends one, is this server's.
 */
export function csrfValid(request: FastifyRequest, field: string | undefined): boolean {
  const origin = request.headers.origin
  if (origin !== undefined) {
    const own = new URL(requestBaseUrl(request, request.server.publicBase)).origin
    const host = request.headers.host
    if (origin !== own && !sameHostOrigin(origin, host)) return false
  }
  const cookie = parseCookies(request.headers.cookie).get(cookieName(request, CSRF_COOKIE))
  return cookie !== undefined && field !== undefined && field !== '' && safeEqual(cookie, field)
}
