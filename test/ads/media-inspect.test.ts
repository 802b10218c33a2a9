import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { aspectRatio, bufferSource, hasRatio, inspectFile, inspectImage, inspectMp4, MediaFormatError, sniff, type Inspection } from '../../services/gateway/media/inspect'
import { checkMedia, defaultCategory, LIMITS, parseCategory } from '../../services/gateway/media/rules'
import { tempDir } from '../helper'
import { hasFfmpeg, Media, png } from './media-fixtures'

/**
 * Byte inspection against real files: PNGs drawn by pngjs, JPEG, GIF, WEBP
 * and MP4 encoded by ffmpeg; then malformed and truncated inputs, and the
 * category rules over what inspection reports.
 */

// ffmpeg makes the JPEG, GIF, WEBP and MP4 inputs. `make test` installs it (deps-system), so its
// absence is a failure of the suite, never a silent skip of the video, GIF, JPEG and WEBP checks.
t.ok(hasFfmpeg(), 'ffmpeg is installed (make deps-system); the JPEG, GIF, WEBP and MP4 checks need it')

t.test('PNG: type and dimensions from the IHDR chunk', async (t) => {
  const info = inspectImage(png(321, 123))
  t.match(info, { format: 'png', mime: 'image/png', width: 321, height: 123, frames: 1, animated: false })
})

t.test('ffmpeg-made JPEG, GIF, WEBP and MP4', async (t) => {
  const media = Media.create(t)
  t.match(inspectImage(media.jpeg(640, 336)), { format: 'jpeg', mime: 'image/jpeg', width: 640, height: 336 })
  t.match(inspectImage(media.webp(300, 200)), { format: 'webp', width: 300, height: 200, animated: false }, 'lossy VP8')
  t.match(inspectImage(media.webp(301, 199, true)), { format: 'webp', width: 301, height: 199 }, 'lossless VP8L (odd sizes)')
  const gif = inspectImage(media.gif(160, 90, 7))
  t.match(gif, { format: 'gif', width: 160, height: 90, frames: 7, animated: true })
  t.equal(gif.durationMs, 700, 'frame delays add up (7 frames at 10 fps)')
  t.match(inspectImage(media.gif(64, 48, 1)), { format: 'gif', frames: 1, animated: false }, 'a one-frame GIF is a still image')

  const mp4 = media.mp4(1280, 720, 1.5)
  const info = await inspectMp4(bufferSource(mp4))
  t.match(info, { format: 'mp4', mime: 'video/mp4', width: 1280, height: 720 })
  t.equal(info.durationMs, 1500, 'duration from mvhd')
  const faststart = await inspectMp4(bufferSource(media.mp4(640, 360, 2, ['-movflags', '+faststart'])))
  t.match(faststart, { width: 640, height: 360, durationMs: 2000 }, 'moov before mdat')
  const portrait = await inspectMp4(bufferSource(media.mp4(360, 640, 1)))
  t.match(portrait, { width: 360, height: 640 })

  const dir = tempDir(t)
  const file = path.join(dir, 'v.mp4')
  fs.writeFileSync(file, mp4)
  t.match(await inspectFile(file), { format: 'mp4', width: 1280, height: 720, durationMs: 1500 }, 'from a file on disk')
  const jpg = path.join(dir, 'a.jpg')
  fs.writeFileSync(jpg, media.jpeg(800, 419))
  t.match(await inspectFile(jpg), { format: 'jpeg', width: 800, height: 419 })

  // An MP4 cut before its moov (written last by default) cannot be inspected.
  await t.rejects(inspectMp4(bufferSource(mp4.subarray(0, 64))), MediaFormatError)
  const noMoov = Buffer.from(mp4)
  noMoov.write('free', mp4.indexOf('moov'), 'latin1')
  await t.rejects(inspectMp4(bufferSource(noMoov)), /without a moov box/)
})

t.test('malformed and unsupported bytes are MediaFormatErrors', async (t) => {
  t.equal(sniff(Buffer.from('hello world, not media')), undefined)
  t.throws(() => inspectImage(Buffer.from('BM6\x00\x00\x00')), MediaFormatError, 'BMP is not accepted')
  const good = png(10, 10)
  t.throws(() => inspectImage(good.subarray(0, 20)), /truncated PNG header/)
  const badIhdr = Buffer.from(good)
  badIhdr.write('XXXX', 12, 'latin1')
  t.throws(() => inspectImage(badIhdr), /IHDR/)
  const zero = Buffer.from(good)
  zero.writeUInt32BE(0, 16)
  t.throws(() => inspectImage(zero), /empty dimension/)
  t.throws(() => inspectImage(Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10])), /truncated JPEG|JPEG/)
  t.throws(() => inspectImage(Buffer.from([0xff, 0xd8, 0xff, 0xd9])), /without a frame header/)
  t.throws(() => inspectImage(Buffer.from('GIF89a\x0a\x00\x0a\x00\x00\x00\x00\x3b', 'latin1')), /without any image/)
  t.throws(() => inspectImage(Buffer.from('GIF89a\x0a\x00\x0a\x00\x00\x00\x00\x2c\x00', 'latin1')), /truncated GIF/)
  const webp = Buffer.alloc(40)
  webp.write('RIFF', 0, 'latin1')
  webp.write('WEBPVP8Z', 8, 'latin1')
  t.throws(() => inspectImage(webp), /unsupported WEBP chunk/)
  const box = Buffer.alloc(24)
  box.writeUInt32BE(16, 0)
  box.write('ftypisom', 4, 'latin1')
  box.writeUInt32BE(4000, 16)
  box.write('moov', 20, 'latin1')
  await t.rejects(inspectMp4(bufferSource(box)), /overruns its container/)
  const dir = tempDir(t)
  const text = path.join(dir, 'x.txt')
  fs.writeFileSync(text, 'plain text')
  await t.rejects(inspectFile(text), /unsupported media/)
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
