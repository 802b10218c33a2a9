import type { FastifyReply, FastifyRequest } from 'fastify'
import { safeEqual } from '../auth/oauth1'
import { sha256Hex } from '../auth/records'
import { cookieName, parseCookies, setCookie } from '../cookies'
import { Problems } from '../errors'
import { newSecret } from '../ids'
import type { Store } from '../store/types'

/**
 * Web console sessions, a documented shared keyspace (like `auth:`): the
 * gateway signs browsers in and writes these; every service that serves
 * console pages or console API routes (webhooks, activity, account-history,
 * gateway) reads them to authorize the request. No service calls another.
 *
 *   console:session:{sha256(id)}  ConsoleSession (JSON), TTL CONSOLE_SESSION_TTL
 *   console:link:{sha256(token)}  PortalLink (JSON), TTL CONSOLE_LINK_TTL; deleted on use
 *
 * The cookie (`console_session`, `__Host-` prefixed over https) is HttpOnly,
 * SameSite=Strict and Secure over https. Every state-changing request must
 * carry the session's CSRF token (header `x-csrf-token`, or form field
 * `_csrf`), compared in constant time: SameSite=Strict alone leaves
 * same-site attackers and old browsers.
 */

export const ConsoleKeys = {
  session: (id: string) => `console:session:${sha256Hex(id)}`,
  link: (token: string) => `console:link:${sha256Hex(token)}`
}

export type ConsoleRole = 'operator' | 'developer'

export interface ConsoleSession {
  role: ConsoleRole
  /** The one app a developer session may see (absent for operators). */
  app_id?: string
  csrf: string
  created_at: string
  expires_at: string
}

export interface PortalLink {
  role: ConsoleRole
  /** The app of a developer link. */
  app_id?: string
  created_at: string
  expires_at: string
}

const SESSION_COOKIE = 'console_session'
const LOGIN_CSRF_COOKIE = 'console_login'
const TOKEN_SHAPE = /^[A-Za-z0-9_-]{20,100}$/
const UNSAFE_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE'])

declare module 'fastify' {
  interface FastifyRequest {
    consoleSession?: ConsoleSession
  }
}

export class ConsoleSessions {
  constructor(
    private readonly store: Store,
    private readonly ttlMs: number,
    private readonly linkTtlMs: number
  ) {}

  private cookieValue(request: FastifyRequest): string | undefined {
    const id = parseCookies(request.headers.cookie).get(cookieName(request, SESSION_COOKIE))
    return id !== undefined && TOKEN_SHAPE.test(id) ? id : undefined
  }

  /** The browser's session, when it has a live one. */
  async current(request: FastifyRequest): Promise<ConsoleSession | undefined> {
    const id = this.cookieValue(request)
    if (id === undefined) return undefined
    const session = await this.store.getJson<ConsoleSession>(ConsoleKeys.session(id))
    if (!session || Date.parse(session.expires_at) <= Date.now()) return undefined
    return session
  }

  /** Signs the browser in with a fresh id (never one an attacker could have planted); the old session ends. */
  async start(request: FastifyRequest, reply: FastifyReply, role: ConsoleRole, appId?: string): Promise<ConsoleSession> {
    const previous = this.cookieValue(request)
    if (previous !== undefined) await this.store.del(ConsoleKeys.session(previous))
    const id = newSecret(32)
    const now = Date.now()
    const session: ConsoleSession = { role, csrf: newSecret(32), created_at: new Date(now).toISOString(), expires_at: new Date(now + this.ttlMs).toISOString() }
    if (appId !== undefined) session.app_id = appId
    await this.store.setJson(ConsoleKeys.session(id), session, this.ttlMs)
    setCookie(request, reply, cookieName(request, SESSION_COOKIE), id, { maxAgeS: Math.floor(this.ttlMs / 1000), sameSite: 'Strict' })
    return session
  }

  async end(request: FastifyRequest, reply: FastifyReply): Promise<void> {
    const id = this.cookieValue(request)
    if (id !== undefined) await this.store.del(ConsoleKeys.session(id))
    setCookie(request, reply, cookieName(request, SESSION_COOKIE), '', { maxAgeS: 0, sameSite: 'Strict' })
  }

  /**
   * A single-use sign-in link: for one app's developer (the portal link), or
   * without an app for an operator (`make console` on the operator's machine).
   * Returns the secret token; only its hash is stored.
   */
  async createLink(appId: string | undefined): Promise<{ token: string; link: PortalLink }> {
    const token = newSecret(32)
    const now = Date.now()
    const link: PortalLink = { role: appId === undefined ? 'operator' : 'developer', created_at: new Date(now).toISOString(), expires_at: new Date(now + this.linkTtlMs).toISOString() }
    if (appId !== undefined) link.app_id = appId
    await this.store.setJson(ConsoleKeys.link(token), link, this.linkTtlMs)
    return { token, link }
  }

  async peekLink(token: string): Promise<PortalLink | undefined> {
    if (!TOKEN_SHAPE.test(token)) return undefined
    return this.store.getJson<PortalLink>(ConsoleKeys.link(token))
  }

  /** Uses the link up: only the first caller gets it. */
  async redeemLink(token: string): Promise<PortalLink | undefined> {
    const link = await this.peekLink(token)
    if (!link) return undefined
    return (await this.store.del(ConsoleKeys.link(token))) === 1 ? link : undefined
  }
}

/**
 * Login forms are posted before there is a session: a double-submitted token
 * (SameSite=Strict cookie + hidden field) keeps another site from signing a
 * browser in to an attacker's app (login CSRF).
 */
export function loginCsrfToken(request: FastifyRequest, reply: FastifyReply): string {
  const existing = parseCookies(request.headers.cookie).get(cookieName(request, LOGIN_CSRF_COOKIE))
  if (existing !== undefined && TOKEN_SHAPE.test(existing)) return existing
  const token = newSecret(32)
  setCookie(request, reply, cookieName(request, LOGIN_CSRF_COOKIE), token, { maxAgeS: 3600, sameSite: 'Strict' })
  return token
}

export function loginCsrfValid(request: FastifyRequest, field: unknown): boolean {
  const cookie = parseCookies(request.headers.cookie).get(cookieName(request, LOGIN_CSRF_COOKIE))
  return cookie !== undefined && typeof field === 'string' && field !== '' && safeEqual(cookie, field)
}

/** The CSRF token a state-changing request presents: the header htmx sends, or the form field. */
function presentedCsrf(request: FastifyRequest): string | undefined {
  const header = request.headers['x-csrf-token']
  if (typeof header === 'string' && header !== '') return header
  const body = request.body
  if (body !== null && typeof body === 'object' && typeof (body as Record<string, unknown>)._csrf === 'string') return (body as Record<string, string>)._csrf
  return undefined
}

export interface GuardOptions {
  /** Only operators (default: operators and developers). */
  operatorOnly?: boolean
  /** Pages redirect to the sign-in page; API routes answer 401. */
  page?: boolean
}

/**
 * preHandler of every console page and console API route: a live session,
 * the role the route needs, and on POST/PUT/PATCH/DELETE the session's CSRF
 * token. Sets request.consoleSession.
 */
export function consoleGuard(sessions: ConsoleSessions, options: GuardOptions = {}) {
  return async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    const session = await sessions.current(request)
    if (!session) {
      if (options.page && request.method === 'GET') {
        await reply.redirect('/console/login', 303)
        return
      }
      throw Problems.generic(401, 'Sign in to the console first (your session is missing or has expired).')
    }
    if (options.operatorOnly && session.role !== 'operator') throw Problems.generic(403, 'This part of the console is for operators.')
    if (UNSAFE_METHODS.has(request.method)) {
      const presented = presentedCsrf(request)
      if (presented === undefined || !safeEqual(presented, session.csrf)) throw Problems.generic(403, 'Missing or wrong CSRF token: reload the page and try again.')
    }
    request.consoleSession = session
  }
}

/** The session of a guarded route (the guard ran). */
export function sessionOf(request: FastifyRequest): ConsoleSession {
  const s = request.consoleSession
  if (!s) throw Problems.generic(401, 'Sign in to the console first.')
  return s
}

/**
 * Whether the session may see `appId`'s data: operators every app, a
 * developer only the app of the portal link. Every console route that
 * touches app data checks this on the server, whatever the page showed.
 */
export function canSeeApp(session: ConsoleSession, appId: string): boolean {
  return session.role === 'operator' || session.app_id === appId
}

/** Throws 404 (not 403: a developer does not learn what exists elsewhere) unless the session may see `appId`. */
export function requireApp(session: ConsoleSession, appId: string, what: string): void {
  if (!canSeeApp(session, appId)) throw Problems.generic(404, `No ${what} here.`)
}

export function consoleSessions(store: Store, config: { consoleSessionTtlMs: number; consoleLinkTtlMs: number }): ConsoleSessions {
  return new ConsoleSessions(store, config.consoleSessionTtlMs, config.consoleLinkTtlMs)
}
