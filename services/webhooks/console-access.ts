import type { FastifyReply, FastifyRequest } from 'fastify'
import { AuthKeys, type App } from '../common/auth/records'
import { type consoleGuard, requireApp, sessionOf, type ConsoleSessions } from '../common/console/session'
import type { ConsoleViews } from '../common/console/views'
import { Problems } from '../common/errors'
import type { WebhooksParts } from './parts'
import type { Webhook } from './registry'

/**
 * What every console route of the webhooks service (./console-routes and
 * the modules it registers) shares: its dependencies, and the app and
 * webhook of the URL after checking the session may see them.
 */

export interface ConsoleDeps {
  core: WebhooksParts
  sessions: ConsoleSessions
  views: ConsoleViews
  /** Pages (redirect to sign-in) and API routes (401), any role. */
  page: ReturnType<typeof consoleGuard>
  api: ReturnType<typeof consoleGuard>
}

export const APP_ID = '^[0-9]{1,19}$'
export const appParams = { type: 'object', required: ['app_id'], properties: { app_id: { type: 'string', pattern: APP_ID } } }

/** The app of the URL, after checking the session may see it. */
export async function consoleApp(core: WebhooksParts, request: FastifyRequest): Promise<App> {
  const appId = (request.params as { app_id: string }).app_id
  requireApp(sessionOf(request), appId, 'app')
  const app = await core.ctx.store.getJson<App>(AuthKeys.app(appId))
  if (!app) throw Problems.generic(404, 'No app here.')
  return app
}

/** A webhook of the URL's app (404 for another app's webhook, whoever asks). */
export async function consoleWebhook(core: WebhooksParts, request: FastifyRequest, app: App): Promise<Webhook> {
  const id = (request.params as { webhook_id?: string }).webhook_id ?? ''
  const w = /^[0-9]{1,19}$/.test(id) ? await core.registry.getOwned(id, app.id) : undefined
  if (!w) throw Problems.generic(404, 'No webhook here.')
  return w
}

/** A note htmx shows after a successful action (console.js reads the header). */
export function withMessage(reply: FastifyReply, message: string): FastifyReply {
  return reply.header('x-console-message', encodeURIComponent(message))
}
