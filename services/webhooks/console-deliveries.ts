import type { FastifyInstance } from 'fastify'
import { sendHtml } from '../common/console/views'
import { Problems } from '../common/errors'
import { recordEventType } from './delivery'
import { appParams, consoleApp, consoleWebhook, type ConsoleDeps, withMessage } from './console-access'
import { DELIVERY_STATUSES, type DeliveryRecord, type DeliveryStatus } from './delivery-log'
import { defaultUserAgent } from './http-client'
import { checkWindow, formatReplayDate, ReplayConflictError } from './replay'
import { SIGNATURE_HEADER, webhookSignature } from './signature'

/**
 * Console: the delivery log of an app (filters: webhook, status, event
 * type, time range; paging), one delivery with the request as sent and its
 * attempts, re-sending one or all failed deliveries, and replaying a window
 * of the last 24 hours. Reads through delivery-log.ts; writes go through
 * the delivery engine and the replay runner, as the operator API's do.
 */

const PAGE_SIZE = 25
/** Records scanned for one page when filtering by event type (the log's index is by time only). */
const SCAN_LIMIT = 5000

interface ListQuery {
  webhook?: string
  status?: string
  event_type?: string
  since?: string
  until?: string
  page?: string
}

/** A datetime-local value (no zone: UTC, as the form says) or an ISO time, as ms. */
export function formTime(name: string, raw: string | undefined): number | undefined {
  if (raw === undefined || raw.trim() === '') return undefined
  const text = raw.trim()
  const ms = Date.parse(/[zZ]|[+-]\d\d:?\d\d$/.test(text) ? text : `${text}Z`)
  if (Number.isNaN(ms)) throw Problems.invalidParameter(name, raw, `${name} must be a time like 2025-01-31T12:00 (UTC)`)
  return ms
}

function statusFilter(raw: string | undefined): DeliveryStatus | undefined {
  if (raw === undefined || raw === '') return undefined
  if ((DELIVERY_STATUSES as readonly string[]).includes(raw)) return raw as DeliveryStatus
  throw Problems.invalidParameter('status', raw, `status must be one of ${DELIVERY_STATUSES.join(', ')}`)
}

function pageNumber(raw: string | undefined): number {
  if (raw === undefined || raw === '') return 1
  const n = Number(raw)
  if (!Number.isInteger(n) || n < 1 || n > 1000) throw Problems.invalidParameter('page', raw, 'page must be an integer from 1 to 1000')
  return n
}

const listQuerySchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    webhook: { type: 'string', maxLength: 19 },
    status: { type: 'string', maxLength: 16 },
    event_type: { type: 'string', maxLength: 64 },
    since: { type: 'string', maxLength: 40 },
    until: { type: 'string', maxLength: 40 },
    page: { type: 'string', maxLength: 5 }
  }
}

export async function registerConsoleDeliveryRoutes(app: FastifyInstance, deps: ConsoleDeps): Promise<void> {
  const { core, views, page, api } = deps

  app.get('/console/webhooks/apps/:app_id/deliveries', { preHandler: page, schema: { params: appParams, querystring: listQuerySchema } }, async (request, reply) => {
    const appRecord = await consoleApp(core, request)
    const q = request.query as ListQuery
    const webhooks = await core.registry.listByApp(appRecord.id)
    const status = statusFilter(q.status)
    const since = formTime('since', q.since)
    const until = formTime('until', q.until)
    const pageNo = pageNumber(q.page)
    const eventType = q.event_type?.trim() ?? ''
    if (q.webhook && !webhooks.some((w) => w.id === q.webhook)) throw Problems.generic(404, 'No webhook here.')
    const chosen = q.webhook ? webhooks.filter((w) => w.id === q.webhook) : webhooks
    const wanted = pageNo * PAGE_SIZE + 1
    const limit = eventType === '' ? wanted : SCAN_LIMIT
    const lists = await Promise.all(chosen.map((w) => core.deliveryLog.list(w.id, { status, since, until, limit, newestFirst: true })))
    let records = lists.flat().sort((a, b) => b.event_time - a.event_time || b.delivery_id.localeCompare(a.delivery_id))
    if (eventType !== '') records = records.filter((r) => recordEventType(r) === eventType)
    const rows = records.slice((pageNo - 1) * PAGE_SIZE, pageNo * PAGE_SIZE).map((r) => ({ record: r, eventType: recordEventType(r) }))
    const hasNext = records.length > pageNo * PAGE_SIZE
    const baseQuery = new URLSearchParams(Object.entries({ ...q, page: undefined }).filter((e): e is [string, string] => typeof e[1] === 'string' && e[1] !== ''))
    const pageUrl = (n: number): string => `?${new URLSearchParams([...baseQuery, ['page', String(n)]]).toString()}`
    return sendHtml(reply, views.page(request, 'deliveries', {
      app: appRecord,
      webhooks,
      q: { ...q, event_type: eventType },
      statuses: DELIVERY_STATUSES,
      rows,
      pageNo,
      prev: pageNo > 1 ? pageUrl(pageNo - 1) : undefined,
      next: hasNext ? pageUrl(pageNo + 1) : undefined,
      replayFrom: formatReplayDate(Date.now() - 3_600_000),
      failedCount: lists.flat().filter((r) => r.status === 'failed').length
    }, { title: 'Deliveries', active: 'deliveries', appId: appRecord.id }))
  })

  app.get('/console/webhooks/apps/:app_id/deliveries/:delivery_id', { preHandler: page }, async (request, reply) => {
    const appRecord = await consoleApp(core, request)
    const record = await ownDelivery(deps, appRecord.id, (request.params as { delivery_id: string }).delivery_id)
    const attempts = await core.attempts.attempts(record.delivery_id)
    const headers: Array<[string, string]> = [
      ['content-type', 'application/json'],
      [SIGNATURE_HEADER, webhookSignature(appRecord.consumer_secret, record.body)],
      ['user-agent', defaultUserAgent()],
      ['content-length', String(Buffer.byteLength(record.body))]
    ]
    let pretty = record.body
    try {
      pretty = JSON.stringify(JSON.parse(record.body), null, 2)
    } catch {
      // Shown as sent.
    }
    const webhook = await core.registry.get(record.webhook_id)
    return sendHtml(reply, views.page(request, 'delivery', { app: appRecord, record, webhook, headers, body: pretty, attempts, eventType: recordEventType(record) }, { title: `Delivery ${record.delivery_id}`, active: 'deliveries', appId: appRecord.id }))
  })

  app.post('/console/webhooks/apps/:app_id/deliveries/:delivery_id/resend', { preHandler: api }, async (request, reply) => {
    const appRecord = await consoleApp(core, request)
    const record = await ownDelivery(deps, appRecord.id, (request.params as { delivery_id: string }).delivery_id)
    if (record.status === 'pending') throw Problems.conflict('This delivery is still pending: it is already scheduled.')
    const resent = await core.engine.resend(record.webhook_id, { since: 0, deliveryId: record.delivery_id })
    request.log.info({ delivery_id: record.delivery_id, webhook_id: record.webhook_id, resent }, 'console: delivery re-sent')
    return sendHtml(withMessage(reply, `Delivery ${record.delivery_id} scheduled again`), '<span class="badge pending" data-status="pending">pending</span>')
  })

  app.post('/console/webhooks/apps/:app_id/webhooks/:webhook_id/resend-failed', { preHandler: api }, async (request, reply) => {
    const appRecord = await consoleApp(core, request)
    const w = await consoleWebhook(core, request, appRecord)
    const resent = await core.engine.resend(w.id, { since: 0, status: 'failed' })
    request.log.info({ webhook_id: w.id, resent }, 'console: failed deliveries re-sent')
    return sendHtml(withMessage(reply, `${resent} failed deliveries scheduled again`), `<span data-resent="${resent}">${resent} re-sent</span>`)
  })

  app.post('/console/webhooks/apps/:app_id/webhooks/:webhook_id/replay', { preHandler: api }, async (request, reply) => {
    const appRecord = await consoleApp(core, request)
    const w = await consoleWebhook(core, request, appRecord)
    const body = (request.body ?? {}) as Record<string, unknown>
    const fromMs = formTime('from', typeof body.from === 'string' ? body.from : undefined)
    const toMs = formTime('to', typeof body.to === 'string' ? body.to : undefined)
    if (fromMs === undefined || toMs === undefined) throw Problems.invalidParameter('from', String(body.from ?? ''), 'from and to are required')
    const problem = checkWindow(fromMs, toMs)
    if (problem) throw Problems.invalidParameter('from', String(body.from), `${problem} (replay covers the last 24 hours)`)
    try {
      const job = await core.replay.create(w, fromMs, toMs)
      request.log.info({ webhook_id: w.id, job_id: job.job_id }, 'console: replay started')
      return sendHtml(withMessage(reply, `Replay job ${job.job_id} started`), views.fragment('replay-job', { app: appRecord, job }))
    } catch (err) {
      if (err instanceof ReplayConflictError) throw Problems.conflict(err.message)
      throw err
    }
  })

  app.get('/console/webhooks/apps/:app_id/replay-jobs/:job_id', { preHandler: api }, async (request, reply) => {
    const appRecord = await consoleApp(core, request)
    const job = await core.replay.get((request.params as { job_id: string }).job_id)
    if (!job || job.app_id !== appRecord.id) throw Problems.generic(404, 'No replay job here.')
    return sendHtml(reply, views.fragment('replay-job', { app: appRecord, job }))
  })
}

/** A delivery of the app's log (404 for another app's, whoever asks). */
async function ownDelivery(deps: ConsoleDeps, appId: string, deliveryId: string): Promise<DeliveryRecord> {
  const record = /^[A-Za-z0-9_-]{1,100}$/.test(deliveryId) ? await deps.core.deliveryLog.get(deliveryId) : undefined
  if (!record || record.app_id !== appId) throw Problems.generic(404, 'No delivery here.')
  return record
}
