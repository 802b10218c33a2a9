import type { FastifyInstance, FastifyRequest } from 'fastify'
import { Problems } from '../errors'
import type { ConsoleSessions } from './session'
import { CONSOLE_CSP, errorPage } from './views'

/**
 * Errors of console URLs as a browser sees them: a navigation (Accept:
 * text/html, not an htmx call) that fails gets an HTML page with the reason
 * and the way back, in the console's layout; htmx calls and API clients keep
 * the JSON problem (console.js shows its detail in the banner). Registered in
 * the plugin of each service that serves console pages, with a catch-all for
 * its prefix so an unknown console URL is a page too.
 */

function wantsPage(request: FastifyRequest): boolean {
  if (request.method !== 'GET' && request.method !== 'POST') return false
  if (request.headers['hx-request'] !== undefined) return false
  const accept = request.headers.accept ?? ''
  return /\btext\/html\b/.test(accept)
}

/** The reason a problem body gives: invalid-request items, else its detail or title. */
function problemDetail(payload: unknown): string {
  if (typeof payload !== 'string') return 'The request could not be completed.'
  try {
    const p = JSON.parse(payload) as { detail?: unknown; title?: unknown; errors?: Array<{ message?: unknown }> }
    if (Array.isArray(p.errors) && p.errors.length > 0) return p.errors.map((e) => String(e.message ?? '')).filter((m) => m !== '').join(' · ')
    if (typeof p.detail === 'string' && p.detail !== '') return p.detail
    if (typeof p.title === 'string') return p.title
  } catch {
    // Not JSON: the status says it.
  }
  return 'The request could not be completed.'
}

export function registerConsoleErrorPages(app: FastifyInstance, sessions: ConsoleSessions, prefix: string): void {
  app.addHook('onSend', async (request, reply, payload) => {
    if (reply.statusCode < 400 || !request.url.startsWith('/console') || !wantsPage(request)) return payload
    const type = String(reply.getHeader('content-type') ?? '')
    if (!type.includes('json')) return payload
    const session = request.consoleSession ?? (await sessions.current(request).catch(() => undefined))
    reply
      .type('text/html; charset=utf-8')
      .header('cache-control', 'no-store')
      .header('content-security-policy', CONSOLE_CSP)
      .header('x-content-type-options', 'nosniff')
      .header('referrer-policy', 'no-referrer')
    return errorPage(session, reply.statusCode, problemDetail(payload))
  })
  app.get(`${prefix}*`, async () => {
    throw Problems.generic(404, 'There is no console page at this address.')
  })
}
