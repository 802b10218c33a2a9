import type { FastifyInstance } from 'fastify'
import { assertUserContextFor, type AuthRequirement, type AuthScheme } from '../common/auth/authenticate'
import type { ServiceContext } from '../common/context'
import { ProblemError, Problems, type InvalidRequestItem } from '../common/errors'
import { checkNewSubscription } from './validate'
import { activityMetrics } from './metrics'
import {
  decodeCursor,
  encodeCursor,
  type Subscription,
  SubscriptionLimitError,
  SubscriptionStore,
  toPublic
} from './subscriptions'
import { webhookOwnedBy } from './webhooks'
import { DATE_TIME, NUMERIC_ID, openObject, pathParams, v2Ok } from '../common/openapi'

/**
 * `/2/activity/subscriptions*` (docs/architecture.md). Authentication follows
 * the security of each operation in the public OpenAPI description: create
 * and list accept the app-only bearer and user context (an OAuth 2.0 user
 * token needs the operation's scopes; an OAuth 1.0a token's access level
 * overrides scopes); update and delete take the app-only bearer only.
 * Subscriptions belong to the authenticated application.
 *
 * A subscription id that names nothing of the caller's application is the
 * resource-not-found Problem (resource_type `subscription`, see errors.ts);
 * the subscription limit is rule-cap (subscriptions are the stream's rules).
 */

const SCHEMA = 'http/activity-subscriptions#/definitions'
const USER_OR_APP: AuthScheme[] = ['bearer-app', 'oauth1-user', 'oauth2-user']
/** createActivitySubscription: OAuth2UserToken [dm.read, like.read, tweet.read]. */
const CREATE_AUTH: AuthRequirement = { schemes: USER_OR_APP, scopes: ['dm.read', 'like.read', 'tweet.read'] }
/** getActivitySubscriptions: OAuth2UserToken [like.read, tweet.read]. */
const LIST_AUTH: AuthRequirement = { schemes: USER_OR_APP, scopes: ['like.read', 'tweet.read'] }
/** update, delete and bulk delete: BearerToken only. */
const APP_ONLY: AuthRequirement = { schemes: ['bearer-app'] }
const MAX_BULK_IDS = 100
const ID_PATTERN = /^[0-9]{1,19}$/

/**
 * Response schemas (OpenAPI document, serialization): open objects, so every
 * property the handlers return is still sent. `{subscription_id}` is checked
 * by pathId (its Problem says where the id came from): the routes that declare
 * it without a body take `attachValidation`.
 */
const SUBSCRIPTION = openObject({
  subscription_id: NUMERIC_ID,
  event_type: { type: 'string' },
  filter: openObject({ user_id: NUMERIC_ID, keyword: { type: 'string' }, direction: { type: 'string' } }),
  tag: { type: 'string' },
  webhook_id: NUMERIC_ID,
  created_at: DATE_TIME,
  updated_at: DATE_TIME
}, 'An activity subscription.')
const TOTAL = { total_subscriptions: { type: 'integer', description: 'Active subscriptions of the application.' } }
const DELETED = v2Ok('The subscriptions are deleted (errors: ids that named none).', openObject({ deleted: { type: 'boolean' } }), TOTAL)

interface CreateBody {
  event_type: string
  filter: { user_id: string; keyword?: string; direction?: string }
  tag?: string
  webhook_id?: string
}

interface UpdateBody {
  tag?: string
  webhook_id?: string
}

function appIdOf(request: { auth?: { app: { id: string } } }): string {
  const id = request.auth?.app.id
  // The auth hook runs before every handler below; no app means a misconfigured route.
  if (id === undefined) throw Problems.generic(401, 'Unauthorized')
  return id
}

/** An id that names no subscription of the caller's application, as the parameter that carried it. */
function notFound(id: string, parameter: 'subscription_id' | 'ids' = 'subscription_id'): ProblemError {
  return Problems.resourceNotFound(parameter, id, 'subscription', `Could not find subscription with ${parameter}: [${id}] for this application.`)
}

/** The `{subscription_id}` path parameter, checked here so the message says where it came from. */
function pathId(request: { params: unknown }): string {
  const raw = (request.params as { subscription_id?: unknown }).subscription_id
  const id = typeof raw === 'string' ? raw : ''
  if (!ID_PATTERN.test(id)) {
    throw Problems.invalidParameter('subscription_id', id, `The \`subscription_id\` path parameter value [${id}] does not match ^[0-9]{1,19}$`)
  }
  return id
}

export async function registerSubscriptionRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  const subscriptions = new SubscriptionStore(ctx.store, ctx.config.subscriptionLimitPerApp)
  const metrics = activityMetrics(ctx)

  async function checkWebhook(appId: string, webhookId: string | undefined, problems: InvalidRequestItem[]): Promise<void> {
    if (webhookId === undefined) return
    if (!(await webhookOwnedBy(ctx.store, webhookId, appId))) {
      problems.push({ message: `WebhookIdInvalid: webhook ${webhookId} does not exist for this application`, parameters: { webhook_id: [webhookId] } })
    }
  }

  app.post('/2/activity/subscriptions', {
    config: { auth: CREATE_AUTH },
    schema: {
      body: { $ref: `${SCHEMA}/CreateRequest` },
      response: v2Ok('The subscription created.', openObject({ subscription: SUBSCRIPTION, total_subscriptions_for_instance_id: { type: 'integer' } }), TOTAL)
    }
  }, async (request) => {
    const appId = appIdOf(request)
    const body = request.body as CreateBody
    const { eventType, filter, problems } = checkNewSubscription(body)
    await checkWebhook(appId, body.webhook_id, problems)
    if (problems.length > 0 || eventType === undefined) throw Problems.invalidRequest(problems)
    // Private events: only the user's own token, with the dm level (OAuth 1.0a) or dm.read (OAuth 2.0).
    if (eventType.startsWith('dm.')) assertUserContextFor(request.auth, filter.user_id, { access: 'dm', scopes: ['dm.read'] }, 'filter.user_id')

    let sub: Subscription
    try {
      sub = await subscriptions.create({
        app_id: appId,
        event_type: eventType,
        filter,
        ...(body.tag !== undefined ? { tag: body.tag } : {}),
        ...(body.webhook_id !== undefined ? { webhook_id: body.webhook_id } : {})
      })
    } catch (err) {
      if (err instanceof SubscriptionLimitError) {
        throw Problems.ruleCap(`SubscriptionLimitExceeded: this application already has the maximum of ${err.limit} subscriptions; delete one before creating another.`)
      }
      throw err
    }
    metrics.subscriptionChanges.inc({ action: 'create' })
    const total = await subscriptions.count(appId)
    return { data: { subscription: toPublic(sub), total_subscriptions_for_instance_id: total }, meta: { total_subscriptions: total } }
  })

  app.get('/2/activity/subscriptions', {
    config: { auth: LIST_AUTH },
    schema: {
      querystring: { $ref: `${SCHEMA}/ListQuery` },
      response: v2Ok("A page of the application's subscriptions.", { type: 'array', items: SUBSCRIPTION }, { result_count: { type: 'integer' }, next_token: { type: 'string' } })
    }
  }, async (request) => {
    const appId = appIdOf(request)
    const query = request.query as { max_results?: number; pagination_token?: string }
    const maxResults = query.max_results ?? 1000
    let cursor: { score: number; id: string } | undefined
    if (query.pagination_token !== undefined) {
      cursor = decodeCursor(query.pagination_token)
      if (!cursor) throw Problems.invalidParameter('pagination_token', query.pagination_token, 'The `pagination_token` query parameter value is not a token this endpoint returned')
    }
    const page = await subscriptions.list(appId, maxResults, cursor)
    const meta: Record<string, unknown> = { result_count: page.items.length }
    if (page.next) meta.next_token = encodeCursor(page.next)
    return { data: page.items.map(toPublic), meta }
  })

  app.put('/2/activity/subscriptions/:subscription_id', {
    config: { auth: APP_ONLY },
    schema: {
      params: pathParams({ subscription_id: { type: 'string', description: 'A subscription id (^[0-9]{1,19}$, checked by the route).' } }),
      body: { $ref: `${SCHEMA}/UpdateRequest` },
      response: v2Ok('The subscription updated.', openObject({ subscription: SUBSCRIPTION, total_subscriptions: { type: 'integer' } }), TOTAL)
    }
  }, async (request) => {
    const appId = appIdOf(request)
    const id = pathId(request)
    const body = (request.body ?? {}) as UpdateBody
    if (body.tag === undefined && body.webhook_id === undefined) {
      throw Problems.invalidRequest([{ message: 'Nothing to update: give `tag` and/or `webhook_id` (the filter and event_type cannot change; create a new subscription instead).', parameters: { body: [] } }])
    }
    const sub = await subscriptions.getOwned(appId, id)
    if (!sub) throw notFound(id)
    const problems: InvalidRequestItem[] = []
    await checkWebhook(appId, body.webhook_id, problems)
    if (problems.length > 0) throw Problems.invalidRequest(problems)
    const changes: UpdateBody = {}
    if (body.tag !== undefined) changes.tag = body.tag
    if (body.webhook_id !== undefined) changes.webhook_id = body.webhook_id
    const updated = await subscriptions.update(sub, changes)
    if (!updated) throw notFound(id)
    metrics.subscriptionChanges.inc({ action: 'update' })
    const total = await subscriptions.count(appId)
    return { data: { subscription: toPublic(updated), total_subscriptions: total }, meta: { total_subscriptions: total } }
  })

  app.delete('/2/activity/subscriptions/:subscription_id', {
    config: { auth: APP_ONLY },
    schema: { params: pathParams({ subscription_id: NUMERIC_ID }), response: DELETED },
    attachValidation: true
  }, async (request) => {
    const appId = appIdOf(request)
    const id = pathId(request)
    const sub = await subscriptions.getOwned(appId, id)
    if (!sub || (await subscriptions.delete([sub])).length === 0) throw notFound(id)
    metrics.subscriptionChanges.inc({ action: 'delete' })
    return { data: { deleted: true }, meta: { total_subscriptions: await subscriptions.count(appId) } }
  })

  app.delete('/2/activity/subscriptions', { config: { auth: APP_ONLY }, schema: { querystring: { $ref: `${SCHEMA}/BulkDeleteQuery` }, response: DELETED } }, async (request) => {
    const appId = appIdOf(request)
    const { ids: raw } = request.query as { ids: string }
    const ids = [...new Set(raw.split(',').map((s) => s.trim()).filter((s) => s !== ''))]
    const bad = ids.filter((id) => !ID_PATTERN.test(id))
    if (ids.length === 0 || ids.length > MAX_BULK_IDS) {
      throw Problems.invalidParameter('ids', raw, `The \`ids\` query parameter must list 1 to ${MAX_BULK_IDS} subscription ids, comma-separated; it lists ${ids.length}`)
    }
    if (bad.length > 0) {
      throw Problems.invalidRequest(bad.map((id) => ({ message: `The \`ids\` query parameter value [${id}] does not match ^[0-9]{1,19}$`, parameters: { ids: [id] } })))
    }
    const found: Subscription[] = []
    const missing: string[] = []
    for (const id of ids) {
      const sub = await subscriptions.getOwned(appId, id)
      if (sub) found.push(sub)
      else missing.push(id)
    }
    const deleted = await subscriptions.delete(found)
    const deletedIds = new Set(deleted.map((s) => s.subscription_id))
    for (const sub of found) if (!deletedIds.has(sub.subscription_id)) missing.push(sub.subscription_id)
    // Nothing deleted: one Problem (the answer is a single object) naming the first id, its detail listing them all.
    if (deleted.length === 0) {
      throw Problems.resourceNotFound('ids', missing[0] as string, 'subscription', `Could not find subscriptions with ids: [${missing.join(',')}] for this application.`)
    }
    metrics.subscriptionChanges.inc({ action: 'delete' }, deleted.length)
    const body: Record<string, unknown> = { data: { deleted: true }, meta: { total_subscriptions: await subscriptions.count(appId) } }
    // Partial success: each id that named nothing is reported as its own Problem.
    if (missing.length > 0) body.errors = missing.map((id) => notFound(id, 'ids').body(ctx.config.problemBase))
    return body
  })
}
