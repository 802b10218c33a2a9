import type { FastifyInstance } from 'fastify'
import { AuthKeys, type App } from '../common/auth/records'
import { consoleGuard } from '../common/console/session'
import { sendHtml } from '../common/console/views'
import { recordEventType } from './delivery'
import type { ConsoleDeps } from './console-access'
import { displayStatus, notSendable } from './console-status'

/**
 * Console, operators only: every app with its webhooks and delivery health
 * (last hour's attempts and success rate, failed deliveries), and the dead
 * letters — deliveries that ended `failed` (retries exhausted or 410), the
 * same ones published on `webhook.dead-letter` — with re-drive (re-send).
 */

const DEAD_LETTERS_PER_WEBHOOK = 100

export async function registerConsoleOpsRoutes(app: FastifyInstance, deps: ConsoleDeps): Promise<void> {
  const { core, views, sessions } = deps
  const operatorPage = consoleGuard(sessions, { page: true, operatorOnly: true })
  const { store } = core.ctx

  const allApps = async (): Promise<App[]> => {
    const ids = await store.zrange(AuthKeys.apps(), 0, -1)
    return (await store.mgetJson<App>(ids.map((m) => AuthKeys.app(m.member)))).filter((a): a is App => a !== undefined)
  }

  app.get('/console/webhooks/apps', { preHandler: operatorPage }, async (request, reply) => {
    const apps = await allApps()
    const rows = await Promise.all(apps.map(async (a) => {
      const webhooks = await core.registry.listByApp(a.id)
      const hour = await core.attempts.stats(a.id, 3_600_000, 3_600_000)
      const point = hour.points[0]
      const failed = (await Promise.all(webhooks.map((w) => core.deliveryLog.list(w.id, { status: 'failed', limit: 1000 })))).flat().length
      const scheduled = (await Promise.all(webhooks.map((w) => core.deliveryLog.list(w.id, { status: 'pending', limit: 1000 })))).flat()
      const failing = scheduled.filter((r) => displayStatus(r) === 'failing').length
      return { app: a, webhooks, attempts: hour.total, successPct: point?.success_pct ?? null, p99: point?.p99_ms ?? null, failed, failing, pending: scheduled.length - failing }
    }))
    return sendHtml(reply, views.page(request, 'ops-apps', { rows }, { title: 'Apps', active: 'apps' }))
  })

  app.get('/console/webhooks/dead-letters', { preHandler: operatorPage }, async (request, reply) => {
    const webhooks = await core.registry.listAll()
    const groups = (await Promise.all(webhooks.map(async (w) => {
      const records = await core.deliveryLog.list(w.id, { status: 'failed', limit: DEAD_LETTERS_PER_WEBHOOK, newestFirst: true })
      return { webhook: w, blocked: notSendable(w), rows: records.map((r) => ({ record: r, eventType: recordEventType(r) })) }
    }))).filter((g) => g.rows.length > 0)
    return sendHtml(reply, views.page(request, 'ops-dead-letters', { groups }, { title: 'Dead letters', active: 'dead-letters' }))
  })
}
