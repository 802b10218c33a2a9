import t from 'tap'
import { TOPICS, type BusMessage } from '../../services/common/bus/types'
import { grantFeatures } from '../../services/gateway/ads/accounts'
import { setClock } from '../../services/gateway/ads/creatives/clock'
import { votingStatus } from '../../services/gateway/ads/creatives/records'
import type { EntityChange } from '../../services/gateway/ads/entities'
import { expectAdsError, hasFfmpeg, libraryMedia, Media, png } from '../support/fixtures/media'
import { oauth1Request, type TestResponse } from '../support/http'
import { startTestRuntime } from '../support/runtime'
import { eventually } from '../support/util'
import { createAdsIdentity } from '../support/fixtures/ads'

/**
 * Poll cards: duration and choice rules, media polls behind the
 * PROMOTED_MEDIA_POLLS feature, numeric-looking values as strings, the
 * open -> closed transition at end_time (moving the creatives clock instead
 * of waiting five minutes), no update, and the hard delete.
 */

// ffmpeg makes the JPEG, GIF, WEBP and MP4 inputs. `make test` installs it (deps-system), so its
// absence is a failure of the suite, never a silent skip of the video, GIF, JPEG and WEBP checks.
t.ok(hasFfmpeg(), 'ffmpeg is installed (make deps-system); the JPEG, GIF, WEBP and MP4 checks need it')

interface Poll {
  id: string
  name: string
  card_uri: string
  card_type: string
  duration_in_minutes: string
  start_time: string
  end_time: string
  voting_status: string
  third_choice?: string
  video_width?: string
  video_height?: string
  content_duration_seconds?: string
  image_display_width?: string
  deleted: boolean
}

t.test('the transition function', async (t) => {
  const poll = { end_time: '2026-01-01T00:10:00Z' }
  t.equal(votingStatus(poll, Date.parse('2026-01-01T00:09:59.999Z')), 'open')
  t.equal(votingStatus(poll, Date.parse('2026-01-01T00:10:00Z')), 'closed', 'closed at end_time exactly')
  t.equal(votingStatus(poll, Date.parse('2026-02-01T00:00:00Z')), 'closed')
})

t.test('poll cards', async (t) => {
  const rt = await startTestRuntime(t)
  const { id, account } = await createAdsIdentity(rt.ctx)
  const polls = `${rt.baseUrl}/12/accounts/${account.id}/cards/poll`
  const changes: EntityChange[] = []
  const consumer = await rt.ctx.bus.subscribe({ groupId: 'poll-changes', topics: [TOPICS.adsEntityChanges], handler: async (m: BusMessage) => { changes.push(m.value as EntityChange) } })
  t.teardown(() => consumer.close())
  const create = (query: Record<string, string>): Promise<TestResponse> => oauth1Request('POST', polls, id, { query: { name: 'Best coast', duration_in_minutes: '5', first_choice: 'East', second_choice: 'West', ...query } })

  const res = await create({})
  t.equal(res.status, 200, res.text)
  const poll = res.json<{ data: Poll; data_type: string }>()
  t.equal(poll.data_type, 'poll_card')
  t.match(poll.data, { name: 'Best coast', card_type: 'TEXT_POLLS', duration_in_minutes: '5', voting_status: 'open', card_uri: `card://${poll.data.id}`, deleted: false })
  t.equal(Date.parse(poll.data.end_time) - Date.parse(poll.data.start_time), 5 * 60_000, 'end_time is duration_in_minutes after the start')
  t.notOk('third_choice' in poll.data)

  // Rules.
  const rules: Array<[string, Record<string, string>, string, string]> = [
    ['duration 4', { duration_in_minutes: '4' }, 'INVALID_PARAMETER', 'duration_in_minutes'],
    ['duration 10081', { duration_in_minutes: '10081' }, 'INVALID_PARAMETER', 'duration_in_minutes'],
    ['duration not a number', { duration_in_minutes: 'soon' }, 'INVALID_PARAMETER', 'duration_in_minutes'],
    ['duration missing', { duration_in_minutes: '' }, 'MISSING_PARAMETER', 'duration_in_minutes'],
    ['first choice missing', { first_choice: '' }, 'MISSING_PARAMETER', 'first_choice'],
    ['second choice missing', { second_choice: '' }, 'MISSING_PARAMETER', 'second_choice'],
    ['name missing', { name: '' }, 'MISSING_PARAMETER', 'name'],
    ['first choice 26', { first_choice: 'c'.repeat(26) }, 'INVALID_PARAMETER', 'first_choice'],
    ['second choice 26', { second_choice: 'c'.repeat(26) }, 'INVALID_PARAMETER', 'second_choice'],
    ['third choice 26', { third_choice: 'c'.repeat(26) }, 'INVALID_PARAMETER', 'third_choice'],
    ['fourth choice 26', { third_choice: 'C', fourth_choice: 'c'.repeat(26) }, 'INVALID_PARAMETER', 'fourth_choice'],
    ['fourth without third', { fourth_choice: 'D' }, 'INCLUSIVE_PARAMETERS', 'fourth_choice']
  ]
  for (const [label, query, code, parameter] of rules) expectAdsError(t, await create(query), 400, code, parameter, label)
  const full = await create({ duration_in_minutes: '10080', first_choice: 'a'.repeat(25), third_choice: 'North', fourth_choice: 'South' })
  t.match(full.json(), { data: { duration_in_minutes: '10080', third_choice: 'North', fourth_choice: 'South', first_choice: 'a'.repeat(25) } }, 'bounds are inclusive')

  // Media polls need the feature; the image must be >= 800 px wide at 1.91:1.
  const wide = await libraryMedia(rt.baseUrl, id, account, png(1200, 628))
  const narrow = await libraryMedia(rt.baseUrl, id, account, png(764, 400))
  const square = await libraryMedia(rt.baseUrl, id, account, png(1000, 1000))
  expectAdsError(t, await create({ media_key: wide }), 403, 'FEATURE_NOT_ENABLED', 'media_key', 'no PROMOTED_MEDIA_POLLS')
  await grantFeatures(rt.ctx, account.id, ['PROMOTED_MEDIA_POLLS'])
  const imagePoll = await create({ media_key: wide })
  t.equal(imagePoll.status, 200, imagePoll.text)
  t.match(imagePoll.json(), { data: { card_type: 'IMAGE_POLLS', image_display_width: '1200', image_display_height: '628' } })
  t.notOk('media_key' in imagePoll.json<{ data: object }>().data, 'media_key is write-only')
  expectAdsError(t, await create({ media_key: narrow }), 400, 'INVALID_PARAMETER', 'media_key', 'narrower than 800')
  expectAdsError(t, await create({ media_key: square }), 400, 'INVALID_PARAMETER', 'media_key', 'not 1.91:1')
  expectAdsError(t, await create({ media_key: '3_12345' }), 400, 'INVALID_PARAMETER', 'media_key', 'not in the library')
  const made = Media.create(t)
  const video = await libraryMedia(rt.baseUrl, id, account, made.mp4(1280, 720, 2), { category: 'amplify_video' })
  const videoPoll = await create({ media_key: video })
  t.match(videoPoll.json(), { data: { card_type: 'VIDEO_POLLS', video_width: '16', video_height: '9', content_duration_seconds: '2', video_poster_url: /\/media\// } })
  const gif = await libraryMedia(rt.baseUrl, id, account, made.gif(100, 100, 3), { category: 'tweet_gif' })
  expectAdsError(t, await create({ media_key: gif }), 400, 'INVALID_PARAMETER', 'media_key', 'a GIF')

  // open -> closed at end_time, visible in reads (the creatives clock moves; nothing is waited for).
  const restore = setClock(() => Date.parse(poll.data.end_time) - 1)
  t.teardown(restore)
  t.match((await oauth1Request('GET', `${polls}/${poll.data.id}`, id)).json(), { data: { voting_status: 'open' } }, 'open just before end_time')
  setClock(() => Date.parse(poll.data.end_time))
  t.match((await oauth1Request('GET', `${polls}/${poll.data.id}`, id)).json(), { data: { voting_status: 'closed' } }, 'closed at end_time')
  const listed = (await oauth1Request('GET', polls, id, { query: { card_ids: `${poll.data.id},${full.json<{ data: Poll }>().data.id}` } })).json<{ data: Poll[] }>().data
  t.same(listed.map((p) => p.voting_status), ['closed', 'open'], 'the week-long poll is still open')
  restore()

  // List filters and bounds.
  const list = async (query: Record<string, string>): Promise<Poll[]> => (await oauth1Request('GET', polls, id, { query })).json<{ data: Poll[] }>().data
  t.same((await list({ card_ids: poll.data.id })).map((p) => p.id), [poll.data.id])
  t.ok((await list({ q: 'BEST' })).length >= 2, 'q is a case-insensitive prefix')
  t.same(await list({ q: 'coast' }), [])
  t.match((await oauth1Request('GET', polls, id, { query: { with_total_count: 'true' } })).json(), { total_count: Number })
  expectAdsError(t, await oauth1Request('GET', polls, id, { query: { count: '1001' } }), 400, 'INVALID_PARAMETER', 'count', 'count 1001')
  expectAdsError(t, await oauth1Request('GET', polls, id, { query: { card_ids: Array.from({ length: 201 }, (_, i) => String(i)).join(',') } }), 400, 'INVALID_PARAMETER', 'card_ids', '201 ids')

  // No update; hard delete.
  const put = await oauth1Request('PUT', `${polls}/${poll.data.id}`, id, { query: { name: 'Renamed' } })
  t.equal(put.status, 405)
  t.match(put.json(), { errors: [{ code: 'METHOD_NOT_ALLOWED' }] })
  const del = await oauth1Request('DELETE', `${polls}/${poll.data.id}`, id)
  t.match(del.json(), { data: { id: poll.data.id, deleted: true } })
  expectAdsError(t, await oauth1Request('GET', `${polls}/${poll.data.id}`, id), 404, 'CARD_NOT_FOUND', undefined, 'gone')
  expectAdsError(t, await oauth1Request('GET', `${polls}/${poll.data.id}`, id, { query: { with_deleted: 'true' } }), 404, 'CARD_NOT_FOUND', undefined, 'gone even with with_deleted')
  t.notOk((await list({ with_deleted: 'true' })).some((p) => p.id === poll.data.id), 'not listed with with_deleted')
  expectAdsError(t, await oauth1Request('DELETE', `${polls}/${poll.data.id}`, id), 404, 'CARD_NOT_FOUND', undefined, 'deleted twice')

  await eventually(() => changes.some((c) => c.entity_id === poll.data.id && c.change_type === 'DELETE'))
  t.same(changes.filter((c) => c.entity_id === poll.data.id).map((c) => c.change_type), ['CREATE', 'DELETE'])
  t.match(changes.find((c) => c.entity_id === poll.data.id), { entity_type: 'POLL_CARD', account_id: account.id })
})
