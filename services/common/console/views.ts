import path from 'node:path'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { Eta } from 'eta'
import { projectRoot } from '../bus/topics'
import type { ConsoleSession } from './session'

/**
 * Server-rendered console pages (eta templates, escaped by default). Each
 * service keeps its own templates in services/<name>/console-views/ and
 * renders them into the one layout of services/common/console/views/, so
 * every page has the same navigation, CSRF token and assets whichever
 * service served it. Templates are read from the source tree (tsc does not
 * copy them), found from the project root like deploy/.
 */

export interface PageOptions {
  title: string
  /** Navigation entry to highlight. */
  active?: string
}

/** The app a developer session is scoped to, or the app an operator is looking at. */
export interface NavContext {
  session: ConsoleSession | undefined
  appId?: string
}

const layoutViews = path.join(projectRoot(), 'services', 'common', 'console', 'views')

export class ConsoleViews {
  private readonly eta: Eta
  private readonly layout: Eta

  constructor(service: string) {
    this.eta = new Eta({ views: path.join(projectRoot(), 'services', service, 'console-views'), cache: true, autoEscape: true })
    this.layout = new Eta({ views: layoutViews, cache: true, autoEscape: true })
  }

  /** A fragment (htmx swaps it in), no layout. */
  fragment(name: string, data: Record<string, unknown>): string {
    return this.eta.render(name, { ...data, utc })
  }

  /** A whole page: the template inside the layout. */
  page(request: FastifyRequest, name: string, data: Record<string, unknown>, options: PageOptions & { appId?: string }): string {
    const session = request.consoleSession
    const body = this.eta.render(name, { ...data, session, utc })
    return renderLayout(this.layout, { body, session, appId: options.appId ?? session?.app_id, title: options.title, active: options.active ?? '' })
  }

  send(reply: FastifyReply, html: string): FastifyReply {
    return sendHtml(reply, html)
  }
}

/** Content-Security-Policy of every console page: only our own scripts and styles, no framing. */
export const CONSOLE_CSP = "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"

/** Sends a console page or fragment: never cached, never framed, no inline script runs. */
export function sendHtml(reply: FastifyReply, html: string): FastifyReply {
  return reply
    .type('text/html; charset=utf-8')
    .header('cache-control', 'no-store')
    .header('content-security-policy', CONSOLE_CSP)
    .header('x-content-type-options', 'nosniff')
    .header('referrer-policy', 'no-referrer')
    .send(html)
}

function renderLayout(eta: Eta, data: Record<string, unknown>): string {
  return eta.render('layout', data)
}

/** The layout alone around a body (pages with no session: sign-in, notices). */
export function standalonePage(body: string, title: string): string {
  return renderLayout(new Eta({ views: layoutViews, cache: true, autoEscape: true }), { body, session: undefined, appId: undefined, title, active: '' })
}

/**
 * One clock for the whole console: every time is shown in UTC with the zone
 * written out (the live tail and the charts format theirs the same way in
 * console.js), so times on different pages and from different people compare.
 * Accepts ms or an ISO string; '—' for none.
 */
export function utc(at: number | string | undefined | null): string {
  if (at === undefined || at === null || at === '') return '—'
  const d = new Date(at)
  if (Number.isNaN(d.getTime())) return String(at)
  return `${d.toISOString().slice(0, 19).replace('T', ' ')} UTC`
}

/** A page for a browser that asked for a console URL that failed: the status, why, and the way back. */
export function errorPage(session: ConsoleSession | undefined, status: number, detail: string): string {
  const title = ERROR_TITLES[status] ?? (status >= 500 ? 'Something went wrong' : 'The request was refused')
  const body = new Eta({ views: layoutViews, cache: true, autoEscape: true }).render('error', { status, title, detail, session })
  return renderLayout(new Eta({ views: layoutViews, cache: true, autoEscape: true }), { body, session, appId: session?.app_id, title, active: '' })
}

const ERROR_TITLES: Record<number, string> = {
  400: 'This request is not valid',
  401: 'Sign in first',
  403: 'Not allowed',
  404: 'Not found',
  409: 'Not possible right now',
  429: 'Too many requests',
  503: 'Temporarily unavailable'
}

/** HTML-escapes text for the few strings built outside templates. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)
}
