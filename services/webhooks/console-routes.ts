import type { FastifyInstance } from 'fastify'
import type { App } from '../common/auth/records'
import { consoleGuard, consoleSessions } from '../common/console/session'
import { ConsoleViews, sendHtml } from '../common/console/views'
import { appParams, consoleApp, type ConsoleDeps, consoleWebhook, withMessage } from './console-access'
import type { WebhooksCore } from './core'
import { registerConsoleDeliveryRoutes } from './console-deliveries'
import { registerConsoleLiveRoutes } from './console-live'
import { registerConsoleOpsRoutes } from './console-ops'

/**
 * The webhooks service's part of the web console (/console/webhooks/...,
 * routed here by deploy/routes.json): an app's webhooks with their CRC
 * history, the delivery log, the live tail and charts, and the operator's
 * overview of every app and the dead letters. Pages are server-rendered
 * (console-views/*.eta) with htmx for actions; every route checks the
 * console session from the shared `console:` keyspace and, for app data,
 * that the session may see that app (a developer: only the portal link's).
 */

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
