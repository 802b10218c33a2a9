import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { App } from '../common/auth/records'
import { sendHtml } from '../common/console/views'
import { Problems } from '../common/errors'
import { enforceRateLimit } from '../common/ratelimit'
import { newNumericId, newUuid } from '../common/ids'
import { appParams, consoleApp, type ConsoleDeps, consoleWebhook, withMessage } from './console-access'
import type { CrcCheck } from './crc'
import { notSendable } from './console-status'
import { changeWebhookUrl, deleteWebhook, registerWebhook } from './registration'

/**
 * Console self-service for an app's developer: register a webhook, point it
 * at a new URL, delete it, and send it a test event. Registration, URL
 * change and delete run the rules of POST/DELETE /2/webhooks (registration.ts:
 * URL safety, one webhook per URL, the app's limit, a passing CRC) and count
 * in the app's window of the same rate-limit family; the test
 * event is accepted by the delivery engine like any matched event, so it is
 * signed, retried, logged and shown like one. Every answer is the refreshed
 * webhook list (htmx swaps it in) with a note coloured by the CRC's outcome.
 */

/** The test event's type: the delivery log and the tail show it as such. */
export const TEST_EVENT_TYPE = 'console.test'

/** What the note says of a CRC, and its colour (console.js): pass green, invalid red, transient amber. */
export function crcNote(check: CrcCheck): { text: string; kind: 'pass' | 'invalid' | 'transient' } {
  if (check.result === 'pass') return { text: `CRC passed${check.status !== undefined ? ` (${check.status})` : ''} in ${check.ms} ms`, kind: 'pass' }
  const what = check.result === 'invalid' ? 'CRC invalid' : 'CRC failed for now (transient)'
  return { text: `${what}: ${check.reason}`, kind: check.result }
}

function formText(body: unknown, name: string): string {
  const v = body !== null && typeof body === 'object' ? (body as Record<string, unknown>)[name] : undefined
  return typeof v === 'string' ? v.trim() : ''
}

/** The refreshed webhook list; `revealed`: a signing secret just made, shown in this answer only. */
export type WebhooksFragment = (app: App, revealed?: { webhookId: string; secret: string }) => Promise<string>

export async function registerConsoleSelfServiceRoutes(app: FastifyInstance, deps: ConsoleDeps, webhooksFragment: WebhooksFragment): Promise<void> {
  const { core, api } = deps
  const withKind = (kind: string) => ({ 'x-console-message-kind': kind })
  // The window of /2/webhooks' family, counted for the app as its bearer calls are: the console is no way around it.
  const limited = (request: FastifyRequest, reply: FastifyReply, appId: string) =>
    enforceRateLimit(request, reply, { family: 'webhooks' }, `app:${appId}`, () => Problems.generic(429, 'Too many webhook changes for this application (the limit of /2/webhooks): try again later.'))

  app.post('/console/webhooks/apps/:app_id/webhooks', { preHandler: api, schema: { params: appParams } }, async (request, reply) => {
    const appRecord = await consoleApp(core, request)
    await limited(request, reply, appRecord.id)
    const url = formText(request.body, 'url')
    if (url === '') throw Problems.invalidParameter('url', url, 'url is required: the https address that receives the events')
    // The form's checkbox: Standard Webhooks signing from the start, its secret shown in this answer only.
    const standardWebhooks = formText(request.body, 'standard_webhooks') !== ''
    const { webhook, crc } = await registerWebhook(core, appRecord, url, request.log, { standardWebhooks })
    const note = crcNote(crc)
    const secret = webhook.signing_secret
    const text = `Webhook ${webhook.id} registered: ${note.text}${secret !== undefined ? '; new signing secret: copy it now' : ''}`
    return sendHtml(withMessage(reply.headers(withKind('pass')), text), await webhooksFragment(appRecord, secret !== undefined ? { webhookId: webhook.id, secret } : undefined))
  })

  app.post('/console/webhooks/apps/:app_id/webhooks/:webhook_id/url', { preHandler: api }, async (request, reply) => {
    const appRecord = await consoleApp(core, request)
    const w = await consoleWebhook(core, request, appRecord)
    await limited(request, reply, appRecord.id)
    const url = formText(request.body, 'url')
    if (url === '') throw Problems.invalidParameter('url', url, 'url is required')
    const { crc } = await changeWebhookUrl(core, appRecord, w, url, request.log)
    return sendHtml(withMessage(reply.headers(withKind('pass')), `Webhook ${w.id} now points at the new URL: ${crcNote(crc).text}`), await webhooksFragment(appRecord))
  })

  app.delete('/console/webhooks/apps/:app_id/webhooks/:webhook_id', { preHandler: api }, async (request, reply) => {
    const appRecord = await consoleApp(core, request)
    const w = await consoleWebhook(core, request, appRecord)
    await limited(request, reply, appRecord.id)
    await deleteWebhook(core, w, request.log)
    return sendHtml(withMessage(reply, `Webhook ${w.id} deleted`), await webhooksFragment(appRecord))
  })

  app.post('/console/webhooks/apps/:app_id/webhooks/:webhook_id/test-event', { preHandler: api }, async (request, reply) => {
    const appRecord = await consoleApp(core, request)
    const w = await consoleWebhook(core, request, appRecord)
    const blocked = notSendable(w)
    if (blocked !== undefined) throw Problems.conflict(`No test event sent. ${blocked}`)
    const now = Date.now()
    const eventUuid = newNumericId()
    const body = JSON.stringify({
      data: {
        event_uuid: eventUuid,
        filter: {},
        event_type: TEST_EVENT_TYPE,
        tag: 'console test event',
        payload: { text: 'A test event sent from the console.', sent_at: new Date(now).toISOString() },
        includes: {}
      }
    })
    const deliveryId = newUuid()
    // Through the usage gate, as the worker hands matched events in: counted, or held over a cap.
    const [result] = await core.usage.take([{ delivery_id: deliveryId, webhook_id: w.id, app_id: appRecord.id, source: 'activity', event_uuid: eventUuid, body, event_type: TEST_EVENT_TYPE, event_time: now }])
    if (result === 'held') throw Problems.generic(429, 'The test event is held: this application is over its usage cap; it is sent when the cap allows.')
    request.log.info({ webhook_id: w.id, delivery_id: deliveryId }, 'console: test event sent')
    const link = `/console/webhooks/apps/${appRecord.id}/deliveries/${deliveryId}`
    return sendHtml(withMessage(reply, `Test event sent to webhook ${w.id}`), `<span data-test-delivery="${deliveryId}"><a href="${link}">See the test delivery and its attempt</a></span>`)
  })
}
