import type { FastifyInstance, FastifyRequest } from 'fastify'
import { AuthKeys, type App } from '../common/auth/records'
import type { ServiceContext } from '../common/context'
import { consoleGuard, consoleSessions, requireApp, sessionOf } from '../common/console/session'
import { registerConsoleErrorPages } from '../common/console/error-pages'
import { ConsoleViews, sendHtml } from '../common/console/views'
import { Problems } from '../common/errors'
import { EVENT_TYPES } from './event-types'
import { activityMetrics } from './metrics'
import { SubscriptionLimitError, SubscriptionStore, toPublic } from './subscriptions'
import { checkNewSubscription } from './validate'
import { webhookOwnedBy } from './webhooks'

/**
 * The activity service's part of the web console (/console/activity/...):
 * an app's activity subscriptions, listed, created and deleted with the
 * same checks as /2/activity/subscriptions. Direct-message events are
 * private to the user: they need the user's own token (the public route
 * checks it), which a console session is not, so the console does not
 * create them.
 */

const LIST_MAX = 1000
const CONSOLE_EVENT_TYPES = EVENT_TYPES.filter((t) => !t.startsWith('dm.'))
const appParams = { type: 'object', required: ['app_id'], properties: { app_id: { type: 'string', pattern: '^[0-9]{1,19}$' } } }

export async function registerActivityConsoleRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  const sessions = consoleSessions(ctx.store, ctx.config)
  const page = consoleGuard(sessions, { page: true })
  const api = consoleGuard(sessions)
  const views = new ConsoleViews('activity')
  const subscriptions = new SubscriptionStore(ctx.store, ctx.config.subscriptionLimitPerApp)
  const metrics = activityMetrics(ctx)
  registerConsoleErrorPages(app, sessions, '/console/activity/')

  const consoleApp = async (request: FastifyRequest): Promise<App> => {
    const appId = (request.params as { app_id: string }).app_id
    requireApp(sessionOf(request), appId, 'app')
    const found = await ctx.store.getJson<App>(AuthKeys.app(appId))
    if (!found) throw Problems.generic(404, 'No app here.')
    return found
  }

  const listFragment = async (appRecord: App): Promise<string> => {
    const { items } = await subscriptions.list(appRecord.id, LIST_MAX)
    return views.fragment('subscriptions-list', { app: appRecord, subs: items.map(toPublic), total: await subscriptions.count(appRecord.id) })
  }

  app.get('/console/activity/apps/:app_id/subscriptions', { preHandler: page, schema: { params: appParams } }, async (request, reply) => {
    const appRecord = await consoleApp(request)
    return sendHtml(reply, views.page(request, 'subscriptions', { app: appRecord, list: await listFragment(appRecord), eventTypes: CONSOLE_EVENT_TYPES }, { title: 'Subscriptions', active: 'subscriptions', appId: appRecord.id }))
  })

  app.post('/console/activity/apps/:app_id/subscriptions', { preHandler: api, schema: { params: appParams } }, async (request, reply) => {
    const appRecord = await consoleApp(request)
    const form = (request.body ?? {}) as Record<string, unknown>
    const text = (name: string): string | undefined => (typeof form[name] === 'string' && (form[name] as string).trim() !== '' ? (form[name] as string).trim() : undefined)
    const userId = text('user_id') ?? ''
    if (!/^[0-9]{1,19}$/.test(userId)) throw Problems.invalidParameter('user_id', userId, 'user_id must be a user id (digits)')
    const keyword = text('keyword')
    const { eventType, filter, problems } = checkNewSubscription({ event_type: text('event_type') ?? '', filter: { user_id: userId, ...(keyword !== undefined ? { keyword } : {}) } })
    if (eventType?.startsWith('dm.')) problems.push({ message: 'Direct-message subscriptions need the user\'s own token: create them through POST /2/activity/subscriptions.', parameters: { event_type: [eventType] } })
    const webhookId = text('webhook_id')
    if (webhookId !== undefined && !(/^[0-9]{1,19}$/.test(webhookId) && (await webhookOwnedBy(ctx.store, webhookId, appRecord.id)))) {
      problems.push({ message: `WebhookIdInvalid: webhook ${webhookId} does not exist for this application`, parameters: { webhook_id: [webhookId] } })
    }
    const tag = text('tag')
    if (tag !== undefined && tag.length > 200) problems.push({ message: 'The `tag` field is at most 200 characters', parameters: { tag: [tag] } })
    if (problems.length > 0 || eventType === undefined) throw Problems.invalidRequest(problems)
    try {
      const sub = await subscriptions.create({ app_id: appRecord.id, event_type: eventType, filter, ...(tag !== undefined ? { tag } : {}), ...(webhookId !== undefined ? { webhook_id: webhookId } : {}) })
      metrics.subscriptionChanges.inc({ action: 'create' })
      request.log.info({ app_id: appRecord.id, subscription_id: sub.subscription_id }, 'console: subscription created')
    } catch (err) {
      if (err instanceof SubscriptionLimitError) throw Problems.ruleCap(`SubscriptionLimitExceeded: this application already has the maximum of ${err.limit} subscriptions.`)
      throw err
    }
    return sendHtml(reply.header('x-console-message', encodeURIComponent('Subscription created')), await listFragment(appRecord))
  })

  app.delete('/console/activity/apps/:app_id/subscriptions/:subscription_id', { preHandler: api }, async (request, reply) => {
    const appRecord = await consoleApp(request)
    const id = (request.params as { subscription_id: string }).subscription_id
    const sub = /^[0-9]{1,19}$/.test(id) ? await subscriptions.getOwned(appRecord.id, id) : undefined
    if (!sub || (await subscriptions.delete([sub])).length === 0) throw Problems.generic(404, 'No subscription here.')
    metrics.subscriptionChanges.inc({ action: 'delete' })
    request.log.info({ app_id: appRecord.id, subscription_id: id }, 'console: subscription deleted')
    return sendHtml(reply.header('x-console-message', encodeURIComponent('Subscription deleted')), await listFragment(appRecord))
  })
}
