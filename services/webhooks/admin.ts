import type { FastifyInstance, FastifyRequest } from 'fastify'
import { Problems } from '../common/errors'
import { operatorGuard, resolveOperatorToken } from '../common/operator'
import type { WebhooksParts } from './parts'
import { DELIVERY_STATUSES, type DeliveryRecord, type DeliveryStatus } from './delivery-log'
import { bodyValidationProblem, failure, webhookIdParam, webhookNotFound } from './problems'
import { type Webhook, withoutSecrets } from './registry'
import { checkWindow, parseReplayDate, ReplayConflictError } from './replay'

/**
 * Operator API of the webhooks service (`/admin/webhooks/...`, operator
 * token; driven by `make webhooks|deliveries|resend|replay` through
 * services/cli/webhooks.ts): every app's webhooks, the delivery log,
 * re-sending and replaying.
 */

/** A log entry as operators see it: the body only on request (it can be large). */
function deliveryView(r: DeliveryRecord, withBody: boolean): Record<string, unknown> {
  const { body, ...rest } = r
  return withBody ? { ...rest, body } : { ...rest, body_bytes: Buffer.byteLength(body) }
}

function statusParam(raw: unknown): DeliveryStatus | undefined {
  if (raw === undefined || raw === '') return undefined
  if (typeof raw === 'string' && (DELIVERY_STATUSES as readonly string[]).includes(raw)) return raw as DeliveryStatus
  throw Problems.invalidParameter('status', String(raw), `status must be one of ${DELIVERY_STATUSES.join(', ')}`)
}

function timeParam(name: string, raw: unknown): number | undefined {
  if (raw === undefined || raw === '') return undefined
  const t = typeof raw === 'string' ? Date.parse(raw) : Number.NaN
  if (Number.isNaN(t)) throw Problems.invalidParameter(name, String(raw), `${name} must be an ISO 8601 time, e.g. 2025-01-31T12:00:00Z`)
  return t
}

function limitParam(raw: unknown): number {
  if (raw === undefined || raw === '') return 100
  const n = Number(raw)
  if (!Number.isInteger(n) || n < 1 || n > 10_000) throw Problems.invalidParameter('limit', String(raw), 'limit must be an integer from 1 to 10000')
  return n
}

export async function registerAdminRoutes(app: FastifyInstance, core: WebhooksParts): Promise<void> {
  const { ctx } = core
  const guard = operatorGuard(resolveOperatorToken(ctx.config, ctx.serviceName !== 'webhooks'))

  const webhookOf = async (request: FastifyRequest): Promise<Webhook> => {
    const id = webhookIdParam((request.params as Record<string, unknown>).webhook_id)
    const webhook = await core.registry.get(id)
    if (!webhook) throw webhookNotFound(id, 'webhook_id', 'on this gateway')
    return webhook
  }

  app.get('/admin/webhooks', { preHandler: guard }, async () => {
    const webhooks = await core.registry.listAll()
    const data = await Promise.all(
      webhooks.map(async (w) => ({ ...withoutSecrets(w), subscriptions: (await core.accountActivity.subscribers(w.id)).length }))
    )
    return { data, meta: { result_count: data.length } }
  })

  app.get('/admin/webhooks/:webhook_id', { preHandler: guard }, async (request) => {
    const w = await webhookOf(request)
    return { data: { ...withoutSecrets(w), subscriptions: await core.accountActivity.subscribers(w.id) } }
  })

  app.get('/admin/webhooks/:webhook_id/deliveries', { preHandler: guard }, async (request) => {
    const w = await webhookOf(request)
    const q = request.query as Record<string, unknown>
    const status = statusParam(q.status)
    const since = timeParam('since', q.since)
    const until = timeParam('until', q.until)
    const records = await core.deliveryLog.list(w.id, { status, since, until, limit: limitParam(q.limit), newestFirst: true })
    const withBody = q.include_body === 'true'
    return { data: records.map((r) => deliveryView(r, withBody)), meta: { result_count: records.length } }
  })

  app.get('/admin/webhooks/:webhook_id/deliveries/:delivery_id', { preHandler: guard }, async (request) => {
    const w = await webhookOf(request)
    const deliveryId = String((request.params as Record<string, unknown>).delivery_id)
    const record = await core.deliveryLog.get(deliveryId)
    // Not a resource type of the public platform (resource-not-found allows user, tweet, media...): a plain 404 Problem.
    if (!record || record.webhook_id !== w.id) throw Problems.generic(404, `No delivery with id [${deliveryId}] in the log of webhook ${w.id}.`)
    return { data: deliveryView(record, true) }
  })

  app.post('/admin/webhooks/:webhook_id/resend', {
    preHandler: guard,
    schema: { body: { $ref: 'http/webhooks.resend-request#' } },
    attachValidation: true
  }, async (request) => {
    if (request.validationError) throw bodyValidationProblem(request.validationError, request.body, () => 'QueryParamInvalid')
    const w = await webhookOf(request)
    const body = request.body as { since: string; status?: DeliveryStatus }
    const since = timeParam('since', body.since) ?? 0
    const resent = await core.engine.resend(w.id, { since, status: body.status ?? 'failed' })
    request.log.info({ webhook_id: w.id, resent, since: body.since }, 'operator re-sent deliveries')
    return { data: { webhook_id: w.id, resent } }
  })

  app.post('/admin/webhooks/:webhook_id/replay', {
    preHandler: guard,
    schema: { body: { $ref: 'http/webhooks.admin-replay-request#' } },
    attachValidation: true
  }, async (request) => {
    if (request.validationError) throw bodyValidationProblem(request.validationError, request.body, () => 'QueryParamInvalid')
    const w = await webhookOf(request)
    const body = request.body as { from_date: string; to_date: string }
    const fromMs = parseReplayDate(body.from_date)
    const toMs = parseReplayDate(body.to_date)
    if (fromMs === undefined) throw failure('QueryParamInvalid', 'from_date', body.from_date, 'from_date is not a valid yyyymmddhhmm UTC time.')
    if (toMs === undefined) throw failure('QueryParamInvalid', 'to_date', body.to_date, 'to_date is not a valid yyyymmddhhmm UTC time.')
    const windowProblem = checkWindow(fromMs, toMs)
    if (windowProblem) throw failure('QueryParamInvalid', 'from_date', body.from_date, `${windowProblem}.`)
    try {
      const job = await core.replay.create(w, fromMs, toMs)
      return { data: job }
    } catch (err) {
      if (err instanceof ReplayConflictError) throw Problems.conflict(`ReplayConflictError: ${err.message}`)
      throw err
    }
  })

  app.get('/admin/webhooks/replay-jobs/:job_id', { preHandler: guard }, async (request) => {
    const jobId = String((request.params as Record<string, unknown>).job_id)
    const job = await core.replay.get(jobId)
    if (!job) throw Problems.generic(404, `No replay job with id [${jobId}].`)
    return { data: job }
  })
}
