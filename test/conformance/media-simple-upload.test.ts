import { execFile } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { promisify } from 'node:util'
import t from 'tap'
import { png } from '../support/fixtures/media'
import { oauth1Request } from '../support/http'
import { createIdentity, startTestRuntime } from '../support/runtime'
import { selfSignedCert, tempDir } from '../support/util'

/**
 * The v1.1 simple upload: `POST /1.1/media/upload.json` with the whole file
 * and no `command`, as the platform's upload host takes it. Driven by
 * tweepy's API.simple_upload (Debian python3-tweepy, run by /usr/bin/python3
 * against the product over HTTPS with a test certificate; only tweepy's
 * host settings change), and in its form-encoded spelling (`media_data`,
 * base64) signed by the oauth-1.0a library.
 */

const PYTHON = process.env.DEBIAN_PYTHON ?? '/usr/bin/python3'
const SCRIPT = path.join(__dirname, '..', 'support', 'fixtures', 'conformance', 'tweepy_simple_upload.py')
const run = promisify(execFile)

t.test('tweepy simple_upload keeps the image; a bad file is its 324', async (t) => {
  const dir = tempDir(t, 'simple-upload-')
  const { cert, key } = selfSignedCert(dir, '127.0.0.1', 'IP:127.0.0.1')
  const rt = await startTestRuntime(t, { env: { TLS_CERT: cert, TLS_KEY: key } })
  const id = await createIdentity(rt.ctx.store)
  const tweepy = async (file: string, mediaCategory?: string): Promise<Record<string, unknown>> => {
    const args = { host: new URL(rt.baseUrl).host, consumer_key: id.app.consumer_key, consumer_secret: id.app.consumer_secret, token: id.token.token, token_secret: id.token.secret, file, media_category: mediaCategory ?? null }
    const { stdout } = await run(PYTHON, [SCRIPT, JSON.stringify(args)], { env: { ...process.env, REQUESTS_CA_BUNDLE: cert }, timeout: 30_000 })
    return JSON.parse(stdout) as Record<string, unknown>
  }

  const image = path.join(dir, 'picture.png')
  fs.writeFileSync(image, png(120, 80))
  const kept = await tweepy(image)
  t.comment(`tweepy ${String(kept.tweepy)}`)
  t.match(kept, { media_id: /^[0-9]{1,19}$/, media_id_string: /^[0-9]{1,19}$/, media_key: /^3_[0-9]+$/, size: fs.statSync(image).size, image: { image_type: 'image/png', w: 120, h: 80 } }, 'tweepy reads the uploaded media')
  t.equal(kept.media_id, kept.media_id_string, 'the media_id tweepy parsed (an exact Python int) is media_id_string')
  const stored = await rt.ctx.store.get(`media:${String(kept.media_id_string)}`)
  t.ok(stored, 'the media record is kept')

  const bogus = path.join(dir, 'not-an-image.png')
  fs.writeFileSync(bogus, 'plain text, not a picture')
  const refused = await tweepy(bogus)
  t.match(refused, { status: 400, api_codes: [324], api_messages: [/Unsupported or malformed media/] }, 'a file that is no media: 400 with code 324')
  const badCategory = await tweepy(image, 'no_such_category')
  t.match(badCategory, { status: 400, api_codes: [44], api_messages: [/media_category/] }, 'an unknown category: 400 with code 44')
})

t.test('the form-encoded simple upload with media_data (base64)', async (t) => {
  const rt = await startTestRuntime(t)
  const id = await createIdentity(rt.ctx.store)
  const bytes = png(64, 48)
  const res = await oauth1Request('POST', `${rt.baseUrl}/1.1/media/upload.json`, id, { form: { media_data: bytes.toString('base64'), media_category: 'tweet_image' } })
  t.equal(res.status, 200, `answered 200 (${res.text.slice(0, 200)})`)
  t.match(res.text, /^\{"media_id":[0-9]+,"media_id_string":"[0-9]+"/, 'media_id is a JSON number')
  t.match(res.json(), { media_key: /^3_/, size: bytes.length, image: { image_type: 'image/png', w: 64, h: 48 } })
  const nothing = await oauth1Request('POST', `${rt.baseUrl}/1.1/media/upload.json`, id, { form: { media_category: 'tweet_image' } })
  t.match([nothing.status, nothing.json()], [400, { errors: [{ code: 38, message: 'command parameter is missing.' }] }], 'no command and no media: still 38')
})
