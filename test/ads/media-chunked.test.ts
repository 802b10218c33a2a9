import fs from 'node:fs'
import https from 'node:https'
import path from 'node:path'
import tls from 'node:tls'
import t, { type Test } from 'tap'
import { ApiResponseError, EUploadMimeType, TwitterApi } from 'twitter-api-v2'
import { getMedia, mediaDir } from '../../services/gateway/media/records'
import { adsFixture, OPERATOR_TOKEN } from '../support/fixtures/campaigns'
import { appendSegment, chunkedUpload, hasFfmpeg, Media, png } from '../support/fixtures/media'
import { oauth1Request, type TestResponse } from '../support/http'
import { createIdentity, startTestRuntime } from '../support/runtime'
import { selfSignedCert, tempDir } from '../support/util'
import { openApiErrors } from '../support/fixtures/activity'
import type { Problem } from '../support/problems'

/**
 * Chunked upload, v2 and v1.1, as clients send it: twitter-api-v2's own
 * uploadMedia (v1.1 INIT/APPEND/FINALIZE/STATUS with three appends in
 * flight, and the v2 initialize/append/finalize/STATUS) against the server
 * on loopback under the platform's host names, then every bad input in the
 * interface's error shape, expiry of unfinished uploads, and an uploaded
 * video used in the media library, a video card and a video poll.
 */

t.ok(hasFfmpeg(), 'ffmpeg is installed (make deps-system); the videos are made with it')


/** A v2 refusal: status, Problem type, the parameter it names, and a valid Problem body. */
function problem(t: Test, res: TestResponse, status: number, suffix: string, parameter: string, label: string): void {
  t.equal(res.status, status, `${label}: ${status} (${res.text.slice(0, 300)})`)
  t.match(res.headers.get('content-type'), /application\/problem\+json/, `${label}: problem+json`)
  const body = res.json<Problem>()
  t.equal(body.type, `https://api.twitter.com/2/problems/${suffix}`, `${label}: ${suffix}`)
  if (suffix === 'invalid-request') t.ok(body.errors?.[0]?.parameters[parameter], `${label}: names ${parameter}`)
  else t.match(body, { parameter, resource_type: 'media', resource_id: String, value: String }, `${label}: names ${parameter}`)
  t.equal(openApiErrors('Problem', body), undefined, `${label}: a Problem of the OpenAPI subset`)
}

/** A v1.1 refusal: 400 with the classic errors array and its code. */
function classic(t: Test, res: TestResponse, code: number, message: RegExp, label: string): void {
  t.equal(res.status, 400, `${label}: 400 (${res.text.slice(0, 300)})`)
  t.match(res.json(), { errors: [{ code, message }] }, `${label}: code ${code}`)
}

t.test('twitter-api-v2 uploads video and images in chunks, v1.1 and v2', async (t) => {
  const dir = tempDir(t, 'tls-')
  const { cert, key } = selfSignedCert(dir, 'upload.x.com', 'DNS:upload.x.com,DNS:api.x.com')
  const rt = await startTestRuntime(t, { env: { TLS_CERT: cert, TLS_KEY: key } })
  const port = Number(new URL(rt.baseUrl).port)
  // The client keeps its own URLs (https://upload.x.com/1.1/..., https://api.x.com/2/...); only the connection goes to loopback.
  const agent = new https.Agent({ keepAlive: false })
  const ca = fs.readFileSync(cert)
  Object.assign(agent, { createConnection: (o: tls.ConnectionOptions) => tls.connect({ host: '127.0.0.1', port, servername: o.servername ?? 'api.x.com', ca }) })
  const id = await createIdentity(rt.ctx.store)
  const client = new TwitterApi({ appKey: id.app.consumer_key, appSecret: id.app.consumer_secret, accessToken: id.token.token, accessSecret: id.token.secret }, { httpAgent: agent })
  const media = Media.create(t)
  const video = media.mp4(320, 180, 1)

  // v1.1: 1 KB segments, three APPENDs in flight (they may land out of order), then STATUS until succeeded.
  const full = await client.v1.uploadMedia(video, { mimeType: EUploadMimeType.Mp4, chunkLength: 1024 }, true)
  t.ok(video.length > 4 * 1024, `several segments (${video.length} bytes)`)
  t.match(full, { media_id_string: /^[0-9]{19}$/, media_key: `7_${full.media_id_string}` })
  const status = await client.v1.mediaInfo(full.media_id_string)
  t.match(status, { media_id_string: full.media_id_string, size: video.length, processing_info: { state: 'succeeded', progress_percent: 100 }, video: { video_type: 'video/mp4' } })
  const record = await getMedia(rt.ctx, full.media_id_string)
  t.match(record, { media_type: 'VIDEO', media_category: 'TWEET_VIDEO', width: 320, height: 180, duration_ms: 1000, size: video.length, owner_user_id: id.user.id })
  t.ok(record?.poster_media_key, 'first frame extracted as the default poster')

  // The exact 64-bit id: the number in the raw body is the string's digits.
  const raw = await client.v1.get('media/upload.json', { command: 'STATUS', media_id: full.media_id_string }, { prefix: 'https://upload.x.com/1.1/', fullResponse: true, forceParseMode: 'text' })
  t.match(raw.data as unknown as string, new RegExp(`^\\{"media_id":${full.media_id_string},"media_id_string":"${full.media_id_string}"`))

  const image = png(400, 300)
  const imageId = await client.v1.uploadMedia(image, { mimeType: EUploadMimeType.Png, chunkLength: 4 * 1024 })
  t.match(await getMedia(rt.ctx, imageId), { media_type: 'IMAGE', width: 400, height: 300, size: image.length })
  t.match(await client.v1.mediaInfo(imageId), { image: { image_type: 'image/png', w: 400, h: 300 } })
  t.notOk((await client.v1.mediaInfo(imageId)).processing_info, 'images have no processing_info')

  // v2: JSON initialize, multipart appends, finalize, STATUS.
  const v2Id = await client.v2.uploadMedia(video, { media_type: 'video/mp4' }, 2 * 1024)
  t.match(await getMedia(rt.ctx, v2Id), { media_type: 'VIDEO', width: 320, height: 180 })
  const v2Image = await client.v2.uploadMedia(image, { media_type: 'image/png' }, 1024)
  t.match(await getMedia(rt.ctx, v2Image), { media_type: 'IMAGE', media_key: `3_${v2Image}` })

  // The client surfaces a refusal as its own error with the Problem.
  const refused = await client.v2.uploadMedia(video, { media_type: 'image/png' }, 64 * 1024).catch((e: unknown) => e)
  t.ok(refused instanceof ApiResponseError, 'a video declared as image/png is refused')
  t.match((refused as ApiResponseError).data, { type: 'https://api.twitter.com/2/problems/invalid-request' })
  // Finished uploads leave no segment behind; the refused one keeps its segments until it expires.
  t.same(fs.readdirSync(path.join(mediaDir(rt.ctx.config), 'uploads')).filter((d) => [full.media_id_string, imageId, v2Id, v2Image].includes(d)), [], 'no segment left behind')
})

t.test('bad input gets the v2 Problem and the classic v1.1 errors, never a 500', async (t) => {
  const mediaRoot = tempDir(t, 'media-dir-')
  const rt = await startTestRuntime(t, { env: { MEDIA_DIR: mediaRoot } })
  const id = await createIdentity(rt.ctx.store)
  const other = await createIdentity(rt.ctx.store)
  const base = rt.baseUrl
  const v2 = (method: string, p: string, json?: unknown, who = id): Promise<TestResponse> => oauth1Request(method, `${base}${p}`, who, json === undefined ? {} : { json })
  const v1 = (form: Record<string, string>, who = id): Promise<TestResponse> => oauth1Request('POST', `${base}/1.1/media/upload.json`, who, { form })
  const v1Status = (mediaId: string): Promise<TestResponse> => oauth1Request('GET', `${base}/1.1/media/upload.json`, id, { query: { command: 'STATUS', media_id: mediaId } })
  const image = png(64, 64)
  const init = async (body: Record<string, unknown>): Promise<string> => {
    const res = await v2('POST', '/2/media/upload/initialize', body)
    t.equal(res.status, 200, res.text)
    t.equal(openApiErrors('MediaUploadResponse', { ...res.json<object>(), meta: {} }), undefined, 'initialize answer matches MediaUploadResponse')
    return res.json<{ data: { id: string } }>().data.id
  }

  const mediaId = await init({ media_type: 'image/png', total_bytes: image.length, media_category: 'tweet_image' })
  problem(t, await appendSegment(base, id, '1234567890123456789', 0, image), 404, 'resource-not-found', 'id', 'unknown media id')
  problem(t, await appendSegment(base, other, mediaId, 0, image), 404, 'resource-not-found', 'id', "another user's upload")
  problem(t, await appendSegment(base, id, mediaId, 1000, image), 400, 'invalid-request', 'segment_index', 'segment index 1000')
  problem(t, await appendSegment(base, id, mediaId, '-1', image), 400, 'invalid-request', 'segment_index', 'negative segment index')
  problem(t, await v2('POST', `/2/media/upload/${mediaId}/append`, { segment_index: 0, media: '@@not base64@@' }), 400, 'invalid-request', 'media', 'garbage base64')
  problem(t, await appendSegment(base, id, mediaId, 0, Buffer.concat([image, image])), 400, 'invalid-request', 'media', 'more bytes than total_bytes')
  const firstHalf = await v2('POST', `/2/media/upload/${mediaId}/append`, { segment_index: 0, media: image.subarray(0, 40).toString('base64') })
  t.equal(firstHalf.status, 200, `base64 JSON segment: ${firstHalf.text}`)
  t.match(firstHalf.json(), { data: { expires_at: Number } })
  t.equal(openApiErrors('MediaUploadAppendResponse', { ...firstHalf.json<object>(), meta: {} }), undefined, 'append answer matches MediaUploadAppendResponse')
  t.equal((await appendSegment(base, id, mediaId, 2, image.subarray(40))).status, 200)
  problem(t, await v2('POST', `/2/media/upload/${mediaId}/finalize`), 400, 'invalid-request', 'segment_index', 'segment 1 missing')
  t.equal((await appendSegment(base, id, mediaId, 1, Buffer.alloc(0))).status, 400, 'an empty segment')
  fs.rmSync(path.join(mediaRoot, 'uploads', mediaId, '2.seg'))
  t.equal((await appendSegment(base, id, mediaId, 1, image.subarray(40))).status, 200)
  const done = await v2('POST', `/2/media/upload/${mediaId}/finalize`)
  t.equal(done.status, 200, done.text)
  t.match(done.json(), { data: { id: mediaId, media_key: `3_${mediaId}`, size: image.length } })
  problem(t, await appendSegment(base, id, mediaId, 2, image), 400, 'invalid-request', 'media_id', 'append after finalize')

  problem(t, await v2('POST', '/2/media/upload/initialize', { media_type: 'image/png', total_bytes: 6 * 1024 * 1024 }), 400, 'invalid-request', 'total_bytes', 'an image over 5 MB')
  problem(t, await v2('POST', '/2/media/upload/initialize', { media_type: 'video/mp4', total_bytes: 600 * 1024 * 1024 }), 400, 'invalid-request', 'total_bytes', 'a video over MEDIA_MAX_BYTES')
  problem(t, await v2('POST', '/2/media/upload/initialize', { media_type: 'video/webm', total_bytes: 100 }), 400, 'invalid-request', 'media_type', 'a type not stored')
  problem(t, await v2('POST', '/2/media/upload/initialize', { media_type: 'image/png', total_bytes: 100, media_category: 'tweet_video' }), 400, 'invalid-request', 'media_category', 'category against type')
  problem(t, await v2('POST', '/2/media/upload/initialize', { total_bytes: 100 }), 400, 'invalid-request', 'media_type', 'no media_type')
  const wrongType = await init({ media_type: 'video/mp4', total_bytes: image.length })
  t.equal((await appendSegment(base, id, wrongType, 0, image)).status, 200)
  problem(t, await v2('POST', `/2/media/upload/${wrongType}/finalize`), 400, 'invalid-request', 'media_type', 'PNG bytes declared as video/mp4')
  problem(t, await v2('GET', '/2/media/upload?command=STATUS&media_id=999'), 404, 'resource-not-found', 'media_id', 'STATUS of an unknown id')
  const malformed = await oauth1Request('POST', `${base}/2/media/upload/${wrongType}/append`, id, { headers: { 'content-type': 'multipart/form-data; boundary=xyz' }, form: undefined })
  t.ok(malformed.status >= 400 && malformed.status < 500, `a multipart body without parts is the client's: ${malformed.status}`)

  // v1.1: form-encoded INIT, APPEND with base64 media_data, FINALIZE, STATUS.
  const v1Init = await v1({ command: 'INIT', total_bytes: String(image.length), media_type: 'image/png' })
  t.equal(v1Init.status, 200, v1Init.text)
  const v1Id = v1Init.json<{ media_id_string: string }>().media_id_string
  t.match(v1Init.text, new RegExp(`^\\{"media_id":${v1Id},"media_id_string":"${v1Id}","media_key":"3_${v1Id}","expires_after_secs":\\d+\\}$`))
  classic(t, await v1({ command: 'APPEND', media_id: v1Id, segment_index: '0', media_data: 'not*base64' }), 324, /base64/, 'v1.1 garbage media_data')
  classic(t, await v1({ command: 'APPEND', media_id: v1Id, segment_index: '1000', media_data: image.toString('base64') }), 44, /between 0 and 999/, 'v1.1 segment index')
  classic(t, await v1({ command: 'APPEND', media_id: '42', segment_index: '0', media_data: image.toString('base64') }), 324, /No upload/, 'v1.1 unknown media id')
  classic(t, await v1({ command: 'APPEND', segment_index: '0', media_data: image.toString('base64') }), 38, /media_id parameter is missing/, 'v1.1 no media_id')
  classic(t, await v1({ command: 'UPLOAD' }), 44, /INIT, APPEND or FINALIZE/, 'v1.1 unknown command')
  classic(t, await v1({ command: 'INIT', total_bytes: String(16 * 1024 * 1024), media_type: 'image/gif' }), 324, /exceeds/, 'v1.1 GIF over 15 MB')
  const appended = await v1({ command: 'APPEND', media_id: v1Id, segment_index: '0', media_data: image.toString('base64') })
  t.equal(appended.status, 204, `v1.1 APPEND: empty 2xx (${appended.text})`)
  t.equal(appended.text, '')
  const fin = await v1({ command: 'FINALIZE', media_id: v1Id })
  t.equal(fin.status, 200, fin.text)
  t.match(fin.json(), { media_id_string: v1Id, size: image.length, image: { image_type: 'image/png', w: 64, h: 64 } })
  classic(t, await v1({ command: 'APPEND', media_id: v1Id, segment_index: '1', media_data: image.toString('base64') }), 44, /finalized/, 'v1.1 append after finalize')
  classic(t, await v1Status('1'), 324, /No upload/, 'v1.1 STATUS of an unknown id')
  t.equal((await v1Status(v1Id)).status, 200)
  t.equal((await oauth1Request('POST', `${base}/1.1/media/upload.json`, other, { form: { command: 'FINALIZE', media_id: v1Id } })).status, 400, "v1.1 another user's upload")
})

t.test('an unfinished upload expires: its id is unknown and its segments are removed', async (t) => {
  const mediaRoot = tempDir(t, 'media-dir-')
  const rt = await startTestRuntime(t, { env: { MEDIA_DIR: mediaRoot, MEDIA_UPLOAD_TTL: '1s' } })
  const id = await createIdentity(rt.ctx.store)
  const image = png(32, 32)
  const init = await oauth1Request('POST', `${rt.baseUrl}/2/media/upload/initialize`, id, { json: { media_type: 'image/png', total_bytes: image.length * 2 } })
  const mediaId = init.json<{ data: { id: string; expires_after_secs: number } }>().data.id
  t.ok(init.json<{ data: { expires_after_secs: number } }>().data.expires_after_secs <= 1)
  t.equal((await appendSegment(rt.baseUrl, id, mediaId, 0, image)).status, 200)
  t.ok(fs.existsSync(path.join(mediaRoot, 'uploads', mediaId, '0.seg')), 'the segment is on disk')
  const deadline = Date.now() + 10_000
  while (fs.existsSync(path.join(mediaRoot, 'uploads', mediaId)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200))
  t.notOk(fs.existsSync(path.join(mediaRoot, 'uploads', mediaId)), 'segments removed after expiry')
  problem(t, await appendSegment(rt.baseUrl, id, mediaId, 1, image), 404, 'resource-not-found', 'id', 'append to an expired upload')
})

t.test('a chunked video in the media library, a video card and a video poll', async (t) => {
  const rt = await startTestRuntime(t, { env: { OPERATOR_TOKEN } })
  const f = await adsFixture(t, { rt })
  const video = Media.create(t).mp4(1280, 720, 2)
  const up = await chunkedUpload(rt.baseUrl, f.id, video, { mediaType: 'video/mp4', category: 'amplify_video', segmentBytes: 64 * 1024 })
  t.equal(up.states[0], 'pending', 'FINALIZE answers pending')
  t.equal(up.states.at(-1), 'succeeded')
  t.ok(up.states.every((s) => ['pending', 'in_progress', 'succeeded'].includes(s)), `states seen: ${up.states.join(', ')}`)
  t.match(up.mediaKey, /^13_/, 'amplify_video is promoted video')

  const lib = await f.call('POST', '/media_library', { query: { media_key: up.mediaKey, name: 'chunked' } })
  t.equal(lib.status, 200, lib.text)
  t.match(lib.json(), { data: { media_key: up.mediaKey, media_type: 'VIDEO', media_category: 'PROMO_VIDEO', aspect_ratio: '16:9', duration: Number } })

  const card = await f.call('POST', '/cards', {
    json: { name: 'chunked video', components: [{ type: 'MEDIA', media_key: up.mediaKey }, { type: 'DETAILS', title: 'Watch', destination: { type: 'WEBSITE', url: 'https://example.com' } }] }
  })
  t.equal(card.status, 200, card.text)
  t.match(card.json(), { data: { card_type: 'VIDEO_WEBSITE' } })

  const poll = { name: 'Pick one', duration_in_minutes: '60', first_choice: 'Yes', second_choice: 'No', media_key: up.mediaKey }
  t.equal((await f.call('POST', '/cards/poll', { query: poll })).status, 403, 'video polls are gated')
  const op = await fetch(`${rt.baseUrl}/admin/ads/accounts/${f.account.id}/features`, {
    method: 'POST',
    headers: { authorization: `Bearer ${OPERATOR_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ feature_keys: ['PROMOTED_MEDIA_POLLS'] })
  })
  t.equal(op.status, 200, 'the operator grants PROMOTED_MEDIA_POLLS')
  const created = await f.call('POST', '/cards/poll', { query: poll })
  t.equal(created.status, 200, created.text)
  t.match(created.json(), { data: { card_type: 'VIDEO_POLLS', video_url: /\/media\/.+\.mp4$/, content_duration_seconds: '2' } })
})
