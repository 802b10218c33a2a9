import type { FastifyInstance } from 'fastify'
import type { App } from '../common/auth/records'
import { consoleGuard, consoleSessions } from '../common/console/session'
import { registerConsoleErrorPages } from '../common/console/error-pages'
import { ConsoleViews, sendHtml } from '../common/console/views'
import { appParams, consoleApp, type ConsoleDeps, consoleWebhook, withMessage } from './console-access'
import type { WebhooksParts } from './parts'
import { registerConsoleDeliveryRoutes } from './console-deliveries'
import { registerConsoleLiveRoutes } from './console-live'
import { registerConsoleOpsRoutes } from './console-ops'
import { crcNote, registerConsoleSelfServiceRoutes } from './console-self-service'
import { webhookHealth } from './console-status'
import { Problems } from '../common/errors'
import { LockBusyError } from './app-lock'
import { NotSigningError, type SigningChange, signingView, StandardSigning } from './standard-webhooks'

/**
 * The webhooks service's part of the web console (/console/webhooks/...,
 * routed here by deploy/routes.json): an app's webhooks with their CRC
 * history, health line and Standard Webhooks signing (and, for self-service, adding, editing,
 * deleting and test-sending them: console-self-service), the delivery log, the live tail and charts, and the operator's
 * overview of every app and the dead letters. Pages are server-rendered
 * (console-views/*.eta) with htmx for actions; every route checks the
 * console session from the shared `console:` keyspace and, for app data,
 * that the session may see that app (a developer: only the portal link's).
 */

export async function registerConsoleRoutes(app: FastifyInstance, core: WebhooksParts): Promise<void> {
  const sessions = consoleSessions(core.ctx.store, core.ctx.config)
  const deps: ConsoleDeps = {
    core,
    sessions,
    views: new ConsoleViews('webhooks'),
    page: consoleGuard(sessions, { page: true }),
    api: consoleGuard(sessions)
  }
  const { views, page, api } = deps
  registerConsoleErrorPages(app, sessions, '/console/webhooks/')

  const signing = new StandardSigning(core.ctx.store, core.registry)

  /** `revealed`: a secret just made, shown in this answer only. */
  const webhooksFragment = async (appRecord: App, revealed?: { webhookId: string; secret: string }): Promise<string> => {
    const webhooks = await core.registry.listByApp(appRecord.id)
    const rows = await Promise.all(webhooks.map(async (w) => ({ webhook: w, signing: signingView(w), history: await core.crcHistory.list(w.id, 20), health: await webhookHealth(core, w) })))
    return views.fragment('webhooks-list', { app: appRecord, rows, revealed, limit: core.ctx.config.webhookLimitPerApp })
  }

  app.get('/console/webhooks/apps/:app_id/', { preHandler: page, schema: { params: appParams } }, async (request, reply) => {
    const appRecord = await consoleApp(core, request)
    const list = await webhooksFragment(appRecord)
    return sendHtml(reply, views.page(request, 'webhooks', { app: appRecord, list }, { title: 'Webhooks', active: 'webhooks', appId: appRecord.id }))
  })

  // The app's webhooks for pickers on pages other services serve (the subscription form): the browser asks, no service calls another.
  app.get('/console/webhooks/apps/:app_id/webhooks.json', { preHandler: api, schema: { params: appParams } }, async (request) => {
    const appRecord = await consoleApp(core, request)
    const webhooks = await core.registry.listByApp(appRecord.id)
    return { data: webhooks.map((w) => ({ id: w.id, url: w.url, valid: w.valid && w.disabled_at === undefined })) }
  })

  // "Validate now": a CRC check recorded like the periodic one; answers the refreshed list.
  app.post('/console/webhooks/apps/:app_id/webhooks/:webhook_id/validate', { preHandler: api }, async (request, reply) => {
    const appRecord = await consoleApp(core, request)
    const w = await consoleWebhook(core, request, appRecord)
    const { result } = await core.checker.check(w, 'console')
    request.log.info({ webhook_id: w.id, result: result.result }, 'console: CRC check on request')
    const note = crcNote(result)
    return sendHtml(withMessage(reply.header('x-console-message-kind', note.kind), note.text), await webhooksFragment(appRecord))
  })

  // Standard Webhooks signing: turn on (the secret shown once), rotate (the same), turn off. One route each, so each is a route of its own.
  const signingActions = {
    enable: (id: string) => signing.enable(id),
    rotate: (id: string) => signing.rotate(id),
    disable: (id: string) => signing.disable(id)
  } as const
  for (const [action, act] of Object.entries(signingActions)) {
    app.post(`/console/webhooks/apps/:app_id/webhooks/:webhook_id/standard-webhooks/${action}`, { preHandler: api }, async (request, reply) => {
      const appRecord = await consoleApp(core, request)
      const w = await consoleWebhook(core, request, appRecord)
      let change: SigningChange | undefined
      try {
        change = await act(w.id)
      } catch (err) {
        if (err instanceof NotSigningError) throw Problems.generic(409, 'Standard Webhooks signing is off for this webhook: turn it on first.')
        if (err instanceof LockBusyError) throw Problems.generic(503, 'Another change of this webhook is under way; try again.')
        throw err
      }
      if (!change) throw Problems.generic(404, 'No webhook here.')
      request.log.info({ webhook_id: w.id, action, new_secret: change.secret !== undefined }, 'console: Standard Webhooks signing changed')
      const note = action === 'disable' ? 'Standard Webhooks signing is off' : change.secret ? 'New signing secret: copy it now' : 'Standard Webhooks signing was already on'
      return sendHtml(withMessage(reply, note), await webhooksFragment(appRecord, change.secret ? { webhookId: w.id, secret: change.secret } : undefined))
    })
  }

  await registerConsoleSelfServiceRoutes(app, deps, webhooksFragment)
  await registerConsoleDeliveryRoutes(app, deps)
  await registerConsoleLiveRoutes(app, deps)
  await registerConsoleOpsRoutes(app, deps)
}
