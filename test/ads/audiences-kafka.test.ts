import t from 'tap'
import { TOPICS } from '../../services/common/bus/types'
import { newNumericId } from '../../services/common/ids'
import { kafkaBus, redisStore, startKafka, startRedis } from '../support/infra'
import { caller, collectChanges, gatewayWithWorkers, type Json, sha256 } from '../support/fixtures/audiences'
import { startTestRuntime } from '../support/runtime'
import { eventually } from '../support/util'
import { createAdsIdentity } from '../support/fixtures/ads'

/**
 * The same paths in distributed mode, with the real Kafka-protocol bus
 * (librdkafka mock cluster) and a real redis-server as the store:
 * entity changes of catalog and audience operations reach a consumer group,
 * keyword insights consume activity.events, the targeting index consumes
 * ads.entity-changes.
 */

t.test('catalog and audiences with Kafka and Redis', async (t) => {
  const kafka = await startKafka(t, { brokers: 1 })
  const bus = await kafkaBus(t, kafka, 'ads-audiences-test')
  const store = await redisStore(t, await startRedis(t))
  // Image URLs are checked by form only here (ADS_CATALOG_IMAGE_CHECK=url); catalog.test.ts fetches them.
  const rt = await startTestRuntime(t, { services: [gatewayWithWorkers], bus, store, env: { ADS_CATALOG_IMAGE_CHECK: 'url', ADS_PRODUCT_SET_EVAL_INTERVAL: '50ms' } })
  const changes = await collectChanges(t, rt)
  const owner = await createAdsIdentity(rt.ctx, { businessId: 'kafka-biz' })
  const partner = await createAdsIdentity(rt.ctx, { businessId: 'kafka-biz' })
  const call = caller(rt, owner.id)
  const acct = owner.account.id

  let res = await call('POST', '12/product_catalogs', { query: { name: 'Kafka catalog' } })
  t.equal(res.status, 200)
  const catalogId = res.json<{ data: Json }>().data.id as string
  const product = (id: string, price: string): Json => ({ id, title: id, description: 'd', availability: 'in stock', condition: 'new', price, link: 'https://shop.example/p', image_link: 'https://shop.example/i.png', brand: 'b' })
  res = await call('PUT', `12/product_catalogs/${catalogId}/products`, { json: { products: [product('a', '5.00 USD'), product('b', '50.00 USD'), product('c', '500.00 USD')] } })
  t.same(res.json<{ data: { products_response: Json[] } }>().data.products_response.map((r) => r.status), ['CREATE_SUCCESS', 'CREATE_SUCCESS', 'CREATE_SUCCESS'])
  res = await call('GET', `12/product_catalogs/${catalogId}/products`, { query: { count: '2' } })
  const page = res.json<{ data: Json[]; next_cursor: string }>()
  res = await call('GET', `12/product_catalogs/${catalogId}/products`, { query: { count: '2', cursor: page.next_cursor } })
  t.same([...page.data, ...res.json<{ data: Json[] }>().data].map((p) => p.id), ['a', 'b', 'c'])
  res = await call('POST', `12/product_catalogs/${catalogId}/product_sets`, { json: { name: 'mid', type: 'FILTERED', filters: [{ attribute: 'price', operator: 'GREATER_THAN', value: '10.00 USD' }, { attribute: 'price', operator: 'LESS_THAN', value: '100.00 USD' }] } })
  const setId = res.json<{ data: Json }>().data.id as string
  const set = await eventually(async () => {
    const d = (await call('GET', `12/product_catalogs/${catalogId}/product_sets/${setId}`)).json<{ data: Json }>().data
    return d.processing_status === 'DONE' ? d : undefined
  }, 10_000)
  t.same(set.product_ids, ['b'])
  res = await call('DELETE', `12/product_catalogs/${catalogId}`)
  t.equal(res.status, 200)
  t.equal((await call('GET', `12/product_catalogs/${catalogId}/product_sets/${setId}`)).status, 404, 'the catalog and its sets are gone')
  let leftovers = 0
  for await (const _key of store.scanPrefix(`ads:catalog:${catalogId}:`)) leftovers++
  t.equal(leftovers, 0, 'no key of the catalog is left in Redis')

  res = await call('POST', `12/accounts/${acct}/custom_audiences`, { query: { name: 'Kafka audience' } })
  const audienceId = res.json<{ data: Json }>().data.id as string
  res = await call('POST', `12/accounts/${acct}/custom_audiences/${audienceId}/users`, { json: [{ operation_type: 'Update', params: { users: [{ email: [sha256('k@example.com')] }] } }] })
  t.same(res.json<{ data: Json }>().data, { success_count: 1, total_count: 1 })
  res = await call('POST', `5/accounts/${acct}/tailored_audiences/${audienceId}/permissions`, { query: { granted_account_id: partner.account.id, permission_level: 'READ_ONLY' } })
  t.equal(res.status, 200)
  const permissionId = res.json<{ data: Json }>().data.id as string
  res = await call('DELETE', `5/accounts/${acct}/tailored_audiences/${audienceId}/permissions/${permissionId}`)
  t.equal(res.status, 200)
  res = await call('DELETE', `12/accounts/${acct}/custom_audiences/${audienceId}`)
  t.equal(res.status, 200)

  res = await call('POST', `12/accounts/${acct}/do_not_reach_lists`)
  const dnrId = res.json<{ data: Json }>().data.id as string
  res = await call('POST', `12/batch/accounts/${acct}/do_not_reach_lists/${dnrId}/users`, { json: [{ operation_type: 'Update', params: { users: [{ email: [sha256('d@example.com')] }] } }] })
  t.same(res.json<{ data: Json[] }>().data, [{ success_count: 1, total_count: 1 }])
  t.equal((await call('DELETE', `12/accounts/${acct}/do_not_reach_lists/${dnrId}`)).status, 200)

  const ofEntity = (type: string, id: string) => changes.filter((c) => c.entity_type === type && c.entity_id === id).map((c) => c.change_type)
  const seen = await eventually(() => {
    const catalog = ofEntity('PRODUCT_CATALOG', catalogId)
    const audience = ofEntity('CUSTOM_AUDIENCE', audienceId)
    const permission = ofEntity('TAILORED_AUDIENCE_PERMISSION', permissionId)
    const dnr = ofEntity('DO_NOT_REACH_LIST', dnrId)
    const products = changes.filter((c) => c.entity_type === 'PRODUCT' && c.account_id === `user:${owner.id.user.id}`).map((c) => `${c.entity_data.id as string}:${c.change_type}`)
    const set = ofEntity('PRODUCT_SET', setId)
    const done = catalog.length === 2 && audience.length === 3 && permission.length === 2 && dnr.length === 3 && products.length === 6 && set.includes('DELETE')
    return done ? { catalog, audience, permission, dnr, products, set } : undefined
  }, 30_000, 100)
  t.same(seen.catalog, ['CREATE', 'DELETE'])
  t.equal(changes.find((c) => c.entity_type === 'PRODUCT_CATALOG')?.account_id, `user:${owner.id.user.id}`)
  t.same(seen.audience, ['CREATE', 'UPDATE', 'DELETE'], 'in order: one partition per account')
  t.same(seen.permission, ['CREATE', 'DELETE'], 'permission changes')
  t.same(seen.dnr, ['CREATE', 'UPDATE', 'DELETE'], 'do-not-reach list changes')
  t.same(seen.products, ['a:CREATE', 'b:CREATE', 'c:CREATE', 'a:DELETE', 'b:DELETE', 'c:DELETE'], 'product creates, then the deletes of the catalog deletion')
  t.same(seen.set[0], 'CREATE')
  t.same(seen.set[seen.set.length - 1], 'DELETE')

  // Insights consume activity.events from Kafka.
  const at = Date.now() - 60_000
  await rt.ctx.bus.publish(TOPICS.activityEvents, '42', {
    event_uuid: newNumericId(),
    event_type: 'post.create',
    user_id: '42',
    created_at: new Date(at).toISOString(),
    payload: { id: newNumericId(), text: 'kafkaesque streaming platform', author_id: '42' }
  })
  const volume = await eventually(async () => {
    const r = await call('GET', '12/insights/keywords/search', { query: { granularity: 'HOUR', keywords: 'kafkaesque', start_time: new Date(at - 3_600_000).toISOString() } })
    const d = r.json<{ data: { tweet_volume: number[]; related_keywords: string[] } }>().data
    return d.tweet_volume.reduce((a, b) => a + b, 0) === 1 ? d : undefined
  }, 30_000, 200)
  t.same(volume.related_keywords, ['platform', 'streaming'])
})
