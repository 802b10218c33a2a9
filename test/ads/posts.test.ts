import t from 'tap'
import { TOPICS, type BusMessage } from '../../services/common/bus/types'
import { grantAccountAccess } from '../../services/gateway/ads/accounts'
import { setClock } from '../../services/gateway/ads/creatives/clock'
import type { EntityChange } from '../../services/gateway/ads/entities'
import { expectAdsError, hasFfmpeg, libraryMedia, Media, png } from '../support/fixtures/media'
import { oauth1Request, type TestResponse } from '../support/http'
import { createIdentity, startTestRuntime } from '../support/runtime'
import { eventually } from '../support/util'
import { openApiErrors, openHttpStream, subscribe } from '../support/fixtures/activity'
import { createAdsIdentity } from '../support/fixtures/ads'

/**
 * Posts on behalf of an advertiser: who may post as whom, text and media
 * rules, card_uri, nullcast, the classic response (64-bit `id` written
 * exactly, trim_user, tweet_mode, no conversation_settings on create), the
 * read and the rename, and an organic post reaching an activity stream
 * subscriber of its author end to end (nullcast posts never do).
 */

// ffmpeg makes the JPEG, GIF, WEBP and MP4 inputs. `make test` installs it (deps-system), so its
// absence is a failure of the suite, never a silent skip of the video, GIF, JPEG and WEBP checks.
t.ok(hasFfmpeg(), 'ffmpeg is installed (make deps-system); the JPEG, GIF, WEBP and MP4 checks need it')

interface Post {
  id: number
  id_str: string
  text?: string
  full_text?: string
  name: string | null
  truncated: boolean
  user: Record<string, unknown>
  entities: Record<string, Array<Record<string, unknown>>>
  conversation_settings?: string
  nullcast?: boolean
  tweet_type?: string
  tweet_id?: string
  contributors: unknown
  scopes: { followers: boolean }
  extended_entities?: { media: Array<Record<string, unknown>> }
  card_uri?: string
}

t.test('creating, reading and renaming posts', async (t) => {
  const rt = await startTestRuntime(t)
  const { id: advertiser, account } = await createAdsIdentity(rt.ctx)
  const agency = await createIdentity(rt.ctx.store)
  await grantAccountAccess(rt.ctx, account.id, agency.user.id)
  const stranger = await createIdentity(rt.ctx.store)
  const tweet = `${rt.baseUrl}/12/accounts/${account.id}/tweet`
  const tweets = `${rt.baseUrl}/12/accounts/${account.id}/tweets`
  const changes: EntityChange[] = []
  const activity: Array<Record<string, unknown>> = []
  const consumers = [
    await rt.ctx.bus.subscribe({ groupId: 'post-changes', topics: [TOPICS.adsEntityChanges], handler: async (m: BusMessage) => { changes.push(m.value as EntityChange) } }),
    await rt.ctx.bus.subscribe({ groupId: 'post-activity', topics: [TOPICS.activityEvents], handler: async (m: BusMessage) => { activity.push({ key: m.key, ...(m.value as object) }) } })
  ]
  t.teardown(() => Promise.all(consumers.map((c) => c.close())))
  const post = (who: typeof agency, query: Record<string, string>): Promise<TestResponse> => oauth1Request('POST', tweet, who, { query })

  // The agency posts as the advertiser, who gave it access to the account (nullcast by default).
  const res = await post(agency, { as_user_id: advertiser.user.id, text: 'Hello #launch $ACME from @' + advertiser.user.screen_name + ' https://example.com/x', name: 'Launch post' })
  t.equal(res.status, 200, res.text)
  t.match(res.text, /"id":[0-9]{19},"id_str":"[0-9]{19}"/, 'id is a JSON integer written digit for digit')
  const created = res.json<{ data: Post; data_type: string }>()
  t.equal(created.data_type, 'tweet')
  t.equal(res.text.match(/"id":([0-9]+),"id_str"/)?.[1], created.data.id_str, 'id and id_str agree exactly')
  t.match(created.data, { text: /^Hello #launch/, name: 'Launch post', truncated: false, scopes: { followers: false }, user: { id_str: advertiser.user.id, screen_name: advertiser.user.screen_name }, source: /rel="nofollow"/ })
  t.notOk('conversation_settings' in created.data, 'conversation_settings is absent from the create response')
  t.notOk('nullcast' in created.data)
  t.match(created.data.contributors, [Number], 'made by someone else than the author')
  t.match(created.data.entities, {
    hashtags: [{ text: 'launch', indices: [6, 13] }],
    symbols: [{ text: 'ACME', indices: [14, 19] }],
    user_mentions: [{ screen_name: advertiser.user.screen_name, id_str: advertiser.user.id }],
    urls: [{ url: 'https://example.com/x', display_url: 'example.com/x' }]
  })

  // Who may post as whom.
  expectAdsError(t, await post(agency, { text: 'x' }), 400, 'MISSING_PARAMETER', 'as_user_id', 'no as_user_id')
  expectAdsError(t, await post(agency, { as_user_id: 'me', text: 'x' }), 400, 'INVALID_PARAMETER', 'as_user_id', 'as_user_id not a long')
  expectAdsError(t, await post(agency, { as_user_id: '123', text: 'x' }), 400, 'INVALID_PARAMETER', 'as_user_id', 'unknown user')
  expectAdsError(t, await post(agency, { as_user_id: stranger.user.id, text: 'x' }), 403, 'ACCOUNT_NOT_FOUND', 'as_user_id', 'as a user without access')
  // A fellow grantee of the same account granted the agency nothing: the agency cannot post as them, nor as itself
  // (only the advertiser, the account's FULL promotable user, is posted for).
  const otherAgency = await createIdentity(rt.ctx.store)
  await grantAccountAccess(rt.ctx, account.id, otherAgency.user.id)
  expectAdsError(t, await post(agency, { as_user_id: otherAgency.user.id, text: 'x' }), 403, 'ACCOUNT_NOT_FOUND', 'as_user_id', 'as a fellow delegate')
  expectAdsError(t, await post(otherAgency, { as_user_id: agency.user.id, text: 'x' }), 403, 'ACCOUNT_NOT_FOUND', 'as_user_id', 'the other way round')
  expectAdsError(t, await post(agency, { as_user_id: agency.user.id, text: 'x' }), 403, 'ACCOUNT_NOT_FOUND', 'as_user_id', 'a delegate as itself')
  t.equal((await post(otherAgency, { as_user_id: advertiser.user.id, text: 'for the advertiser' })).status, 200, 'every delegate may post for the advertiser')
  expectAdsError(t, await post(stranger, { as_user_id: advertiser.user.id, text: 'x' }), 403, 'ACCOUNT_NOT_FOUND', undefined, 'caller without access')
  expectAdsError(t, await post(agency, { as_user_id: advertiser.user.id, text: 'x', nullcast: 'false' }), 400, 'INVALID_PARAMETER', 'nullcast', 'organic only for oneself')

  // Text and parameter rules.
  expectAdsError(t, await post(advertiser, { as_user_id: advertiser.user.id }), 400, 'MISSING_PARAMETER', 'text', 'neither text nor media')
  expectAdsError(t, await post(advertiser, { as_user_id: advertiser.user.id, text: 'x'.repeat(281) }), 400, 'INVALID_PARAMETER', 'text', 'text 281')
  expectAdsError(t, await post(advertiser, { as_user_id: advertiser.user.id, text: 'x', name: 'n'.repeat(81) }), 400, 'INVALID_PARAMETER', 'name', 'name 81')
  expectAdsError(t, await post(advertiser, { as_user_id: advertiser.user.id, text: 'x', conversation_settings: 'NOBODY' }), 400, 'INVALID_PARAMETER', 'conversation_settings', 'conversation_settings')
  expectAdsError(t, await post(advertiser, { as_user_id: advertiser.user.id, text: 'x', tweet_mode: 'full' }), 400, 'INVALID_PARAMETER', 'tweet_mode', 'tweet_mode')
  expectAdsError(t, await post(advertiser, { as_user_id: advertiser.user.id, text: 'x', nullcast: 'maybe' }), 400, 'INVALID_PARAMETER', 'nullcast', 'nullcast')
  expectAdsError(t, await post(advertiser, { as_user_id: advertiser.user.id, text: 'x', card_uri: 'card://1' }), 400, 'INVALID_PARAMETER', 'card_uri', 'unknown card')
  expectAdsError(t, await post(advertiser, { as_user_id: advertiser.user.id, text: 'x', video_title: 'Title' }), 400, 'INVALID_PARAMETER', 'video_title', 'video fields without a video')
  t.equal((await post(advertiser, { as_user_id: advertiser.user.id, text: 'x'.repeat(280) })).status, 200, 'text 280')

  // Media: up to 4 images, or 1 GIF, or 1 video, from the library.
  const images = [] as string[]
  for (let i = 0; i < 5; i++) images.push(await libraryMedia(rt.baseUrl, advertiser, account, png(100 + i, 100)))
  const four = await post(advertiser, { as_user_id: advertiser.user.id, media_keys: images.slice(0, 4).join(',') })
  t.equal(four.status, 200, 'four images and no text')
  t.equal(four.json<{ data: Post }>().data.extended_entities?.media.length, 4)
  t.match(four.json<{ data: Post }>().data.extended_entities?.media[0], { type: 'photo', media_key: images[0], original_info: { width: 100, height: 100 } })
  expectAdsError(t, await post(advertiser, { as_user_id: advertiser.user.id, media_keys: images.join(',') }), 400, 'INVALID_PARAMETER', 'media_keys', 'five images')
  expectAdsError(t, await post(advertiser, { as_user_id: advertiser.user.id, media_keys: `${images[0]},${images[0]}` }), 400, 'INVALID_PARAMETER', 'media_keys', 'the same image twice')
  expectAdsError(t, await post(advertiser, { as_user_id: advertiser.user.id, media_keys: '3_1234' }), 400, 'INVALID_PARAMETER', 'media_keys', 'not in the library')
  const library = await oauth1Request('GET', `${rt.baseUrl}/12/accounts/${account.id}/media_library/${images[0]}`, advertiser)
  t.match(library.json(), { data: { tweeted: true } }, 'used media is marked tweeted')
  const made = Media.create(t)
  const gif = await libraryMedia(rt.baseUrl, advertiser, account, made.gif(80, 80, 4), { category: 'tweet_gif' })
  const video = await libraryMedia(rt.baseUrl, advertiser, account, made.mp4(640, 360, 1), { category: 'tweet_video' })
  t.match((await post(advertiser, { as_user_id: advertiser.user.id, media_keys: gif })).json(), { data: { extended_entities: { media: [{ type: 'animated_gif' }] } } })
  const withVideo = await post(advertiser, { as_user_id: advertiser.user.id, media_keys: video, video_title: 't'.repeat(70), video_description: 'd'.repeat(200), video_cta: 'WATCH_NOW', video_cta_value: 'https://example.com/watch' })
  t.equal(withVideo.status, 200, withVideo.text)
  expectAdsError(t, await post(advertiser, { as_user_id: advertiser.user.id, media_keys: `${gif},${images[0]}` }), 400, 'INVALID_PARAMETER', 'media_keys', 'a GIF with an image')
  expectAdsError(t, await post(advertiser, { as_user_id: advertiser.user.id, media_keys: `${video},${images[0]}` }), 400, 'INVALID_PARAMETER', 'media_keys', 'a video with an image')
  expectAdsError(t, await post(advertiser, { as_user_id: advertiser.user.id, media_keys: video, video_title: 't'.repeat(71) }), 400, 'INVALID_PARAMETER', 'video_title', 'video_title 71')
  expectAdsError(t, await post(advertiser, { as_user_id: advertiser.user.id, media_keys: video, video_description: 'd'.repeat(201) }), 400, 'INVALID_PARAMETER', 'video_description', 'video_description 201')
  expectAdsError(t, await post(advertiser, { as_user_id: advertiser.user.id, media_keys: video, video_cta: 'WATCH_NOW' }), 400, 'INCLUSIVE_PARAMETERS', 'video_cta', 'cta without its value')
  expectAdsError(t, await post(advertiser, { as_user_id: advertiser.user.id, media_keys: video, video_cta: 'BUY_NOW', video_cta_value: 'https://a.b' }), 400, 'INVALID_PARAMETER', 'video_cta', 'unknown cta')

  // Cards: an existing card of the account; a closed poll cannot be posted.
  const poll = (await oauth1Request('POST', `${rt.baseUrl}/12/accounts/${account.id}/cards/poll`, advertiser, { query: { name: 'P', duration_in_minutes: '5', first_choice: 'A', second_choice: 'B' } })).json<{ data: { card_uri: string; end_time: string } }>().data
  const withCard = await post(advertiser, { as_user_id: advertiser.user.id, text: 'Vote', card_uri: poll.card_uri })
  t.match(withCard.json(), { data: { card_uri: poll.card_uri } })
  const restore = setClock(() => Date.parse(poll.end_time) + 1000)
  expectAdsError(t, await post(advertiser, { as_user_id: advertiser.user.id, text: 'Vote', card_uri: poll.card_uri }), 400, 'INVALID_PARAMETER', 'card_uri', 'closed poll')
  restore()
  const other = await createAdsIdentity(rt.ctx)
  expectAdsError(t, await oauth1Request('POST', `${rt.baseUrl}/12/accounts/${other.account.id}/tweet`, other.id, { query: { as_user_id: other.id.user.id, text: 'x', card_uri: poll.card_uri } }), 400, 'INVALID_PARAMETER', 'card_uri', "another account's card")

  // trim_user, tweet_mode.
  const trimmed = await post(advertiser, { as_user_id: advertiser.user.id, text: 'y'.repeat(200), trim_user: 'true' })
  const tp = trimmed.json<{ data: Post }>().data
  t.same(Object.keys(tp.user).sort(), ['id', 'id_str'], 'trim_user leaves only the ids')
  t.equal(tp.truncated, true, 'compat mode truncates beyond 140 characters')
  t.equal([...(tp.text ?? '')].length, 140)
  t.equal(tp.contributors, null, 'posted by the author')
  const extended = (await post(advertiser, { as_user_id: advertiser.user.id, text: 'z'.repeat(200), tweet_mode: 'extended' })).json<{ data: Post }>().data
  t.equal(extended.full_text, 'z'.repeat(200))
  t.equal(extended.truncated, false)

  // Read: tweet_type required; the read carries conversation_settings, nullcast, tweet_type.
  const organic = await post(advertiser, { as_user_id: advertiser.user.id, text: 'Organic hello', nullcast: 'false', conversation_settings: 'FOLLOWING' })
  t.equal(organic.status, 200, organic.text)
  const organicId = organic.json<{ data: Post }>().data.id_str
  const read = async (query: Record<string, string>): Promise<Post[]> => {
    const r = await oauth1Request('GET', tweets, advertiser, { query })
    t.equal(r.status, 200, `read ${JSON.stringify(query)}: ${r.text.slice(0, 200)}`)
    return r.json<{ data: Post[] }>().data
  }
  expectAdsError(t, await oauth1Request('GET', tweets, advertiser), 400, 'MISSING_PARAMETER', 'tweet_type', 'tweet_type required')
  const [readBack] = await read({ tweet_type: 'PUBLISHED', tweet_ids: created.data.id_str })
  t.match(readBack, { tweet_id: created.data.id_str, id_str: created.data.id_str, conversation_settings: 'EVERYONE', nullcast: true, tweet_type: 'PUBLISHED', full_text: /^Hello/, name: 'Launch post' })
  t.same(await read({ tweet_type: 'PUBLISHED', tweet_ids: organicId }), [], 'organic posts are not in the default NULLCAST timeline')
  t.match(await read({ tweet_type: 'PUBLISHED', tweet_ids: organicId, timeline_type: 'ORGANIC' }), [{ conversation_settings: 'FOLLOWING', nullcast: false, scopes: { followers: true } }])
  t.equal((await read({ tweet_type: 'PUBLISHED', timeline_type: 'ALL', count: '3' })).length, 3)
  t.same((await read({ tweet_type: 'PUBLISHED', name: 'launch' })).map((p) => p.id_str), [created.data.id_str], 'name prefix')
  t.same(await read({ tweet_type: 'DRAFT' }), [])
  t.same(await read({ tweet_type: 'PUBLISHED', user_id: stranger.user.id }), [])
  expectAdsError(t, await oauth1Request('GET', tweets, advertiser, { query: { tweet_type: 'PUBLISHED', count: '1001' } }), 400, 'INVALID_PARAMETER', 'count', 'count 1001')
  expectAdsError(t, await oauth1Request('GET', tweets, advertiser, { query: { tweet_type: 'PUBLISHED', tweet_ids: 'abc' } }), 400, 'INVALID_PARAMETER', 'tweet_ids', 'tweet_ids not longs')

  // Rename.
  const renamed = await oauth1Request('PUT', `${tweets}/${created.data.id_str}/name`, agency, { query: { name: 'New name' } })
  t.equal(renamed.status, 200, renamed.text)
  t.match(renamed.json(), { data: { name: 'New name', tweet_id: created.data.id_str, conversation_settings: 'EVERYONE' } })
  expectAdsError(t, await oauth1Request('PUT', `${tweets}/${created.data.id_str}/name`, agency, { query: { name: 'n'.repeat(81) } }), 400, 'INVALID_PARAMETER', 'name', 'name 81')
  expectAdsError(t, await oauth1Request('PUT', `${tweets}/abc/name`, agency, { query: { name: 'x' } }), 400, 'INVALID_PARAMETER', 'tweet_id', 'tweet_id not a long')
  expectAdsError(t, await oauth1Request('PUT', `${tweets}/1234567/name`, agency, { query: { name: 'x' } }), 404, 'TWEET_NOT_FOUND', undefined, 'unknown post')
  t.match((await oauth1Request('PUT', `${tweets}/${created.data.id_str}/name`, agency)).json(), { data: { name: null } }, 'no name unsets it')

  // Entity changes for posts; post.create only for the organic post, keyed and owned by its author.
  await eventually(() => changes.filter((c) => c.entity_id === created.data.id_str).length >= 3)
  t.same(changes.filter((c) => c.entity_id === created.data.id_str).map((c) => c.change_type), ['CREATE', 'UPDATE', 'UPDATE'])
  t.match(changes.find((c) => c.entity_id === created.data.id_str), { entity_type: 'TWEET', changed_by: { user_id: agency.user.id } })
  // The snapshots are the public read rendering (full user, ids as strings), never the stored record.
  const postChanges = changes.filter((c) => c.entity_id === created.data.id_str)
  t.match(postChanges[0]?.entity_data, { id: created.data.id_str, id_str: created.data.id_str, full_text: /^Hello #launch/, name: 'Launch post', tweet_type: 'PUBLISHED', nullcast: true, user: { id_str: advertiser.user.id, screen_name: advertiser.user.screen_name } })
  t.notOk('created_by' in (postChanges[0]?.entity_data ?? {}), 'no internal field')
  t.same(postChanges.slice(1).map((c) => c.changes), [{ name: { old: 'Launch post', new: 'New name' } }, { name: { old: 'New name', new: null } }], 'a rename changes the name only')
  const fourId = four.json<{ data: Post }>().data.id_str
  const withMedia = await eventually(() => changes.find((c) => c.entity_id === fourId))
  const media = (withMedia.entity_data.extended_entities as { media: Array<Record<string, unknown>> }).media
  t.same(media.map((m) => m.media_key), images.slice(0, 4), 'the media of the post')
  const fileFields = (value: unknown): number => (Array.isArray(value) ? value.reduce((n: number, v) => n + fileFields(v), 0) : value !== null && typeof value === 'object' ? Object.entries(value).reduce((n, [k, v]) => n + (k === 'file' ? 1 : 0) + fileFields(v), 0) : 0)
  t.equal(fileFields(changes.filter((c) => c.entity_type === 'TWEET')), 0, 'no post change carries a stored file name (media[].file)')
  // Media used in a post becomes `tweeted`, published as a MEDIA_LIBRARY update of each library object; the unused one stays as it was.
  const tweetedUpdate = (key: string): EntityChange | undefined => changes.find((c) => c.entity_type === 'MEDIA_LIBRARY' && c.entity_id === key && c.change_type === 'UPDATE')
  await eventually(() => images.slice(0, 4).every((key) => tweetedUpdate(key) !== undefined))
  for (const key of images.slice(0, 4)) {
    const update = tweetedUpdate(key) as EntityChange
    t.same(update.changes, { tweeted: { old: false, new: true } }, `${key}: only tweeted changed`)
    t.match(update, { account_id: account.id, changed_by: { user_id: advertiser.user.id }, entity_data: { media_key: key, tweeted: true } })
  }
  t.equal(tweetedUpdate(images[4] as string), undefined, 'media never posted is not marked')
  await eventually(() => activity.length >= 1)
  t.equal(activity.length, 1, 'nullcast posts publish nothing')
  const event = activity[0] as { key: string; event_type: string; user_id: string; payload: Record<string, unknown> }
  t.match(event, { key: advertiser.user.id, event_type: 'post.create', user_id: advertiser.user.id, payload: { id: organicId, text: 'Organic hello', author_id: advertiser.user.id, reply_settings: 'following' } })
  t.equal(openApiErrors('Tweet', event.payload), undefined, 'the payload is a v2 Tweet')
})

t.test('an organic advertiser post reaches an activity stream subscriber', async (t) => {
  const rt = await startTestRuntime(t)
  const { id: advertiser, account } = await createAdsIdentity(rt.ctx)
  const subscriber = await createIdentity(rt.ctx.store)
  await subscribe(rt.baseUrl, subscriber.bearer, { event_type: 'post.create', filter: { user_id: advertiser.user.id } })
  const stream = await openHttpStream(rt.baseUrl, subscriber.bearer)
  t.teardown(() => stream.close())
  t.equal(stream.status, 200)

  const tweet = `${rt.baseUrl}/12/accounts/${account.id}/tweet`
  const nullcast = await oauth1Request('POST', tweet, advertiser, { query: { as_user_id: advertiser.user.id, text: 'promoted only' } })
  t.equal(nullcast.status, 200)
  const image = await libraryMedia(rt.baseUrl, advertiser, account, png(300, 200))
  const organic = await oauth1Request('POST', tweet, advertiser, { query: { as_user_id: advertiser.user.id, text: 'Our #launch is live', nullcast: 'false', media_keys: image } })
  t.equal(organic.status, 200, organic.text)
  const postId = organic.json<{ data: Post }>().data.id_str

  const messages = await stream.waitFor((m) => m.some((e) => e.data?.event_type === 'post.create'), 10_000)
  const delivered = messages.filter((e) => e.data?.event_type === 'post.create')
  t.equal(delivered.length, 1, 'exactly the organic post')
  t.match(delivered[0]?.data, {
    event_type: 'post.create',
    filter: { user_id: advertiser.user.id },
    payload: { id: postId, text: 'Our #launch is live', author_id: advertiser.user.id, attachments: { media_keys: [image] }, entities: { hashtags: [{ tag: 'launch', start: 4, end: 11 }] } }
  })
  t.notOk(JSON.stringify(messages).includes('promoted only'), 'the nullcast post never reaches the stream')
})
