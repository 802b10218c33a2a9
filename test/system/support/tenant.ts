import { createHmac } from 'node:crypto'
import OAuth from 'oauth-1.0a'
import type { Test } from 'tap'
import type { AccessToken, App, User } from '../../../services/common/auth/records'
import { newNumericId } from '../../../services/common/ids'
import { createApp, createUser, issueAccessToken, issueBearer } from '../../../services/gateway/identity'
import { startCountingReceiver, type CountingReceiver } from './receiver'
import type { System } from './system'

/**
 * The customer the fault tests deliver to: an app and a user (created in
 * Redis, as the CLI does), a webhook on a counting receiver registered
 * through the webhooks service (CRC included), one activity subscription
 * with that webhook per followed user, and an Account Activity
 * subscription of the app's own user on the same webhook. Every event of a
 * followed user therefore reaches the receiver as an envelope, and events of
 * the app's user also as an Account Activity message.
 */

export interface Tenant {
  app: App
  user: User
  token: AccessToken
  bearer: string
  receiver: CountingReceiver
  webhookId: string
  /** user_ids with an activity subscription (the first is `user.id`). */
  followed: string[]
}

interface Answer {
  status: number
  json: Record<string, unknown>
  text: string
}

async function call(method: string, url: string, headers: Record<string, string>, json?: unknown): Promise<Answer> {
  const res = await fetch(url, {
    method,
    headers: json === undefined ? headers : { ...headers, 'content-type': 'application/json' },
    body: json === undefined ? undefined : JSON.stringify(json),
    signal: AbortSignal.timeout(20_000)
  })
  const text = await res.text()
  let parsed: Record<string, unknown> = {}
  try {
    parsed = JSON.parse(text) as Record<string, unknown>
  } catch {
    // not JSON: `text` tells
  }
  return { status: res.status, json: parsed, text }
}

function oauth1Header(method: string, url: string, app: App, token: AccessToken): Record<string, string> {
  const oauth = new OAuth({
    consumer: { key: app.consumer_key, secret: app.consumer_secret },
    signature_method: 'HMAC-SHA1',
    hash_function: (base, key) => createHmac('sha1', key).update(base).digest('base64')
  })
  return { ...oauth.toHeader(oauth.authorize({ url, method }, { key: token.token, secret: token.secret })) }
}

function first(urls: string[], service: string): string {
  const url = urls[0]
  if (url === undefined) throw new Error(`no running ${service} instance`)
  return url
}

export async function setUpTenant(t: Test, system: System, followedUsers = 4): Promise<Tenant> {
  const app = await createApp(system.store, { name: `fault app ${process.pid}`, access_level: 'read-write-dm', callback_urls: ['http://127.0.0.1/callback'] })
  const user = await createUser(system.store, `fault_${process.pid % 100000}`, 'correct horse battery')
  const token = await issueAccessToken(system.store, app, user, 'read-write-dm')
  const { token: bearer } = await issueBearer(system.store, app)
  const receiver = await startCountingReceiver(t, app.consumer_secret)
  const auth = { authorization: `Bearer ${bearer}` }

  const webhooks = first(system.urls('webhooks'), 'webhooks')
  const created = await call('POST', `${webhooks}/2/webhooks`, auth, { url: receiver.url })
  if (created.status !== 200) throw new Error(`webhook registration failed: ${created.status} ${created.text}`)
  const webhook = created.json.data as { id: string; valid: boolean }
  if (!webhook.valid) throw new Error(`the webhook was registered invalid: ${created.text}`)

  const followed = [user.id, ...Array.from({ length: followedUsers - 1 }, () => newNumericId())]
  const activity = first(system.urls('activity'), 'activity')
  for (const userId of followed) {
    const sub = await call('POST', `${activity}/2/activity/subscriptions`, auth, { event_type: 'post.create', filter: { user_id: userId }, tag: 'fault-tests', webhook_id: webhook.id })
    if (sub.status !== 200) throw new Error(`activity subscription failed: ${sub.status} ${sub.text}`)
  }

  const aaaUrl = `${webhooks}/2/account_activity/webhooks/${webhook.id}/subscriptions/all`
  const aaa = await call('POST', aaaUrl, oauth1Header('POST', aaaUrl, app, token))
  if (aaa.status !== 200) throw new Error(`account activity subscription failed: ${aaa.status} ${aaa.text}`)

  return { app, user, token, bearer, receiver, webhookId: webhook.id, followed }
}
