import t from 'tap'
import { TOPICS } from '../../services/common/bus/types'
import type { Runtime } from '../../services/common/runtime'
import { WebhookKeys } from '../../services/webhooks/keys'
import { accountActivityDeliveryId } from '../../services/webhooks/account-activity'
import { numericId, openApiErrors, registerWebhook, startWebhooks } from '../support/fixtures/webhooks'
import { bearerRequest, oauth1Request } from '../support/http'
import { metricsText, metricValue } from '../support/metrics'
import { firstMessage } from '../support/problems'
import { createIdentity, type TestIdentity } from '../support/runtime'
import { eventually } from '../support/util'

function subscriptionsUrl(rt: Runtime, webhookId: string): string {
  return `${rt.baseUrl}/2/account_activity/webhooks/${webhookId}/subscriptions/all`
}

/** Publishes an activity event, keyed by its user unless `key` says otherwise (a barrier shares another's key). */
async function publishEvent(rt: Runtime, event: Record<string, unknown>, key = String(event.user_id)): Promise<void> {
  await rt.ctx.bus.publish(TOPICS.activityEvents, key, event)
}

function postCreate(userId: string, text: string): Record<string, unknown> {
  return { event_uuid: numericId(), event_type: 'post.create', user_id: userId, created_at: new Date().toISOString(), payload: { id: numericId(), text, author_id: userId } }
}

function dmSent(sender: string, recipient: string): Record<string, unknown> {
  return {
    event_uuid: numericId(),
    event_type: 'dm.sent',
    user_id: sender,
    created_at: new Date().toISOString(),
    payload: {
      direct_message_events: [
        { type: 'message_create', id: numericId(), created_timestamp: String(Date.now()), message_create: { target: { recipient_id: recipient }, sender_id: sender, message_data: { text: 'hi there' } } }
      ]
    }
  }
}

t.test('a user subscribes with user context and the app manages subscriptions with its bearer token', async (t) => {
  const rt = await startWebhooks(t, { env: { WEBHOOK_SUBSCRIPTION_LIMIT: '2' } })
  const { id, webhookId, receiver } = await registerWebhook(t, rt)
  const alice: TestIdentity = await createIdentity(rt.ctx.store, { app: id.app })
  const bob: TestIdentity = await createIdentity(rt.ctx.store, { app: id.app })
  const url = subscriptionsUrl(rt, webhookId)

  const created = await oauth1Request('POST', url, alice)
  t.equal(created.status, 200, created.text)
  t.equal(openApiErrors('SubscriptionsCreateResponse', created.json()), undefined)
  t.same(created.json(), { data: { subscribed: true } })

  const check = await oauth1Request('GET', url, alice)
  t.equal(openApiErrors('SubscriptionsGetResponse', check.json()), undefined)
  t.same(check.json(), { data: { subscribed: true } })
  t.same((await oauth1Request('GET', url, bob)).json(), { data: { subscribed: false } })

  const dup = await oauth1Request('POST', url, alice)
  t.equal(dup.status, 400)
  t.match(firstMessage(dup), /^DuplicateSubscriptionFailed: /)

  t.equal((await oauth1Request('POST', url, bob)).status, 200)
  const carol = await createIdentity(rt.ctx.store, { app: id.app })
  const limited = await oauth1Request('POST', url, carol)
  t.equal(limited.status, 400)
  t.match(firstMessage(limited), /^SubscriptionLimitExceeded: .*limit of 2/)

  const list = await bearerRequest('GET', `${url}/list`, id.bearer)
  t.equal(list.status, 200, list.text)
  t.equal(openApiErrors('SubscriptionsListGetResponse', list.json()), undefined)
  t.same(list.json(), {
    data: {
      application_id: id.app.id,
      webhook_id: webhookId,
      webhook_url: receiver.url,
      subscriptions: [{ user_id: alice.user.id }, { user_id: bob.user.id }].sort((a, b) => a.user_id.localeCompare(b.user_id))
    }
  })

  const count = await bearerRequest('GET', `${rt.baseUrl}/2/account_activity/subscriptions/count`, id.bearer)
  t.equal(openApiErrors('SubscriptionsCountGetResponse', count.json()), undefined)
  t.same(count.json(), { data: { account_name: id.app.name, provisioned_count: '2', subscriptions_count_all: '2', subscriptions_count_direct_messages: '0' } })

  const removed = await bearerRequest('DELETE', `${rt.baseUrl}/2/account_activity/webhooks/${webhookId}/subscriptions/${bob.user.id}/all`, id.bearer)
  t.equal(removed.status, 200)
  t.equal(openApiErrors('SubscriptionsDeleteResponse', removed.json()), undefined)
  t.same(removed.json(), { data: { subscribed: false } })
  const again = await bearerRequest('DELETE', `${rt.baseUrl}/2/account_activity/webhooks/${webhookId}/subscriptions/${bob.user.id}/all`, id.bearer)
  t.equal(again.status, 404)
  t.match(again.json(), { type: 'https://api.twitter.com/2/problems/resource-not-found', parameter: 'user_id', resource_id: bob.user.id, resource_type: 'subscription', value: bob.user.id })
  t.equal(openApiErrors('ResourceNotFoundProblem', again.json()), undefined)
  const badUser = await bearerRequest('DELETE', `${rt.baseUrl}/2/account_activity/webhooks/${webhookId}/subscriptions/bob/all`, id.bearer)
  t.equal(badUser.status, 400)
  t.match(firstMessage(badUser), /^UserIdInvalid: /)
  t.same((await bearerRequest('GET', `${rt.baseUrl}/2/account_activity/subscriptions/count`, id.bearer)).json<{ data: Record<string, string> }>().data.subscriptions_count_all, '1')
})

t.test('each Account Activity route accepts only the credentials the platform declares', async (t) => {
  const rt = await startWebhooks(t)
  const { id, webhookId } = await registerWebhook(t, rt)
  const url = subscriptionsUrl(rt, webhookId)
  for (const method of ['POST', 'GET']) {
    const res = await bearerRequest(method, url, id.bearer)
    t.equal(res.status, 403, `${method} subscriptions/all with the app's bearer token`)
    t.match(res.json(), { type: 'https://api.twitter.com/2/problems/unsupported-authentication' })
  }
  t.equal((await oauth1Request('GET', `${url}/list`, id)).status, 403)
  t.equal((await oauth1Request('GET', `${rt.baseUrl}/2/account_activity/subscriptions/count`, id)).status, 403)
  t.equal((await oauth1Request('DELETE', `${rt.baseUrl}/2/account_activity/webhooks/${webhookId}/subscriptions/${id.user.id}/all`, id)).status, 403)

  // A read-only application cannot subscribe users (Account Activity carries direct messages).
  const readOnly = await createIdentity(rt.ctx.store, { access: 'read' })
  const ro = await oauth1Request('POST', url, readOnly)
  t.equal(ro.status, 403)
  t.equal(ro.json<{ errors: Array<{ code: number }> }>().errors[0]?.code, 93, 'the app lacks direct-message permission')

  // A webhook of another application is not found.
  const other = await createIdentity(rt.ctx.store)
  const foreign = await oauth1Request('POST', url, other)
  t.equal(foreign.status, 404)
  t.match(foreign.json(), { type: 'https://api.twitter.com/2/problems/resource-not-found', parameter: 'webhook_id', resource_id: webhookId, resource_type: 'webhook' })
  t.equal(openApiErrors('ResourceNotFoundProblem', foreign.json()), undefined)
  const bad = await oauth1Request('POST', subscriptionsUrl(rt, 'x1'), id)
  t.equal(bad.status, 400)
  t.match(firstMessage(bad), /^WebhookIdInvalid: /)
})

t.test("a subscribed user's activity is delivered in the Account Activity format", async (t) => {
  // One delivery at a time: the webhook's lane then POSTs in the order the events were consumed.
  const rt = await startWebhooks(t, { env: { WEBHOOK_CONCURRENCY: '1' } })
  const { id, webhookId, receiver } = await registerWebhook(t, rt)
  const alice = await createIdentity(rt.ctx.store, { app: id.app })
  const bob = await createIdentity(rt.ctx.store, { app: id.app })
  const stranger = '1234567890123'
  t.equal((await oauth1Request('POST', subscriptionsUrl(rt, webhookId), alice)).status, 200)
  t.equal((await oauth1Request('POST', subscriptionsUrl(rt, webhookId), bob)).status, 200)

  // Barriers for the "nothing arrives" checks: a later event of a subscribed user published under the
  // same key as the event under test, so it is consumed after it (per-key order). Once the barrier is
  // delivered, whatever the earlier event produced has been logged and, in the one-at-a-time lane, POSTed.
  const deliveredEvents = () => receiver.posts.map((p) => p.json.event_uuid)
  const barrier = async (key: string, label: string): Promise<void> => {
    const later = postCreate(bob.user.id, `barrier ${label}`)
    await publishEvent(rt, later, key)
    await eventually(() => deliveredEvents().includes(later.event_uuid), 10_000)
    // A first attempt's outcome is its record's first write, and its log entry's: logged once that write is in.
    const deliveryId = accountActivityDeliveryId(String(later.event_uuid), webhookId)
    await eventually(async () => (await rt.ctx.store.zscore(WebhookKeys.log(webhookId), deliveryId)) !== undefined, 10_000)
  }
  const logged = async () => (await rt.ctx.store.zcard(WebhookKeys.log(webhookId)))

  const post = postCreate(alice.user.id, 'hello world')
  const dm = dmSent(alice.user.id, stranger)
  const strangers = postCreate(stranger, 'not subscribed')
  await publishEvent(rt, post)
  await publishEvent(rt, strangers)
  await publishEvent(rt, dm)
  await publishEvent(rt, { event_uuid: numericId(), event_type: 'post.delete', user_id: alice.user.id, created_at: new Date().toISOString(), payload: { id: '42', author_id: alice.user.id } })

  await eventually(() => receiver.accepted.length === 3, 10_000)
  t.ok(receiver.posts.every((p) => p.signatureValid), 'every body is signed')
  const byType = (key: string) => receiver.posts.find((p) => key in p.json)?.json
  t.same(byType('tweet_create_events'), { for_user_id: alice.user.id, event_uuid: post.event_uuid, tweet_create_events: [post.payload] })
  t.same(byType('direct_message_events'), { for_user_id: alice.user.id, event_uuid: dm.event_uuid, ...(dm.payload as object) })
  t.match(byType('tweet_delete_events'), { for_user_id: alice.user.id, tweet_delete_events: [{ status: { id: '42', user_id: alice.user.id } }] })
  await barrier(stranger, 'after the stranger')
  t.notOk(deliveredEvents().includes(strangers.event_uuid), "the unsubscribed user's post went nowhere")
  t.equal(await logged(), 4, 'three events of alice and the barrier: nothing for the stranger')

  // The same event redelivered by the bus is the same delivery: the receiver gets it once.
  await publishEvent(rt, post)
  await barrier(alice.user.id, 'after the redelivery')
  t.equal(await logged(), 5, 'the redelivered event made no second delivery')
  t.equal(deliveredEvents().filter((u) => u === post.event_uuid).length, 1, 'a redelivered event is not delivered twice')
  t.equal(metricValue(await metricsText(rt), 'webhook_deliveries_total', { outcome: 'delivered' }), 5)

  // After the subscription is deleted nothing more arrives; deleting the webhook drops the routing index.
  t.equal((await bearerRequest('DELETE', `${rt.baseUrl}/2/account_activity/webhooks/${webhookId}/subscriptions/${alice.user.id}/all`, id.bearer)).status, 200)
  const afterUnsubscribe = postCreate(alice.user.id, 'after unsubscribe')
  await publishEvent(rt, afterUnsubscribe)
  await barrier(alice.user.id, 'after the unsubscribe')
  t.notOk(deliveredEvents().includes(afterUnsubscribe.event_uuid), 'nothing arrives after the unsubscribe')
  t.equal(await logged(), 6)
  t.equal((await oauth1Request('POST', subscriptionsUrl(rt, webhookId), alice)).status, 200)
  t.equal((await bearerRequest('DELETE', `${rt.baseUrl}/2/webhooks/${webhookId}`, id.bearer)).status, 200)
  t.same(await rt.ctx.store.smembers(WebhookKeys.userWebhooks(alice.user.id)), [], 'the user index forgets a deleted webhook')
})

t.test('a burst of events is routed a batch at a time: every subscribed event once, a stale index entry dropped', async (t) => {
  const rt = await startWebhooks(t, { env: { WEBHOOK_CONCURRENCY: '1' } })
  const { id, webhookId, receiver } = await registerWebhook(t, rt)
  const alice = await createIdentity(rt.ctx.store, { app: id.app })
  const bob = await createIdentity(rt.ctx.store, { app: id.app })
  const stranger = '1234567890124'
  t.equal((await oauth1Request('POST', subscriptionsUrl(rt, webhookId), alice)).status, 200)
  t.equal((await oauth1Request('POST', subscriptionsUrl(rt, webhookId), bob)).status, 200)
  // The index still names a webhook that no longer exists (deleted by a process that died before cleaning up).
  await rt.ctx.store.sadd(WebhookKeys.userWebhooks(alice.user.id), '999999999999999999')

  // Published back to back under one key, so they sit in one partition and are consumed in batches.
  const users = [alice.user.id, bob.user.id, stranger]
  const burst = Array.from({ length: 90 }, (_, i) => postCreate(users[i % 3] as string, `burst ${i}`))
  await Promise.all(burst.map((e) => publishEvent(rt, e, 'one-key')))
  const expected = burst.filter((e) => e.user_id !== stranger).map((e) => e.event_uuid)
  await eventually(() => receiver.accepted.length >= expected.length, 15_000)
  const delivered = receiver.posts.map((p) => p.json.event_uuid)
  // Not compared in order: 60 deliveries overflow a lane of one (32 queued), and what overflows comes back through the schedule.
  t.same([...delivered].sort(), [...expected].sort(), 'every event of a subscribed user exactly once')
  t.ok(receiver.posts.every((p) => p.signatureValid), 'every body is signed')
  t.ok(receiver.posts.every((p, i) => p.json.for_user_id === burst.find((e) => e.event_uuid === delivered[i])?.user_id), 'each body is for its own user')
  t.same(await rt.ctx.store.smembers(WebhookKeys.userWebhooks(alice.user.id)), [webhookId], 'the stale webhook id left the user index')
  t.equal(await rt.ctx.store.zcard(WebhookKeys.log(webhookId)), expected.length, 'nothing logged for the unsubscribed user')
})
