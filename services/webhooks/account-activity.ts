import { createHash } from 'node:crypto'
import type { Logger } from 'pino'
import type { Store } from '../common/store/types'
import { withLock } from './app-lock'
import type { NewDelivery } from './delivery/intake'
import type { UsageGate } from './delivery/usage-gate'
import { WebhookKeys } from './keys'
import { type ActivityEventMessage, eventTime } from './delivery/messages'
import type { Webhook, WebhookRegistry } from './registry'

/**
 * Account Activity user subscriptions: a user (authenticated with user
 * context) subscribes to a webhook of an app, and every piece of that
 * user's activity is POSTed to the webhook in the Account Activity message
 * format (`{"for_user_id", "<type>_events": [...]}`).
 *
 * Design choice: these subscriptions are the webhooks service's own state,
 * and the service consumes `activity.events` in its own consumer group to
 * route a subscribed user's events (index `webhooks:user:{user_id}`, O(1)
 * per event). The deliveries go through the same durable engine as those of
 * activity subscriptions (signature, retries, dead letter, log, replay).
 */

export type SubscribeResult = 'subscribed' | 'duplicate' | 'limit' | 'gone'

/** Account Activity message type per dotted event type (the public platform's names where it has one). */
const MESSAGE_TYPES: Record<string, string> = {
  'post.create': 'tweet_create_events',
  'post.delete': 'tweet_delete_events',
  'dm.sent': 'direct_message_events',
  'dm.received': 'direct_message_events',
  'dm.read': 'direct_message_mark_read_events',
  'dm.indicate_typing': 'direct_message_indicate_typing_events',
  'spaces.start': 'spaces_events',
  'spaces.end': 'spaces_events'
}

/** The message type an event is delivered under. */
export function messageTypeFor(eventType: string): string {
  const known = MESSAGE_TYPES[eventType]
  if (known) return known
  if (eventType.startsWith('profile.update.')) return 'user_update_events'
  return `${eventType.replace(/[^a-zA-Z0-9]+/g, '_')}_events`
}

/** The Account Activity body of one event for one subscribed user (exact bytes, signed as sent). */
export function accountActivityBody(event: ActivityEventMessage, forUserId: string): string {
  return accountActivityEntry(event, forUserId).body
}

/**
 * The body and the type the console shows for it: what eventTypeOf (attempt-log.ts) would read
 * back from the body, its first `*_events` key, taken from the object before it is serialized.
 */
export function accountActivityEntry(event: ActivityEventMessage, forUserId: string): { body: string; eventType: string | undefined } {
  const type = messageTypeFor(event.event_type)
  const body: Record<string, unknown> = { for_user_id: forUserId, event_uuid: event.event_uuid }
  const payload = event.payload
  if (Array.isArray(payload[type])) {
    // Direct-message payloads already carry their message array (and the `users` map) in this format.
    Object.assign(body, payload)
  } else if (type === 'tweet_delete_events') {
    body.tweet_delete_events = [
      { status: { id: payload.id, user_id: payload.author_id ?? event.user_id }, timestamp_ms: String(eventTime(event.created_at, Date.now())) }
    ]
  } else if (MESSAGE_TYPES[event.event_type] === undefined) {
    // No public message type of its own: the dotted type travels inside the entry.
    body[type] = [{ event_type: event.event_type, created_at: event.created_at, ...payload }]
  } else {
    body[type] = [payload]
  }
  // Expanded users travel beside the events, as on the public platform.
  if (body.users === undefined && event.includes?.users !== undefined) body.users = event.includes.users
  return { body: JSON.stringify(body), eventType: Object.keys(body).find((k) => k.endsWith('_events')) }
}

/** One delivery id per (event, webhook), so a redelivered event is recognised as the same delivery. */
export function accountActivityDeliveryId(eventUuid: string, webhookId: string): string {
  const h = createHash('sha256').update(`account-activity\n${eventUuid}\n${webhookId}`).digest('hex')
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-5${h.slice(13, 16)}-${((parseInt(h.slice(16, 18), 16) & 0x3f) | 0x80).toString(16)}${h.slice(18, 20)}-${h.slice(20, 32)}`
}

export class AccountActivity {
  constructor(
    private readonly store: Store,
    private readonly registry: WebhookRegistry,
    /** The usage gate in front of the delivery engine (delivery/usage-gate.ts): counted, or held over a cap. */
    private readonly intake: Pick<UsageGate, 'take'>,
    private readonly limitPerApp: number,
    private readonly log: Logger
  ) {}

  get provisioned(): number {
    return this.limitPerApp
  }

  async countForApp(appId: string): Promise<number> {
    const ids = await this.store.smembers(WebhookKeys.byApp(appId))
    const counts = await Promise.all(ids.map((id) => this.store.scard(WebhookKeys.subscribers(id))))
    return counts.reduce((a, b) => a + b, 0)
  }

  /**
   * Subscribes the user unless already subscribed or the app is at its
   * limit. The checks and the write hold the app's subscription lock, so
   * concurrent subscribes (in any process) cannot overshoot the limit.
   */
  async subscribe(webhook: Webhook, userId: string): Promise<SubscribeResult> {
    return withLock(this.store, WebhookKeys.subscriptionLock(webhook.app_id), async () => {
      if (await this.store.sismember(WebhookKeys.subscribers(webhook.id), userId)) return 'duplicate'
      if ((await this.countForApp(webhook.app_id)) >= this.limitPerApp) return 'limit'
      // Deleted meanwhile: a subscription must not outlive its webhook.
      if (!(await this.store.exists(WebhookKeys.config(webhook.id)))) return 'gone'
      await this.store.batch([
        { op: 'sadd', key: WebhookKeys.subscribers(webhook.id), members: [userId] },
        { op: 'sadd', key: WebhookKeys.userWebhooks(userId), members: [webhook.id] }
      ])
      return 'subscribed'
    })
  }

  isSubscribed(webhookId: string, userId: string): Promise<boolean> {
    return this.store.sismember(WebhookKeys.subscribers(webhookId), userId)
  }

  async unsubscribe(webhookId: string, userId: string): Promise<boolean> {
    if (!(await this.isSubscribed(webhookId, userId))) return false
    await this.store.batch([
      { op: 'srem', key: WebhookKeys.subscribers(webhookId), members: [userId] },
      { op: 'srem', key: WebhookKeys.userWebhooks(userId), members: [webhookId] }
    ])
    return true
  }

  async subscribers(webhookId: string): Promise<string[]> {
    return (await this.store.smembers(WebhookKeys.subscribers(webhookId))).sort()
  }

  /**
   * Routes a batch of activity events (one partition's, in order) to the
   * webhooks their users are subscribed to: the users' webhook sets in one
   * pipelined read, the webhooks they name in another, and every delivery
   * through the usage gate and the engine as one batch (one store write
   * batch), in event order. Most events have no Account Activity
   * subscriber at all: they cost one SMEMBERS answer in a pipeline.
   */
  async onEvents(events: ActivityEventMessage[], traceparents?: Array<string | undefined>): Promise<number> {
    if (events.length === 0) return 0
    const users = [...new Set(events.map((e) => e.user_id))]
    const sets = await Promise.all(users.map((u) => this.store.smembers(WebhookKeys.userWebhooks(u))))
    const webhooksOf = new Map(users.map((u, i) => [u, sets[i] as string[]]))
    const ids = [...new Set(sets.flat())]
    if (ids.length === 0) return 0
    const found = await Promise.all(ids.map((id) => this.registry.get(id)))
    const webhookById = new Map(ids.map((id, i) => [id, found[i]]))
    // A user still indexed under a deleted webhook: the index entry goes (once per batch).
    const stale = new Map<string, string[]>()
    const list: NewDelivery[] = []
    const now = Date.now()
    for (const [i, event] of events.entries()) {
      // Traced: each delivery's attempts are children of the span that published its event (the ingest).
      const traceparent = traceparents?.[i]
      for (const webhookId of webhooksOf.get(event.user_id) ?? []) {
        const webhook = webhookById.get(webhookId)
        if (!webhook) {
          const gone = stale.get(event.user_id) ?? []
          if (!gone.includes(webhookId)) stale.set(event.user_id, [...gone, webhookId])
          continue
        }
        const entry = accountActivityEntry(event, event.user_id)
        list.push({
          delivery_id: accountActivityDeliveryId(event.event_uuid, webhookId),
          webhook_id: webhookId,
          app_id: webhook.app_id,
          source: 'account-activity',
          event_uuid: event.event_uuid,
          for_user_id: event.user_id,
          body: entry.body,
          ...(entry.eventType === undefined ? {} : { event_type: entry.eventType }),
          ...(traceparent === undefined ? {} : { traceparent }),
          event_time: eventTime(event.created_at, now)
        })
      }
    }
    const results = list.length > 0 ? await this.intake.take(list) : []
    if (stale.size > 0) await Promise.all([...stale].map(([userId, gone]) => this.store.srem(WebhookKeys.userWebhooks(userId), ...gone)))
    const routed = results.filter((r) => r === 'accepted' || r === 'held').length
    if (routed > 0) this.log.debug({ events: events.length, routed }, 'account activity events routed')
    return routed
  }
}
