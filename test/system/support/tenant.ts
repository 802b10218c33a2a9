import type { Test } from 'tap'
import type { AccessToken, App, User } from '../../../services/common/auth/records'
import { keysCoveringPartitions, partitionFor } from '../../../services/common/bus/partitioner'
import { loadTopics } from '../../../services/common/bus/topics'
import { TOPICS } from '../../../services/common/bus/types'
import { newNumericId } from '../../../services/common/ids'
import { createApp, createUser, issueAccessToken, issueBearer } from '../../../services/gateway/identity'
import { oauthHeader } from '../../support/http'
import { startCountingReceiver, type CountingReceiver } from './receiver'
import type { SystemView } from './system'

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
  /** user_ids with an activity subscription (the first is `user.id`); together they cover every partition of activity.events. */
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

/**
 * `first` plus as many new user ids as it takes for the users to land on
 * every partition of activity.events (keyed by user_id), so a burst of
 * their events gives every matcher work, whichever partitions it owns.
 */
export function usersCoveringPartitions(first: string, atLeast: number): string[] {
  const partitions = loadTopics().topics.find((x) => x.name === TOPICS.activityEvents)?.partitions ?? 1
  return keysCoveringPartitions(first, atLeast, partitions, newNumericId)
}

function first(urls: string[], service: string): string {
  const url = urls[0]
  if (url === undefined) throw new Error(`no running ${service} instance`)
  return url
}

export interface TenantOptions {
  /** At least this many followed users (more when it takes more to cover every partition). */
  followedUsers?: number
  /**
   * Stream-only subscriptions of a second application on each followed user:
   * every event then fans out to 1 + fanOut deliveries (as a popular
   * account's events do), so a matcher working through a burst always holds
   * many deliveries it has not published yet. Default 0.
   */
  fanOut?: number
}

/**
 * An application whose deliveries land on another activity.deliveries
 * partition than the tenant's (deliveries are keyed by app id). librdkafka's
 * mock cluster keeps only 5 MB per partition and trims the oldest beyond
 * that (the broker's "retention"): the fan-out's tens of thousands of
 * deliveries sharing the tenant's partition would push the tenant's own out
 * before a consumer that was down reads them, a loss the mock causes and a
 * real broker with the topic's 72 h retention would not.
 */
async function fanOutApp(system: SystemView, tenantAppId: string): Promise<App> {
  const partitions = loadTopics().topics.find((x) => x.name === TOPICS.activityDeliveries)?.partitions ?? 1
  if (partitions < 2) throw new Error('the fan-out needs activity.deliveries to have at least two partitions')
  for (let attempt = 0; ; attempt++) {
    const app = await createApp(system.store, { name: `fan-out app ${process.pid} ${attempt}`, access_level: 'read', callback_urls: ['http://127.0.0.1/callback'] })
    if (partitionFor(app.id, partitions) !== partitionFor(tenantAppId, partitions)) return app
  }
}

/** A second application with `perUser` stream-only subscriptions on each user (nobody streams it: only the matchers feel it). */
async function addFanOut(system: SystemView, activity: string, users: string[], perUser: number, tenantAppId: string): Promise<void> {
  if (perUser <= 0) return
  const other = await fanOutApp(system, tenantAppId)
  const { token } = await issueBearer(system.store, other)
  for (const userId of users) {
    for (let i = 0; i < perUser; i++) {
      const sub = await call('POST', `${activity}/2/activity/subscriptions`, { authorization: `Bearer ${token}` }, { event_type: 'post.create', filter: { user_id: userId }, tag: `fan-out-${i}` })
      if (sub.status !== 200) throw new Error(`fan-out subscription failed: ${sub.status} ${sub.text}`)
    }
  }
}

export async function setUpTenant(t: Test, system: SystemView, options: TenantOptions = {}): Promise<Tenant> {
  const followedUsers = options.followedUsers ?? 4
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

  const followed = usersCoveringPartitions(user.id, followedUsers)
  const activity = first(system.urls('activity'), 'activity')
  for (const userId of followed) {
    const sub = await call('POST', `${activity}/2/activity/subscriptions`, auth, { event_type: 'post.create', filter: { user_id: userId }, tag: 'fault-tests', webhook_id: webhook.id })
    if (sub.status !== 200) throw new Error(`activity subscription failed: ${sub.status} ${sub.text}`)
  }

  await addFanOut(system, activity, followed, options.fanOut ?? 0, app.id)

  const aaaUrl = `${webhooks}/2/account_activity/webhooks/${webhook.id}/subscriptions/all`
  const aaa = await call('POST', aaaUrl, { authorization: oauthHeader('POST', aaaUrl, { app, token }) })
  if (aaa.status !== 200) throw new Error(`account activity subscription failed: ${aaa.status} ${aaa.text}`)

  return { app, user, token, bearer, receiver, webhookId: webhook.id, followed }
}
