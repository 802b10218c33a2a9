import type { FastifyInstance } from 'fastify'
import type { ServiceContext } from '../common/context'
import { consoleGuard, consoleSessions } from '../common/console/session'
import { registerConsoleErrorPages } from '../common/console/error-pages'
import { ConsoleViews, sendHtml } from '../common/console/views'
import { type HistoryEntry, HistoryKeys } from './history'

/**
 * The account-history service's part of the web console, operators only and
 * read-only: an ads account's recent changes, newest first, from this
 * service's own `history:` keyspace (every entity of the account).
 */

const SHOWN = 200
const accountParams = { type: 'object', required: ['account_id'], properties: { account_id: { type: 'string', pattern: '^[0-9a-z]{1,32}$' } } }

export async function registerHistoryConsoleRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  const sessions = consoleSessions(ctx.store, ctx.config)
  const page = consoleGuard(sessions, { page: true, operatorOnly: true })
  const views = new ConsoleViews('account-history')
  registerConsoleErrorPages(app, sessions, '/console/history/')

  app.get('/console/history/accounts/:account_id', { preHandler: page, schema: { params: accountParams } }, async (request, reply) => {
    const accountId = (request.params as { account_id: string }).account_id
    const entities: string[] = []
    for await (const key of ctx.store.scanPrefix(HistoryKeys.entity(accountId, '', '').replace(/:+$/, ':'))) entities.push(key)
    // Each entity's newest changes, then the newest of all of them.
    const ids = (await Promise.all(entities.map((k) => ctx.store.zrange(k, 0, SHOWN - 1, { reverse: true })))).flat()
    const newest = ids.sort((a, b) => b.score - a.score).slice(0, SHOWN)
    const entries = (await ctx.store.mgetJson<HistoryEntry>(newest.map((m) => HistoryKeys.entry(m.member)))).filter((e): e is HistoryEntry => e !== undefined)
    const rows = entries.map((e) => ({ entry: e, changes: JSON.stringify(e.changes ?? {}) }))
    return sendHtml(reply, views.page(request, 'history', { accountId, rows, entities: entities.length }, { title: `History of ${accountId}`, active: 'accounts' }))
  })
}
