import type { FastifyInstance } from 'fastify'
import { sendHtml } from '../common/console/views'
import { Problems } from '../common/errors'
import { recordEventType } from './delivery'
import { appParams, consoleApp, consoleWebhook, type ConsoleDeps, withMessage } from './console-access'
import { listQuerySchema, type ListQuery, searchDeliveries, formTime } from './console-search'
import { DISPLAY_STATUSES, displayStatus, notSendable, totalAttempts } from './console-status'
import type { DeliveryRecord } from './delivery-log'
import { defaultUserAgent } from './http-client'
import { checkWindow, formatReplayDate, ReplayConflictError } from './replay'
import { SIGNATURE_HEADER, STANDARD_ID_HEADER, STANDARD_SIGNATURE_HEADER, STANDARD_TIMESTAMP_HEADER, webhookSignature } from './signature'

/**
 * Console: the delivery log of an app (filters and search: console-search),
 * one delivery with the request as sent and every attempt (replayed sends
 * marked), re-sending one or all failed deliveries, "retry now" for one
 * that is failing, and replaying a window of the last 24 hours with the
 * webhook's replay jobs listed. Statuses changed by an action refresh in
 * place until they settle. Reads through delivery-log.ts; writes go through
 * the delivery engine and the replay runner, as the operator API's do.
 */

export async function registerConsoleDeliveryRoutes(app: FastifyInstance, deps: ConsoleDeps): Promise<void> {
  const { core, views, page, api } = deps

  app.get('/console/webhooks/apps/:app_id/deliveries', { preHandler: page, schema: { params: appParams, querystring: listQuerySchema } }, async (request, reply) => {
    const appRecord = await consoleApp(core, request)
    const q = request.query as ListQuery
    const webhooks = await core.registry.listByApp(appRecord.id)
    const found = await searchDeliveries(core, webhooks, q)
    const baseQuery = new URLSearchParams(Object.entries({ ...q, page: undefined }).filter((e): e is [string, string] => typeof e[1] === 'string' && e[1] !== ''))
    const pageUrl = (n: number): string => `?${new URLSearchParams([...baseQuery, ['page', String(n)]]).toString()}`
    const jobs = await Promise.all(webhooks.map(async (w) => ({ webhook: w, jobs: await core.replay.listForWebhook(w.id), blocked: notSendable(w) })))
    return sendHtml(reply, views.page(request, 'deliveries', {
      app: appRecord,
      webhooks: jobs,
      q: found.q,
      statuses: DISPLAY_STATUSES,
      rows: found.rows.map(row),
      pageNo: found.pageNo,
      prev: found.pageNo > 1 ? pageUrl(found.pageNo - 1) : undefined,
      next: found.hasNext ? pageUrl(found.pageNo + 1) : undefined,
      filtered: Object.values({ ...q, page: undefined }).some((v) => typeof v === 'string' && v !== ''),
      replayFrom: formatReplayDate(Date.now() - 3_600_000)
    }, { title: 'Deliveries', active: 'deliveries', appId: appRecord.id }))
  })

  app.get('/console/webhooks/apps/:app_id/deliveries/:delivery_id', { preHandler: page }, async (request, reply) => {
    const appRecord = await consoleApp(core, request)
    const record = await ownDelivery(deps, appRecord.id, (request.params as { delivery_id: string }).delivery_id)
    // Oldest first by time: a replayed send sits between the attempts around it.
    const attempts = [...(await core.attempts.attempts(record.delivery_id)), ...(await core.replay.sends(record.delivery_id))].sort((a, b) => a.at.localeCompare(b.at) || a.n - b.n)
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
    if (webhook?.signing_secret) {
      // Timestamp and signature are each attempt's own: described, not recomputed (and no secret on the page).
      headers.push(
        [STANDARD_ID_HEADER, record.delivery_id],
        [STANDARD_TIMESTAMP_HEADER, '(the time of each attempt, in seconds)'],
        [STANDARD_SIGNATURE_HEADER, "v1,… (each attempt's, with the webhook's signing secret)"]
      )
    }
    return sendHtml(reply, views.page(request, 'delivery', { app: appRecord, ...row(record), webhook, blocked: notSendable(webhook), headers, body: pretty, attempts }, { title: `Delivery ${record.delivery_id}`, active: 'deliveries', appId: appRecord.id }))
  })

  // The status cell of a delivery: polled after an action until the delivery settles.
  app.get('/console/webhooks/apps/:app_id/deliveries/:delivery_id/status', { preHandler: api }, async (request, reply) => {
    const appRecord = await consoleApp(core, request)
    const record = await ownDelivery(deps, appRecord.id, (request.params as { delivery_id: string }).delivery_id)
    return sendHtml(reply, views.fragment('status-cell', { app: appRecord, ...row(record) }))
  })

  app.post('/console/webhooks/apps/:app_id/deliveries/:delivery_id/resend', { preHandler: api }, async (request, reply) => {
    const appRecord = await consoleApp(core, request)
    const record = await ownDelivery(deps, appRecord.id, (request.params as { delivery_id: string }).delivery_id)
    if (record.status === 'pending') throw Problems.conflict('This delivery is still scheduled: use "Retry now" to make its next attempt now.')
    const blocked = notSendable(await core.registry.get(record.webhook_id))
    if (blocked !== undefined) throw Problems.conflict(`Not re-sent. ${blocked}`)
    const resent = await core.engine.resend(record.webhook_id, { since: 0, deliveryId: record.delivery_id })
    request.log.info({ delivery_id: record.delivery_id, webhook_id: record.webhook_id, resent }, 'console: delivery re-sent')
    const after = (await core.deliveryLog.get(record.delivery_id)) ?? record
    return sendHtml(withMessage(reply, `Delivery ${record.delivery_id} scheduled again`), views.fragment('status-cell', { app: appRecord, ...row(after) }))
  })

  app.post('/console/webhooks/apps/:app_id/deliveries/:delivery_id/retry-now', { preHandler: api }, async (request, reply) => {
    const appRecord = await consoleApp(core, request)
    const record = await ownDelivery(deps, appRecord.id, (request.params as { delivery_id: string }).delivery_id)
    if (record.status !== 'pending') throw Problems.conflict(`This delivery is ${record.status}, not scheduled: use "Resend" to send it again.`)
    const blocked = notSendable(await core.registry.get(record.webhook_id))
    if (blocked !== undefined) throw Problems.conflict(`Not retried. ${blocked}`)
    // The scheduler's own move (claimed, as a CRC that passes again moves a webhook's deliveries).
    const moved = (await core.engine.pullForward(record.webhook_id, record.delivery_id)) > 0
    request.log.info({ delivery_id: record.delivery_id, moved }, 'console: retry now')
    const after = (await core.deliveryLog.get(record.delivery_id)) ?? record
    return sendHtml(withMessage(reply, moved ? `Delivery ${record.delivery_id}: next attempt now` : `Delivery ${record.delivery_id} is being attempted right now`), views.fragment('status-cell', { app: appRecord, ...row(after) }))
  })

  app.post('/console/webhooks/apps/:app_id/webhooks/:webhook_id/resend-failed', { preHandler: api }, async (request, reply) => {
    const appRecord = await consoleApp(core, request)
    const w = await consoleWebhook(core, request, appRecord)
    const blocked = notSendable(w)
    if (blocked !== undefined) throw Problems.conflict(`Nothing re-sent. ${blocked}`)
    const resent = await core.engine.resend(w.id, { since: 0, status: 'failed' })
    request.log.info({ webhook_id: w.id, resent }, 'console: failed deliveries re-sent')
    // The rows on the page re-read their status (console-views/status-cell), then follow it until it settles.
    return sendHtml(withMessage(reply.header('hx-trigger', 'deliveries-changed'), `${resent} failed deliveries scheduled again`), `<span data-resent="${resent}">${resent} re-sent</span>`)
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
      const blocked = notSendable(w)
      if (blocked !== undefined) throw Problems.conflict(`No replay. ${blocked}`)
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

/** What a row (and the status cell) shows of a delivery. */
function row(record: DeliveryRecord): { record: DeliveryRecord; eventType: string | undefined; shown: string; total: number } {
  return { record, eventType: recordEventType(record), shown: displayStatus(record), total: totalAttempts(record) }
}

/** A delivery of the app's log (404 for another app's, whoever asks). */
async function ownDelivery(deps: ConsoleDeps, appId: string, deliveryId: string): Promise<DeliveryRecord> {
  const record = /^[A-Za-z0-9_-]{1,100}$/.test(deliveryId) ? await deps.core.deliveryLog.get(deliveryId) : undefined
  if (!record || record.app_id !== appId) throw Problems.generic(404, 'No delivery here.')
  return record
}
