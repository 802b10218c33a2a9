import t, { type Test } from 'tap'
import { createLogger } from '../../services/common/logger'
import type { Runtime } from '../../services/common/runtime'
import { RedisStore } from '../../services/common/store/redis'
import { LockBusyError, withLock } from '../../services/webhooks/app-lock'
import { partsFor } from '../../services/webhooks/parts'
import { WebhookKeys } from '../../services/webhooks/keys'
import { registerWebhook, startWebhooks } from '../support/fixtures/webhooks'
import { bearerRequest } from '../support/http'
import { firstMessage } from '../support/problems'
import { gate, startReceiver } from '../support/receivers'
import { createIdentity } from '../support/runtime'
import { startRedis } from '../support/infra'

/**
 * The per-app limits hold under concurrency across processes: two webhooks
 * services on one Redis (two processes of a deployment), creating webhooks
 * and subscriptions for one app at the same time.
 */

async function twoProcesses(t: Test, env: Record<string, string>): Promise<[Runtime, Runtime]> {
  const redis = await startRedis(t)
  const open = () => RedisStore.connect(redis.url, createLogger('silent', 'redis-store'))
  const a = await startWebhooks(t, { store: await open(), env })
  const b = await startWebhooks(t, { store: await open(), env })
  return [a, b]
}

t.test('concurrent creates on two processes never exceed WEBHOOK_LIMIT_PER_APP', async (t) => {
  const [a, b] = await twoProcesses(t, { WEBHOOK_LIMIT_PER_APP: '2' })
  const id = await createIdentity(a.ctx.store)
  const receiver = await startReceiver(t, id.app.consumer_secret)
  // Every CRC is answered only once all six have arrived: the creates then race for the last step together.
  const creates = 6
  const allArrived = gate()
  receiver.crcHold = (n) => {
    if (n === creates) allArrived.open()
    return allArrived.promise
  }
  const results = await Promise.all(
    Array.from({ length: creates }, (_, i) =>
      bearerRequest('POST', `${(i % 2 === 0 ? a : b).baseUrl}/2/webhooks`, id.bearer, { json: { url: receiver.urlFor(`/hook-${i}`) } })
    )
  )
  const created = results.filter((r) => r.status === 200)
  const refused = results.filter((r) => r.status === 400)
  t.equal(created.length, 2, `exactly the limit was created (${results.map((r) => r.status).join(',')})`)
  t.equal(refused.length, 4)
  t.ok(refused.every((r) => /^WebhookLimitExceeded: .*limit of 2 webhook/.test(firstMessage(r))), 'the others got WebhookLimitExceeded')
  t.equal(await a.ctx.store.scard(WebhookKeys.byApp(id.app.id)), 2)
  const listed = (await bearerRequest('GET', `${b.baseUrl}/2/webhooks`, id.bearer)).json<{ data: unknown[] }>().data
  t.equal(listed.length, 2)

  // The refused creates released their URLs: deleting one webhook frees a slot for a refused URL.
  const createdId = created[0]?.json<{ data: { id: string } }>().data.id
  receiver.crcHold = undefined
  t.equal((await bearerRequest('DELETE', `${a.baseUrl}/2/webhooks/${createdId}`, id.bearer)).status, 200)
  const refusedUrl = receiver.urlFor(`/hook-${results.findIndex((r) => r.status === 400)}`)
  const again = await bearerRequest('POST', `${b.baseUrl}/2/webhooks`, id.bearer, { json: { url: refusedUrl } })
  t.equal(again.status, 200, again.text)
})

t.test('concurrent subscribes on two processes never exceed WEBHOOK_SUBSCRIPTION_LIMIT', async (t) => {
  const [a, b] = await twoProcesses(t, { WEBHOOK_SUBSCRIPTION_LIMIT: '3' })
  const { webhookId } = await registerWebhook(t, a)
  const webhook = await partsFor(a.ctx).registry.get(webhookId)
  if (!webhook) throw new Error('the webhook was not stored')
  const processes = [partsFor(a.ctx).accountActivity, partsFor(b.ctx).accountActivity]

  // One user subscribing on both processes at once is subscribed once.
  const sameUser = await Promise.all(Array.from({ length: 6 }, (_, i) => (processes[i % 2] as (typeof processes)[number]).subscribe(webhook, '8000000')))
  t.same(sameUser.filter((r) => r === 'subscribed').length, 1, `subscribed once (${sameUser.join(',')})`)
  t.ok(sameUser.every((r) => r === 'subscribed' || r === 'duplicate'))

  const users = Array.from({ length: 20 }, (_, i) => String(9_000_000 + i))
  const results = await Promise.all(users.map((user, i) => (processes[i % 2] as (typeof processes)[number]).subscribe(webhook, user)))
  t.equal(results.filter((r) => r === 'subscribed').length, 2, `exactly up to the limit of 3 (${results.join(',')})`)
  t.equal(results.filter((r) => r === 'limit').length, 18)
  t.equal(await processes[0]?.countForApp(webhook.app_id), 3)
})

t.test('the app lock: one holder at a time, a busy lock gives up, a dead holder expires', async (t) => {
  const redis = await startRedis(t)
  const store = await RedisStore.connect(redis.url, createLogger('silent', 'redis-store'))
  t.teardown(() => store.close())
  const key = 'webhooks:limit-lock:test-app'

  let inside = 0
  let most = 0
  await Promise.all(
    Array.from({ length: 8 }, () =>
      withLock(store, key, async () => {
        most = Math.max(most, ++inside)
        await store.incr('webhooks:test-counter')
        inside--
      })
    )
  )
  t.equal(most, 1, 'never two holders at once')
  t.equal(await store.get('webhooks:test-counter'), '8')
  t.equal(await store.exists(key), false, 'released')

  // A process that died holding the lock: others give up while it lasts, and get in once it expires.
  await store.set(key, 'dead-process', 300)
  await t.rejects(withLock(store, key, async () => 'never', { waitMs: 50 }), LockBusyError)
  t.equal(await withLock(store, key, async () => 'after expiry', { waitMs: 5000 }), 'after expiry')
})

t.test('a subscription is not added to a webhook deleted meanwhile', async (t) => {
  const rt = await startWebhooks(t)
  const { id, webhookId } = await registerWebhook(t, rt)
  const core = partsFor(rt.ctx)
  const webhook = await core.registry.get(webhookId)
  if (!webhook) throw new Error('the webhook was not stored')
  t.equal((await bearerRequest('DELETE', `${rt.baseUrl}/2/webhooks/${webhookId}`, id.bearer)).status, 200)
  t.equal(await core.accountActivity.subscribe(webhook, '7000000'), 'gone')
  t.equal(await rt.ctx.store.scard(WebhookKeys.subscribers(webhookId)), 0)
  t.same(await rt.ctx.store.smembers(WebhookKeys.userWebhooks('7000000')), [])
})
