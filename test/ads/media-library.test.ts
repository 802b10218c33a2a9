import t from 'tap'
import { TOPICS, type BusMessage } from '../../services/common/bus/types'
import type { EntityChange } from '../../services/gateway/ads/entities'
import { grantAccountAccess } from '../../services/gateway/ads/accounts'
import { addToLibrary, expectAdsError, hasFfmpeg, Media, png, uploadKey } from '../support/fixtures/media'
import { oauth1Request } from '../support/http'
import { createIdentity, startTestRuntime } from '../support/runtime'
import { eventually } from '../support/util'
import { createAdsIdentity } from '../support/fixtures/ads'

/**
 * Media library and account media: adding uploads with their labels and
 * limits, term search, type filter, count bounds, poster default and choice,
 * PROMO_VIDEO becoming PREROLL account media, deletes, and the entity
 * changes every write publishes.
 */

// ffmpeg makes the JPEG, GIF, WEBP and MP4 inputs. `make test` installs it (deps-system), so its
// absence is a failure of the suite, never a silent skip of the video, GIF, JPEG and WEBP checks.
t.ok(hasFfmpeg(), 'ffmpeg is installed (make deps-system); the JPEG, GIF, WEBP and MP4 checks need it')

interface LibraryObject {
  media_key: string
  media_type: string
  media_category: string
  name: string | null
  file_name: string | null
  title?: string | null
  description?: string | null
  media_url: string
  poster_media_key?: string | null
  poster_media_url?: string | null
  duration?: number | null
  aspect_ratio?: string
  tweeted: boolean
  deleted: boolean
}

t.test('media library: add, read, search, update, delete', async (t) => {
  const rt = await startTestRuntime(t)
  const { id, account } = await createAdsIdentity(rt.ctx)
  const changes: EntityChange[] = []
  const consumer = await rt.ctx.bus.subscribe({ groupId: 'library-changes', topics: [TOPICS.adsEntityChanges], handler: async (m: BusMessage) => { changes.push(m.value as EntityChange) } })
  t.teardown(() => consumer.close())
  const lib = `${rt.baseUrl}/12/accounts/${account.id}/media_library`

  const key = await uploadKey(rt.baseUrl, id, png(1200, 628))
  const added = await addToLibrary(rt.baseUrl, id, account, key, { name: 'Coffee shop', file_name: 'coffee beans.png' })
  t.equal(added.status, 200, added.text)
  const body = added.json<{ data: LibraryObject; data_type: string; request: { params: Record<string, unknown> } }>()
  t.match(body, { data_type: 'media_library', request: { params: { account_id: account.id, media_key: key } } })
  t.match(body.data, { media_key: key, media_type: 'IMAGE', media_category: 'TWEET_IMAGE', media_status: 'TRANSCODE_COMPLETED', name: 'Coffee shop', file_name: 'coffee beans.png', tweeted: false, deleted: false })
  t.notOk('title' in body.data, 'images carry no video fields')
  const image = await fetch(body.data.media_url)
  t.equal(image.status, 200, 'media_url resolves')
  t.equal(image.headers.get('content-type'), 'image/png')
  expectAdsError(t, await addToLibrary(rt.baseUrl, id, account, key), 409, 'DUPLICATE', 'media_key', 'added twice')

  // Labels and their limits.
  const other = await uploadKey(rt.baseUrl, id, png(10, 10))
  expectAdsError(t, await addToLibrary(rt.baseUrl, id, account, other, { name: 'n'.repeat(101) }), 400, 'INVALID_PARAMETER', 'name', 'name 101')
  expectAdsError(t, await addToLibrary(rt.baseUrl, id, account, other, { file_name: 'f'.repeat(256) }), 400, 'INVALID_PARAMETER', 'file_name', 'file_name 256')
  expectAdsError(t, await addToLibrary(rt.baseUrl, id, account, other, { title: 'A title' }), 400, 'INVALID_PARAMETER', 'title', 'title on an image')
  expectAdsError(t, await addToLibrary(rt.baseUrl, id, account, other, { description: 'Words' }), 400, 'INVALID_PARAMETER', 'description', 'description on an image')
  expectAdsError(t, await addToLibrary(rt.baseUrl, id, account, other, { poster_media_key: key }), 400, 'INVALID_PARAMETER', 'poster_media_key', 'poster on an image')
  expectAdsError(t, await addToLibrary(rt.baseUrl, id, account, '3_1234567890123456789'), 400, 'INVALID_PARAMETER', 'media_key', 'unknown media')
  expectAdsError(t, await addToLibrary(rt.baseUrl, id, account, 'not-a-key'), 400, 'INVALID_PARAMETER', 'media_key', 'malformed key')
  expectAdsError(t, await oauth1Request('POST', lib, id), 400, 'MISSING_PARAMETER', 'media_key', 'no media_key')
  t.equal((await addToLibrary(rt.baseUrl, id, account, other, { name: 'n'.repeat(100), file_name: 'f'.repeat(255) })).status, 200, 'limits are inclusive')

  // Someone else's upload cannot be taken; an upload naming the account's user as owner can.
  const stranger = await createIdentity(rt.ctx.store)
  const theirs = await uploadKey(rt.baseUrl, stranger, png(12, 12))
  expectAdsError(t, await addToLibrary(rt.baseUrl, id, account, theirs), 400, 'INVALID_PARAMETER', 'media_key', 'foreign upload')
  const shared = await uploadKey(rt.baseUrl, stranger, png(12, 12), { additionalOwners: [id.user.id] })
  t.equal((await addToLibrary(rt.baseUrl, id, account, shared, { name: 'Shared upload' })).status, 200, 'additional_owners lets the account use it')

  // Term search over name, title, file_name and description; type filter; count bounds.
  const search = async (query: Record<string, string>): Promise<string[]> => {
    const res = await oauth1Request('GET', lib, id, { query })
    t.equal(res.status, 200, `list ${JSON.stringify(query)}: ${res.text.slice(0, 200)}`)
    return res.json<{ data: LibraryObject[] }>().data.map((d) => d.media_key)
  }
  t.same(await search({ q: 'coffee' }), [key], 'term in name')
  t.same(await search({ q: 'BEANS' }), [key], 'term in file_name, any case')
  t.same(await search({ q: 'coff' }), [], 'a term is a whole word, not a prefix')
  t.same(await search({ q: 'shop coffee' }), [key], 'every term must match')
  t.same(await search({ q: 'upload' }), [shared])
  t.same(await search({ media_type: 'VIDEO' }), [])
  t.equal((await search({ media_type: 'IMAGE' })).length, 3)
  expectAdsError(t, await oauth1Request('GET', lib, id, { query: { q: '' } }), 400, 'INVALID_PARAMETER', 'q', 'empty q')
  expectAdsError(t, await oauth1Request('GET', lib, id, { query: { q: '   ' } }), 400, 'INVALID_PARAMETER', 'q', 'blank q')
  expectAdsError(t, await oauth1Request('GET', lib, id, { query: { q: ' -- ' } }), 400, 'INVALID_PARAMETER', 'q', 'q without a term')
  expectAdsError(t, await oauth1Request('GET', lib, id, { query: { q: 'q'.repeat(256) } }), 400, 'INVALID_PARAMETER', 'q', 'q of 256')
  expectAdsError(t, await oauth1Request('GET', lib, id, { query: { count: '51' } }), 400, 'INVALID_PARAMETER', 'count', 'count 51')
  expectAdsError(t, await oauth1Request('GET', lib, id, { query: { count: '0' } }), 400, 'INVALID_PARAMETER', 'count', 'count 0')
  expectAdsError(t, await oauth1Request('GET', lib, id, { query: { media_type: 'AUDIO' } }), 400, 'INVALID_PARAMETER', 'media_type', 'media_type')
  const page = await oauth1Request('GET', lib, id, { query: { count: '2' } })
  const first = page.json<{ data: LibraryObject[]; next_cursor: string | null }>()
  t.equal(first.data.length, 2)
  t.type(first.next_cursor, 'string', 'a cursor to the rest')
  const rest = await oauth1Request('GET', lib, id, { query: { count: '2', cursor: first.next_cursor as string } })
  t.equal(rest.json<{ data: LibraryObject[]; next_cursor: string | null }>().data.length, 1)
  t.equal(rest.json<{ next_cursor: string | null }>().next_cursor, null)

  // Read, update (empty unsets), delete (gone, and can be added again).
  const read = await oauth1Request('GET', `${lib}/${key}`, id)
  t.match(read.json(), { data: { media_key: key, name: 'Coffee shop' } })
  const updated = await oauth1Request('PUT', `${lib}/${key}`, id, { query: { name: '', file_name: 'renamed.png' } })
  t.match(updated.json(), { data: { name: null, file_name: 'renamed.png' } })
  expectAdsError(t, await oauth1Request('PUT', `${lib}/${key}`, id, { query: { title: 'x' } }), 400, 'INVALID_PARAMETER', 'title', 'title update on an image')
  expectAdsError(t, await oauth1Request('GET', `${lib}/3_999`, id), 404, 'MEDIA_NOT_FOUND', undefined, 'unknown key')
  const deleted = await oauth1Request('DELETE', `${lib}/${key}`, id)
  t.match(deleted.json(), { data: { media_key: key, deleted: true } })
  expectAdsError(t, await oauth1Request('GET', `${lib}/${key}`, id), 404, 'MEDIA_NOT_FOUND', undefined, 'read after delete')
  t.equal((await addToLibrary(rt.baseUrl, id, account, key)).status, 200, 'added again after delete')

  // Someone else's account.
  const outsider = await createAdsIdentity(rt.ctx)
  expectAdsError(t, await oauth1Request('GET', lib, outsider.id), 403, 'ACCOUNT_NOT_FOUND', undefined, 'not their account')

  await eventually(() => changes.some((c) => c.change_type === 'DELETE' && c.entity_id === key))
  const ofKey = changes.filter((c) => c.entity_id === key)
  t.same(ofKey.map((c) => c.change_type), ['CREATE', 'UPDATE', 'DELETE', 'CREATE'], 'entity changes in order')
  t.match(ofKey[0], { entity_type: 'MEDIA_LIBRARY', account_id: account.id, changed_by: { user_id: id.user.id } })
  t.match(ofKey[1]?.changes, { name: { old: 'Coffee shop', new: null }, file_name: { old: 'coffee beans.png', new: 'renamed.png' } })
})

t.test('videos: labels, poster default and choice; PROMO_VIDEO becomes PREROLL account media', async (t) => {
  const rt = await startTestRuntime(t)
  const { id, account } = await createAdsIdentity(rt.ctx)
  const media = Media.create(t)
  const lib = `${rt.baseUrl}/12/accounts/${account.id}/media_library`
  const accountMedia = `${rt.baseUrl}/12/accounts/${account.id}/account_media`
  const changes: EntityChange[] = []
  const consumer = await rt.ctx.bus.subscribe({ groupId: 'preroll-changes', topics: [TOPICS.adsEntityChanges], handler: async (m: BusMessage) => { changes.push(m.value as EntityChange) } })
  t.teardown(() => consumer.close())

  const video = await uploadKey(rt.baseUrl, id, media.mp4(1280, 720, 1.5), { category: 'tweet_video' })
  expectAdsError(t, await addToLibrary(rt.baseUrl, id, account, video, { title: 't'.repeat(71) }), 400, 'INVALID_PARAMETER', 'title', 'title 71')
  expectAdsError(t, await addToLibrary(rt.baseUrl, id, account, video, { description: 'd'.repeat(201) }), 400, 'INVALID_PARAMETER', 'description', 'description 201')
  const added = await addToLibrary(rt.baseUrl, id, account, video, { title: 't'.repeat(70), description: 'd'.repeat(200) })
  t.equal(added.status, 200, added.text)
  const obj = added.json<{ data: LibraryObject }>().data
  t.match(obj, { media_type: 'VIDEO', media_category: 'TWEET_VIDEO', duration: 1500, aspect_ratio: '16:9', poster_media_key: /^3_/ })
  const poster = await fetch(obj.poster_media_url as string)
  t.equal(poster.status, 200, 'default poster (first frame) is served')
  t.equal(poster.headers.get('content-type'), 'image/jpeg')

  // Choosing a poster: an uploaded image; not a video; unsetting goes back to the first frame.
  const image = await uploadKey(rt.baseUrl, id, png(1280, 720))
  const chosen = await oauth1Request('PUT', `${lib}/${video}`, id, { query: { poster_media_key: image } })
  t.match(chosen.json(), { data: { poster_media_key: image } })
  expectAdsError(t, await oauth1Request('PUT', `${lib}/${video}`, id, { query: { poster_media_key: video } }), 400, 'INVALID_PARAMETER', 'poster_media_key', 'a video as poster')
  const reset = await oauth1Request('PUT', `${lib}/${video}`, id, { query: { poster_media_key: '' } })
  t.equal(reset.json<{ data: LibraryObject }>().data.poster_media_key, obj.poster_media_key, 'back to the default poster')

  // A TWEET_VIDEO is not account media; a PROMO_VIDEO is, as PREROLL.
  t.same((await oauth1Request('GET', accountMedia, id)).json<{ data: unknown[] }>().data, [])
  const promo = await uploadKey(rt.baseUrl, id, media.mp4(640, 360, 1), { category: 'PROMO_VIDEO' })
  const promoAdded = await addToLibrary(rt.baseUrl, id, account, promo, { poster_media_key: image })
  t.match(promoAdded.json(), { data: { media_category: 'PROMO_VIDEO', poster_media_key: image } })
  const list = await oauth1Request('GET', accountMedia, id)
  t.equal(list.status, 200)
  const items = list.json<{ data: Array<{ id: string; video_id: string; media_url: null; creative_type: string; deleted: boolean }>; next_cursor: null }>()
  t.equal(items.data.length, 1, 'one PREROLL account media')
  const preroll = items.data[0] as { id: string }
  t.match(preroll, { video_id: promo, media_url: null, creative_type: 'PREROLL', deleted: false })

  // Account media list filters and bounds.
  const ids = async (query: Record<string, string>): Promise<string[]> => (await oauth1Request('GET', accountMedia, id, { query })).json<{ data: Array<{ id: string }> }>().data.map((m) => m.id)
  t.same(await ids({ creative_types: 'PREROLL' }), [preroll.id])
  t.same(await ids({ creative_types: 'BANNER,MEDIUM_RECTANGLE' }), [])
  t.same(await ids({ account_media_ids: preroll.id }), [preroll.id])
  t.same(await ids({ account_media_ids: 'zzzzz' }), [])
  t.match((await oauth1Request('GET', accountMedia, id, { query: { with_total_count: 'true' } })).json(), { total_count: 1 })
  expectAdsError(t, await oauth1Request('GET', accountMedia, id, { query: { count: '1001' } }), 400, 'INVALID_PARAMETER', 'count', 'count 1001')
  expectAdsError(t, await oauth1Request('GET', accountMedia, id, { query: { count: '0' } }), 400, 'INVALID_PARAMETER', 'count', 'count 0')
  t.equal((await oauth1Request('GET', accountMedia, id, { query: { count: '1000' } })).status, 200, 'count 1000')
  expectAdsError(t, await oauth1Request('GET', accountMedia, id, { query: { creative_types: 'POSTER' } }), 400, 'INVALID_PARAMETER', 'creative_types', 'unknown creative type')
  const tooMany = Array.from({ length: 201 }, (_, i) => `a${i}`).join(',')
  expectAdsError(t, await oauth1Request('GET', accountMedia, id, { query: { account_media_ids: tooMany } }), 400, 'INVALID_PARAMETER', 'account_media_ids', '201 ids')
  expectAdsError(t, await oauth1Request('GET', accountMedia, id, { query: { with_total_count: 'true', cursor: 'abc' } }), 400, 'EXCLUSIVE_PARAMETERS', undefined, 'total count with cursor')

  // Read, delete, read again only with with_deleted.
  t.match((await oauth1Request('GET', `${accountMedia}/${preroll.id}`, id)).json(), { data: { id: preroll.id, creative_type: 'PREROLL' } })
  t.match((await oauth1Request('DELETE', `${accountMedia}/${preroll.id}`, id)).json(), { data: { id: preroll.id, deleted: true } })
  expectAdsError(t, await oauth1Request('GET', `${accountMedia}/${preroll.id}`, id), 404, 'ACCOUNT_MEDIA_NOT_FOUND', undefined, 'deleted account media')
  t.match((await oauth1Request('GET', `${accountMedia}/${preroll.id}`, id, { query: { with_deleted: 'true' } })).json(), { data: { deleted: true } })
  t.same(await ids({}), [], 'gone from the list')
  t.same(await ids({ with_deleted: 'true' }), [preroll.id], 'listed with with_deleted')
  expectAdsError(t, await oauth1Request('DELETE', `${accountMedia}/${preroll.id}`, id), 404, 'ACCOUNT_MEDIA_NOT_FOUND', undefined, 'deleted twice')

  // Deleting a promoted video from the library takes its PREROLL with it.
  const promo2 = await uploadKey(rt.baseUrl, id, media.mp4(640, 360, 1), { category: 'amplify_video' })
  t.equal((await addToLibrary(rt.baseUrl, id, account, promo2)).status, 200)
  t.equal((await ids({})).length, 1)
  t.equal((await oauth1Request('DELETE', `${lib}/${promo2}`, id)).status, 200)
  t.same(await ids({}), [], 'PREROLL removed with its video')

  await eventually(() => changes.filter((c) => c.entity_type === 'ACCOUNT_MEDIA').length >= 4)
  t.same(changes.filter((c) => c.entity_type === 'ACCOUNT_MEDIA').map((c) => c.change_type), ['CREATE', 'DELETE', 'CREATE', 'DELETE'])
})

t.test('an account user granted access adds uploads of the account owner', async (t) => {
  const rt = await startTestRuntime(t)
  const { id: owner, account } = await createAdsIdentity(rt.ctx)
  const manager = await createIdentity(rt.ctx.store)
  await grantAccountAccess(rt.ctx, account.id, manager.user.id)
  const key = await uploadKey(rt.baseUrl, owner, png(40, 40))
  const res = await addToLibrary(rt.baseUrl, manager, account, key)
  t.equal(res.status, 200, res.text)
})

t.test('GIFs take a title and a description, as the public update example does; images do not', async (t) => {
  const rt = await startTestRuntime(t)
  const { id, account } = await createAdsIdentity(rt.ctx)
  const lib = `${rt.baseUrl}/12/accounts/${account.id}/media_library`
  const gif = await uploadKey(rt.baseUrl, id, Media.create(t).gif(120, 80, 3), { category: 'tweet_gif' })
  expectAdsError(t, await addToLibrary(rt.baseUrl, id, account, gif, { title: 't'.repeat(71) }), 400, 'INVALID_PARAMETER', 'title', 'GIF title 71')
  const added = await addToLibrary(rt.baseUrl, id, account, gif, { title: 'cat GIF', description: 'in space' })
  t.equal(added.status, 200, added.text)
  t.match(added.json<{ data: LibraryObject }>().data, { media_type: 'GIF', media_category: 'TWEET_GIF', title: 'cat GIF', description: 'in space' })
  const updated = await oauth1Request('PUT', `${lib}/${gif}`, id, { query: { title: 'dog GIF', description: '' } })
  t.equal(updated.status, 200, updated.text)
  t.match(updated.json<{ data: LibraryObject }>().data, { title: 'dog GIF', description: null })
  t.match((await oauth1Request('GET', `${lib}/${gif}`, id)).json<{ data: LibraryObject }>().data, { title: 'dog GIF', description: null }, 'what was written is what reads show')
  t.same((await oauth1Request('GET', lib, id, { query: { q: 'dog' } })).json<{ data: LibraryObject[] }>().data.map((e) => e.media_key), [gif], 'the title is searchable')
  expectAdsError(t, await oauth1Request('PUT', `${lib}/${gif}`, id, { query: { poster_media_key: gif } }), 400, 'INVALID_PARAMETER', 'poster_media_key', 'a poster stays a video setting')

  const image = await uploadKey(rt.baseUrl, id, png(40, 40))
  expectAdsError(t, await addToLibrary(rt.baseUrl, id, account, image, { description: 'x' }), 400, 'INVALID_PARAMETER', 'description', 'description on an image')
})
