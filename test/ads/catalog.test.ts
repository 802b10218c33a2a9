import http from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import type { Test } from 'tap'
import { PNG } from 'pngjs'
import { grantAccountAccess } from '../../services/gateway/ads/accounts'
import { PRODUCT_FIELDS } from '../../services/gateway/ads/catalog/products'
import { collectChanges, gatewayWithWorkers, type Json, queryString } from '../support/fixtures/audiences'
import { oauth1Request, type TestResponse } from '../support/http'
import { type AdsErrorItem, adsErrorOf } from '../support/problems'
import { startTestRuntime } from '../support/runtime'
import { eventually } from '../support/util'
import { createAdsIdentity } from '../support/fixtures/ads'

/**
 * Catalog management end to end over HTTP with OAuth 1.0a: catalogs, the
 * product batch with every rule of the Product table (images checked by
 * really fetching them from a loopback server), grouping, paging, deletion,
 * and product sets with their background evaluation.
 */

type ItemResult = { warnings: AdsErrorItem[]; errors: AdsErrorItem[]; product_key: string | null; id: string | null; status: string }

function png(width: number, height: number): Buffer {
  return PNG.sync.write(new PNG({ width, height }))
}

/** A loopback image host: real bytes for the image rules. */
async function imageServer(t: Test): Promise<string> {
  const big = png(600, 600)
  const small = png(300, 300)
  const tall = png(500, 499)
  const huge = Buffer.concat([png(600, 600), Buffer.alloc(5 * 1024 * 1024 + 10)])
  const server = http.createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0] ?? ''
    const send = (status: number, body: Buffer | string, type = 'image/png'): void => {
      res.writeHead(status, { 'content-type': type })
      res.end(body)
    }
    if (path.startsWith('/img/')) return send(200, big)
    if (path === '/small.png') return send(200, small)
    if (path === '/tall.png') return send(200, tall)
    if (path === '/huge.png') return send(200, huge)
    if (path === '/redirect.png') {
      res.writeHead(302, { location: '/img/redirected.png' })
      return res.end()
    }
    if (path === '/loop.png') {
      res.writeHead(302, { location: '/loop.png' })
      return res.end()
    }
    if (path === '/text.png') return send(200, 'this is plainly not an image, just some text that is long enough to be judged by its header bytes', 'text/plain')
    send(404, 'not found', 'text/plain')
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

async function setup(t: Test) {
  const rt = await startTestRuntime(t, { services: [gatewayWithWorkers], env: { ADS_CATALOG_IMAGE_ALLOW_PRIVATE: 'true', ADS_PRODUCT_SET_EVAL_INTERVAL: '20ms' } })
  const images = await imageServer(t)
  const owner = await createAdsIdentity(rt.ctx)
  const changes = await collectChanges(t, rt)
  // The query is encoded here with %20 for spaces: URLSearchParams' `+` is signed differently by the oauth-1.0a client.
  const call = (method: string, path: string, options: { query?: Record<string, string>; json?: unknown; as?: typeof owner.id } = {}): Promise<TestResponse> =>
    oauth1Request(method, `${rt.baseUrl}/12/${path}${queryString(options.query)}`, options.as ?? owner.id, options.json !== undefined ? { json: options.json } : {})
  const product = (id: string, extra: Json = {}): Json => ({
    id,
    title: `Product ${id}`,
    description: 'A plain description',
    availability: 'in stock',
    condition: 'new',
    price: '20.00 USD',
    link: `https://shop.example/p/${id}`,
    image_link: `${images}/img/${id}.png`,
    brand: 'Acme',
    inventory: 5,
    ...extra
  })
  return { rt, images, owner, changes, call, product }
}

async function newCatalog(call: Awaited<ReturnType<typeof setup>>['call']): Promise<string> {
  const res = await call('POST', 'product_catalogs', { query: { name: 'Main catalog' } })
  if (res.status !== 200) throw new Error(`catalog create failed: ${res.text}`)
  return res.json<{ data: { id: string } }>().data.id
}

t.test('product catalogs: one per user, ownership, delegation, entity changes', async (t) => {
  const { rt, owner, changes, call } = await setup(t)

  let res = await call('POST', 'product_catalogs', {})
  t.equal(res.status, 400)
  t.match(adsErrorOf(res), { code: 'MISSING_PARAMETER', parameter: 'name' })

  res = await call('POST', 'product_catalogs', { query: { name: 'Main catalog' } })
  t.equal(res.status, 200)
  const created = res.json<{ data: { id: string; name: string }; request: { params: Json } }>()
  t.match(created.data, { id: /^[0-9]{1,19}$/, name: 'Main catalog' })
  t.same(created.request.params, { name: 'Main catalog' })
  t.equal(res.headers.get('x-current-api-version'), '12')
  const cid = created.data.id

  res = await call('POST', 'product_catalogs', { query: { name: 'Second' } })
  t.equal(res.status, 409, 'one catalog per user')
  t.match(adsErrorOf(res), { code: 'DUPLICATE' })

  res = await call('GET', 'product_catalogs')
  t.same(res.json<{ data: unknown[]; next_cursor: unknown }>().data, [{ id: cid, name: 'Main catalog' }])
  t.equal(res.json<{ next_cursor: unknown }>().next_cursor, null)
  res = await call('GET', 'product_catalogs', { query: { user_id: owner.id.user.id } })
  t.equal(res.json<{ data: unknown[] }>().data.length, 1, 'user_id of the caller')
  res = await call('GET', 'product_catalogs', { query: { user_id: 'abc' } })
  t.equal(res.status, 400)
  t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER', parameter: 'user_id', message: /Expected Long/ })

  const other = await createAdsIdentity(rt.ctx)
  res = await call('GET', 'product_catalogs', { query: { user_id: owner.id.user.id }, as: other.id })
  t.equal(res.status, 403, 'another user cannot act for the owner')
  t.match(adsErrorOf(res), { code: 'ACTION_NOT_ALLOWED', parameter: 'user_id' })
  res = await call('PUT', `product_catalogs/${cid}`, { query: { name: 'Stolen' }, as: other.id })
  t.equal(res.status, 403)
  t.match(adsErrorOf(res), { code: 'ACTION_NOT_ALLOWED', parameter: 'product_catalog_id' })
  res = await call('GET', `product_catalogs/${cid}/products`, { as: other.id })
  t.equal(res.status, 403)

  // A user the owner granted access to one of the owner's ads accounts may operate the owner's catalog.
  const delegate = await createAdsIdentity(rt.ctx)
  await grantAccountAccess(rt.ctx, owner.account.id, delegate.id.user.id)
  res = await call('GET', 'product_catalogs', { query: { user_id: owner.id.user.id }, as: delegate.id })
  t.same(res.json<{ data: unknown[] }>().data, [{ id: cid, name: 'Main catalog' }])
  res = await call('GET', `product_catalogs/${cid}/products`, { as: delegate.id })
  t.equal(res.status, 200)

  res = await call('PUT', `product_catalogs/${cid}`, {})
  t.match(adsErrorOf(res), { code: 'MISSING_PARAMETER', parameter: 'name' })
  res = await call('PUT', `product_catalogs/${cid}`, { query: { name: 'Renamed' } })
  t.same(res.json<{ data: unknown }>().data, { id: cid, name: 'Renamed' })
  res = await call('PUT', 'product_catalogs/1234567', { query: { name: 'x' } })
  t.equal(res.status, 404)
  t.match(adsErrorOf(res), { code: 'NOT_FOUND', parameter: 'product_catalog_id' })
  res = await call('PUT', 'product_catalogs/abc', { query: { name: 'x' } })
  t.equal(res.status, 400)

  res = await call('DELETE', `product_catalogs/${cid}`)
  t.same(res.json<{ data: unknown }>().data, { id: cid, name: 'Renamed' })
  res = await call('GET', `product_catalogs/${cid}/products`)
  t.equal(res.status, 404, 'deletion is permanent')
  res = await call('GET', 'product_catalogs')
  t.same(res.json<{ data: unknown[] }>().data, [])
  res = await call('POST', 'product_catalogs', { query: { name: 'Again' } })
  t.equal(res.status, 200, 'a new catalog after deleting the old one')

  const mine = await eventually(() => {
    const list = changes.filter((c) => c.entity_type === 'PRODUCT_CATALOG' && c.entity_id === cid)
    return list.length === 3 ? list : undefined
  })
  t.same(mine.map((c) => c.change_type), ['CREATE', 'UPDATE', 'DELETE'])
  t.equal(mine[0]?.account_id, `user:${owner.id.user.id}`)
  t.same(mine[1]?.changes, { name: { old: 'Main catalog', new: 'Renamed' } })
  t.equal(mine[1]?.changed_by.user_id, owner.id.user.id)
})

t.test('product batch: create, update, no change, every field returned', async (t) => {
  const { changes, call, product, images } = await setup(t)
  const cid = await newCatalog(call)
  let res = await call('PUT', `product_catalogs/${cid}/products`, { json: { products: [product('sku-1'), product('sku-2', { gtin: '4006381333931', brand: undefined })] } })
  t.equal(res.status, 200, 'status 200')
  const body = res.json<{ data: { products_response: ItemResult[] }; request: { params: Json } }>()
  t.same(body.request.params, { product_catalog_id: cid })
  t.equal(body.data.products_response.length, 2)
  for (const r of body.data.products_response) t.match(r, { status: 'CREATE_SUCCESS', errors: [], warnings: [], product_key: /^[0-9]{1,19}$/ })
  t.same(body.data.products_response.map((r) => r.id), ['sku-1', 'sku-2'])
  const key1 = body.data.products_response[0]?.product_key

  res = await call('PUT', `product_catalogs/${cid}/products`, { json: { products: [product('sku-1')] } })
  t.match(res.json<{ data: { products_response: ItemResult[] } }>().data.products_response[0], { status: 'NO_CHANGE', product_key: key1 })

  res = await call('PUT', `product_catalogs/${cid}/products`, { json: { products: [product('sku-1', { title: 'New title', product_key: key1 })] } })
  t.match(res.json<{ data: { products_response: ItemResult[] } }>().data.products_response[0], { status: 'UPDATE_SUCCESS', product_key: key1 })

  res = await call('PUT', `product_catalogs/${cid}/products`, { json: { products: [product('sku-1', { product_key: '999' })] } })
  t.match(res.json<{ data: { products_response: ItemResult[] } }>().data.products_response[0], { status: 'ERROR', errors: [{ parameter: 'product_key' }] })

  res = await call('GET', `product_catalogs/${cid}/products`)
  const list = res.json<{ data: Json[]; next_cursor: unknown }>()
  t.equal(list.next_cursor, null)
  t.equal(list.data.length, 2)
  const p1 = list.data[0] as Json
  t.same(Object.keys(p1).sort(), [...PRODUCT_FIELDS].sort(), 'every field of the Product table')
  t.match(p1, {
    id: 'sku-1',
    product_key: key1,
    title: 'New title',
    price: '20.00 USD',
    image_link: `${images}/img/sku-1.png`,
    inventory: 5,
    gtin: null,
    mpn: null,
    sale_price: null,
    item_group_id: null,
    item_group_key: null,
    custom_label_4: null
  })

  const productChanges = await eventually(() => {
    const l = changes.filter((c) => c.entity_type === 'PRODUCT' && c.entity_id === key1)
    return l.length === 2 ? l : undefined
  })
  t.same(productChanges.map((c) => c.change_type), ['CREATE', 'UPDATE'])
  t.same(productChanges[1]?.changes, { title: { old: 'Product sku-1', new: 'New title' } })
})

t.test('product batch: every rule of the Product table answers ERROR with its parameter', async (t) => {
  const { call, product, images } = await setup(t)
  const cid = await newCatalog(call)
  const cases: Array<[string, Json, string, string]> = [
    ['id missing', { id: undefined }, 'id', 'MISSING_PARAMETER'],
    ['title missing', { title: '' }, 'title', 'MISSING_PARAMETER'],
    ['description missing', { description: undefined }, 'description', 'MISSING_PARAMETER'],
    ['availability missing', { availability: undefined }, 'availability', 'MISSING_PARAMETER'],
    ['condition missing', { condition: undefined }, 'condition', 'MISSING_PARAMETER'],
    ['price missing', { price: undefined }, 'price', 'MISSING_PARAMETER'],
    ['link missing', { link: undefined }, 'link', 'MISSING_PARAMETER'],
    ['image_link missing', { image_link: undefined }, 'image_link', 'MISSING_PARAMETER'],
    ['title over 150', { title: 'x'.repeat(151) }, 'title', 'INVALID_PARAMETER'],
    ['description over 5000', { description: 'x'.repeat(5001) }, 'description', 'INVALID_PARAMETER'],
    ['description with HTML', { description: 'Great <b>shoes</b>' }, 'description', 'INVALID_PARAMETER'],
    ['availability enum', { availability: 'sold' }, 'availability', 'INVALID_PARAMETER'],
    ['condition enum', { condition: 'mint' }, 'condition', 'INVALID_PARAMETER'],
    ['price without space', { price: '20.00USD' }, 'price', 'INVALID_PARAMETER'],
    ['price with comma', { price: '20,00 USD' }, 'price', 'INVALID_PARAMETER'],
    ['price currency first', { price: 'USD 20.00' }, 'price', 'INVALID_PARAMETER'],
    ['price unknown currency', { price: '20.00 XYZ' }, 'price', 'INVALID_PARAMETER'],
    ['price negative', { price: '-1.00 USD' }, 'price', 'INVALID_PARAMETER'],
    ['link not https', { link: 'http://shop.example/p' }, 'link', 'INVALID_PARAMETER'],
    ['link not a URL', { link: 'shop.example/p' }, 'link', 'INVALID_PARAMETER'],
    ['mobile_link not https', { mobile_link: 'http://m.shop.example/p' }, 'mobile_link', 'INVALID_PARAMETER'],
    ['image_link wrong type', { image_link: `${images}/img/a.bmp` }, 'image_link', 'INVALID_PARAMETER'],
    ['image too small', { image_link: `${images}/small.png` }, 'image_link', 'INVALID_PARAMETER'],
    ['image 500x499', { image_link: `${images}/tall.png` }, 'image_link', 'INVALID_PARAMETER'],
    ['image over 5 MB', { image_link: `${images}/huge.png` }, 'image_link', 'INVALID_PARAMETER'],
    ['image not an image', { image_link: `${images}/text.png` }, 'image_link', 'INVALID_PARAMETER'],
    ['image not found', { image_link: `${images}/missing.png` }, 'image_link', 'INVALID_PARAMETER'],
    ['image redirect loop', { image_link: `${images}/loop.png` }, 'image_link', 'INVALID_PARAMETER'],
    ['additional images over 10', { additional_image_link: Array.from({ length: 11 }, (_, i) => `${images}/img/a${i}.png`).join(',') }, 'additional_image_link', 'INVALID_PARAMETER'],
    ['additional image too small', { additional_image_link: `${images}/img/ok.png,${images}/small.png` }, 'additional_image_link', 'INVALID_PARAMETER'],
    ['brand, gtin and mpn all absent', { brand: undefined }, 'brand', 'MISSING_PARAMETER'],
    ['gtin check digit', { gtin: '4006381333932' }, 'gtin', 'INVALID_PARAMETER'],
    ['inventory 0 in stock', { inventory: 0 }, 'inventory', 'INVALID_PARAMETER'],
    ['inventory negative', { inventory: -2, availability: 'out of stock' }, 'inventory', 'INVALID_PARAMETER'],
    ['inventory not an int', { inventory: 'many' }, 'inventory', 'INVALID_PARAMETER'],
    ['sale_price not lower', { sale_price: '20.00 USD' }, 'sale_price', 'INVALID_PARAMETER'],
    ['sale_price other currency', { sale_price: '10.00 EUR' }, 'sale_price', 'INVALID_PARAMETER'],
    ['sale_price format', { sale_price: 'ten dollars' }, 'sale_price', 'INVALID_PARAMETER'],
    ['effective date format', { sale_price: '10.00 USD', sale_price_effective_date: '2026-01-01/2026-02-01' }, 'sale_price_effective_date', 'INVALID_PARAMETER'],
    ['effective date reversed', { sale_price: '10.00 USD', sale_price_effective_date: '2026-02-01T00:00+00:00/2026-01-01T00:00+00:00' }, 'sale_price_effective_date', 'INVALID_PARAMETER'],
    ['age_group enum', { age_group: 'elderly' }, 'age_group', 'INVALID_PARAMETER'],
    ['gender enum', { gender: 'other' }, 'gender', 'INVALID_PARAMETER'],
    ['color as hex', { color: '#ff0000' }, 'color', 'INVALID_PARAMETER'],
    ['product_type separator', { product_type: 'Apparel>Shoes' }, 'product_type', 'INVALID_PARAMETER'],
    ['title not a string', { title: { text: 'x' } }, 'title', 'INVALID_PARAMETER']
  ]
  // 25 per batch: the cases go in two requests, each item its own id.
  const items = cases.map(([, patch], i) => product(`bad-${i}`, patch))
  const results: ItemResult[] = []
  for (let i = 0; i < items.length; i += 25) {
    const res = await call('PUT', `product_catalogs/${cid}/products`, { json: { products: items.slice(i, i + 25) } })
    t.equal(res.status, 200, 'status 200')
    results.push(...res.json<{ data: { products_response: ItemResult[] } }>().data.products_response)
  }
  for (const [i, [name, , parameter, code]] of cases.entries()) {
    const r = results[i] as ItemResult
    t.equal(r.status, 'ERROR', name)
    t.ok(r.errors.some((e) => e.parameter === parameter && e.code === code), `${name}: ${parameter} ${code} in ${JSON.stringify(r.errors)}`)
  }

  // Valid edge values pass.
  const ok = await call('PUT', `product_catalogs/${cid}/products`, {
    json: {
      products: [
        product('edge-1', { title: 'x'.repeat(150), description: 'd'.repeat(5000), price: '20 JPY', inventory: 1, color: 'bad', gtin: '0-306-40615-2', mobile_link: 'https://m.shop.example/p' }),
        product('edge-2', { availability: 'out of stock', inventory: 0, sale_price: '19.99 USD', sale_price_effective_date: '2026-01-01T10:00+01:00/2026-01-31T23:59+01:00', additional_image_link: Array.from({ length: 10 }, (_, i) => `${images}/img/x${i}.png`).join(',') }),
        product('edge-3', { image_link: `${images}/redirect.png`, brand: undefined, mpn: 'MPN-1', product_type: 'Apparel > Shoes > Sneakers', age_group: 'all ages', gender: 'unisex', google_product_category: 'Apparel & Accessories > Shoes' })
      ]
    }
  })
  for (const r of ok.json<{ data: { products_response: ItemResult[] } }>().data.products_response) t.equal(r.status, 'CREATE_SUCCESS', JSON.stringify(r))
  const list = await call('GET', `product_catalogs/${cid}/products`)
  const edge3 = list.json<{ data: Json[] }>().data.find((p) => p.id === 'edge-3')
  t.equal(edge3?.ext_product_category, 'Apparel & Accessories > Shoes', 'google_product_category is accepted as ext_product_category')
  t.equal(list.json<{ data: Json[] }>().data.length, 3, 'no failed item was stored')
})

t.test('product batch: request-level limits and duplicate ids', async (t) => {
  const { call, product } = await setup(t)
  const cid = await newCatalog(call)
  let res = await call('PUT', `product_catalogs/${cid}/products`, { json: { products: Array.from({ length: 26 }, (_, i) => product(`p${i}`)) } })
  t.equal(res.status, 400, 'over 25 products')
  t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER', parameter: 'products', message: /at most 25/ })
  res = await call('PUT', `product_catalogs/${cid}/products`, { json: { products: Array.from({ length: 25 }, (_, i) => product(`p${i}`)) } })
  t.equal(res.status, 200, 'exactly 25 products')
  res = await call('PUT', `product_catalogs/${cid}/products`, { json: {} })
  t.match(adsErrorOf(res), { code: 'MISSING_PARAMETER', parameter: 'products' })
  res = await call('PUT', `product_catalogs/${cid}/products`, { json: { products: [] } })
  t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER', parameter: 'products' })
  res = await call('PUT', `product_catalogs/${cid}/products`, { json: { products: 'sku' } })
  t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER', parameter: 'products' })

  res = await call('PUT', `product_catalogs/${cid}/products`, { json: { products: [product('dup'), product('solo'), product('dup', { title: 'Other' })] } })
  const r = res.json<{ data: { products_response: ItemResult[] } }>().data.products_response
  t.match(r[0], { id: 'dup', status: 'NO_CHANGE', product_key: null, errors: [], warnings: [{ code: 'DUPLICATE_ID', parameter: 'id' }] })
  t.match(r[2], { id: 'dup', status: 'NO_CHANGE', warnings: [{ code: 'DUPLICATE_ID' }] })
  t.match(r[1], { id: 'solo', status: 'CREATE_SUCCESS' })
  const ids = (await call('GET', `product_catalogs/${cid}/products`)).json<{ data: Json[] }>().data.map((p) => p.id)
  t.notOk(ids.includes('dup'), 'every instance of a duplicated id is ignored')
  t.ok(ids.includes('solo'))
})

t.test('products GET: count bounds, pages, groups, deletion', async (t) => {
  const { call, product } = await setup(t)
  const cid = await newCatalog(call)
  const all = Array.from({ length: 30 }, (_, i) => product(`item-${String(i).padStart(2, '0')}`))
  for (let i = 0; i < all.length; i += 15) {
    const res = await call('PUT', `product_catalogs/${cid}/products`, { json: { products: all.slice(i, i + 15) } })
    t.equal(res.status, 200)
  }
  for (const count of ['0', '101', 'x']) {
    const res = await call('GET', `product_catalogs/${cid}/products`, { query: { count } })
    t.equal(res.status, 400, `count=${count}`)
    t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER', parameter: 'count' })
  }
  let res = await call('GET', `product_catalogs/${cid}/products`, { query: { count: '100' } })
  t.equal(res.json<{ data: unknown[] }>().data.length, 30)
  res = await call('GET', `product_catalogs/${cid}/products`, { query: { count: '30' } })
  t.equal(res.json<{ next_cursor: unknown }>().next_cursor, null, 'a full last page has no next cursor')

  const seen: string[] = []
  const sizes: number[] = []
  let cursor: string | null = null
  do {
    const page: TestResponse = await call('GET', `product_catalogs/${cid}/products`, { query: { count: '7', ...(cursor ? { cursor } : {}) } })
    const body = page.json<{ data: Json[]; next_cursor: string | null }>()
    sizes.push(body.data.length)
    seen.push(...body.data.map((p) => p.id as string))
    cursor = body.next_cursor
  } while (cursor !== null && sizes.length < 10)
  t.same(sizes, [7, 7, 7, 7, 2])
  t.same(seen, all.map((p) => p.id), 'submission order, no repeats')
  res = await call('GET', `product_catalogs/${cid}/products`, { query: { cursor: 'garbage' } })
  t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER', parameter: 'cursor' })

  // Groups: the first-submitted variant stands for the group.
  res = await call('PUT', `product_catalogs/${cid}/products`, {
    json: { products: [product('shoe-red', { item_group_id: 'shoe', color: 'red' }), product('shoe-blue', { item_group_id: 'shoe', color: 'blue' }), product('shoe-green', { item_group_id: 'shoe', color: 'green' })] }
  })
  const keys = res.json<{ data: { products_response: ItemResult[] } }>().data.products_response.map((r) => r.product_key as string)
  res = await call('GET', `product_catalogs/${cid}/products`)
  let listed = res.json<{ data: Json[] }>().data
  t.equal(listed.length, 31)
  const rep = listed.find((p) => p.item_group_id === 'shoe') as Json
  t.equal(rep.id, 'shoe-red')
  t.match(rep.item_group_key, /^[0-9]{1,19}$/)
  res = await call('GET', `product_catalogs/${cid}/products`, { query: { item_group_key: rep.item_group_key as string } })
  t.same(res.json<{ data: Json[] }>().data.map((p) => p.id), ['shoe-red', 'shoe-blue', 'shoe-green'])
  t.ok(res.json<{ data: Json[] }>().data.every((p) => p.item_group_key === rep.item_group_key))

  res = await call('DELETE', `product_catalogs/${cid}/products`, { json: { product_keys: [keys[0], '123', 'not-a-key', keys[0]] } })
  t.equal(res.status, 200, 'status 200')
  const deleted = res.json<{ data: { delete_products: Json[] } }>().data.delete_products
  t.same(deleted[0], { product_key: keys[0], failed_product_key: null, message: null })
  t.match(deleted[1], { product_key: '123', failed_product_key: '123', message: /not found/ })
  t.match(deleted[2], { failed_product_key: 'not-a-key', message: /Invalid/ })
  t.match(deleted[3], { failed_product_key: keys[0] })
  listed = (await call('GET', `product_catalogs/${cid}/products`)).json<{ data: Json[] }>().data
  t.equal(listed.find((p) => p.item_group_id === 'shoe')?.id, 'shoe-blue', 'the next variant stands for the group')

  res = await call('DELETE', `product_catalogs/${cid}/products`, { json: {} })
  t.match(adsErrorOf(res), { code: 'MISSING_PARAMETER', parameter: 'product_keys' })
})

t.test('product sets: MANUAL, FILTERED evaluation in the background, updates, errors', async (t) => {
  const { call, product, changes } = await setup(t)
  const cid = await newCatalog(call)
  let res = await call('PUT', `product_catalogs/${cid}/products`, {
    json: {
      products: [
        product('cheap', { price: '50.00 USD', custom_label_0: 'Summer sale' }),
        product('mid', { price: '150.00 USD', product_type: 'Apparel > Shoes > Sneakers' }),
        product('dear', { price: '250.00 USD', product_type: 'Apparel > Shoes', custom_label_0: 'summer' })
      ]
    }
  })
  const keys = res.json<{ data: { products_response: ItemResult[] } }>().data.products_response.map((r) => r.product_key as string)

  res = await call('POST', `product_catalogs/${cid}/product_sets`, { json: { name: 'Picked', type: 'MANUAL', product_keys: [keys[0], keys[2]] } })
  t.equal(res.status, 200, 'status 200')
  const manual = res.json<{ data: Json }>().data
  t.match(manual, { name: 'Picked', description: null, type: 'MANUAL', filters: [], product_ids: ['cheap', 'dear'], processing_status: 'DONE', id: /^[0-9]+$/ })

  const errors: Array<[Json, string, string]> = [
    [{ type: 'MANUAL', product_keys: [keys[0]] }, 'name', 'MISSING_PARAMETER'],
    [{ name: 'x', product_keys: [keys[0]] }, 'type', 'MISSING_PARAMETER'],
    [{ name: 'x', type: 'SMART' }, 'type', 'INVALID_PARAMETER'],
    [{ name: 'x', type: 'MANUAL' }, 'product_keys', 'MISSING_PARAMETER'],
    [{ name: 'x', type: 'MANUAL', product_keys: ['42'] }, 'product_keys', 'INVALID_PARAMETER'],
    [{ name: 'x', type: 'FILTERED' }, 'filters', 'MISSING_PARAMETER'],
    [{ name: 'x', type: 'FILTERED', filters: [] }, 'filters', 'INVALID_PARAMETER'],
    [{ name: 'x', type: 'FILTERED', filters: [{ attribute: 'title', operator: 'MATCH', value: 'a' }] }, 'filters[0].attribute', 'INVALID_PARAMETER'],
    [{ name: 'x', type: 'FILTERED', filters: [{ attribute: 'price', operator: 'BETWEEN', value: '1.00 USD' }] }, 'filters[0].operator', 'INVALID_PARAMETER'],
    [{ name: 'x', type: 'FILTERED', filters: [{ attribute: 'price', operator: 'CONTAINS', value: '1.00 USD' }] }, 'filters[0].operator', 'INVALID_PARAMETER'],
    [{ name: 'x', type: 'FILTERED', filters: [{ attribute: 'price', operator: 'LESS_THAN', value: 'cheap' }] }, 'filters[0].value', 'INVALID_PARAMETER'],
    [{ name: 'x', type: 'FILTERED', filters: [{ attribute: 'inventory', operator: 'LESS_THAN', value: 'few' }] }, 'filters[0].value', 'INVALID_PARAMETER'],
    [{ name: 'x', type: 'FILTERED', filters: [{ attribute: 'custom_label_0', operator: 'MATCH' }] }, 'filters[0].value', 'MISSING_PARAMETER']
  ]
  for (const [body, parameter, code] of errors) {
    res = await call('POST', `product_catalogs/${cid}/product_sets`, { json: body })
    t.equal(res.status, 400, JSON.stringify(body))
    t.match(adsErrorOf(res), { code, parameter }, JSON.stringify(body))
  }

  res = await call('POST', `product_catalogs/${cid}/product_sets`, { json: { name: 'Over 100', description: 'price above 100 USD', type: 'FILTERED', filters: [{ attribute: 'price', operator: 'GREATER_THAN', value: '100.00 USD' }] } })
  const filtered = res.json<{ data: Json }>().data
  t.match(filtered, { type: 'FILTERED', processing_status: 'PROCESSING', product_ids: [], filters: [{ attribute: 'price', operator: 'GREATER_THAN', value: '100.00 USD' }] })
  const read = (id: string): Promise<Json> => call('GET', `product_catalogs/${cid}/product_sets/${id}`).then((r) => r.json<{ data: Json }>().data)
  const done = await eventually(async () => {
    const s = await read(filtered.id as string)
    return s.processing_status === 'DONE' ? s : undefined
  })
  t.same(done.product_ids, ['mid', 'dear'], 'evaluated over the catalog')

  res = await call('POST', `product_catalogs/${cid}/product_sets`, {
    json: { name: 'Summer shoes', type: 'FILTERED', filters: [{ attribute: 'custom_label_0', operator: 'CONTAINS', value: 'SUMMER' }, { attribute: 'product_type', operator: 'MATCH', value: 'apparel > shoes' }] }
  })
  const combined = res.json<{ data: Json }>().data
  t.same((await eventually(async () => ((await read(combined.id as string)).processing_status === 'DONE' ? read(combined.id as string) : undefined))).product_ids, ['dear'])

  // A product change re-runs the evaluation.
  res = await call('PUT', `product_catalogs/${cid}/products`, { json: { products: [product('new-dear', { price: '300.00 USD' })] } })
  t.equal(res.status, 200)
  const reevaluated = await eventually(async () => {
    const s = await read(filtered.id as string)
    return s.processing_status === 'DONE' && (s.product_ids as string[]).includes('new-dear') ? s : undefined
  })
  t.same(reevaluated.product_ids, ['mid', 'dear', 'new-dear'])

  // Prices in another currency cannot be compared with the filter's: the evaluation fails.
  await call('PUT', `product_catalogs/${cid}/products`, { json: { products: [product('euro', { price: '500.00 EUR' })] } })
  const failed = await eventually(async () => {
    const s = await read(filtered.id as string)
    return s.processing_status === 'FAILED' ? s : undefined
  })
  t.same(failed.product_ids, [])

  // Updates: a MANUAL set's name, description and product keys; a FILTERED set not at all.
  const before = await read(filtered.id as string)
  const refusals: Array<[string, Json]> = [
    ['name and description', { name: 'Premium', description: '' }],
    ['filters', { filters: [{ attribute: 'price', operator: 'LESS_THAN', value: '1.00 USD' }] }],
    ['product_keys', { product_keys: [keys[0]] }],
    ['type', { type: 'MANUAL' }],
    ['nothing', {}],
    ['an invalid name', { name: '' }]
  ]
  for (const [label, body] of refusals) {
    res = await call('PUT', `product_catalogs/${cid}/product_sets/${filtered.id}`, { json: body })
    t.equal(res.status, 400, `FILTERED set, ${label}: ${res.text.slice(0, 160)}`)
    t.match(res.json(), { errors: [{ code: 'INVALID_PARAMETER', parameter: 'product_set_id', message: /FILTERED product sets is not supported/ }], request: { params: { product_set_id: filtered.id } } }, label)
  }
  t.same(await read(filtered.id as string), before, 'the FILTERED set is unchanged')
  res = await call('PUT', `product_catalogs/${cid}/product_sets/${manual.id}`, { json: { filters: [{ attribute: 'price', operator: 'LESS_THAN', value: '1.00 USD' }] } })
  t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER', parameter: 'filters' })
  res = await call('PUT', `product_catalogs/${cid}/product_sets/${manual.id}`, { json: { type: 'FILTERED' } })
  t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER', parameter: 'type' })
  res = await call('PUT', `product_catalogs/${cid}/product_sets/${manual.id}`, { json: {} })
  t.match(adsErrorOf(res), { code: 'MISSING_PARAMETER' })
  res = await call('PUT', `product_catalogs/${cid}/product_sets/${manual.id}`, { json: { name: 'Picked again', product_keys: [keys[1]] } })
  t.match(res.json<{ data: Json }>().data, { name: 'Picked again', product_ids: ['mid'], processing_status: 'DONE' })
  // Deleting a FILTERED set is allowed (the public reference's example deletes one).

  // A deleted product drops out of a MANUAL set.
  await call('DELETE', `product_catalogs/${cid}/products`, { json: { product_keys: [keys[1]] } })
  t.same((await read(manual.id as string)).product_ids, [])

  res = await call('GET', `product_catalogs/${cid}/product_sets/999`)
  t.equal(res.status, 404)
  t.match(adsErrorOf(res), { code: 'PRODUCT_SET_NOT_FOUND' })
  res = await call('GET', `product_catalogs/${cid}/product_sets`, { query: { count: '1' } })
  t.equal(res.json<{ data: unknown[] }>().data.length, 1)
  const next = res.json<{ next_cursor: string }>().next_cursor
  t.type(next, 'string')
  res = await call('GET', `product_catalogs/${cid}/product_sets`, { query: { count: '1', cursor: next } })
  t.equal(res.json<{ data: Json[] }>().data.length, 1)

  res = await call('DELETE', `product_catalogs/${cid}/product_sets/${manual.id}`)
  t.equal(res.status, 200)
  t.equal((await call('GET', `product_catalogs/${cid}/product_sets/${manual.id}`)).status, 404)

  const setChanges = await eventually(() => {
    const l = changes.filter((c) => c.entity_type === 'PRODUCT_SET' && c.entity_id === manual.id)
    return l.length >= 3 ? l : undefined
  })
  t.same(setChanges.map((c) => c.change_type).filter((c, i, a) => a.indexOf(c) === i), ['CREATE', 'UPDATE', 'DELETE'])
  const statusChange = changes.find((c) => c.entity_type === 'PRODUCT_SET' && c.entity_id === filtered.id && c.changed_by.platform === 'SYSTEM')
  t.ok(statusChange, 'the evaluator publishes the PROCESSING -> DONE transition')
})

t.test('catalog routes refuse unauthenticated and bearer calls', async (t) => {
  const { rt } = await setup(t)
  const res = await fetch(`${rt.baseUrl}/12/product_catalogs`)
  t.equal(res.status, 401)
  t.match(await res.json(), { errors: [{ code: 'UNAUTHORIZED_ACCESS' }] })
})

t.test('product sets list: count bounds, keyset pages across a deletion, forged cursors', async (t) => {
  const { call, product } = await setup(t)
  const cid = await newCatalog(call)
  let res = await call('PUT', `product_catalogs/${cid}/products`, { json: { products: [product('only')] } })
  const key = res.json<{ data: { products_response: ItemResult[] } }>().data.products_response[0]?.product_key as string
  const ids: string[] = []
  for (const name of ['s1', 's2', 's3']) {
    res = await call('POST', `product_catalogs/${cid}/product_sets`, { json: { name, type: 'MANUAL', product_keys: [key] } })
    ids.push(res.json<{ data: Json }>().data.id as string)
  }
  const list = (query: Record<string, string>): Promise<TestResponse> => call('GET', `product_catalogs/${cid}/product_sets`, { query })
  for (const count of ['0', '101', 'x']) {
    res = await list({ count })
    t.equal(res.status, 400, `count=${count}`)
    t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER', parameter: 'count' })
  }
  res = await list({ count: '100' })
  t.same(res.json<{ data: Json[] }>().data.map((s) => s.name), ['s1', 's2', 's3'], 'count=100 is the largest page')

  res = await list({ count: '1' })
  const first = res.json<{ data: Json[]; next_cursor: string }>()
  t.same(first.data.map((s) => s.name), ['s1'])
  t.equal((await call('DELETE', `product_catalogs/${cid}/product_sets/${ids[0]}`)).status, 200)
  res = await list({ count: '1', cursor: first.next_cursor })
  const second = res.json<{ data: Json[]; next_cursor: string }>()
  t.same(second.data.map((s) => s.name), ['s2'], 'the set after the deleted one is not skipped')
  res = await list({ count: '1', cursor: second.next_cursor })
  t.same(res.json<{ data: Json[]; next_cursor: unknown }>().data.map((s) => s.name), ['s3'])
  t.equal(res.json<{ next_cursor: unknown }>().next_cursor, null)

  const forged = (c: unknown): string => Buffer.from(JSON.stringify(c)).toString('base64url')
  for (const cursor of ['garbage', forged({ seq: 1, group: 'sets' }), forged({ seq: -1, group: 'sets', id: ids[1] }), forged({ seq: 1, group: '', id: ids[1] }), forged({ seq: 1, group: 'sets', id: 'x y' })]) {
    res = await list({ cursor })
    t.equal(res.status, 400, `cursor ${cursor.slice(0, 20)}`)
    t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER', parameter: 'cursor' })
  }
})

t.test('inherited member names as product ids and filter attributes; impossible sale dates', async (t) => {
  const { call, product } = await setup(t)
  const cid = await newCatalog(call)
  const names = ['constructor', 'toString', 'hasOwnProperty']
  let res = await call('PUT', `product_catalogs/${cid}/products`, { json: { products: names.map((id) => product(id)) } })
  t.same(res.json<{ data: { products_response: ItemResult[] } }>().data.products_response.map((r) => r.status), ['CREATE_SUCCESS', 'CREATE_SUCCESS', 'CREATE_SUCCESS'])
  const keys = res.json<{ data: { products_response: ItemResult[] } }>().data.products_response.map((r) => r.product_key)
  res = await call('PUT', `product_catalogs/${cid}/products`, { json: { products: names.map((id) => product(id, { title: `Changed ${id}` })) } })
  const updated = res.json<{ data: { products_response: ItemResult[] } }>().data.products_response
  t.same(updated.map((r) => r.status), ['UPDATE_SUCCESS', 'UPDATE_SUCCESS', 'UPDATE_SUCCESS'], 'the second batch finds each product by its own id')
  t.same(updated.map((r) => r.product_key), keys)
  res = await call('GET', `product_catalogs/${cid}/products`)
  t.same(res.json<{ data: Json[] }>().data.map((p) => p.title), names.map((id) => `Changed ${id}`))

  res = await call('POST', `product_catalogs/${cid}/product_sets`, { json: { name: 'x', type: 'FILTERED', filters: [{ attribute: 'constructor', operator: 'EQUAL_TO', value: 'y' }] } })
  t.equal(res.status, 400)
  t.match(adsErrorOf(res), { code: 'INVALID_PARAMETER', parameter: 'filters[0].attribute' })

  res = await call('PUT', `product_catalogs/${cid}/products`, {
    json: { products: [product('sale', { sale_price: '10.00 USD', sale_price_effective_date: '2030-02-31T00:00+00:00/2030-03-05T00:00+00:00' })] }
  })
  const sale = res.json<{ data: { products_response: ItemResult[] } }>().data.products_response[0]
  t.equal(sale?.status, 'ERROR', 'February 31st does not exist')
  t.match(sale?.errors, [{ code: 'INVALID_PARAMETER', parameter: 'sale_price_effective_date' }])
})

t.test('deleting a catalog publishes a DELETE for each product and product set, then the catalog', async (t) => {
  const { call, product, changes, owner } = await setup(t)
  const cid = await newCatalog(call)
  let res = await call('PUT', `product_catalogs/${cid}/products`, { json: { products: [product('p1', { price: '5.00 USD' }), product('p2', { price: '500.00 USD' })] } })
  const keys = res.json<{ data: { products_response: ItemResult[] } }>().data.products_response.map((r) => r.product_key as string)
  res = await call('POST', `product_catalogs/${cid}/product_sets`, { json: { name: 'manual', type: 'MANUAL', product_keys: keys } })
  const manual = res.json<{ data: Json }>().data
  res = await call('POST', `product_catalogs/${cid}/product_sets`, { json: { name: 'dear', type: 'FILTERED', filters: [{ attribute: 'price', operator: 'GREATER_THAN', value: '100.00 USD' }] } })
  const filtered = res.json<{ data: Json }>().data
  t.equal((await call('DELETE', `product_catalogs/${cid}`)).status, 200)

  const deletes = await eventually(() => {
    const catalogDelete = changes.findIndex((c) => c.entity_type === 'PRODUCT_CATALOG' && c.entity_id === cid && c.change_type === 'DELETE')
    return catalogDelete >= 0 ? changes.slice(0, catalogDelete + 1).filter((c) => c.change_type === 'DELETE') : undefined
  })
  const productDeletes = deletes.filter((c) => c.entity_type === 'PRODUCT').map((c) => c.entity_id)
  t.same([...productDeletes].sort(), [...keys].sort(), 'one DELETE per product')
  const setDeletes = deletes.filter((c) => c.entity_type === 'PRODUCT_SET')
  t.same(setDeletes.map((c) => c.entity_id).sort(), [manual.id, filtered.id].sort(), 'one DELETE per product set')
  t.ok(deletes.every((c) => c.entity_data.deleted === true && c.account_id === `user:${owner.id.user.id}`), 'all under the owner scope, marked deleted')
  t.equal(deletes[deletes.length - 1]?.entity_type, 'PRODUCT_CATALOG', 'the catalog last')
})

t.test('a write waiting for the lease after its catalog was deleted is 404 and leaves nothing behind', async (t) => {
  const { rt, call, product } = await setup(t)
  const cid = await newCatalog(call)
  // The batch fetches its images after resolving the catalog and before taking the lease:
  // this image host deletes the catalog right then, so the write reaches the lease with a stale catalog.
  let deleteStatus = 0
  const gate = http.createServer((req, res) => {
    void (async () => {
      deleteStatus = (await call('DELETE', `product_catalogs/${cid}`)).status
      res.writeHead(200, { 'content-type': 'image/png' })
      res.end(png(600, 600))
    })()
  })
  await new Promise<void>((resolve) => gate.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => gate.close(() => resolve())))
  const image = `http://127.0.0.1:${(gate.address() as AddressInfo).port}/gate.png`

  const res = await call('PUT', `product_catalogs/${cid}/products`, { json: { products: [product('late', { image_link: image })] } })
  t.equal(deleteStatus, 200, 'the catalog was deleted while the batch fetched its image')
  t.equal(res.status, 404)
  t.match(adsErrorOf(res), { code: 'NOT_FOUND', parameter: 'product_catalog_id' })
  let leftovers = 0
  for await (const key of rt.ctx.store.scanPrefix(`ads:catalog:${cid}`)) if (!key.endsWith(':lock')) leftovers++
  t.equal(leftovers, 0, 'no product of a deleted catalog was written')
})
