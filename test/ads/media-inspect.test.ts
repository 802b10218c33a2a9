import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { aspectRatio, hasRatio, inspectFile, MediaFormatError, type Inspection } from '../../services/gateway/media/inspect'
import { checkMedia, defaultCategory, LIMITS, parseCategory } from '../../services/gateway/media/rules'
import { hasFfmpeg, Media, png } from '../support/fixtures/media'
import { tempDir } from '../support/util'

/**
 * Inspection (file-type, image-size, ffprobe) against real files: PNGs drawn
 * by pngjs, JPEG, GIF, WEBP and MP4 encoded by ffmpeg; then malformed and
 * truncated inputs, and the category rules over what inspection reports.
 */

// ffmpeg makes the JPEG, GIF, WEBP and MP4 inputs. `make test` installs it (deps-system), so its
// absence is a failure of the suite, never a silent skip of the video, GIF, JPEG and WEBP checks.
t.ok(hasFfmpeg(), 'ffmpeg is installed (make deps-system); the JPEG, GIF, WEBP and MP4 checks need it')

let n = 0
function inspect(dir: string, bytes: Buffer): Promise<Inspection> {
  const file = path.join(dir, `f${n++}`)
  fs.writeFileSync(file, bytes)
  return inspectFile(file)
}

t.test('PNG, JPEG, GIF, WEBP and MP4 made by pngjs and ffmpeg', async (t) => {
  const dir = tempDir(t)
  const media = Media.create(t)
  t.match(await inspect(dir, png(321, 123)), { format: 'png', mime: 'image/png', width: 321, height: 123, frames: 1, animated: false })
  t.match(await inspect(dir, media.jpeg(640, 336)), { format: 'jpeg', mime: 'image/jpeg', width: 640, height: 336 })
  t.match(await inspect(dir, media.webp(300, 200)), { format: 'webp', width: 300, height: 200, animated: false }, 'lossy VP8')
  t.match(await inspect(dir, media.webp(301, 199, true)), { format: 'webp', width: 301, height: 199, animated: false }, 'lossless VP8L (odd sizes)')
  const gif = await inspect(dir, media.gif(160, 90, 7))
  t.match(gif, { format: 'gif', width: 160, height: 90, frames: 7, animated: true })
  t.equal(gif.durationMs, 700, 'frame delays add up (7 frames at 10 fps)')
  t.match(await inspect(dir, media.gif(64, 48, 1)), { format: 'gif', frames: 1, animated: false }, 'a one-frame GIF is a still image')

  const mp4 = media.mp4(1280, 720, 1.5)
  t.match(await inspect(dir, mp4), { format: 'mp4', mime: 'video/mp4', width: 1280, height: 720, durationMs: 1500 })
  t.match(await inspect(dir, media.mp4(640, 360, 2, ['-movflags', '+faststart'])), { width: 640, height: 360, durationMs: 2000 }, 'moov before mdat')
  t.match(await inspect(dir, media.mp4(360, 640, 1)), { width: 360, height: 640 }, 'portrait')

  // An MP4 cut before its moov (written last by default) cannot be inspected.
  await t.rejects(inspect(dir, mp4.subarray(0, 64)), MediaFormatError)
  await t.rejects(inspect(dir, mp4.subarray(0, mp4.indexOf('moov') - 4)), /moov atom not found/, 'cut just before its moov: ffprobe names what is missing')
})

t.test('malformed and unsupported bytes are MediaFormatErrors', async (t) => {
  const dir = tempDir(t)
  await t.rejects(inspect(dir, Buffer.from('plain text, not media')), /unsupported media/)
  await t.rejects(inspect(dir, Buffer.from('BM6\x00\x00\x00\x00\x00\x00\x00\x36\x00\x00\x00', 'latin1')), /unsupported media/, 'BMP is not accepted')
  const good = png(10, 10)
  await t.rejects(inspect(dir, good.subarray(0, 20)), MediaFormatError, 'truncated PNG header')
  const zero = Buffer.from(good)
  zero.writeUInt32BE(0, 16)
  await t.rejects(inspect(dir, zero), MediaFormatError, 'zero width')
  await t.rejects(inspect(dir, Buffer.from([0xff, 0xd8, 0xff, 0xd9, 0, 0, 0, 0, 0, 0, 0, 0])), MediaFormatError, 'JPEG without a frame')
  await t.rejects(inspect(dir, Buffer.from('GIF89a\x0a\x00\x0a\x00\x00\x00\x00\x3b', 'latin1')), /GIF/, 'GIF without any image')
  const box = Buffer.alloc(24)
  box.writeUInt32BE(16, 0)
  box.write('ftypisom', 4, 'latin1')
  box.writeUInt32BE(4000, 16)
  box.write('moov', 20, 'latin1')
  await t.rejects(inspect(dir, box), MediaFormatError, 'a box overrunning the file')
  // Without ffprobe the server cannot inspect: that is its own failure, never the client's bad media.
  const gif = path.join(dir, 'still.gif')
  fs.writeFileSync(gif, Buffer.from('GIF89a\x01\x00\x01\x00\x00\x00\x00\x2c\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02\x44\x01\x00\x3b', 'latin1'))
  t.match(await inspectFile(gif), { format: 'gif', width: 1, height: 1, frames: 1 })
  const err = await inspectFile(gif, path.join(dir, 'no-such-ffprobe')).catch((e: unknown) => e)
  t.match(err, { code: 'ENOENT' })
  t.notOk(err instanceof MediaFormatError, 'a missing ffprobe is no format error')
})

t.test('aspect ratios', async (t) => {
  t.equal(aspectRatio(1280, 720), '16:9')
  t.equal(aspectRatio(1000, 632), '125:79')
  t.equal(aspectRatio(7, 7), '1:1')
  t.ok(hasRatio(854, 480, 16, 9), '854x480 counts as 16:9')
  t.ok(hasRatio(1200, 628, 1.91, 1), '1200x628 is 1.91:1')
  t.notOk(hasRatio(1280, 960, 16, 9), '4:3 is not 16:9')
  t.notOk(hasRatio(10, 0, 1, 1))
})

t.test('category rules over the inspection', async (t) => {
  const image = (w: number, h: number): Inspection => ({ format: 'png', mime: 'image/png', width: w, height: h, frames: 1, animated: false })
  const gif = (w: number, h: number, frames: number): Inspection => ({ format: 'gif', mime: 'image/gif', width: w, height: h, frames, animated: frames > 1 })
  const video = (w: number, h: number, ms: number): Inspection => ({ format: 'mp4', mime: 'video/mp4', width: w, height: h, frames: 1, animated: true, durationMs: ms })
  const max = 512 * 1024 * 1024

  t.equal(parseCategory('tweet_image'), 'TWEET_IMAGE')
  t.equal(parseCategory('AMPLIFY_VIDEO'), 'PROMO_VIDEO', 'amplify_video is the platform name of promoted video')
  t.equal(parseCategory('TweetVideo'), 'TWEET_VIDEO', 'v1.1 clients send CamelCase')
  t.equal(parseCategory('AmplifyVideo'), 'PROMO_VIDEO')
  t.equal(parseCategory('dm_image'), undefined)
  t.equal(defaultCategory(video(10, 10, 1000)), 'TWEET_VIDEO')
  t.equal(defaultCategory(gif(10, 10, 3)), 'TWEET_GIF')
  t.equal(defaultCategory(gif(10, 10, 1)), 'TWEET_IMAGE')

  t.equal(checkMedia('TWEET_IMAGE', image(1200, 628), 1000, max), undefined)
  t.match(checkMedia('TWEET_IMAGE', image(100, 100), LIMITS.imageBytes + 1, max), { parameter: 'media', message: /5 MB/ })
  t.match(checkMedia('TWEET_IMAGE', image(9000, 100), 1000, max), { parameter: 'media', message: /8192/ })
  t.match(checkMedia('TWEET_IMAGE', gif(10, 10, 4), 1000, max), { parameter: 'media_category', message: /tweet_gif/ })
  t.match(checkMedia('TWEET_IMAGE', video(10, 10, 1000), 1000, max), { parameter: 'media_category' })
  t.equal(checkMedia('TWEET_GIF', gif(320, 240, 30), 1000, max), undefined)
  t.match(checkMedia('TWEET_GIF', image(10, 10), 1000, max), { parameter: 'media_category' })
  t.match(checkMedia('TWEET_GIF', gif(320, 240, 3), LIMITS.gifBytes + 1, max), { message: /15 MB/ })
  t.match(checkMedia('TWEET_GIF', gif(1281, 240, 3), 1000, max), { message: /1280x1080/ })
  t.match(checkMedia('TWEET_GIF', gif(320, 240, 351), 1000, max), { message: /350 frames/ })
  t.match(checkMedia('TWEET_GIF', gif(1280, 1080, 300), 1000, max), { message: /pixels in total/ })
  t.equal(checkMedia('TWEET_VIDEO', video(1280, 720, 1000), 1000, max), undefined)
  t.equal(checkMedia('PROMO_VIDEO', video(720, 1280, 1000), 1000, max), undefined, 'portrait 720x1280 fits 1280x1024 turned')
  t.match(checkMedia('TWEET_VIDEO', image(10, 10), 1000, max), { parameter: 'media_category' })
  t.match(checkMedia('TWEET_VIDEO', video(1280, 720, 400), 1000, max), { message: /0\.5 s/ })
  t.match(checkMedia('TWEET_VIDEO', video(1280, 720, 20 * 60 * 1000 + 1), 1000, max), { message: /20 minutes/ })
  t.match(checkMedia('TWEET_VIDEO', video(1920, 1080, 1000), 1000, max), { message: /1280x1024/ })
  t.match(checkMedia('TWEET_VIDEO', video(31, 100, 1000), 1000, max), { message: /32x32/ })
  t.match(checkMedia('TWEET_VIDEO', video(1000, 300, 1000), 1000, max), { message: /1:3 to 3:1/ })
  t.match(checkMedia('TWEET_VIDEO', video(1280, 720, 1000), 2000, 1500), { message: /limit/ })
})
