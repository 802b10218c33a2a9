import { execFile } from 'node:child_process'
import fs from 'node:fs/promises'
import path from 'node:path'
import type { ServiceContext } from '../../common/context'
import { newNumericId, newSecret } from '../../common/ids'
import { inspectFile } from './inspect'
import { mediaDir, newRecord, saveMedia, type MediaRecord } from './records'

/**
 * A video's default poster is its first frame (media library: "default first
 * frame"). Decoding video is ffmpeg's job, so the frame is extracted by the
 * MEDIA_FFMPEG executable when one is configured; the result is inspected like
 * any upload and stored as an image media of the same owners. Without ffmpeg
 * (or when it fails) the video simply has no default poster.
 */

const FFMPEG_TIMEOUT_MS = 20_000

function run(file: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { timeout: FFMPEG_TIMEOUT_MS, windowsHide: true }, (err) => (err ? reject(err) : resolve()))
  })
}

export async function extractPoster(ctx: ServiceContext, video: MediaRecord): Promise<MediaRecord | undefined> {
  const ffmpeg = ctx.config.mediaFfmpeg
  if (ffmpeg === '') return undefined
  const dir = mediaDir(ctx.config)
  const file = `${newSecret(12)}.jpg`
  const target = path.join(dir, file)
  try {
    await run(ffmpeg, ['-nostdin', '-v', 'error', '-y', '-i', path.join(dir, video.file), '-frames:v', '1', '-f', 'image2', '-c:v', 'mjpeg', target])
    const info = await inspectFile(target, ctx.config.mediaFfprobe)
    const { size } = await fs.stat(target)
    const poster = newRecord({
      mediaId: newNumericId(),
      category: 'TWEET_IMAGE',
      info,
      size,
      ownerUserId: video.owner_user_id,
      additionalOwners: video.additional_owners,
      file
    })
    await saveMedia(ctx, poster)
    return poster
  } catch (err) {
    ctx.log.warn({ err: (err as Error).message, media_key: video.media_key }, 'no default poster: first-frame extraction failed')
    await fs.rm(target, { force: true })
    return undefined
  }
}
