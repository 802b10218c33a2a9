import type { FastifyBaseLogger as Logger } from 'fastify'
import type { App } from '../common/auth/records'
import { Problems } from '../common/errors'
import { newNumericId } from '../common/ids'
import { LockBusyError } from './app-lock'
import type { CrcCheck } from './crc'
import type { WebhooksParts } from './parts'
import { failure, type Reason } from './problems'
import { normalizeUrl, type Webhook } from './registry'
import { newStandardSecret } from './signature'
import { checkWebhookUrl, UnsafeUrlError } from './url-safety'

/**
 * Registering, re-pointing and deleting a webhook: the rules of
 * POST/DELETE /2/webhooks (URL safety, one webhook per URL per app, the
 * per-app limit, a passing CRC before anything is stored), shared by the
 * public routes and the console's self-service so both answer alike. The
 * registration's CRC goes into the webhook's CRC history like every later
 * check.
 */

/** Runs a step that holds an app lock; a lock that stayed taken is a 503 to retry, not a 500. */
export async function lockedOrBusy<T>(step: () => Promise<T>): Promise<T> {
  try {
    return await step()
  } catch (err) {
    if (err instanceof LockBusyError) throw Problems.generic(503, 'Another request of this application is updating the same limit; try again.')
    throw err
  }
}

/** A URL the app may register: safe, and not already one of its webhooks' (`except`: the webhook being re-pointed). */
async function acceptableUrl(core: WebhooksParts, app: App, url: string, except?: string): Promise<string> {
  const reject = (reason: Reason, text: string) => failure(reason, 'url', url, text)
  let parsed: URL
  try {
    parsed = await checkWebhookUrl(url, core.policy)
  } catch (err) {
    if (err instanceof UnsafeUrlError) throw reject('UrlValidationFailed', err.message)
    throw err
  }
  // Stored, challenged and used from here on: the parsed form, never the raw input.
  const urlKey = normalizeUrl(parsed)
  const existing = await core.registry.listByApp(app.id)
  if (existing.some((w) => w.url_key === urlKey && w.id !== except)) throw reject('DuplicateUrlFailed', 'A webhook is already registered by this application for this URL.')
  return urlKey
}

export interface Registered {
  webhook: Webhook
  crc: CrcCheck
}

export interface RegisterOptions {
  /** Sign its deliveries with Standard Webhooks too: the webhook is stored with a new `whsec_` secret (standard-webhooks.ts). */
  standardWebhooks?: boolean
}

export async function registerWebhook(core: WebhooksParts, app: App, url: string, log: Logger, options: RegisterOptions = {}): Promise<Registered> {
  const { config } = core.ctx
  const reject = (reason: Reason, text: string) => failure(reason, 'url', url, text)
  const urlKey = await acceptableUrl(core, app, url)
  const limitReached = () => reject('WebhookLimitExceeded', `This application has reached its limit of ${config.webhookLimitPerApp} webhook(s).`)
  // An early answer that spares a CRC; the authoritative check is the one made with the insert.
  if ((await core.registry.countByApp(app.id)) >= config.webhookLimitPerApp) throw limitReached()
  const id = newNumericId()
  if ((await core.registry.reserveUrl(app.id, urlKey, id)) !== undefined) {
    throw reject('DuplicateUrlFailed', 'A webhook is already registered by this application for this URL.')
  }
  try {
    const crc = await core.checker.challengeNew(urlKey, app.consumer_secret)
    if (crc.result !== 'pass') throw reject('CrcValidationFailed', crc.reason)
    const now = Date.now()
    const at = new Date(now).toISOString()
    const webhook: Webhook = { id, app_id: app.id, url: urlKey, url_key: urlKey, valid: true, created_at: at, last_crc_at: at, last_crc_ok_at: at }
    if (options.standardWebhooks === true) webhook.signing_secret = newStandardSecret()
    // Another create (in any process) may have completed while the CRC ran: counted and inserted under the app's lock.
    if (!(await lockedOrBusy(() => core.registry.insertWithinLimit(webhook, now + config.webhookCrcIntervalMs, config.webhookLimitPerApp)))) {
      throw limitReached()
    }
    await core.crcHistory.record(id, 'create', crc, now).catch((err: unknown) => log.warn({ err, webhook_id: id }, 'could not record the registration CRC in its history'))
    log.info({ webhook_id: id, app_id: app.id, standard_webhooks: webhook.signing_secret !== undefined }, 'webhook registered')
    return { webhook, crc }
  } catch (err) {
    await core.registry.releaseUrl(app.id, urlKey, id)
    throw err
  }
}

/**
 * Points a webhook at a new URL: the same checks as a registration, the
 * new URL's CRC must pass, then the webhook is valid at its new address
 * (a 410 disable is lifted with it: that was the old receiver's answer).
 */
export async function changeWebhookUrl(core: WebhooksParts, app: App, webhook: Webhook, url: string, log: Logger): Promise<Registered> {
  const urlKey = await acceptableUrl(core, app, url, webhook.id)
  if (urlKey === webhook.url_key) return { webhook, crc: { result: 'pass', ms: 0 } }
  if ((await core.registry.reserveUrl(app.id, urlKey, webhook.id)) !== undefined) {
    throw failure('DuplicateUrlFailed', 'url', url, 'A webhook is already registered by this application for this URL.')
  }
  let changed: Webhook | undefined
  let crc: CrcCheck
  try {
    crc = await core.checker.challengeNew(urlKey, app.consumer_secret)
    await core.crcHistory.record(webhook.id, 'edit', crc).catch((err: unknown) => log.warn({ err, webhook_id: webhook.id }, 'could not record the CRC in its history'))
    if (crc.result !== 'pass') throw failure('CrcValidationFailed', 'url', url, `${crc.reason} (the webhook keeps its old URL)`)
    changed = await core.registry.changeUrl(webhook.id, urlKey)
    if (!changed) throw Problems.generic(404, 'No webhook here.')
  } catch (err) {
    await core.registry.releaseUrl(app.id, urlKey, webhook.id)
    throw err
  }
  await core.registry.releaseUrl(app.id, webhook.url_key, webhook.id)
  await core.client.forget(webhook.id)
  log.info({ webhook_id: webhook.id, app_id: app.id }, 'webhook URL changed')
  // Deliveries held while the old address failed go to the new one now.
  if (!webhook.valid || webhook.disabled_at !== undefined) await core.engine.pullForward(webhook.id)
  return { webhook: changed, crc }
}

export async function deleteWebhook(core: WebhooksParts, webhook: Webhook, log: Logger): Promise<void> {
  await core.registry.remove(webhook)
  await core.client.forget(webhook.id)
  log.info({ webhook_id: webhook.id }, 'webhook deleted')
}
