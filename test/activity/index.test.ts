import { Redis } from 'ioredis'
import t from 'tap'
import { ActivityKeys, type Subscription, SubscriptionStore } from '../../services/activity/subscriptions'
import { redisStore, startRedis } from '../support/infra'
import { nextUserId } from '../support/fixtures/activity'

/**
 * The matcher's index on a real redis-server: one round trip per event
 * (counted by the server itself), changes reflected at once, no subscription
 * left behind by a delete racing an update, and the set-of-ids index of
 * earlier versions converted at start.
 */

/** Commands the server has processed (INFO stats), read over a connection of its own. */
async function commandsProcessed(admin: Redis): Promise<number> {
  const info = await admin.info('stats')
  return Number(/total_commands_processed:(\d+)/.exec(info)?.[1])
}

t.test('candidates are one store round trip per event, and follow updates and deletes', async (t) => {
  const redis = await startRedis(t)
  const store = await redisStore(t, redis)
  const admin = new Redis(redis.url)
  t.teardown(() => admin.quit())
  const subs = new SubscriptionStore(store, 100)
  const userId = nextUserId()
  const created: Subscription[] = []
  for (const tag of ['a', 'b', 'c']) created.push(await subs.create({ app_id: 'app-1', event_type: 'post.create', filter: { user_id: userId }, tag }))
  await subs.create({ app_id: 'app-1', event_type: 'post.delete', filter: { user_id: userId } })

  const before = await commandsProcessed(admin)
  const lookups = 20
  for (let i = 0; i < lookups; i++) t.equal((await subs.candidates('post.create', userId)).length, 3)
  const after = await commandsProcessed(admin)
  // The INFO call that read `before` is counted in `after`.
  t.equal(after - before - 1, lookups, 'one command per lookup')
  t.same((await subs.candidates('post.create', userId)).map((s) => s.tag).sort(), ['a', 'b', 'c'])
  t.same(await subs.candidates('post.create', '1'), [], 'another user has none')

  const updated = await subs.update(created[0] as Subscription, { tag: 'a2', webhook_id: '12345' })
  t.equal(updated?.tag, 'a2')
  const seen = (await subs.candidates('post.create', userId)).find((s) => s.subscription_id === created[0]?.subscription_id)
  t.match(seen, { tag: 'a2', webhook_id: '12345' }, 'the matcher sees the update at once')
  t.same(await subs.delete([created[1] as Subscription]), [created[1]])
  t.same((await subs.candidates('post.create', userId)).map((s) => s.tag).sort(), ['a2', 'c'], 'and the delete')
})

t.test('a delete racing an update never leaves an index entry behind', async (t) => {
  const redis = await startRedis(t)
  const store = await redisStore(t, redis)
  const subs = new SubscriptionStore(store, 1000)
  for (let round = 0; round < 30; round++) {
    const userId = nextUserId()
    const sub = await subs.create({ app_id: 'app-race', event_type: 'spaces.start', filter: { user_id: userId } })
    const [updated] = await Promise.all([subs.update(sub, { tag: `round ${round}` }), subs.delete([sub])])
    t.same(await subs.candidates('spaces.start', userId), [], `round ${round}: nothing to match (update ${updated ? 'won' : 'lost'})`)
    t.equal(await subs.get(sub.subscription_id), undefined, `round ${round}: no record`)
  }
  t.equal(await subs.count('app-race'), 0)
})

t.test('the set-of-ids index of earlier versions is converted once', async (t) => {
  const redis = await startRedis(t)
  const store = await redisStore(t, redis)
  const subs = new SubscriptionStore(store, 1000)
  const userId = nextUserId()
  const iso = new Date().toISOString()
  const legacy: Subscription[] = ['1001', '1002'].map((id) => ({ subscription_id: id, app_id: 'app-old', event_type: 'dm.sent', filter: { user_id: userId }, created_at: iso, updated_at: iso }))
  for (const sub of legacy) await store.set(ActivityKeys.sub(sub.subscription_id), JSON.stringify(sub))
  // As earlier versions wrote it, including an id whose record is gone.
  await store.sadd(ActivityKeys.legacyIndex('dm.sent', userId), '1001', '1002', '1003')
  t.same(await subs.candidates('dm.sent', userId), [], 'the new index does not read the old sets')
  t.equal(await subs.migrateLegacyIndex(), 1)
  t.same((await subs.candidates('dm.sent', userId)).map((s) => s.subscription_id).sort(), ['1001', '1002'])
  t.equal(await store.exists(ActivityKeys.legacyIndex('dm.sent', userId)), false, 'the old set is gone')
  t.equal(await subs.migrateLegacyIndex(), 0, 'a second start has nothing to convert')
})
