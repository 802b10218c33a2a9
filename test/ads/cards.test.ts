import t from 'tap'
import { TOPICS, type BusMessage } from '../../services/common/bus/types'
import type { EntityChange } from '../../services/gateway/ads/entities'
import { expectAdsError, hasFfmpeg, libraryMedia, Media, png, uploadKey } from '../support/fixtures/media'
import { oauth1Request, type TestResponse } from '../support/http'
import { startTestRuntime } from '../support/runtime'
import { eventually } from '../support/util'
import { createAdsIdentity } from '../support/fixtures/ads'

/**
 * Cards from components: every component rule with its error and JSON path,
 * the card_type derived for each media / destination combination, slides,
 * list filters (including legacy cards), read, update, delete and the
 * cards/all fetch.
 */

// ffmpeg makes the JPEG, GIF, WEBP and MP4 inputs. `make test` installs it (deps-system), so its
// absence is a failure of the suite, never a silent skip of the video, GIF, JPEG and WEBP checks.
t.ok(hasFfmpeg(), 'ffmpeg is installed (make deps-system); the JPEG, GIF, WEBP and MP4 checks need it')

interface Card {
  id: string
  name: string
  card_uri: string
  card_type: string
  components?: Array<Record<string, unknown>>
  slides?: unknown[]
  deleted: boolean
}

const website = (title = 'Visit us', url = 'https://example.com/landing'): Record<string, unknown> => ({ type: 'DETAILS', title, destination: { type: 'WEBSITE', url } })
const button = (destination: Record<string, unknown> = { type: 'APP', country_code: 'US', androidstore_app_id: 'com.example.app' }, value = 'INSTALL'): Record<string, unknown> => ({ type: 'BUTTON', label: { type: 'ENUM', value }, destination })

t.test('components: rules, card types, slides, list, read, update, delete', async (t) => {
  const rt = await startTestRuntime(t)
  const { id, account } = await createAdsIdentity(rt.ctx)
  const cards = `${rt.baseUrl}/12/accounts/${account.id}/cards`
  const changes: EntityChange[] = []
  const consumer = await rt.ctx.bus.subscribe({ groupId: 'card-changes', topics: [TOPICS.adsEntityChanges], handler: async (m: BusMessage) => { changes.push(m.value as EntityChange) } })
  t.teardown(() => consumer.close())

  const img1 = await libraryMedia(rt.baseUrl, id, account, png(800, 418))
  const img2 = await libraryMedia(rt.baseUrl, id, account, png(800, 800))
  const notInLibrary = await uploadKey(rt.baseUrl, id, png(20, 20))
  const made = Media.create(t)
  const video1 = await libraryMedia(rt.baseUrl, id, account, made.mp4(640, 360, 1), { category: 'tweet_video' })
  const video2 = await libraryMedia(rt.baseUrl, id, account, made.mp4(640, 360, 1), { category: 'amplify_video' })
  const gif = await libraryMedia(rt.baseUrl, id, account, made.gif(100, 100, 3), { category: 'tweet_gif' })

  const create = (body: unknown): Promise<TestResponse> => oauth1Request('POST', cards, id, { json: body })
  const created = async (body: Record<string, unknown>): Promise<Card> => {
    const res = await create(body)
    t.equal(res.status, 200, `create ${String(body.name)}: ${res.text.slice(0, 300)}`)
    return res.json<{ data: Card }>().data
  }

  // card_type follows the media and the destination.
  const imageWebsite = await created({ name: 'Image website', components: [{ type: 'MEDIA', media_key: img1 }, website()] })
  t.match(imageWebsite, { card_type: 'IMAGE_WEBSITE', card_uri: `card://${imageWebsite.id}`, deleted: false })
  t.match(imageWebsite.id, /^[0-9]{19}$/)
  t.same(imageWebsite.components, [{ type: 'MEDIA', media_key: img1 }, website()], 'components as given, in order')
  t.equal((await created({ name: 'Image app', components: [{ type: 'MEDIA', media_key: img1 }, button()] })).card_type, 'IMAGE_APP')
  t.equal((await created({ name: 'Image carousel website', components: [{ type: 'SWIPEABLE_MEDIA', media_keys: [img1, img2] }, website()] })).card_type, 'IMAGE_CAROUSEL_WEBSITE')
  const carouselApp = await created({ name: 'Image carousel app', components: [{ type: 'SWIPEABLE_MEDIA', media_keys: [img1, img2, img1] }, button({ type: 'APP', country_code: 'GB', ios_app_store_identifier: '333903271', ios_deep_link: 'example://open' }, 'OPEN')] })
  t.equal(carouselApp.card_type, 'IMAGE_CAROUSEL_APP')
  t.equal((await created({ name: 'Multi dest images', slides: [[{ type: 'MEDIA', media_key: img1 }, website('One')], [{ type: 'MEDIA', media_key: img2 }, website('Two', 'https://example.org')]] })).card_type, 'IMAGE_MULTI_DEST_CAROUSEL_WEBSITE')
  t.equal((await created({ name: 'Video website', components: [{ type: 'MEDIA', media_key: video1 }, website()] })).card_type, 'VIDEO_WEBSITE')
  t.equal((await created({ name: 'Video app', components: [{ type: 'MEDIA', media_key: video1 }, button()] })).card_type, 'VIDEO_APP')
  t.equal((await created({ name: 'Video carousel website', components: [{ type: 'SWIPEABLE_MEDIA', media_keys: [video1, video2] }, website()] })).card_type, 'VIDEO_CAROUSEL_WEBSITE')
  t.equal((await created({ name: 'Video carousel app', components: [{ type: 'SWIPEABLE_MEDIA', media_keys: [video1, video2] }, button()] })).card_type, 'VIDEO_CAROUSEL_APP')
  t.equal((await created({ name: 'Mixed website', components: [{ type: 'SWIPEABLE_MEDIA', media_keys: [img1, video1] }, website()] })).card_type, 'MIXED_MEDIA_SINGLE_DEST_CAROUSEL_WEBSITE')
  t.equal((await created({ name: 'Mixed app', components: [{ type: 'SWIPEABLE_MEDIA', media_keys: [video1, img2] }, button()] })).card_type, 'MIXED_MEDIA_SINGLE_DEST_CAROUSEL_APP')
  t.equal((await created({ name: 'Multi dest videos', slides: [[{ type: 'MEDIA', media_key: video1 }, website()], [{ type: 'MEDIA', media_key: video2 }, website()]] })).card_type, 'VIDEO_MULTI_DEST_CAROUSEL_WEBSITE')
  t.equal((await created({ name: 'Multi dest mixed', slides: [[{ type: 'MEDIA', media_key: img1 }, website()], [{ type: 'MEDIA', media_key: video2 }, website()]] })).card_type, 'MIXED_MEDIA_MULTI_DEST_CAROUSEL_WEBSITE')
  expectAdsError(t, await create({ name: 'GIF', components: [{ type: 'MEDIA', media_key: gif }, website()] }), 400, 'INVALID_PARAMETER', 'components[0].media_key', 'GIF in MEDIA')
  // The public documentation's googleplay_* names are accepted and stored under the contract's names.
  const alias = await created({ name: 'Alias', components: [{ type: 'MEDIA', media_key: img1 }, button({ type: 'APP', country_code: 'US', googleplay_app_id: 'com.twitter.android', googleplay_deep_link: 'twitter://user?screen_name=x' }, 'OPEN')] })
  t.same(alias.components?.[1], button({ type: 'APP', country_code: 'US', androidstore_app_id: 'com.twitter.android', androidstore_deep_link: 'twitter://user?screen_name=x' }, 'OPEN'))

  // Every rule, with its code and parameter.
  const media = { type: 'MEDIA', media_key: img1 }
  const rules: Array<[string, unknown, number, string, string | undefined]> = [
    ['no name', { components: [media, website()] }, 400, 'MISSING_PARAMETER', 'name'],
    ['name 81', { name: 'n'.repeat(81), components: [media, website()] }, 400, 'INVALID_PARAMETER', 'name'],
    ['neither components nor slides', { name: 'x' }, 400, 'MISSING_PARAMETER', 'components'],
    ['components and slides', { name: 'x', components: [media, website()], slides: [[media, website()], [media, website()]] }, 400, 'EXCLUSIVE_PARAMETERS', 'components'],
    ['unknown field', { name: 'x', components: [media, website()], card_type: 'IMAGE_APP' }, 400, 'INVALID_PARAMETER', 'card_type'],
    ['components not an array', { name: 'x', components: {} }, 400, 'INVALID_PARAMETER', 'components'],
    ['one component', { name: 'x', components: [media] }, 400, 'INVALID_PARAMETER', 'components'],
    ['three components', { name: 'x', components: [media, website(), website()] }, 400, 'INVALID_PARAMETER', 'components'],
    ['description first', { name: 'x', components: [website(), media] }, 400, 'INVALID_PARAMETER', 'components'],
    ['two media', { name: 'x', components: [media, media] }, 400, 'INVALID_PARAMETER', 'components'],
    ['unknown type', { name: 'x', components: [{ type: 'POLL' }, website()] }, 400, 'INVALID_PARAMETER', 'components[0].type'],
    ['type missing', { name: 'x', components: [{ media_key: img1 }, website()] }, 400, 'MISSING_PARAMETER', 'components[0].type'],
    ['MEDIA without key', { name: 'x', components: [{ type: 'MEDIA' }, website()] }, 400, 'MISSING_PARAMETER', 'components[0].media_key'],
    ['media not in library', { name: 'x', components: [{ type: 'MEDIA', media_key: notInLibrary }, website()] }, 400, 'INVALID_PARAMETER', 'components[0].media_key'],
    ['unknown media key', { name: 'x', components: [{ type: 'MEDIA', media_key: '3_1' }, website()] }, 400, 'INVALID_PARAMETER', 'components[0].media_key'],
    ['MEDIA with destination', { name: 'x', components: [{ type: 'MEDIA', media_key: img1, destination: { type: 'WEBSITE', url: 'https://a.b' } }, website()] }, 400, 'INVALID_PARAMETER', 'components[0].destination'],
    ['swipeable of 1', { name: 'x', components: [{ type: 'SWIPEABLE_MEDIA', media_keys: [img1] }, website()] }, 400, 'INVALID_PARAMETER', 'components[0].media_keys'],
    ['swipeable of 7', { name: 'x', components: [{ type: 'SWIPEABLE_MEDIA', media_keys: Array(7).fill(img1) }, website()] }, 400, 'INVALID_PARAMETER', 'components[0].media_keys'],
    ['swipeable without keys', { name: 'x', components: [{ type: 'SWIPEABLE_MEDIA' }, website()] }, 400, 'MISSING_PARAMETER', 'components[0].media_keys'],
    ['swipeable with a stranger', { name: 'x', components: [{ type: 'SWIPEABLE_MEDIA', media_keys: [img1, notInLibrary] }, website()] }, 400, 'INVALID_PARAMETER', 'components[0].media_keys[1]'],
    ['DETAILS without title', { name: 'x', components: [media, { type: 'DETAILS', destination: { type: 'WEBSITE', url: 'https://a.b' } }] }, 400, 'MISSING_PARAMETER', 'components[1].title'],
    ['DETAILS without destination', { name: 'x', components: [media, { type: 'DETAILS', title: 'T' }] }, 400, 'MISSING_PARAMETER', 'components[1].destination'],
    ['DETAILS with APP destination', { name: 'x', components: [media, { type: 'DETAILS', title: 'T', destination: { type: 'APP', country_code: 'US', androidstore_app_id: 'com.a.b' } }] }, 400, 'INVALID_PARAMETER', 'components[1].destination.type'],
    ['DETAILS with a label', { name: 'x', components: [media, { ...website(), label: { type: 'ENUM', value: 'SHOP' } }] }, 400, 'INVALID_PARAMETER', 'components[1].label'],
    ['website without url', { name: 'x', components: [media, { type: 'DETAILS', title: 'T', destination: { type: 'WEBSITE' } }] }, 400, 'MISSING_PARAMETER', 'components[1].destination.url'],
    ['website with a bad url', { name: 'x', components: [media, website('T', 'not a url')] }, 400, 'INVALID_PARAMETER', 'components[1].destination.url'],
    ['website with country_code', { name: 'x', components: [media, { type: 'DETAILS', title: 'T', destination: { type: 'WEBSITE', url: 'https://a.b', country_code: 'US' } }] }, 400, 'INVALID_PARAMETER', 'components[1].destination.country_code'],
    ['destination type unknown', { name: 'x', components: [media, { type: 'DETAILS', title: 'T', destination: { type: 'PHONE' } }] }, 400, 'INVALID_PARAMETER', 'components[1].destination.type'],
    ['BUTTON without label', { name: 'x', components: [media, { type: 'BUTTON', destination: { type: 'APP', country_code: 'US', androidstore_app_id: 'com.a.b' } }] }, 400, 'MISSING_PARAMETER', 'components[1].label'],
    ['label type not ENUM', { name: 'x', components: [media, { type: 'BUTTON', label: { type: 'TEXT', value: 'SHOP' }, destination: { type: 'APP', country_code: 'US', androidstore_app_id: 'com.a.b' } }] }, 400, 'INVALID_PARAMETER', 'components[1].label.type'],
    ['label value unknown', { name: 'x', components: [media, button(undefined, 'BUY')] }, 400, 'INVALID_PARAMETER', 'components[1].label.value'],
    ['BUTTON with WEBSITE destination', { name: 'x', components: [media, { type: 'BUTTON', label: { type: 'ENUM', value: 'SHOP' }, destination: { type: 'WEBSITE', url: 'https://a.b' } }] }, 400, 'INVALID_PARAMETER', 'components[1].destination.type'],
    ['BUTTON without destination', { name: 'x', components: [media, { type: 'BUTTON', label: { type: 'ENUM', value: 'SHOP' } }] }, 400, 'MISSING_PARAMETER', 'components[1].destination'],
    ['app without country', { name: 'x', components: [media, button({ type: 'APP', androidstore_app_id: 'com.a.b' })] }, 400, 'MISSING_PARAMETER', 'components[1].destination.country_code'],
    ['app with a bad country', { name: 'x', components: [media, button({ type: 'APP', country_code: 'XX', androidstore_app_id: 'com.a.b' })] }, 400, 'INVALID_PARAMETER', 'components[1].destination.country_code'],
    ['app without any store id', { name: 'x', components: [media, button({ type: 'APP', country_code: 'US' })] }, 400, 'MISSING_PARAMETER', 'components[1].destination.androidstore_app_id'],
    ['android deep link without its id', { name: 'x', components: [media, button({ type: 'APP', country_code: 'US', ios_app_store_identifier: '1', androidstore_deep_link: 'app://x' })] }, 400, 'INCLUSIVE_PARAMETERS', 'components[1].destination.androidstore_deep_link'],
    ['ios deep link without its id', { name: 'x', components: [media, button({ type: 'APP', country_code: 'US', androidstore_app_id: 'com.a.b', ios_deep_link: 'app://x' })] }, 400, 'INCLUSIVE_PARAMETERS', 'components[1].destination.ios_deep_link'],
    ['bad android package', { name: 'x', components: [media, button({ type: 'APP', country_code: 'US', androidstore_app_id: 'not a package' })] }, 400, 'INVALID_PARAMETER', 'components[1].destination.androidstore_app_id'],
    ['bad ios id', { name: 'x', components: [media, button({ type: 'APP', country_code: 'US', ios_app_store_identifier: 'id-abc' })] }, 400, 'INVALID_PARAMETER', 'components[1].destination.ios_app_store_identifier'],
    ['one slide', { name: 'x', slides: [[media, website()]] }, 400, 'INVALID_PARAMETER', 'slides'],
    ['seven slides', { name: 'x', slides: Array(7).fill([media, website()]) }, 400, 'INVALID_PARAMETER', 'slides'],
    ['swipeable in a slide', { name: 'x', slides: [[{ type: 'SWIPEABLE_MEDIA', media_keys: [img1, img2] }, website()], [media, website()]] }, 400, 'INVALID_PARAMETER', 'slides[0][0].type'],
    ['app in a slide', { name: 'x', slides: [[media, website()], [media, button()]] }, 400, 'INVALID_PARAMETER', 'slides[1][1].type'],
    ['bad slide contents', { name: 'x', slides: [[media, website()], [media, { type: 'DETAILS', title: 'T' }]] }, 400, 'MISSING_PARAMETER', 'slides[1][1].destination'],
    // Names of Object's own members are plain unknown values, never a lookup into Object.prototype.
    ['type toString', { name: 'x', components: [{ type: 'toString' }, website()] }, 400, 'INVALID_PARAMETER', 'components[0].type'],
    ['type constructor', { name: 'x', components: [media, { type: 'constructor' }] }, 400, 'INVALID_PARAMETER', 'components[1].type'],
    ['type __proto__', { name: 'x', components: [{ type: '__proto__' }, website()] }, 400, 'INVALID_PARAMETER', 'components[0].type'],
    ['type hasOwnProperty', { name: 'x', components: [{ type: 'hasOwnProperty' }, website()] }, 400, 'INVALID_PARAMETER', 'components[0].type'],
    ['app destination key constructor', { name: 'x', components: [media, button({ type: 'APP', country_code: 'US', androidstore_app_id: 'com.a.b', constructor: 'x' })] }, 400, 'INVALID_PARAMETER', 'components[1].destination.constructor'],
    ['app destination key toString', { name: 'x', components: [media, button({ type: 'APP', country_code: 'US', androidstore_app_id: 'com.a.b', toString: 'x' })] }, 400, 'INVALID_PARAMETER', 'components[1].destination.toString'],
    ['website destination key valueOf', { name: 'x', components: [media, { type: 'DETAILS', title: 'T', destination: { type: 'WEBSITE', url: 'https://a.b', valueOf: 1 } }] }, 400, 'INVALID_PARAMETER', 'components[1].destination.valueOf']
  ]
  for (const [label, body, status, code, parameter] of rules) expectAdsError(t, await create(body), status, code, parameter, label)
  expectAdsError(t, await oauth1Request('POST', cards, id, { query: { name: 'x' } }), 400, 'INVALID_PARAMETER', 'content-type', 'JSON body required')
  // A `__proto__` key in the JSON text is refused whole, never merged into the object's prototype.
  const poisoned: unknown = JSON.parse('{"type":"APP","__proto__":{"country_code":"US","androidstore_app_id":"com.a.b"}}')
  const protoKey = await create({ name: 'x', components: [media, { type: 'BUTTON', label: { type: 'ENUM', value: 'OPEN' }, destination: poisoned }] })
  t.equal(protoKey.status, 400, `__proto__ key: ${protoKey.text.slice(0, 200)}`)
  t.match(protoKey.json(), { errors: [{ code: /^[A-Z_]+$/ }] }, '__proto__ key: ads error envelope')
  t.equal((await create({ name: 'n'.repeat(80), components: [media, website('t'.repeat(70))] })).status, 200, 'name 80 and title 70 are accepted')

  // List: filters, count bounds, q prefix (case-insensitive).
  const list = async (query: Record<string, string>): Promise<Card[]> => {
    const res = await oauth1Request('GET', cards, id, { query })
    t.equal(res.status, 200, `list ${JSON.stringify(query)}: ${res.text.slice(0, 200)}`)
    return res.json<{ data: Card[] }>().data
  }
  const all = await list({ count: '200' })
  t.ok(all.length >= 7)
  t.same((await list({ card_types: 'IMAGE_APP' })).map((c) => c.name).sort(), ['Alias', 'Image app'])
  t.same((await list({ card_id: `${imageWebsite.id},${carouselApp.id}` })).map((c) => c.id), [imageWebsite.id, carouselApp.id])
  t.same((await list({ card_uris: imageWebsite.card_uri })).map((c) => c.id), [imageWebsite.id])
  t.same((await list({ q: 'image CAR' })).map((c) => c.name), ['Image carousel website', 'Image carousel app'])
  t.same(await list({ q: 'carousel' }), [], 'q is a prefix match')
  t.equal((await list({ count: '2' })).length, 2)
  expectAdsError(t, await oauth1Request('GET', cards, id, { query: { count: '201' } }), 400, 'INVALID_PARAMETER', 'count', 'count 201')
  expectAdsError(t, await oauth1Request('GET', cards, id, { query: { q: 'q'.repeat(81) } }), 400, 'INVALID_PARAMETER', 'q', 'q 81')
  expectAdsError(t, await oauth1Request('GET', cards, id, { query: { card_types: 'BANNER' } }), 400, 'INVALID_PARAMETER', 'card_types', 'unknown card type')
  expectAdsError(t, await oauth1Request('GET', cards, id, { query: { card_uris: 'https://x' } }), 400, 'INVALID_PARAMETER', 'card_uris', 'malformed uri')
  const ids201 = Array.from({ length: 201 }, (_, i) => String(i + 1)).join(',')
  expectAdsError(t, await oauth1Request('GET', cards, id, { query: { card_id: ids201 } }), 400, 'INVALID_PARAMETER', 'card_id', '201 card ids')
  expectAdsError(t, await oauth1Request('GET', cards, id, { query: { card_uris: ids201.split(',').map((n) => `card://${n}`).join(',') } }), 400, 'INVALID_PARAMETER', 'card_uris', '201 card uris')

  // Read (a data array), update (replace; the card as an object), delete (soft, then 404).
  const read = await oauth1Request('GET', `${cards}/${imageWebsite.id}`, id)
  t.match(read.json(), { data: [{ id: imageWebsite.id, card_type: 'IMAGE_WEBSITE' }], data_type: 'card' })
  expectAdsError(t, await oauth1Request('GET', `${cards}/1234`, id), 404, 'CARD_NOT_FOUND', undefined, 'unknown card')
  const renamed = await oauth1Request('PUT', `${cards}/${imageWebsite.id}`, id, { json: { name: 'Renamed' } })
  t.match(renamed.json(), { data: { name: 'Renamed', card_type: 'IMAGE_WEBSITE', components: [{ media_key: img1 }, {}] } }, 'PUT answers the card itself, as POST does')
  const relaid = await oauth1Request('PUT', `${cards}/${imageWebsite.id}`, id, { json: { components: [{ type: 'SWIPEABLE_MEDIA', media_keys: [img2, img1] }, button()] } })
  t.match(relaid.json(), { data: { name: 'Renamed', card_type: 'IMAGE_CAROUSEL_APP', components: [{ type: 'SWIPEABLE_MEDIA', media_keys: [img2, img1] }, { type: 'BUTTON' }] } })
  const toSlides = await oauth1Request('PUT', `${cards}/${imageWebsite.id}`, id, { json: { slides: [[media, website()], [media, website()]] } })
  const slid = toSlides.json<{ data: Card }>().data
  t.equal(slid.card_type, 'IMAGE_MULTI_DEST_CAROUSEL_WEBSITE')
  t.notOk('components' in slid, 'slides replace components')
  expectAdsError(t, await oauth1Request('PUT', `${cards}/${imageWebsite.id}`, id, { json: { components: [media] } }), 400, 'INVALID_PARAMETER', 'components', 'invalid update')
  expectAdsError(t, await oauth1Request('PUT', `${cards}/${imageWebsite.id}`, id, { json: { name: '' } }), 400, 'INVALID_PARAMETER', 'name', 'empty name')
  const removed = await oauth1Request('DELETE', `${cards}/${imageWebsite.id}`, id)
  t.match(removed.json(), { data: [{ id: imageWebsite.id, deleted: true }] })
  expectAdsError(t, await oauth1Request('GET', `${cards}/${imageWebsite.id}`, id), 404, 'CARD_NOT_FOUND', undefined, 'deleted card')
  t.match((await oauth1Request('GET', `${cards}/${imageWebsite.id}`, id, { query: { with_deleted: 'true' } })).json(), { data: [{ deleted: true }] })
  t.notOk((await list({ count: '200' })).some((c) => c.id === imageWebsite.id), 'not listed')
  t.ok((await list({ count: '200', with_deleted: 'true' })).some((c) => c.id === imageWebsite.id), 'listed with with_deleted')
  expectAdsError(t, await oauth1Request('DELETE', `${cards}/${imageWebsite.id}`, id), 404, 'CARD_NOT_FOUND', undefined, 'deleted twice')
  expectAdsError(t, await oauth1Request('PUT', `${cards}/${imageWebsite.id}`, id, { json: { name: 'x' } }), 404, 'CARD_NOT_FOUND', undefined, 'update after delete')

  // Legacy cards only with include_legacy_cards; cards/all fetches any kind by URI.
  const poll = await oauth1Request('POST', `${cards}/poll`, id, { query: { name: 'Image poll-free', duration_in_minutes: '60', first_choice: 'A', second_choice: 'B' } })
  const pollCard = poll.json<{ data: Card }>().data
  t.notOk((await list({ count: '200' })).some((c) => c.id === pollCard.id), 'legacy cards left out by default')
  const withLegacy = await list({ count: '200', include_legacy_cards: 'true' })
  t.ok(withLegacy.some((c) => c.id === pollCard.id && c.card_type === 'TEXT_POLLS'), 'and included on request')
  t.same((await list({ include_legacy_cards: 'true', card_types: 'TEXT_POLLS' })).map((c) => c.id), [pollCard.id])
  const fetched = await oauth1Request('GET', `${cards}/all`, id, { query: { card_uris: `${pollCard.card_uri},${carouselApp.card_uri}` } })
  t.same(fetched.json<{ data: Card[] }>().data.map((c) => c.id).sort(), [pollCard.id, carouselApp.id].sort())
  expectAdsError(t, await oauth1Request('GET', `${cards}/all`, id), 400, 'MISSING_PARAMETER', 'card_uris', 'cards/all needs card_uris')
  t.match((await oauth1Request('GET', `${cards}/all/${pollCard.id}`, id)).json(), { data: { id: pollCard.id, card_type: 'TEXT_POLLS' } })

  await eventually(() => changes.some((c) => c.entity_id === imageWebsite.id && c.change_type === 'DELETE'))
  const trail = changes.filter((c) => c.entity_id === imageWebsite.id)
  t.same(trail.map((c) => c.change_type), ['CREATE', 'UPDATE', 'UPDATE', 'UPDATE', 'DELETE'])
  t.match(trail[2]?.changes, { card_type: { old: 'IMAGE_WEBSITE', new: 'IMAGE_CAROUSEL_APP' } })
  t.match(trail[0], { entity_type: 'CARD', entity_data: { card_uri: imageWebsite.card_uri } })
})
