import t from 'tap'
import { ApiError, Client, OAuth1 } from '@xdevplatform/xdk'
import { png } from '../support/fixtures/media'
import { startReceiver } from '../support/receivers'
import { createIdentity, startTestRuntime } from '../support/runtime'
import { eventually } from '../support/util'
import { ingest, nextUserId, OPERATOR_TOKEN, sampleEvent } from '../support/fixtures/activity'
import { OpenApiAudit } from '../support/fixtures/conformance/openapi-audit'
import { Recorder } from '../support/fixtures/conformance/recorder'
import { clientVersion, reportCalls } from '../support/fixtures/conformance/clients'

/**
 * The platform's official TypeScript SDK, `@xdevplatform/xdk`, unmodified:
 * its only setting changed is `baseUrl` (the Client option for the host),
 * pointed at a recorder in front of the running product. It sends
 * `Content-Type: application/json` on every call, bodies or not, and reads
 * answers with its own key transformation (snake_case to camelCase). It has
 * a call for every operation of the public OpenAPI subset, and this test
 * makes each one: the audit at the end fails when one of them is not driven
 * (or its answer does not validate).
 */

const WAIT = 15_000

t.test('@xdevplatform/xdk: webhooks, account activity, activity subscriptions, the stream, errors', async (t) => {
  const rt = await startTestRuntime(t, { env: { OPERATOR_TOKEN, STREAM_KEEPALIVE: '200ms' } })
  const id = await createIdentity(rt.ctx.store)
  const recorder = await Recorder.start(t, rt.baseUrl)
  const receiver = await startReceiver(t, id.app.consumer_secret)
  const app = new Client({ baseUrl: recorder.url, bearerToken: id.bearer })
  const oauth1 = new OAuth1({ apiKey: id.app.consumer_key, apiSecret: id.app.consumer_secret, callback: 'oob', accessToken: id.token.token, accessTokenSecret: id.token.secret })
  const user = new Client({ baseUrl: recorder.url, oauth1 })

  // ------------------------------------------------------------ webhooks
  const created = await app.webhooks.create({ url: receiver.url })
  const webhook = (created as { data: { id: string; url: string; valid: boolean; createdAt: string } }).data
  t.match(webhook, { url: receiver.url, valid: true }, 'create: the SDK reads the webhook')
  t.match(webhook.id, /^\d{1,19}$/)
  t.match(webhook.createdAt, /^\d{4}-\d\d-\d\dT/, 'created_at arrives as the SDK\'s createdAt')

  const listed = (await app.webhooks.get()) as { data: Array<{ id: string; valid: boolean }>; meta: { resultCount: number } }
  t.same(listed.data.map((w) => [w.id, w.valid]), [[webhook.id, true]], 'list')
  t.equal(listed.meta.resultCount, 1)

  const validated = (await app.webhooks.validate(webhook.id)) as unknown as { data: { attempted: boolean } }
  t.same(validated, { data: { attempted: true } }, 'validate: PUT with the SDK\'s JSON content type and no body')
  t.equal(receiver.crcCount, 2, 'the validation ran a CRC against the receiver')

  // ------------------------------------------------------------ account activity (user context, OAuth 1.0a)
  const subscribed = (await user.accountActivity.createSubscription(webhook.id, {})) as { data: { subscribed: boolean } }
  t.same(subscribed, { data: { subscribed: true } }, 'account activity: subscribe the user')
  const check = (await user.accountActivity.validateSubscription(webhook.id)) as { data: { subscribed: boolean } }
  t.same(check, { data: { subscribed: true } })
  const aaaList = (await app.accountActivity.getSubscriptions(webhook.id)) as { data: { applicationId: string; webhookId: string; webhookUrl: string; subscriptions: Array<{ userId: string }> } }
  t.match(aaaList.data, { applicationId: /^\d+$/, webhookId: webhook.id, webhookUrl: receiver.url }, 'account activity: list the webhook\'s subscriptions')
  t.same(aaaList.data.subscriptions, [{ userId: id.user.id }], 'the subscribed user, read back camelCased')
  const count = (await app.accountActivity.getSubscriptionCount()) as { data: { subscriptionsCountAll: string } }
  t.equal(count.data.subscriptionsCountAll, '1')
  const unsubscribed = (await app.accountActivity.deleteSubscription(webhook.id, id.user.id)) as { data: { subscribed: boolean } }
  t.same(unsubscribed, { data: { subscribed: false } }, 'account activity: delete the subscription')

  // ------------------------------------------------------------ activity subscriptions and the stream
  const watched = nextUserId()
  const sub = (await app.activity.createSubscription({ eventType: 'post.create', filter: { userId: watched }, tag: 'xdk' })) as {
    data: { subscription: { subscriptionId: string; eventType: string; filter: { userId: string }; tag: string } }
  }
  t.match(sub.data.subscription, { eventType: 'post.create', filter: { userId: watched }, tag: 'xdk' }, 'create: the SDK\'s camelCase body arrives as the platform\'s snake_case')
  const subs = (await app.activity.getSubscriptions()) as { data: Array<{ subscriptionId: string }>; meta: { resultCount: number } }
  t.same(subs.data.map((s) => s.subscriptionId), [sub.data.subscription.subscriptionId], 'list')
  const retagged = (await app.activity.updateSubscription(sub.data.subscription.subscriptionId, { tag: 'xdk-renamed' })) as {
    data: { subscription: { subscriptionId: string; tag: string; filter: { userId: string } }; totalSubscriptions: number }
  }
  t.match(retagged.data, { subscription: { subscriptionId: sub.data.subscription.subscriptionId, tag: 'xdk-renamed', filter: { userId: watched } }, totalSubscriptions: 1 }, 'update: the new tag read back')
  const relisted = (await app.activity.getSubscriptions()) as { data: Array<{ tag: string }> }
  t.same(relisted.data.map((s) => s.tag), ['xdk-renamed'], 'and listed')
  await app.activity.updateSubscription(sub.data.subscription.subscriptionId, { tag: 'xdk' })

  const stream = await app.stream.activity()
  t.teardown(() => stream.close())
  const events: Array<{ data?: { eventType?: string; event_type?: string; tag?: string; payload?: { text?: string } } }> = []
  stream.on('data', (d: unknown) => {
    if (d && typeof d === 'object' && 'data' in d) events.push(d as (typeof events)[number])
  })
  // The stream is registered with the node before the event is published.
  await eventually(async () => /stream_connections_opened_total\{[^}]*\} 1/.test(await fetch(`${rt.baseUrl}/metrics`).then((r) => r.text())), WAIT)
  const published = await ingest(rt.baseUrl, [sampleEvent('post.create', watched, { text: 'hello xdk' })])
  t.equal(published.status, 200, published.text)
  await eventually(() => events.length >= 1, WAIT)
  t.match(events[0], { data: { tag: 'xdk', payload: { text: 'hello xdk' } } }, 'the stream delivers the event to the SDK\'s reader')
  stream.close()

  // Bulk delete by ids (DELETE /2/activity/subscriptions?ids=...) of a second subscription.
  const extra = (await app.activity.createSubscription({ eventType: 'post.delete', filter: { userId: watched } })) as { data: { subscription: { subscriptionId: string } } }
  const bulk = await app.activity.deleteSubscriptionsByIds([extra.data.subscription.subscriptionId])
  t.same(bulk, { data: { deleted: true }, meta: { totalSubscriptions: 1 } }, 'bulk delete: the SDK reads deleted and the remaining count')
  const remaining = (await app.activity.getSubscriptions()) as { data: Array<{ subscriptionId: string }> }
  t.same(remaining.data.map((s) => s.subscriptionId), [sub.data.subscription.subscriptionId], 'bulk delete by ids: only the named subscription is gone')

  const removed = (await app.activity.deleteSubscription(sub.data.subscription.subscriptionId)) as { data: { deleted: boolean }; meta: { totalSubscriptions: number } }
  t.same(removed, { data: { deleted: true }, meta: { totalSubscriptions: 0 } }, 'delete: DELETE with the SDK\'s JSON content type and no body')

  // ------------------------------------------------------------ replay (the webhook is valid; the window is the last hour)
  const minute = (ms: number): string => new Date(ms).toISOString().replace(/[-:T]/g, '').slice(0, 12)
  const replay = (await app.webhooks.createWebhookReplayJob({ webhookId: webhook.id, fromDate: minute(Date.now() - 3_600_000), toDate: minute(Date.now() - 60_000) })) as { data: { jobId: string; createdAt: string } }
  t.match(replay.data, { jobId: /^\d{1,19}$/, createdAt: /^\d{4}-\d\d-\d\dT/ }, 'replay: the SDK reads the job id and its creation time')

  // ------------------------------------------------------------ media upload (user context): one shot, then chunked
  const image = png(64, 48)
  const oneShot = (await user.media.upload({ media: image.toString('base64'), mediaCategory: 'tweet_image' })) as { data: { id: string; mediaKey: string; size: number } }
  t.match(oneShot.data, { id: /^\d+$/, mediaKey: /^3_\d+$/, size: image.length }, 'upload (JSON, base64 media): id, media key and size read back')
  const init = (await user.media.initializeUpload({ mediaType: 'image/png', totalBytes: image.length, mediaCategory: 'tweet_image' })) as { data: { id: string; mediaKey: string; expiresAfterSecs: number } }
  t.match(init.data, { id: /^\d+$/, mediaKey: /^3_\d+$/ }, 'initialize: the upload session')
  t.type(init.data.expiresAfterSecs, 'number')
  const appended = (await user.media.appendUpload(init.data.id, { media: image.toString('base64'), segmentIndex: 0 })) as Record<string, unknown>
  t.type(appended, 'object', 'append (JSON, base64 segment 0)')
  const finalized = (await user.media.finalizeUpload(init.data.id)) as { data: { id: string; mediaKey: string; size: number } }
  t.match(finalized.data, { id: init.data.id, mediaKey: init.data.mediaKey, size: image.length }, 'finalize: the whole file')
  const status = (await user.media.getUploadStatus(init.data.id, { command: 'STATUS' })) as { data: { id: string; mediaKey: string } }
  t.match(status.data, { id: init.data.id, mediaKey: init.data.mediaKey }, 'status: the finished upload')

  // ------------------------------------------------------------ errors
  const gone = await app.webhooks.delete(webhook.id)
  t.same(gone, { data: { deleted: true } }, 'delete the webhook')
  const again = await app.webhooks.delete(webhook.id).then(
    () => undefined,
    (err: unknown) => err
  )
  t.type(again, ApiError, 'a second delete is an ApiError')
  const apiError = again as ApiError & { data: { type: string; resource_type: string; resource_id: string; detail: string } }
  t.equal(apiError.status, 404)
  t.match(apiError.data, { type: 'https://api.twitter.com/2/problems/resource-not-found', resource_type: 'webhook', resource_id: webhook.id }, 'the SDK exposes the Problem')
  const unauthorized = await new Client({ baseUrl: recorder.url, bearerToken: 'not-a-token' }).webhooks.get().then(
    () => undefined,
    (err: unknown) => err as ApiError
  )
  t.equal(unauthorized?.status, 401, 'a bad token is a 401 ApiError')
  const badUrl = await app.webhooks.create({ url: 'http://127.0.0.1:1/nothing-listens' }).then(
    () => undefined,
    (err: unknown) => err as ApiError & { data: { errors: Array<{ message: string }> } }
  )
  t.equal(badUrl?.status, 400)
  t.match(badUrl?.data.errors[0]?.message, /^CrcValidationFailed/, 'a failing CRC names its reason')

  // Every call carried the SDK's JSON content type, bodies or not.
  t.ok(recorder.exchanges.every((e) => String(e.requestHeaders['content-type']).startsWith('application/json')), 'the SDK sent Content-Type: application/json on every call')
  t.ok(recorder.exchanges.some((e) => e.method === 'DELETE' && e.requestBody === ''), 'including bodiless DELETEs')
  const audit = new OpenApiAudit()
  const audited = audit.check(t, recorder.exchanges, 'xdk')
  // The SDK has a call for every operation of the public subset: each one's answer passed the audit.
  audit.assertCoversSubset(t, audited, 'xdk')
  reportCalls(t, '@xdevplatform/xdk', clientVersion('@xdevplatform/xdk'), recorder)
})
