import t, { type Test } from 'tap'
import { TOPICS, type BusMessage } from '../../services/common/bus/types'
import type { Runtime } from '../../services/common/runtime'
import type { EntityChange } from '../../services/gateway/ads/entities'
import { expectAdsError, hasFfmpeg, libraryMedia, Media, png } from '../support/fixtures/media'
import { oauth1Request, type TestResponse } from '../support/http'
import { startTestRuntime } from '../support/runtime'
import { eventually } from '../support/util'
import { createAdsIdentity } from '../support/fixtures/ads'

/**
 * Conversation cards: every conditional rule of the video form (title vs
 * second_cta, each *_cta_tweet with its CTA, the CTA order, lengths 20
 * without # and 23, a 16:9 video from the library), updates checked as the
 * card they would produce, the hard delete; and the legacy image form,
 * including its delete.
 */

// ffmpeg makes the JPEG, GIF, WEBP and MP4 inputs. `make test` installs it (deps-system), so its
// absence is a failure of the suite, never a silent skip of the video, GIF, JPEG and WEBP checks.
t.ok(hasFfmpeg(), 'ffmpeg is installed (make deps-system); the JPEG, GIF, WEBP and MP4 checks need it')

/** Every ads entity change the runtime publishes, as a subscriber of the topic sees them. */
async function observeChanges(t: Test, rt: Runtime, groupId: string): Promise<EntityChange[]> {
  const changes: EntityChange[] = []
  const consumer = await rt.ctx.bus.subscribe({ groupId, topics: [TOPICS.adsEntityChanges], handler: async (m: BusMessage) => { changes.push(m.value as EntityChange) } })
  t.teardown(() => consumer.close())
  return changes
}

interface Conversation {
  id: string
  card_uri: string
  card_type: string
  title: string | null
  first_cta: string
  second_cta?: string
  media_key: string
  media_url: string
  poster_media_url?: string | null
  video_owner_id?: string
  video_width?: string
  video_height?: string
  image_display_width?: string
  deleted: boolean
}

t.test('video conversation cards', async (t) => {
  const rt = await startTestRuntime(t)
  const { id, account } = await createAdsIdentity(rt.ctx)
  const changes = await observeChanges(t, rt, 'video-conversation-changes')
  const media = Media.create(t)
  const base = `${rt.baseUrl}/12/accounts/${account.id}/cards/video_conversation`
  const video = await libraryMedia(rt.baseUrl, id, account, media.mp4(1280, 720, 1), { category: 'amplify_video' })
  const scaled = await libraryMedia(rt.baseUrl, id, account, media.mp4(854, 480, 1), { category: 'tweet_video' })
  const square = await libraryMedia(rt.baseUrl, id, account, media.mp4(480, 480, 1), { category: 'tweet_video' })
  const image = await libraryMedia(rt.baseUrl, id, account, png(1280, 720))
  const required = { name: 'Developers', first_cta: '#APIs', first_cta_tweet: 'Ads API', thank_you_text: 'Build it', media_key: video }
  const create = (query: Record<string, string>): Promise<TestResponse> => oauth1Request('POST', base, id, { query: { ...required, ...query } })

  const res = await create({ title: 'Developers' })
  t.equal(res.status, 200, res.text)
  const card = res.json<{ data: Conversation; data_type: string }>()
  t.equal(card.data_type, 'video_conversation_card')
  t.match(card.data, { card_type: 'VIDEO_CONVERSATION', title: 'Developers', first_cta: '#APIs', media_key: video, video_width: '16', video_height: '9', video_owner_id: id.user.id, card_uri: `card://${card.data.id}` })
  t.equal((await fetch(card.data.media_url)).status, 200, 'media_url resolves')
  t.equal((await fetch(card.data.poster_media_url as string)).status, 200, 'the video poster resolves')
  t.equal((await create({ second_cta: '#SDKs', second_cta_tweet: 'SDKs', media_key: scaled })).status, 200, 'second_cta instead of title; 854x480 is 16:9')

  const rules: Array<[string, Record<string, string>, string, string]> = [
    ['neither title nor second_cta', {}, 'MISSING_PARAMETER', 'title'],
    ['second_cta without its tweet', { second_cta: '#B' }, 'MISSING_PARAMETER', 'second_cta_tweet'],
    ['second tweet without its cta', { title: 'T', second_cta_tweet: 'b' }, 'INCLUSIVE_PARAMETERS', 'second_cta_tweet'],
    ['third_cta without its tweet', { title: 'T', second_cta: '#B', second_cta_tweet: 'b', third_cta: '#C' }, 'MISSING_PARAMETER', 'third_cta_tweet'],
    ['third tweet without its cta', { title: 'T', second_cta: '#B', second_cta_tweet: 'b', third_cta_tweet: 'c' }, 'INCLUSIVE_PARAMETERS', 'third_cta_tweet'],
    ['third cta before the second', { title: 'T', third_cta: '#C', third_cta_tweet: 'c' }, 'INCLUSIVE_PARAMETERS', 'third_cta'],
    ['fourth_cta without its tweet', { title: 'T', second_cta: '#B', second_cta_tweet: 'b', third_cta: '#C', third_cta_tweet: 'c', fourth_cta: '#D' }, 'MISSING_PARAMETER', 'fourth_cta_tweet'],
    ['fourth cta before the third', { title: 'T', second_cta: '#B', second_cta_tweet: 'b', fourth_cta: '#D', fourth_cta_tweet: 'd' }, 'INCLUSIVE_PARAMETERS', 'fourth_cta'],
    ['first_cta 21 without #', { title: 'T', first_cta: `#${'a'.repeat(21)}` }, 'INVALID_PARAMETER', 'first_cta'],
    ['second_cta 21', { second_cta: 'b'.repeat(21), second_cta_tweet: 'b' }, 'INVALID_PARAMETER', 'second_cta'],
    ['cta with a space', { title: 'T', first_cta: '#two words' }, 'INVALID_PARAMETER', 'first_cta'],
    ['title 24', { title: 't'.repeat(24) }, 'INVALID_PARAMETER', 'title'],
    ['thank_you_text 24', { title: 'T', thank_you_text: 't'.repeat(24) }, 'INVALID_PARAMETER', 'thank_you_text'],
    ['thank_you_url not a URL', { title: 'T', thank_you_url: 'example' }, 'INVALID_PARAMETER', 'thank_you_url'],
    ['missing first_cta', { title: 'T', first_cta: '' }, 'MISSING_PARAMETER', 'first_cta'],
    ['missing first_cta_tweet', { title: 'T', first_cta_tweet: '' }, 'MISSING_PARAMETER', 'first_cta_tweet'],
    ['missing thank_you_text', { title: 'T', thank_you_text: '' }, 'MISSING_PARAMETER', 'thank_you_text'],
    ['missing name', { title: 'T', name: '' }, 'MISSING_PARAMETER', 'name'],
    ['missing media_key', { title: 'T', media_key: '' }, 'MISSING_PARAMETER', 'media_key'],
    ['an image as media', { title: 'T', media_key: image }, 'INVALID_PARAMETER', 'media_key'],
    ['a 1:1 video', { title: 'T', media_key: square }, 'INVALID_PARAMETER', 'media_key'],
    ['media not in the library', { title: 'T', media_key: '13_42' }, 'INVALID_PARAMETER', 'media_key'],
    ['a video as poster', { title: 'T', poster_media_key: scaled }, 'INVALID_PARAMETER', 'poster_media_key'],
    ['an image as unlocked video', { title: 'T', unlocked_video_media_key: image }, 'INVALID_PARAMETER', 'unlocked_video_media_key']
  ]
  for (const [label, query, code, parameter] of rules) expectAdsError(t, await create(query), 400, code, parameter, label)

  const four = await create({
    title: 't'.repeat(23), first_cta: `#${'a'.repeat(20)}`, thank_you_text: 'y'.repeat(23), thank_you_url: 'https://example.com/thanks',
    second_cta: 'Second', second_cta_tweet: 'two', third_cta: '#Third', third_cta_tweet: 'three', fourth_cta: '#Fourth', fourth_cta_tweet: 'four',
    poster_media_key: image, unlocked_image_media_key: image, unlocked_video_media_key: scaled
  })
  t.equal(four.status, 200, four.text)
  t.match(four.json(), { data: { second_cta: 'Second', third_cta: '#Third', fourth_cta_tweet: 'four', thank_you_url: 'https://example.com/thanks', unlocked_video_media_key: scaled, unlocked_image_url: /\/media\// } })
  t.notOk('unlocked_image_media_key' in four.json<{ data: object }>().data, 'unlocked_image_media_key is write-only')
  const fourCard = four.json<{ data: Conversation }>().data
  t.not(fourCard.poster_media_url, card.data.poster_media_url, 'a chosen poster')
  const unposter = await oauth1Request('PUT', `${base}/${fourCard.id}`, id, { query: { poster_media_key: '' } })
  t.equal(unposter.json<{ data: Conversation }>().data.poster_media_url, card.data.poster_media_url, 'unsetting the poster goes back to the video poster')

  // Updates are checked as the card they produce.
  const one = `${base}/${card.data.id}`
  const put = (query: Record<string, string>): Promise<TestResponse> => oauth1Request('PUT', one, id, { query })
  expectAdsError(t, await put({ title: '' }), 400, 'MISSING_PARAMETER', 'title', 'unsetting the title without a second cta')
  const swapped = await put({ title: '', second_cta: '#Second', second_cta_tweet: 'two' })
  t.match(swapped.json(), { data: { title: null, second_cta: '#Second' } }, 'title unset once a second cta exists')
  expectAdsError(t, await put({ second_cta_tweet: '' }), 400, 'MISSING_PARAMETER', 'second_cta_tweet', 'unsetting the tweet of a set cta')
  expectAdsError(t, await put({ name: '' }), 400, 'INVALID_PARAMETER', 'name', 'required fields cannot be unset')
  expectAdsError(t, await put({ media_key: square }), 400, 'INVALID_PARAMETER', 'media_key', 'update to a 1:1 video')
  t.match((await put({ name: 'Renamed', media_key: scaled })).json(), { data: { name: 'Renamed', media_key: scaled, first_cta: '#APIs' } })
  expectAdsError(t, await oauth1Request('PUT', `${base}/999`, id, { query: { name: 'x' } }), 404, 'CARD_NOT_FOUND', undefined, 'unknown card')

  // List, read, hard delete.
  const list = async (query: Record<string, string>): Promise<Conversation[]> => (await oauth1Request('GET', base, id, { query })).json<{ data: Conversation[] }>().data
  t.equal((await list({})).length, 3)
  t.same((await list({ card_ids: card.data.id })).map((c) => c.id), [card.data.id])
  t.same((await list({ q: 'renamed' })).map((c) => c.id), [card.data.id])
  expectAdsError(t, await oauth1Request('GET', base, id, { query: { count: '1001' } }), 400, 'INVALID_PARAMETER', 'count', 'count 1001')
  t.match((await oauth1Request('GET', one, id)).json(), { data: { id: card.data.id, name: 'Renamed' } })
  t.match((await oauth1Request('DELETE', one, id)).json(), { data: { id: card.data.id, deleted: true } })
  expectAdsError(t, await oauth1Request('GET', one, id, { query: { with_deleted: 'true' } }), 404, 'CARD_NOT_FOUND', undefined, 'hard deleted')
  t.equal((await list({ with_deleted: 'true' })).length, 2)

  // Entity changes: create, the two accepted updates (refused ones publish nothing), the hard delete.
  await eventually(() => changes.some((c) => c.entity_id === card.data.id && c.change_type === 'DELETE'))
  const trail = changes.filter((c) => c.entity_id === card.data.id)
  t.same(trail.map((c) => c.change_type), ['CREATE', 'UPDATE', 'UPDATE', 'DELETE'])
  t.match(trail[0], { entity_type: 'VIDEO_CONVERSATION_CARD', account_id: account.id, changed_by: { user_id: id.user.id }, entity_data: { id: card.data.id, title: 'Developers' } })
  t.match(trail[1]?.changes, { title: { old: 'Developers', new: null }, second_cta: { old: null, new: '#Second' }, second_cta_tweet: { old: null, new: 'two' } })
  t.match(trail[2]?.changes, { name: { old: 'Developers', new: 'Renamed' }, media_key: { old: video, new: scaled } })
  t.match(trail[3], { entity_data: { id: card.data.id, deleted: true } })
  const posterTrail = changes.filter((c) => c.entity_id === fourCard.id)
  t.same(posterTrail.map((c) => c.change_type), ['CREATE', 'UPDATE'], 'unsetting the poster is an update')
  t.match(posterTrail[1]?.changes, { poster_media_url: { old: /\/media\/[^/]+\.png$/, new: /\/media\/[^/]+\.jpg$/ } }, 'from the chosen PNG poster back to the first frame')
})

t.test('legacy image conversation cards and their delete', async (t) => {
  const rt = await startTestRuntime(t)
  const { id, account } = await createAdsIdentity(rt.ctx)
  const changes = await observeChanges(t, rt, 'image-conversation-changes')
  const base = `${rt.baseUrl}/12/accounts/${account.id}/cards/image_conversation`
  const image = await libraryMedia(rt.baseUrl, id, account, png(1280, 670))
  const small = await libraryMedia(rt.baseUrl, id, account, png(700, 366))
  const unlock = await libraryMedia(rt.baseUrl, id, account, png(1000, 400))
  const query = { name: 'Moon', first_cta: '#moon', first_cta_tweet: 'stars', thank_you_text: 'thanks', title: 'Full moon', media_key: image }

  const res = await oauth1Request('POST', base, id, { query })
  t.equal(res.status, 200, res.text)
  const card = res.json<{ data: Conversation }>().data
  t.match(card, { card_type: 'IMAGE_CONVERSATION', image_display_width: '1280', image_display_height: '670', media_key: image })
  expectAdsError(t, await oauth1Request('POST', base, id, { query: { ...query, media_key: small } }), 400, 'INVALID_PARAMETER', 'media_key', 'narrower than 800')
  expectAdsError(t, await oauth1Request('POST', base, id, { query: { ...query, unlocked_image_media_key: image } }), 400, 'INVALID_PARAMETER', 'unlocked_image_media_key', 'unlock image not 5:2')
  t.equal((await oauth1Request('POST', base, id, { query: { ...query, unlocked_image_media_key: unlock } })).status, 200, '5:2 unlock image')
  expectAdsError(t, await oauth1Request('POST', base, id, { query: { ...query, poster_media_key: image } }), 400, 'INVALID_PARAMETER', 'poster_media_key', 'no poster on images')
  expectAdsError(t, await oauth1Request('POST', base, id, { query: { ...query, title: '' } }), 400, 'MISSING_PARAMETER', 'title', 'same conditional rules')

  // Listed among cards only as a legacy card.
  const cards = `${rt.baseUrl}/12/accounts/${account.id}/cards`
  t.same((await oauth1Request('GET', cards, id)).json<{ data: unknown[] }>().data, [])
  t.equal((await oauth1Request('GET', cards, id, { query: { include_legacy_cards: 'true', card_types: 'IMAGE_CONVERSATION' } })).json<{ data: unknown[] }>().data.length, 2)

  const del = await oauth1Request('DELETE', `${base}/${card.id}`, id)
  t.equal(del.status, 200)
  t.match(del.json(), { data: { id: card.id, card_type: 'IMAGE_CONVERSATION', deleted: true }, request: { params: { card_id: card.id } } })
  expectAdsError(t, await oauth1Request('GET', `${base}/${card.id}`, id), 404, 'CARD_NOT_FOUND', undefined, 'gone')
  expectAdsError(t, await oauth1Request('DELETE', `${base}/${card.id}`, id), 404, 'CARD_NOT_FOUND', undefined, 'deleted twice')
  const outsider = await createAdsIdentity(rt.ctx)
  expectAdsError(t, await oauth1Request('DELETE', `${base}/${card.id}`, outsider.id), 403, 'ACCOUNT_NOT_FOUND', undefined, 'another user')

  // Entity changes: one CREATE per card made (refused creates publish nothing), the DELETE of the deleted one.
  await eventually(() => changes.some((c) => c.entity_id === card.id && c.change_type === 'DELETE'))
  const images = changes.filter((c) => c.entity_type === 'IMAGE_CONVERSATION_CARD')
  t.same(images.map((c) => c.change_type), ['CREATE', 'CREATE', 'DELETE'])
  t.match(images[0], { entity_id: card.id, account_id: account.id, changed_by: { user_id: id.user.id }, entity_data: { card_type: 'IMAGE_CONVERSATION', title: 'Full moon' } })
  t.match(images[2], { entity_id: card.id, entity_data: { deleted: true } })
})
