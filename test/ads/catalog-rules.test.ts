import t from 'tap'
import { PNG } from 'pngjs'
import { Membership } from '../../services/gateway/ads/audiences/membership'
import { isCandidateTerm, matchesKeyword, parseKeyword, postTerms } from '../../services/gateway/ads/audiences/text'
import { addMonths, CUSTOM_AUDIENCE_RULES, validateUpload } from '../../services/gateway/ads/audiences/uploads'
import { evaluateFilters, parseFilters } from '../../services/gateway/ads/catalog/filters'
import { decodeImageHeader, ImageChecker, isPublicAddress } from '../../services/gateway/ads/catalog/images'
import { containsHtml, isValidGtin, type Product, PRODUCT_FIELDS, validateProduct } from '../../services/gateway/ads/catalog/products'
import { MemoryStore } from '../../services/common/store/memory'

/** The pure rules behind catalog and audiences: image headers, codes, filters, text, membership. */

t.test('image headers: the four formats and their dimensions', async (t) => {
  t.same(decodeImageHeader(PNG.sync.write(new PNG({ width: 640, height: 520 }))), { format: 'PNG', width: 640, height: 520 })
  const gif = Buffer.alloc(16)
  gif.write('GIF89a', 0, 'latin1')
  gif.writeUInt16LE(800, 6)
  gif.writeUInt16LE(600, 8)
  t.same(decodeImageHeader(gif), { format: 'GIF', width: 800, height: 600 })

  const jpeg = Buffer.concat([
    Buffer.from([0xff, 0xd8]),
    Buffer.from([0xff, 0xe0, 0x00, 0x10]),
    Buffer.alloc(14),
    Buffer.from([0xff, 0xc0, 0x00, 0x11, 0x08]),
    Buffer.from([0x02, 0x58, 0x03, 0x20]), // height 600, width 800
    Buffer.alloc(12)
  ])
  t.same(decodeImageHeader(jpeg), { format: 'JPG', width: 800, height: 600 })

  const webpX = Buffer.alloc(40)
  webpX.write('RIFF', 0, 'latin1')
  webpX.write('WEBP', 8, 'latin1')
  webpX.write('VP8X', 12, 'latin1')
  webpX.writeUIntLE(1023, 24, 3)
  webpX.writeUIntLE(767, 27, 3)
  t.same(decodeImageHeader(webpX), { format: 'WEBP', width: 1024, height: 768 })
  const webpLossy = Buffer.alloc(40)
  webpLossy.write('RIFF', 0, 'latin1')
  webpLossy.write('WEBP', 8, 'latin1')
  webpLossy.write('VP8 ', 12, 'latin1')
  webpLossy.writeUInt16LE(500, 26)
  webpLossy.writeUInt16LE(501, 28)
  t.same(decodeImageHeader(webpLossy), { format: 'WEBP', width: 500, height: 501 })

  t.equal(decodeImageHeader(Buffer.from('BM this is a bitmap header of sorts, certainly not supported here')), undefined)
})

t.test('image fetches refuse non-public addresses unless allowed', async (t) => {
  for (const [address, pub] of [['127.0.0.1', false], ['10.1.2.3', false], ['172.20.0.1', false], ['192.168.1.1', false], ['169.254.169.254', false], ['100.64.0.1', false], ['8.8.8.8', true], ['::1', false], ['fd00::1', false], ['::ffff:10.0.0.1', false], ['2001:4860:4860::8888', true]] as const) {
    t.equal(isPublicAddress(address), pub, address)
  }
  const checker = new ImageChecker({ timeoutMs: 2000, allowPrivate: false })
  t.teardown(() => checker.close())
  t.match(await checker.check('http://127.0.0.1:9/a.png'), { ok: false, message: /not a public address/ })
  t.match(await checker.check('http://localhost:9/a.png'), { ok: false, message: /not public|could not be fetched/ })
})

t.test('product codes and text rules', async (t) => {
  for (const gtin of ['4006381333931', '036000291452', '96385074', '0306406152', '080442957X', '978-0-306-40615-7', '10614141000415']) t.ok(isValidGtin(gtin), gtin)
  for (const gtin of ['4006381333932', '12345', '03600029145A', '0306406151']) t.notOk(isValidGtin(gtin), gtin)
  t.notOk(containsHtml('5 < 6 and 7 > 3, Tom & Jerry'))
  for (const html of ['<p>hi</p>', 'line<br/>break', 'a &amp; b', '<!-- c -->', '&#39;quoted&#39;']) t.ok(containsHtml(html), html)
  const v = validateProduct({ id: 'x', title: 'T', description: 'D', availability: 'preorder', condition: 'used', price: '1 EUR', link: 'https://a.example', image_link: 'https://a.example/i', mpn: 'M', surprise: 1 })
  t.ok(v.ok)
  if (v.ok) {
    t.match(v.warnings, [{ code: 'UNKNOWN_ATTRIBUTE', parameter: 'surprise' }])
    t.same(Object.keys(v.product).sort(), PRODUCT_FIELDS.filter((f) => f !== 'product_key' && f !== 'item_group_key').sort())
    t.equal(v.product.brand, null)
  }
  t.match(validateProduct('not an object'), { ok: false, errors: [{ parameter: 'products' }] })
})

t.test('product set filters: operators by attribute and their evaluation', async (t) => {
  const base = Object.fromEntries(PRODUCT_FIELDS.map((f) => [f, null])) as unknown as Product
  const p = (id: string, fields: Partial<Product>): Product => ({ ...base, id, product_key: id, ...fields })
  const products = [
    p('a', { price: '10.00 USD', inventory: 3, product_type: 'Home > Kitchen', custom_label_1: 'Gift' }),
    p('b', { price: '99.99 USD', inventory: 0, product_type: 'Home > Kitchenware', custom_label_1: null }),
    p('c', { price: '150 USD', sale_price: '120 USD', inventory: 12, product_type: 'Home' })
  ]
  const run = (filters: unknown): unknown => {
    const parsed = parseFilters(filters)
    if (!parsed.ok) return parsed.error.parameter
    const r = evaluateFilters(parsed.filters, products)
    return r.ok ? r.productIds : `FAILED: ${r.reason}`
  }
  t.same(run([{ attribute: 'product_type', operator: 'MATCH', value: 'home > kitchen' }]), ['a'], 'MATCH is taxonomy-aware')
  t.same(run([{ attribute: 'product_type', operator: 'MATCH', value: 'Home' }]), ['a', 'b', 'c'])
  t.same(run([{ attribute: 'product_type', operator: 'EQUAL_TO', value: 'home' }]), [], 'EQUAL_TO is exact')
  t.same(run([{ attribute: 'product_type', operator: 'CONTAINS', value: 'KITCHEN' }]), ['a', 'b'])
  t.same(run([{ attribute: 'custom_label_1', operator: 'NOT_CONTAINS', value: 'gift' }]), ['b', 'c'], 'an unset value contains nothing')
  t.same(run([{ attribute: 'inventory', operator: 'GREATER_THAN', value: 2 }]), ['a', 'c'])
  t.same(run([{ attribute: 'price', operator: 'LESS_THAN', value: '100 USD' }, { attribute: 'inventory', operator: 'EQUAL_TO', value: '0' }]), ['b'], 'filters combine with AND')
  t.same(run([{ attribute: 'sale_price', operator: 'LESS_THAN', value: '130.00 USD' }]), ['c'], 'no sale_price never matches')
  t.match(run([{ attribute: 'price', operator: 'GREATER_THAN', value: '1.00 EUR' }]), /^FAILED: .*USD/)
  t.same(run([{ attribute: 'google_product_category', operator: 'MATCH', value: 'x' }]), [], 'the older attribute name is accepted')
  t.equal(run(Array.from({ length: 21 }, () => ({ attribute: 'price', operator: 'LESS_THAN', value: '1 USD' }))), 'filters')
  t.equal(run([{ attribute: 'inventory', operator: 'MATCH', value: '1' }]), 'filters[0].operator')
})

t.test('keyword text: terms, phrases, hashtags', async (t) => {
  const post = postTerms('RT @dev: Big Data & #AI at https://x.co/1 — it’s big-data season! 2026')
  t.equal(post.plain, ' rt big data ai at it\'s big-data season 2026 ')
  t.same(post.terms, ['rt', 'big', 'data', '#ai', 'at', "it's", 'big-data', 'season', '2026'])
  t.ok(matchesKeyword(post, parseKeyword('big data')!))
  t.ok(matchesKeyword(post, parseKeyword('AI')!))
  t.ok(matchesKeyword(post, parseKeyword('#ai')!))
  t.notOk(matchesKeyword(post, parseKeyword('#data')!), 'a hashtag keyword needs the hashtag')
  t.notOk(matchesKeyword(post, parseKeyword('dat')!), 'whole words only')
  t.equal(parseKeyword('!!!'), undefined)
  t.notOk(isCandidateTerm('the'))
  t.notOk(isCandidateTerm('2026'))
  t.ok(isCandidateTerm('#ai'))
})

t.test('membership: identities merge, deletes remove people, windows count, all or nothing', async (t) => {
  const store = await MemoryStore.open()
  t.teardown(() => store.close())
  const m = new Membership(store, 'custom_audience', 'aud1')
  const now = Date.now()
  const far = now + 86_400_000
  t.same(await m.summary(now), { size: 0, uploads: 0 })
  await m.apply([{ type: 'Update', users: [['email:a'], ['email:b', 'handle:b'], ['email:c']], effectiveAt: now, expiresAt: far }], now)
  t.same(await m.summary(now), { size: 3, uploads: 1 })
  // One user object naming two existing people merges them.
  await m.apply([{ type: 'Update', users: [['email:a', 'handle:b']], effectiveAt: now, expiresAt: far }], now)
  t.equal((await m.summary(now)).size, 2)
  t.ok(await m.contains('email:b', now), 'identifiers of merged people still resolve')
  await m.apply([{ type: 'Delete', users: [['handle:b']], effectiveAt: now, expiresAt: far }], now)
  t.equal((await m.summary(now)).size, 1)
  t.notOk(await m.contains('email:a', now))
  // A created-then-deleted person within one upload leaves nothing behind.
  await m.apply(
    [
      { type: 'Update', users: [['email:z']], effectiveAt: now, expiresAt: far },
      { type: 'Delete', users: [['email:z']], effectiveAt: now, expiresAt: far }
    ],
    now
  )
  t.equal((await m.summary(now)).size, 1)
  // Windows.
  await m.apply([{ type: 'Update', users: [['email:later']], effectiveAt: now + 1000, expiresAt: far }], now)
  t.equal((await m.summary(now)).size, 1)
  t.equal((await m.summary(now + 1001)).size, 2)
  t.same((await m.members(now + 1001)).length, 2)
  t.equal((await m.summary(far + 1)).size, 0, 'everyone expired')
  t.same(await m.members(far + 1), [], 'expired members are purged')
})

t.test('upload rules: defaults and dates', async (t) => {
  t.equal(new Date(addMonths(Date.UTC(2025, 0, 31, 12), 1)).toISOString(), '2025-02-28T12:00:00.000Z')
  t.equal(new Date(addMonths(Date.UTC(2024, 0, 15), 13)).toISOString(), '2025-02-15T00:00:00.000Z')
  const now = Date.UTC(2026, 0, 10)
  const v = validateUpload([{ operation_type: 'Update', params: { users: [{ email: ['a'.repeat(64)], partner_user_id: ['p-1'] }] } }], CUSTOM_AUDIENCE_RULES, now)
  t.ok(v.ok)
  if (v.ok) {
    t.same(v.plan.operations[0], { type: 'Update', users: [[`email:${'a'.repeat(64)}`, 'partner_user_id:p-1']], effectiveAt: now, expiresAt: Date.UTC(2027, 1, 10) }, 'expires 13 months after the request by default')
    t.same(v.plan.counts, [1])
  }
})
