import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { AuthKeys, type App } from '../common/auth/records'
import { consoleGuard, consoleSessions, requireApp, sessionOf, type ConsoleSessions } from '../common/console/session'
import { ConsoleViews, sendHtml } from '../common/console/views'
import { Problems } from '../common/errors'
import type { WebhooksCore } from './core'
import { registerConsoleDeliveryRoutes } from './console-deliveries'
import { registerConsoleLiveRoutes } from './console-live'
import { registerConsoleOpsRoutes } from './console-ops'
import type { Webhook } from './registry'

/**
 * The webhooks service's part of the web console (/console/webhooks/...,
 * routed here by deploy/routes.json): an app's webhooks with their CRC
 * history, the delivery log, the live tail and charts, and the operator's
 * overview of every app and the dead letters. Pages are server-rendered
 * (console-views/*.eta) with htmx for actions; every route checks the
 * console session from the shared `console:` keyspace and, for app data,
 * that the session may see that app (a developer: only the portal link's).
 */

export interface ConsoleDeps {
  core: WebhooksCore
  sessions: ConsoleSessions
  views: ConsoleViews
  /** Pages (redirect to sign-in) and API routes (401), any role. */
  page: ReturnType<typeof consoleGuard>
  api: ReturnType<typeof consoleGuard>
}

export const APP_ID = '^[0-9]{1,19}$'
export const appParams = { type: 'object', required: ['app_id'], properties: { app_id: { type: 'string', pattern: APP_ID } } }

/** The app of the URL, after checking the session may see it. */
export async function consoleApp(core: WebhooksCore, request: FastifyRequest): Promise<App> {
  const appId = (request.params as { app_id: string }).app_id
  requireApp(sessionOf(request), appId, 'app')
  const app = await core.ctx.store.getJson<App>(AuthKeys.app(appId))
  if (!app) throw Problems.generic(404, 'No app here.')
  return app
}

/** A webhook of the URL's app (404 for another app's webhook, whoever asks). */
export async function consoleWebhook(core: WebhooksCore, request: FastifyRequest, app: App): Promise<Webhook> {
  const id = (request.params as { webhook_id?: string }).webhook_id ?? ''
  const w = /^[0-9]{1,19}$/.test(id) ? await core.registry.getOwned(id, app.id) : undefined
  if (!w) throw Problems.generic(404, 'No webhook here.')
  return w
}

/** A note htmx shows after a successful action (console.js reads the header). */
export function withMessage(reply: FastifyReply, message: string): FastifyReply {
  return reply.header('x-console-message', encodeURIComponent(message))
}

export async function registerConsoleRoutes(app: FastifyInstance, core: WebhooksCore): Promise<void> {
  const sessions = consoleSessions(core.ctx.store, core.ctx.config)
  const deps: ConsoleDeps = {
    core,
    sessions,
    views: new ConsoleViews('webhooks'),
    page: consoleGuard(sessions, { page: true }),
    api: consoleGuard(sessions)
  }
  const { views, page, api } = deps

  const webhooksFragment = async (appRecord: App): Promise<string> => {
    const webhooks = await core.registry.listByApp(appRecord.id)
    const rows = await Promise.all(webhooks.map(async (w) => ({ webhook: w, history: await core.crcHistory.list(w.id, 20) })))
    return views.fragment('webhooks-list', { app: appRecord, rows })
  }

  app.get('/console/webhooks/apps/:app_id/', { preHandler: page, schema: { params: appParams } }, async (request, reply) => {
    const appRecord = await consoleApp(core, request)
    const list = await webhooksFragment(appRecord)
    return sendHtml(reply, views.page(request, 'webhooks', { app: appRecord, list }, { title: 'Webhooks', active: 'webhooks', appId: appRecord.id }))
  })

  // "Validate now": a CRC check recorded like the periodic one; answers the refreshed list.
  app.post('/console/webhooks/apps/:app_id/webhooks/:webhook_id/validate', { preHandler: api }, async (request, reply) => {
    const appRecord = await consoleApp(core, request)
    const w = await consoleWebhook(core, request, appRecord)
    const { result } = await core.checker.check(w, 'console')
    request.log.info({ webhook_id: w.id, result: result.result }, 'console: CRC check on request')
    const note = result.result === 'pass' ? `CRC passed in ${result.ms} ms` : `CRC ${result.result}: ${result.reason}`
    return sendHtml(withMessage(reply, note), await webhooksFragment(appRecord))
  })

  await registerConsoleDeliveryRoutes(app, deps)
  await registerConsoleLiveRoutes(app, deps)
  await registerConsoleOpsRoutes(app, deps)
}
