import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import t, { type Test } from 'tap'
import { configureClient } from '../../services/gateway/oauth2/clients'
import { createGrant, newGrantId } from '../../services/gateway/oauth2/grants'
import { getMediaByKey, mediaDir } from '../../services/gateway/media/records'
import { hasFfmpeg, Media, png, upload } from '../support/fixtures/media'
import { bearerRequest, oauthHeader, plainRequest, type TestResponse } from '../support/http'
import { createIdentity, startTestRuntime, type TestIdentity } from '../support/runtime'
import { tempDir } from '../support/util'
import { openApiErrors } from '../support/fixtures/activity'
import type { Problem } from '../support/problems'

/**
 * POST /2/media/upload end to end: real files uploaded over multipart (and
 * base64 JSON), inspected by the server, stored in MEDIA_DIR with only
 * metadata in the store, served back byte for byte; every refusal in the v2
 * Problem shape naming its parameter.
 */

// ffmpeg makes the JPEG, GIF, WEBP and MP4 inputs. `make test` installs it (deps-system), so its
// absence is a failure of the suite, never a silent skip of the video, GIF, JPEG and WEBP checks.
t.ok(hasFfmpeg(), 'ffmpeg is installed (make deps-system); the JPEG, GIF, WEBP and MP4 checks need it')


function invalidParameter(t: Test, res: TestResponse, parameter: string, message: RegExp, label: string): void {
  t.equal(res.status, 400, `${label}: 400 (${res.text.slice(0, 200)})`)
  t.match(res.headers.get('content-type'), /application\/problem\+json/, `${label}: problem+json`)
  const body = res.json<Problem>()
  t.equal(body.type, 'https://api.twitter.com/2/problems/invalid-request', `${label}: invalid-request`)
  t.ok(body.errors?.[0]?.parameters[parameter], `${label}: names ${parameter}`)
  t.match(body.errors?.[0]?.message, message, `${label}: message`)
  t.equal(openApiErrors('Problem', body), undefined, `${label}: a Problem`)
}

t.test('uploads of every format are inspected, stored on disk and served back', async (t) => {
  const mediaRoot = tempDir(t, 'media-dir-')
  // Leftovers of an upload cut short by a crash are removed at start; recent ones may be in flight elsewhere.
  fs.mkdirSync(path.join(mediaRoot, 'tmp'))
  fs.writeFileSync(path.join(mediaRoot, 'tmp', 'stale'), 'x')
  fs.utimesSync(path.join(mediaRoot, 'tmp', 'stale'), new Date(Date.now() - 2 * 3600_000), new Date(Date.now() - 2 * 3600_000))
  fs.writeFileSync(path.join(mediaRoot, 'tmp', 'recent'), 'x')
  const rt = await startTestRuntime(t, { env: { MEDIA_DIR: mediaRoot } })
  t.same(fs.readdirSync(path.join(mediaRoot, 'tmp')), ['recent'], 'stale partial upload removed at start')
  fs.rmSync(path.join(mediaRoot, 'tmp', 'recent'))
  const id = await createIdentity(rt.ctx.store)

  const image = png(640, 480)
  const res = await upload(rt.baseUrl, id, image, { category: 'tweet_image', filename: 'photo.gif', contentType: 'image/gif' })
  t.equal(res.status, 200, res.text)
  const data = res.json<{ data: { id: string; media_key: string; size: number } }>().data
  t.match(data, { id: /^[0-9]{19}$/, media_key: `3_${data.id}`, size: image.length })
  // The published schema marks `meta` required without defining it (the platform's answers carry none): only `data` is checked.
  t.equal(openApiErrors('MediaUploadResponse', { ...res.json<object>(), meta: {} }), undefined, 'data matches MediaUploadResponse')
  t.same(Object.keys(res.json<object>()), ['data'])

  // The record holds metadata only; the bytes are the file in MEDIA_DIR.
  const record = await getMediaByKey(rt.ctx, data.media_key)
  t.match(record, { media_type: 'IMAGE', media_category: 'TWEET_IMAGE', format: 'png', mime: 'image/png', width: 640, height: 480, owner_user_id: id.user.id, aspect_ratio: '4:3' })
  t.notOk(JSON.stringify(record).includes(image.subarray(16, 48).toString('base64')), 'no bytes in the store')
  t.equal(mediaDir(rt.ctx.config), path.resolve(mediaRoot))
  const file = path.join(mediaRoot, record?.file ?? 'missing')
  t.same(fs.readFileSync(file), image, 'bytes stored under MEDIA_DIR')
  t.same(fs.readdirSync(path.join(mediaRoot, 'tmp')), [], 'no temporary file left behind')
  const served = await fetch(`${rt.baseUrl}/media/${record?.file}`)
  t.equal(served.status, 200)
  t.equal(served.headers.get('content-type'), 'image/png', 'type from the bytes, not the client')
  t.same(Buffer.from(await served.arrayBuffer()), image, 'served byte for byte')
  t.equal((await plainRequest('GET', `${rt.baseUrl}/media/nothing-here-at-all.png`)).status, 404)
  t.equal((await plainRequest('GET', `${rt.baseUrl}/media/..%2F..%2Fetc%2Fpasswd`)).status, 404)

  // No category: inferred from the bytes.
  const inferred = await upload(rt.baseUrl, id, png(20, 20))
  t.match(inferred.json<{ data: { media_key: string } }>().data.media_key, /^3_/)

  // Base64 in a JSON body.
  const json = await fetch(`${rt.baseUrl}/2/media/upload`, {
    method: 'POST',
    headers: { ...(signedHeader(rt.baseUrl, id)), 'content-type': 'application/json' },
    body: JSON.stringify({ media: png(33, 44).toString('base64'), media_category: 'tweet_image', media_type: 'image/png' })
  })
  t.equal(json.status, 200, 'base64 JSON upload')
  const jsonKey = ((await json.json()) as { data: { media_key: string } }).data.media_key
  t.match(await getMediaByKey(rt.ctx, jsonKey), { width: 33, height: 44 })

  const made = Media.create(t)
  const cases: Array<[string, Buffer, string, RegExp, object]> = [
    ['jpeg', made.jpeg(800, 419), 'tweet_image', /^3_/, { format: 'jpeg', width: 800, height: 419, media_type: 'IMAGE' }],
    ['webp', made.webp(300, 300), 'tweet_image', /^3_/, { format: 'webp', width: 300, height: 300 }],
    ['gif', made.gif(200, 100, 6), 'tweet_gif', /^16_/, { format: 'gif', media_type: 'GIF', frames: 6, aspect_ratio: '2:1' }],
    ['mp4', made.mp4(1280, 720, 1), 'tweet_video', /^7_/, { format: 'mp4', media_type: 'VIDEO', duration_ms: 1000, width: 1280, height: 720, aspect_ratio: '16:9' }],
    ['promo mp4', made.mp4(640, 360, 1), 'amplify_video', /^13_/, { media_category: 'PROMO_VIDEO', duration_ms: 1000 }]
  ]
  for (const [label, bytes, category, key, expected] of cases) {
    const r = await upload(rt.baseUrl, id, bytes, { category })
    t.equal(r.status, 200, `${label}: ${r.text}`)
    const k = r.json<{ data: { media_key: string } }>().data.media_key
    t.match(k, key, `${label}: key prefix`)
    t.match(await getMediaByKey(rt.ctx, k), expected, `${label}: inspected`)
  }
  // A video gets its first frame as default poster (an image media of its own).
  const video = await upload(rt.baseUrl, id, made.mp4(640, 360, 1), { category: 'tweet_video' })
  const rec = await getMediaByKey(rt.ctx, video.json<{ data: { media_key: string } }>().data.media_key)
  t.match(rec?.poster_media_key, /^3_/, 'default poster extracted')
  t.match(await getMediaByKey(rt.ctx, rec?.poster_media_key ?? ''), { format: 'jpeg', width: 640, height: 360 }, 'poster is the first frame')
})

/** The Authorization header of a POST to the upload route, signed without body parameters. */
function signedHeader(baseUrl: string, id: TestIdentity): Record<string, string> {
  return { Authorization: oauthHeader('POST', `${baseUrl}/2/media/upload`, id) }
}

t.test('refusals name their parameter', async (t) => {
  const rt = await startTestRuntime(t, { env: { MEDIA_MAX_BYTES: String(6 * 1024 * 1024) } })
  const id = await createIdentity(rt.ctx.store)

  invalidParameter(t, await upload(rt.baseUrl, id, Buffer.from('just some text, not an image at all')), 'media', /Unsupported or malformed media/, 'not media')
  invalidParameter(t, await upload(rt.baseUrl, id, png(10, 10), { category: 'dm_image' }), 'media_category', /must be one of/, 'unknown category')
  for (const name of ['constructor', '__proto__', 'toString', 'hasOwnProperty']) {
    invalidParameter(t, await upload(rt.baseUrl, id, png(10, 10), { category: name }), 'media_category', /must be one of/, `category ${name}`)
  }
  invalidParameter(t, await upload(rt.baseUrl, id, png(10, 10), { category: 'tweet_gif' }), 'media_category', /takes a GIF/, 'PNG as a GIF')
  invalidParameter(t, await upload(rt.baseUrl, id, png(10, 10), { category: 'tweet_video' }), 'media_category', /MP4/, 'PNG as a video')
  invalidParameter(t, await upload(rt.baseUrl, id, png(10, 10), { mediaType: 'image/jpeg' }), 'media_type', /file is image\/png/, 'claimed type differs')
  invalidParameter(t, await upload(rt.baseUrl, id, png(10, 10), { mediaType: 'text/plain' }), 'media_type', /must be one of/, 'unknown media_type')
  invalidParameter(t, await upload(rt.baseUrl, id, png(10, 10), { additionalOwners: ['abc'] }), 'additional_owners', /user ids/, 'bad owners')
  invalidParameter(t, await upload(rt.baseUrl, id, png(10, 10), { fields: { colour: 'red' } }), 'colour', /not accepted/, 'unknown field')
  invalidParameter(t, await upload(rt.baseUrl, id, png(1200, 1200, true)), 'media', /exceeds the 5 MB limit/, 'image over 5 MB')

  const form = new FormData()
  form.append('media_category', 'tweet_image')
  const empty = await fetch(`${rt.baseUrl}/2/media/upload`, { method: 'POST', headers: signedHeader(rt.baseUrl, id), body: form })
  t.equal(empty.status, 400, 'no media')
  t.match(await empty.json(), { errors: [{ parameters: { media: [] } }] })

  const badB64 = await fetch(`${rt.baseUrl}/2/media/upload`, { method: 'POST', headers: { ...(signedHeader(rt.baseUrl, id)), 'content-type': 'application/json' }, body: JSON.stringify({ media: '***' }) })
  t.equal(badB64.status, 400, 'bad base64')

  // Over MEDIA_MAX_BYTES: cut off while streaming.
  const huge = Buffer.concat([png(8, 8), Buffer.alloc(6 * 1024 * 1024 + 10)])
  const big = await upload(rt.baseUrl, id, huge)
  t.equal(big.status, 413, big.text)
  t.match(big.json(), { type: 'about:blank', status: 413, detail: /upload limit of 6291456 bytes/ })

  const made = Media.create(t)
  invalidParameter(t, await upload(rt.baseUrl, id, made.gif(64, 64, 5), { category: 'tweet_image' }), 'media_category', /tweet_gif/, 'animated GIF as image')
  // An animated WEBP (VP8X with the animation flag, ANMF frames) is refused as a still image, and it is no GIF either.
  const animatedWebp = path.join(tempDir(t, 'anim-webp-'), 'anim.webp')
  execFileSync('ffmpeg', ['-nostdin', '-v', 'error', '-y', '-f', 'lavfi', '-i', 'testsrc=size=64x48:rate=10', '-frames:v', '3', '-loop', '0', animatedWebp], { stdio: 'ignore', timeout: 30_000 })
  const animated = fs.readFileSync(animatedWebp)
  t.equal(animated.toString('latin1', 12, 16), 'VP8X', 'ffmpeg wrote an extended (animated) WEBP')
  invalidParameter(t, await upload(rt.baseUrl, id, animated, { category: 'tweet_image' }), 'media', /animated WEBP cannot be uploaded as tweet_image/, 'animated WEBP as image')
  invalidParameter(t, await upload(rt.baseUrl, id, animated), 'media', /animated WEBP/, 'animated WEBP with no category')
  invalidParameter(t, await upload(rt.baseUrl, id, animated, { category: 'tweet_gif' }), 'media_category', /takes a GIF file/, 'animated WEBP as GIF')
  invalidParameter(t, await upload(rt.baseUrl, id, made.mp4(1920, 1080, 1), { category: 'tweet_video' }), 'media', /1280x1024/, '1080p video')
  invalidParameter(t, await upload(rt.baseUrl, id, made.mp4(640, 360, 0.3), { category: 'tweet_video' }), 'media', /0\.5 s/, 'video too short')
  invalidParameter(t, await upload(rt.baseUrl, id, made.mp4(960, 160, 1), { category: 'tweet_video' }), 'media', /1:3 to 3:1/, 'video too wide')
  invalidParameter(t, await upload(rt.baseUrl, id, made.mp4(640, 360, 1), { category: 'tweet_image' }), 'media_category', /video/, 'video as image')
})

t.test('malformed multipart forms are the invalid-request Problem naming the body, never a 500', async (t) => {
  const rt = await startTestRuntime(t, { env: { MEDIA_MAX_BYTES: String(64 * 1024) } })
  const id = await createIdentity(rt.ctx.store)
  const url = `${rt.baseUrl}/2/media/upload`
  const post = async (contentType: string, body: string | Buffer): Promise<TestResponse> => {
    const res = await fetch(url, { method: 'POST', headers: { ...(signedHeader(rt.baseUrl, id)), 'content-type': contentType }, body })
    const text = await res.text()
    return { status: res.status, headers: res.headers, text, json: <T>() => JSON.parse(text) as T }
  }
  const part = (name: string, value: string, headers = ''): string => `--b0undary\r\nContent-Disposition: form-data; name="${name}"${headers}\r\n\r\n${value}\r\n`
  const filePart = (bytes: string): string => `--b0undary\r\nContent-Disposition: form-data; name="media"; filename="a.png"\r\nContent-Type: image/png\r\n\r\n${bytes}`
  const cases: Array<[string, string, string]> = [
    ['no boundary', 'multipart/form-data', 'no boundary at all'],
    ['an empty boundary', 'multipart/form-data; boundary=', `--\r\n${'x'.repeat(20)}`],
    ['a boundary longer than any parser takes', `multipart/form-data; boundary=${'b'.repeat(300)}`, `--${'b'.repeat(300)}\r\n`],
    ['a body with another boundary', 'multipart/form-data; boundary=b0undary', `--other\r\nContent-Disposition: form-data; name="media"\r\n\r\nx\r\n--other--\r\n`],
    ['a file part cut short', 'multipart/form-data; boundary=b0undary', filePart(png(4, 4).toString('latin1'))],
    ['a field part cut short', 'multipart/form-data; boundary=b0undary', `${part('media_category', 'tweet_image')}--b0undary\r\nContent-Disposition: form-data; name="media_type"\r\n\r\nimage/`],
    ['a field named after a prototype property', 'multipart/form-data; boundary=b0undary', `${part('__proto__', 'x')}--b0undary--\r\n`],
    ['a JSON field that is not JSON', 'multipart/form-data; boundary=b0undary', `${part('media_category', '{', '\r\nContent-Type: application/json')}--b0undary--\r\n`]
  ]
  for (const [label, contentType, body] of cases) {
    const res = await post(contentType, Buffer.from(body, 'latin1'))
    t.equal(res.status, 400, `${label}: 400 (${res.text.slice(0, 200)})`)
    t.match(res.headers.get('content-type'), /application\/problem\+json/, `${label}: problem+json`)
    t.match(res.json(), { type: 'https://api.twitter.com/2/problems/invalid-request', errors: [{ message: /multipart\/form-data body could not be read/, parameters: { body: [] } }] }, label)
    t.equal(openApiErrors('Problem', res.json()), undefined, `${label}: a Problem`)
  }

  const missing = await post('multipart/form-data; boundary=b0undary', `${part('media_category', 'tweet_image')}--b0undary--\r\n`)
  t.equal(missing.status, 400, 'a well-formed form without media')
  t.match(missing.json(), { type: 'https://api.twitter.com/2/problems/invalid-request', errors: [{ parameters: { media: [] } }] })

  // Over MEDIA_MAX_BYTES in the middle of the part, the form itself unfinished.
  const tooLarge = await post('multipart/form-data; boundary=b0undary', Buffer.concat([Buffer.from(filePart(''), 'latin1'), png(8, 8), Buffer.alloc(128 * 1024)]))
  t.equal(tooLarge.status, 413, `a file over the limit mid-stream (${tooLarge.text.slice(0, 200)})`)
  t.match(tooLarge.json(), { type: 'about:blank', status: 413, detail: /upload limit of 65536 bytes/ })

  const good = await upload(rt.baseUrl, id, png(6, 6))
  t.equal(good.status, 200, 'the server still takes a good upload after all of them')
  t.same(fs.readdirSync(path.join(mediaDir(rt.ctx.config), 'tmp')), [], 'no partial upload is left behind')
})

t.test('authentication: OAuth 1.0a or OAuth 2.0 user context with media.write', async (t) => {
  const rt = await startTestRuntime(t)
  const id = await createIdentity(rt.ctx.store)
  const url = `${rt.baseUrl}/2/media/upload`
  const body = (): FormData => {
    const f = new FormData()
    f.append('media', new Blob([png(5, 5)]), 'a.png')
    return f
  }

  const none = await fetch(url, { method: 'POST', body: body() })
  t.equal(none.status, 401)

  const app = await bearerRequest('POST', url, id.bearer, { json: { media: png(5, 5).toString('base64') } })
  t.equal(app.status, 403)
  t.match(app.json(), { type: 'https://api.twitter.com/2/problems/unsupported-authentication', detail: /OAuth 2\.0 Application-Only/ })

  // A real OAuth 2.0 user-context token: the app becomes an OAuth 2.0 client and the user grants scopes.
  const client = await configureClient(rt.ctx.store, id.app.id, { confidential: true, redirect_uris: ['http://127.0.0.1/cb'] })
  const userToken = async (scopes: string[]): Promise<string> => {
    const issued = await createGrant(rt.ctx.store, rt.ctx.config, { grant_id: newGrantId(), app_id: id.app.id, client_id: client.oauth2?.client_id ?? '', user_id: id.user.id, scopes })
    return issued.access_token
  }
  const withScope = await fetch(url, { method: 'POST', headers: { authorization: `Bearer ${await userToken(['tweet.write', 'media.write'])}` }, body: body() })
  t.equal(withScope.status, 200, 'OAuth 2.0 user token with media.write')
  const key = ((await withScope.json()) as { data: { media_key: string } }).data.media_key
  t.equal((await getMediaByKey(rt.ctx, key))?.owner_user_id, id.user.id, 'owned by the token user')

  const noScope = await fetch(url, { method: 'POST', headers: { authorization: `Bearer ${await userToken(['tweet.read'])}` }, body: body() })
  t.equal(noScope.status, 403, 'media.write is needed')
  t.match(await noScope.json(), { detail: /Missing OAuth 2\.0 scopes: media\.write/ })

  const readOnly = await createIdentity(rt.ctx.store, { access: 'read' })
  const ro = await upload(rt.baseUrl, readOnly, png(5, 5))
  t.equal(ro.status, 403, 'a read-only OAuth 1.0a token cannot upload')
})
