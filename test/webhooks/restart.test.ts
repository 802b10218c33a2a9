import { scheduleSize } from '../../services/webhooks/delivery/schedule'
import path from 'node:path'
import t, { type Test } from 'tap'
import type { Runtime } from '../../services/common/runtime'
import { MemoryStore } from '../../services/common/store/memory'
import { RedisStore } from '../../services/common/store/redis'
import type { Store } from '../../services/common/store/types'
import { createLogger } from '../../services/common/logger'
import { deliveryMessage, publishDeliveries, registerWebhook, startWebhooks } from '../support/fixtures/webhooks'
import { tempDir, eventually } from '../support/util'
import { startRedis } from '../support/infra'

/**
 * Retries live in the store, not in the process: a webhooks service that
 * stops with retries pending and starts again (on the same journaled memory
 * store, or the same Redis) makes every one of them.
 */

// First attempt at once, the retry a second later: long enough to stop the service in between.
const ENV = { WEBHOOK_RETRY_SCHEDULE: '0,1s,200ms,200ms' }

async function restartWithPendingRetries(t: Test, openStore: () => Promise<Store>): Promise<void> {
  const rt1: Runtime = await startWebhooks(t, { store: await openStore(), env: ENV })
  const { id, receiver, webhookId } = await registerWebhook(t, rt1)
  receiver.onPost = () => ({ status: 503 })
  const messages = Array.from({ length: 4 }, () => deliveryMessage({ appId: id.app.id, webhookId }))
  await publishDeliveries(rt1, messages)
  await eventually(() => receiver.posts.length === 4, 10_000)
  await eventually(async () => (await scheduleSize(rt1.ctx.store)) === 4 && receiver.inFlight === 0, 5000)
  await rt1.close()
  t.equal(receiver.accepted.length, 0, 'nothing was delivered before the restart')

  receiver.onPost = () => ({ status: 200 })
  const rt2 = await startWebhooks(t, { store: await openStore(), env: ENV })
  await eventually(() => receiver.accepted.length === 4, 10_000)
  t.same(receiver.accepted.map((p) => p.body).sort(), messages.map((m) => JSON.stringify(m.envelope)).sort(), 'every pending retry was made after the restart')
  t.ok(receiver.posts.every((p) => p.signatureValid))
  await eventually(async () => (await scheduleSize(rt2.ctx.store)) === 0, 5000)
  t.equal(receiver.posts.length, 8, 'one failed attempt and one retry each: nothing twice')
}

t.test('memory store with a data directory', async (t) => {
  const dir = path.join(tempDir(t, 'wh-restart-'), 'state')
  await restartWithPendingRetries(t, () => MemoryStore.open(dir))
})

t.test('Redis store', async (t) => {
  const redis = await startRedis(t)
  await restartWithPendingRetries(t, () => RedisStore.connect(redis.url, createLogger('silent', 'redis-store')))
})
