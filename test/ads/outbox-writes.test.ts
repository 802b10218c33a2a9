import path from 'node:path'
import t, { type Test } from 'tap'
import { MemoryBus } from '../../services/common/bus/memory'
import type { Bus } from '../../services/common/bus/types'
import { createLogger } from '../../services/common/logger'
import type { Runtime } from '../../services/common/runtime'
import { MemoryStore } from '../../services/common/store/memory'
import type { Store } from '../../services/common/store/types'
import type { EntityChange } from '../../services/gateway/ads/entities'
import { OutboxRelay } from '../../services/gateway/outbox'
import { gatewayWithWorkers, type Json, sha256 } from '../support/fixtures/audiences'
import { oauth1Request, type TestResponse } from '../support/http'
import { startTestRuntime } from '../support/runtime'
import { eventually, tempDir } from '../support/util'
import { collectChanges, outboxDepth, outboxFailingStore, switchableBus } from '../support/fixtures/change'
import { createAdsIdentity } from '../support/fixtures/ads'

/**
 * The writers outside EntityRepo (catalogs, products, product sets,
 * custom-audience and do-not-reach uploads) commit their data and its
 * entity changes in one store batch through the gateway outbox:
 *  - with the broker down, the writes succeed and their changes wait in the
 *    outbox; a relay with a good bus later delivers every one of them;
 *  - a commit that fails leaves neither the data nor its change (before,
 *    the data was written first and its change could be lost).
 */

const log = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent', 'outbox-writes-test')

async function memoryStore(t: Test): Promise<Store> {
  const store = await MemoryStore.open(path.join(tempDir(t, 'outbox-writes-'), 'state'))
  t.teardown(() => store.close())
  return store
}

async function gateway(t: Test, bus: Bus, store: Store): Promise<Runtime> {
  return startTestRuntime(t, { services: [gatewayWithWorkers], bus, store, env: { ADS_CATALOG_IMAGE_CHECK: 'url', ADS_PRODUCT_SET_EVAL_INTERVAL: '20ms' } })
}

function product(id: string): Json {
  return { id, title: `Product ${id}`, description: 'A plain description', availability: 'in stock', condition: 'new', price: '20.00 USD', link: `https://shop.example/p/${id}`, image_link: `https://shop.example/img/${id}.png`, brand: 'Acme' }
}

/** `count` users, hashed e-mail addresses from `prefix`. */
function users(prefix: string, count: number): Array<{ email: string[] }> {
  return Array.from({ length: count }, (_, i) => ({ email: [sha256(`${prefix}${i}@example.com`)] }))
}

async function ads(rt: Runtime, who: Awaited<ReturnType<typeof createAdsIdentity>>['id'], method: string, path: string, options: { query?: Record<string, string>; json?: unknown } = {}): Promise<TestResponse> {
  return oauth1Request(method, `${rt.baseUrl}/12/${path}`, who, options)
}

function dataOf(res: TestResponse): Json {
  return res.json<{ data: Json }>().data
}

t.test('broker down: catalog, product, product set and upload writes succeed; a relay later delivers every change', async (t) => {
  const store = await memoryStore(t)
  const good = new MemoryBus(6, log)
  t.teardown(() => good.close())
  const bus = switchableBus(good)
  const rt = await gateway(t, bus, store)
  const seen = await collectChanges(t, good, 'outbox-writes-down')
  const { id: owner, account } = await createAdsIdentity(rt.ctx)
  const call = (method: string, p: string, options?: { query?: Record<string, string>; json?: unknown }): Promise<TestResponse> => ads(rt, owner, method, p, options)

  const catalog = await call('POST', 'product_catalogs', { query: { name: 'Main' } })
  t.equal(catalog.status, 200, catalog.text)
  const cid = dataOf(catalog).id as string
  const batch = await call('PUT', `product_catalogs/${cid}/products`, { json: { products: [product('a'), product('b'), product('c')] } })
  t.equal(batch.status, 200, batch.text)
  const keys = dataOf(batch).products_response as Array<{ product_key: string; status: string }>
  t.same(keys.map((k) => k.status), ['CREATE_SUCCESS', 'CREATE_SUCCESS', 'CREATE_SUCCESS'])
  const set = await call('POST', `product_catalogs/${cid}/product_sets`, { json: { name: 'Filtered', type: 'FILTERED', filters: [{ attribute: 'price', operator: 'GREATER_THAN', value: '10.00 USD' }] } })
  t.equal(set.status, 200, set.text)

  const audience = dataOf(await call('POST', `accounts/${account.id}/custom_audiences`, { query: { name: 'Buyers' } }))
  const upload = await call('POST', `accounts/${account.id}/custom_audiences/${audience.id as string}/users`, { json: [{ operation_type: 'Update', params: { users: users('buyer', 150) } }] })
  t.equal(upload.status, 200, upload.text)
  // Ten members leave, five join only tomorrow: the change's size must be what a read says.
  const tomorrow = new Date(Date.now() + 86_400_000).toISOString()
  const second = await call('POST', `accounts/${account.id}/custom_audiences/${audience.id as string}/users`, {
    json: [
      { operation_type: 'Delete', params: { users: users('buyer', 10) } },
      { operation_type: 'Update', params: { effective_at: tomorrow, users: users('future', 5) } }
    ]
  })
  t.equal(second.status, 200, second.text)
  const dnr = dataOf(await call('POST', `accounts/${account.id}/do_not_reach_lists`))
  const dnrUpload = await call('POST', `batch/accounts/${account.id}/do_not_reach_lists/${dnr.id as string}/users`, { json: [{ operation_type: 'Update', params: { users: users('never', 120) } }] })
  t.equal(dnrUpload.status, 200, dnrUpload.text)

  const expected = 1 + 3 + 1 + 1 + 2 + 1 + 1
  t.ok((await outboxDepth(store)) >= expected, 'the changes wait in the outbox')
  t.equal(seen.length, 0, 'nothing reached the bus')

  // Another process's relay, with a working bus.
  const relay = new OutboxRelay({ store, bus: good, log, sweepMs: 50 })
  t.teardown(() => relay.close())
  relay.start()
  const scope = `user:${owner.user.id}`
  await eventually(() => seen.filter((c) => c.account_id === scope || c.account_id === account.id).length >= expected, 20_000)
  const byType = (type: string): EntityChange[] => seen.filter((c) => c.entity_type === type)
  t.same(byType('PRODUCT_CATALOG').map((c) => c.change_type), ['CREATE'])
  t.same(byType('PRODUCT').filter((c) => c.change_type === 'CREATE').map((c) => c.entity_id).sort(), keys.map((k) => k.product_key).sort(), 'every product CREATE')
  t.match(byType('PRODUCT_SET')[0], { change_type: 'CREATE', entity_data: { name: 'Filtered' } })
  const audienceChanges = byType('CUSTOM_AUDIENCE').filter((c) => c.entity_id === audience.id)
  t.same(audienceChanges.map((c) => c.change_type), ['CREATE', 'UPDATE', 'UPDATE'])
  t.same(audienceChanges.slice(1).map((c) => c.changes.audience_size), [{ old: null, new: 150 }, { old: 150, new: 140 }])
  const read = dataOf(await call('GET', `accounts/${account.id}/custom_audiences/${audience.id as string}`))
  t.equal(audienceChanges[2]?.entity_data.audience_size, read.audience_size, 'the last change has the size a read reports')
  t.match(read, { audience_size: 140 })
  const dnrChanges = byType('DO_NOT_REACH_LIST').filter((c) => c.entity_id === dnr.id)
  t.same(dnrChanges.map((c) => c.change_type), ['CREATE', 'UPDATE'])
  t.same(dnrChanges[1]?.changes, { list_size: { old: null, new: 120 } })
  await eventually(async () => (await outboxDepth(store)) === 0, 10_000)
  t.pass('the outbox is empty once delivered')
})

t.test('a commit that fails leaves neither the data nor its change; the retry delivers both', async (t) => {
  const base = await memoryStore(t)
  const store = outboxFailingStore(base)
  store.failing = false
  const bus = new MemoryBus(6, log)
  t.teardown(() => bus.close())
  const rt = await gateway(t, bus, store)
  const seen = await collectChanges(t, bus, 'outbox-writes-fail')
  const { id: owner, account } = await createAdsIdentity(rt.ctx)
  const call = (method: string, p: string, options?: { query?: Record<string, string>; json?: unknown }): Promise<TestResponse> => ads(rt, owner, method, p, options)
  const cid = dataOf(await call('POST', 'product_catalogs', { query: { name: 'Main' } })).id as string
  const audience = dataOf(await call('POST', `accounts/${account.id}/custom_audiences`, { query: { name: 'Buyers' } }))
  const dnr = dataOf(await call('POST', `accounts/${account.id}/do_not_reach_lists`))
  const products = (): Promise<unknown[]> => call('GET', `product_catalogs/${cid}/products`).then((r) => r.json<{ data: unknown[] }>().data)
  const sizeOf = async (p: string, field: string): Promise<unknown> => dataOf(await call('GET', p))[field]

  store.failing = true
  const batch = await call('PUT', `product_catalogs/${cid}/products`, { json: { products: [product('a'), product('b')] } })
  t.equal(batch.status, 500, `the product batch fails (${batch.text.slice(0, 120)})`)
  t.same(await products(), [], 'and writes no product')
  const set = await call('POST', `product_catalogs/${cid}/product_sets`, { json: { name: 'Picked', type: 'FILTERED', filters: [{ attribute: 'price', operator: 'GREATER_THAN', value: '10.00 USD' }] } })
  t.equal(set.status, 500, 'a product set create fails')
  t.same((await call('GET', `product_catalogs/${cid}/product_sets`)).json<{ data: unknown[] }>().data, [], 'and writes no set')
  const renamed = await call('PUT', `product_catalogs/${cid}`, { query: { name: 'Renamed' } })
  t.equal(renamed.status, 500, 'a catalog rename fails')
  t.match(dataOf(await call('GET', 'product_catalogs')), [{ name: 'Main' }], 'and keeps the name')
  const upload = await call('POST', `accounts/${account.id}/custom_audiences/${audience.id as string}/users`, { json: [{ operation_type: 'Update', params: { users: users('buyer', 120) } }] })
  t.equal(upload.status, 500, 'the audience upload fails')
  t.equal(await sizeOf(`accounts/${account.id}/custom_audiences/${audience.id as string}`, 'audience_size'), null, 'and adds no member')
  const dnrUpload = await call('POST', `batch/accounts/${account.id}/do_not_reach_lists/${dnr.id as string}/users`, { json: [{ operation_type: 'Update', params: { users: users('never', 120) } }] })
  t.equal(dnrUpload.status, 500, 'the do-not-reach upload fails')
  t.equal(await sizeOf(`accounts/${account.id}/do_not_reach_lists/${dnr.id as string}`, 'list_size'), null, 'and adds no member')

  store.failing = false
  t.equal((await call('PUT', `product_catalogs/${cid}/products`, { json: { products: [product('a'), product('b')] } })).status, 200)
  t.equal((await call('POST', `accounts/${account.id}/custom_audiences/${audience.id as string}/users`, { json: [{ operation_type: 'Update', params: { users: users('buyer', 120) } }] })).status, 200)
  t.equal((await call('POST', `batch/accounts/${account.id}/do_not_reach_lists/${dnr.id as string}/users`, { json: [{ operation_type: 'Update', params: { users: users('never', 120) } }] })).status, 200)
  t.equal((await products()).length, 2)
  await eventually(() => seen.filter((c) => c.change_type === 'UPDATE' && (c.entity_id === audience.id || c.entity_id === dnr.id)).length >= 2 && seen.filter((c) => c.entity_type === 'PRODUCT').length >= 2)
  const updates = seen.filter((c) => c.change_type === 'UPDATE' && (c.entity_id === audience.id || c.entity_id === dnr.id))
  t.same(updates.map((c) => c.changes), [{ audience_size: { old: null, new: 120 } }, { list_size: { old: null, new: 120 } }], 'one change per upload that landed, none for the failed ones')
  t.same(seen.filter((c) => c.entity_type === 'PRODUCT').map((c) => c.change_type), ['CREATE', 'CREATE'])
  t.same(seen.filter((c) => c.entity_type === 'PRODUCT_SET' || (c.entity_type === 'PRODUCT_CATALOG' && c.change_type !== 'CREATE')), [], 'no change of the failed set create and rename')
})
