import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { AuthContext } from '../common/auth/authenticate'
import { type ProblemError, Problems } from '../common/errors'
import type { WebhooksParts } from './parts'
import { bodyValidationProblem, failure, userIdParam, webhookIdParam } from './problems'
import { publicView, type Webhook } from './registry'
import { deleteWebhook, lockedOrBusy, registerWebhook } from './registration'
import { checkWindow, parseReplayDate, ReplayConflictError } from './replay'
import { NotSigningError, ROTATION_OVERLAP_MS, type SigningChange, signingView, StandardSigning } from './standard-webhooks'
import { DATE_TIME, NUMERIC_ID, openObject, pathParams, v2Ok } from '../common/openapi'

/**
 * The public routes: v2 webhooks (docs/webhooks.md) and Account Activity
 * user subscriptions. Authentication per route as the public platform
 * declares it (schemas/platform/): management with the app's bearer token (or a
 * user-context token where the platform allows it), subscribing a user with
 * that user's context.
 */

const AAA_SCOPES = ['dm.read', 'dm.write', 'tweet.read', 'users.read']
/** Rate-limit families (RATE_LIMIT_DEFAULT per window unless RATE_LIMITS overrides them). */
const WEBHOOKS_LIMIT = { family: 'webhooks' }
const AAA_LIMIT = { family: 'account-activity' }
const CONFIG_FIELDS = ['created_at', 'id', 'url', 'valid'] as const

/**
 * Route schemas for the OpenAPI document (GET /openapi.json) and response
 * serialization. Path parameters are checked by the handlers, whose Problems
 * name the parameter as the public platform does: the routes that declare
 * them take `attachValidation` and answer with their own checks.
 */
/** The product's extension: present only on webhooks that opted into Standard Webhooks signing (docs/webhooks.md). */
const STANDARD_WEBHOOKS = openObject({
  enabled: { type: 'boolean' },
  secret: { type: 'string', description: 'The `whsec_` signing secret: only in the answer that created it.' },
  previous_secret_expires_at: DATE_TIME
}, 'Standard Webhooks signing (an extension of this gateway).')
const WEBHOOK_CONFIG = openObject({ created_at: DATE_TIME, id: NUMERIC_ID, url: { type: 'string' }, valid: { type: 'boolean' }, standard_webhooks: STANDARD_WEBHOOKS }, 'A webhook configuration.')
const WEBHOOK_PARAMS = pathParams({ webhook_id: NUMERIC_ID })
const SUBSCRIBED = v2Ok('Whether the user is subscribed.', openObject({ subscribed: { type: 'boolean' } }))

function appOf(request: FastifyRequest): AuthContext {
  const auth = request.auth
  if (!auth) throw Problems.generic(401, 'Unauthorized')
  return auth
}

function userOf(request: FastifyRequest): string {
  const auth = appOf(request)
  if (auth.scheme === 'bearer-app') throw Problems.unsupportedAuthentication('OAuth 2.0 Application-Only', ['OAuth 1.0a User Context', 'OAuth 2.0 User Context'])
  return auth.userId
}

async function ownedWebhook(core: WebhooksParts, request: FastifyRequest, parameter = 'webhook_id'): Promise<Webhook> {
  const raw = (request.params as Record<string, unknown>)[parameter] ?? (request.body as Record<string, unknown> | undefined)?.[parameter]
  const id = webhookIdParam(raw, parameter)
  const webhook = await core.registry.getOwned(id, appOf(request).app.id)
  if (!webhook) throw unknownWebhook(id, parameter)
  return webhook
}

/** An id that names no webhook of the caller's application (none, or another app's): resource-not-found. */
function unknownWebhook(id: string, parameter = 'webhook_id'): ProblemError {
  return Problems.resourceNotFound(parameter, id, 'webhook', `Could not find webhook with ${parameter}: [${id}] for this application.`)
}

/** The answer of a signing change: the webhook's configuration with its signing state, and the new secret once. */
function signingAnswer(change: SigningChange): { data: Record<string, unknown> } {
  const standard = { ...signingView(change.webhook), ...(change.secret !== undefined ? { secret: change.secret } : {}) }
  return { data: { ...publicView(change.webhook), standard_webhooks: standard } }
}

/** `webhook_config.fields`: which WebhookConfig fields to return (all by default). */
function requestedFields(raw: unknown): ReadonlyArray<(typeof CONFIG_FIELDS)[number]> {
  if (raw === undefined) return CONFIG_FIELDS
  const text = Array.isArray(raw) ? raw.join(',') : String(raw)
  const fields = text.split(',').map((f) => f.trim())
  const unknown = fields.filter((f) => !(CONFIG_FIELDS as readonly string[]).includes(f))
  if (fields.length === 0 || unknown.length > 0) {
    throw Problems.invalidParameter(
      'webhook_config.fields',
      text,
      `The \`webhook_config.fields\` query parameter value [${unknown.join(',') || text}] is not one of [${CONFIG_FIELDS.join(',')}]`
    )
  }
  return CONFIG_FIELDS.filter((f) => fields.includes(f))
}

export async function registerWebhookRoutes(app: FastifyInstance, core: WebhooksParts): Promise<void> {
  const signing = new StandardSigning(core.ctx.store, core.registry)

  // ---------------------------------------------------------------- /2/webhooks

  app.post('/2/webhooks', {
    config: { auth: { schemes: ['bearer-app', 'oauth1-user'] }, rateLimit: WEBHOOKS_LIMIT },
    schema: { body: { $ref: 'http/webhooks.create-request#' }, response: v2Ok('The webhook, registered after a passing CRC.', WEBHOOK_CONFIG) },
    attachValidation: true
  }, async (request) => {
    if (request.validationError) throw bodyValidationProblem(request.validationError, request.body, () => 'UrlValidationFailed')
    const { url, standard_webhooks: standard } = request.body as { url: string; standard_webhooks?: boolean }
    const { webhook } = await registerWebhook(core, appOf(request).app, url, request.log, { standardWebhooks: standard === true })
    // Without the option the answer is the platform's exactly; with it, the secret this once.
    return webhook.signing_secret ? signingAnswer({ webhook, secret: webhook.signing_secret }) : { data: publicView(webhook) }
  })

  app.get('/2/webhooks', {
    config: { auth: { schemes: ['bearer-app'] }, rateLimit: WEBHOOKS_LIMIT },
    schema: {
      querystring: {
        type: 'object',
        // A comma-separated list (@fastify/swagger reads style and explode here, for every parameter of the query).
        style: 'form',
        explode: false,
        properties: {
          'webhook_config.fields': { type: 'array', minItems: 1, uniqueItems: true, items: { type: 'string', enum: [...CONFIG_FIELDS] }, description: 'Comma-separated WebhookConfig fields (all by default).' }
        }
      },
      response: v2Ok("The application's webhooks.", { type: 'array', items: WEBHOOK_CONFIG }, { result_count: { type: 'integer' } })
    },
    attachValidation: true
  }, async (request) => {
    const fields = requestedFields((request.query as Record<string, unknown>)['webhook_config.fields'])
    const webhooks = await core.registry.listByApp(appOf(request).app.id)
    const everyField = (request.query as Record<string, unknown>)['webhook_config.fields'] === undefined
    const data = webhooks.map((w) => {
      const view = publicView(w) as Record<string, unknown>
      const out: Record<string, unknown> = {}
      for (const f of fields) out[f] = view[f]
      // The extension only where it is used, and never a secret.
      if (everyField && w.signing_secret) out.standard_webhooks = signingView(w)
      return out
    })
    return { data, meta: { result_count: data.length } }
  })

  app.delete('/2/webhooks/:webhook_id', {
    config: { auth: { schemes: ['bearer-app', 'oauth1-user'] }, rateLimit: WEBHOOKS_LIMIT },
    schema: { params: WEBHOOK_PARAMS, response: v2Ok('The webhook is deleted.', openObject({ deleted: { type: 'boolean' } })) },
    attachValidation: true
  }, async (request) => {
    await deleteWebhook(core, await ownedWebhook(core, request), request.log)
    return { data: { deleted: true } }
  })

  // Validate: a CRC now; a passing check makes the webhook valid again (also after a 410).
  app.put('/2/webhooks/:webhook_id', {
    config: { auth: { schemes: ['bearer-app', 'oauth1-user'] }, rateLimit: WEBHOOKS_LIMIT },
    schema: { params: WEBHOOK_PARAMS, response: v2Ok('A CRC passed: the webhook is valid.', openObject({ attempted: { type: 'boolean' } })) },
    attachValidation: true
  }, async (request) => {
    const webhook = await ownedWebhook(core, request)
    const { result } = await core.checker.check(webhook, 'put')
    if (result.result !== 'pass') throw failure('CrcValidationFailed', 'webhook_id', webhook.id, result.reason)
    return { data: { attempted: true } }
  })

  // Standard Webhooks signing on or off (the product's extension; PUT is the platform's CRC trigger, so an update is a PATCH).
  app.patch('/2/webhooks/:webhook_id', {
    config: { auth: { schemes: ['bearer-app', 'oauth1-user'] }, rateLimit: WEBHOOKS_LIMIT },
    schema: { params: WEBHOOK_PARAMS, body: { $ref: 'http/webhooks.update-request#' }, response: v2Ok('The webhook; turned on, its new signing secret, shown this once.', WEBHOOK_CONFIG) },
    attachValidation: true
  }, async (request) => {
    const webhook = await ownedWebhook(core, request)
    if (request.validationError) throw bodyValidationProblem(request.validationError, request.body, () => 'QueryParamInvalid')
    const on = (request.body as { standard_webhooks: boolean }).standard_webhooks
    const change = await lockedOrBusy(() => (on ? signing.enable(webhook.id) : signing.disable(webhook.id)))
    if (!change) throw unknownWebhook(webhook.id)
    request.log.info({ webhook_id: webhook.id, standard_webhooks: on, new_secret: change.secret !== undefined }, 'webhook signing updated')
    return signingAnswer(change)
  })

  app.post('/2/webhooks/:webhook_id/standard_webhooks/rotate', {
    config: { auth: { schemes: ['bearer-app', 'oauth1-user'] }, rateLimit: WEBHOOKS_LIMIT },
    schema: { params: WEBHOOK_PARAMS, body: { $ref: 'http/webhooks.rotate-request#' }, response: v2Ok('The new signing secret, shown this once; the replaced one is still signed with until previous_secret_expires_at.', WEBHOOK_CONFIG) },
    attachValidation: true
  }, async (request) => {
    const webhook = await ownedWebhook(core, request)
    // The body is optional: none rotates with the default overlap.
    if (request.validationError && request.body !== undefined) throw bodyValidationProblem(request.validationError, request.body, () => 'QueryParamInvalid')
    const seconds = (request.body as { overlap_seconds?: number } | undefined)?.overlap_seconds
    let change: SigningChange | undefined
    try {
      change = await lockedOrBusy(() => signing.rotate(webhook.id, seconds === undefined ? ROTATION_OVERLAP_MS : seconds * 1000))
    } catch (err) {
      if (err instanceof NotSigningError) throw Problems.conflict(`${err.message} Turn it on with PATCH /2/webhooks/${webhook.id} first.`)
      throw err
    }
    if (!change) throw unknownWebhook(webhook.id)
    request.log.info({ webhook_id: webhook.id, overlap_seconds: seconds ?? ROTATION_OVERLAP_MS / 1000 }, 'webhook signing secret rotated')
    return signingAnswer(change)
  })

  app.post('/2/webhooks/replay', {
    config: { auth: { schemes: ['bearer-app'] }, rateLimit: WEBHOOKS_LIMIT },
    schema: { body: { $ref: 'http/webhooks.replay-request#' }, response: v2Ok('The replay job.', openObject({ job_id: NUMERIC_ID, created_at: DATE_TIME })) },
    attachValidation: true
  }, async (request) => {
    if (request.validationError) {
      throw bodyValidationProblem(request.validationError, request.body, (field) => (field === 'webhook_id' ? 'WebhookIdInvalid' : 'QueryParamInvalid'))
    }
    const body = request.body as { webhook_id: string; from_date: string; to_date: string }
    const webhook = await ownedWebhook(core, request)
    const fromMs = parseReplayDate(body.from_date)
    if (fromMs === undefined) throw failure('QueryParamInvalid', 'from_date', body.from_date, 'from_date is not a valid yyyymmddhhmm UTC time.')
    const toMs = parseReplayDate(body.to_date)
    if (toMs === undefined) throw failure('QueryParamInvalid', 'to_date', body.to_date, 'to_date is not a valid yyyymmddhhmm UTC time.')
    const windowProblem = checkWindow(fromMs, toMs)
    if (windowProblem) throw failure('QueryParamInvalid', windowProblem.startsWith('to_date') ? 'to_date' : 'from_date', windowProblem.startsWith('to_date') ? body.to_date : body.from_date, `${windowProblem}.`)
    if (!webhook.valid) {
      throw failure('CrcValidationFailed', 'webhook_id', webhook.id, `The webhook is not valid (${webhook.invalid_reason ?? 'CRC failing'}); validate it with PUT /2/webhooks/${webhook.id} first.`)
    }
    try {
      const job = await core.replay.create(webhook, fromMs, toMs)
      return { data: { job_id: job.job_id, created_at: job.created_at } }
    } catch (err) {
      if (err instanceof ReplayConflictError) throw Problems.conflict(`ReplayConflictError: ${err.message} Wait for its replay_job_status before creating another.`)
      throw err
    }
  })

  // ---------------------------------------------------------------- Account Activity

  const aaaPath = '/2/account_activity/webhooks/:webhook_id/subscriptions/all'

  app.post(aaaPath, {
    config: { auth: { schemes: ['oauth1-user', 'oauth2-user'], access: 'dm', scopes: AAA_SCOPES }, rateLimit: AAA_LIMIT },
    schema: { params: WEBHOOK_PARAMS, response: SUBSCRIBED },
    attachValidation: true
  }, async (request) => {
    const userId = userOf(request)
    const webhook = await ownedWebhook(core, request)
    const result = await lockedOrBusy(() => core.accountActivity.subscribe(webhook, userId))
    if (result === 'gone') throw unknownWebhook(webhook.id)
    if (result === 'duplicate') {
      throw failure('DuplicateSubscriptionFailed', 'webhook_id', webhook.id, `User ${userId} is already subscribed to webhook ${webhook.id}.`)
    }
    if (result === 'limit') {
      throw failure('SubscriptionLimitExceeded', 'webhook_id', webhook.id, `This application has reached its limit of ${core.accountActivity.provisioned} subscriptions.`)
    }
    request.log.info({ webhook_id: webhook.id, user_id: userId }, 'account activity subscription created')
    return { data: { subscribed: true } }
  })

  app.get(aaaPath, {
    config: { auth: { schemes: ['oauth1-user', 'oauth2-user'], access: 'read', scopes: AAA_SCOPES }, rateLimit: AAA_LIMIT },
    schema: { params: WEBHOOK_PARAMS, response: SUBSCRIBED },
    attachValidation: true
  }, async (request) => {
    const userId = userOf(request)
    const webhook = await ownedWebhook(core, request)
    return { data: { subscribed: await core.accountActivity.isSubscribed(webhook.id, userId) } }
  })

  app.get(`${aaaPath}/list`, {
    config: { auth: { schemes: ['bearer-app'] }, rateLimit: AAA_LIMIT },
    schema: {
      params: WEBHOOK_PARAMS,
      response: v2Ok('The users subscribed to the webhook.', openObject({
        application_id: { type: 'string' },
        webhook_id: { type: 'string' },
        webhook_url: { type: 'string' },
        subscriptions: { type: 'array', items: openObject({ user_id: { type: 'string' } }) }
      }))
    },
    attachValidation: true
  }, async (request) => {
    const webhook = await ownedWebhook(core, request)
    const users = await core.accountActivity.subscribers(webhook.id)
    return {
      data: { application_id: webhook.app_id, webhook_id: webhook.id, webhook_url: webhook.url, subscriptions: users.map((user_id) => ({ user_id })) }
    }
  })

  app.get('/2/account_activity/subscriptions/count', {
    config: { auth: { schemes: ['bearer-app'] }, rateLimit: AAA_LIMIT },
    schema: {
      response: v2Ok("The application's subscriptions across its webhooks.", openObject({
        account_name: { type: 'string' },
        provisioned_count: { type: 'string' },
        subscriptions_count_all: { type: 'string' },
        subscriptions_count_direct_messages: { type: 'string' }
      }))
    }
  }, async (request) => {
    const { app: client } = appOf(request)
    const count = await core.accountActivity.countForApp(client.id)
    return {
      data: {
        account_name: client.name,
        provisioned_count: String(core.accountActivity.provisioned),
        subscriptions_count_all: String(count),
        // Direct-message-only subscriptions no longer exist on the public platform: always "0".
        subscriptions_count_direct_messages: '0'
      }
    }
  })

  app.delete('/2/account_activity/webhooks/:webhook_id/subscriptions/:user_id/all', {
    config: { auth: { schemes: ['bearer-app'] }, rateLimit: AAA_LIMIT },
    schema: { params: pathParams({ webhook_id: NUMERIC_ID, user_id: NUMERIC_ID }), response: SUBSCRIBED },
    attachValidation: true
  }, async (request) => {
    const webhook = await ownedWebhook(core, request)
    const userId = userIdParam((request.params as Record<string, unknown>).user_id)
    if (!(await core.accountActivity.unsubscribe(webhook.id, userId))) {
      throw Problems.resourceNotFound('user_id', userId, 'subscription', `Could not find subscription with user_id: [${userId}] on webhook ${webhook.id}.`)
    }
    request.log.info({ webhook_id: webhook.id, user_id: userId }, 'account activity subscription deleted')
    return { data: { subscribed: false } }
  })
}
