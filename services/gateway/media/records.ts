import path from 'node:path'
import type { Config } from '../../common/config'
import type { ServiceContext } from '../../common/context'
import type { Inspection, MediaFormat } from './inspect'
import { aspectRatio } from './inspect'
import { KEY_PREFIX, MEDIA_TYPE_OF, type MediaCategory, type MediaType } from './rules'

/**
 * Metadata of uploaded media. The bytes live in the media directory under an
 * unguessable file name; the store keeps only this record:
 *
 *   media:{media_id}     MediaRecord (JSON)
 *
 * A media key is `<kind prefix>_<media_id>` (`3_...` image, `16_...` GIF,
 * `7_...` video, `13_...` promoted video), so a key resolves to its record
 * without an index.
 */

export interface MediaRecord {
  media_id: string
  media_key: string
  media_category: MediaCategory
  media_type: MediaType
  format: MediaFormat
  mime: string
  size: number
  width: number
  height: number
  frames: number
  /** Milliseconds, video only. */
  duration_ms: number | null
  aspect_ratio: string
  /** The uploading user. */
  owner_user_id: string
  /** Users the uploader let use the media (e.g. the advertiser the upload is for). */
  additional_owners: string[]
  /** File name inside the media directory (also the last path segment of its URL). */
  file: string
  /** Video only: the image extracted from the first frame, used when no poster is chosen. */
  poster_media_key: string | null
  created_at: string
}

export const MediaKeys = {
  record: (mediaId: string) => `media:${mediaId}`
}

export const MEDIA_KEY_PATTERN = /^([0-9]{1,3})_([0-9]{1,19})$/

export function mediaDir(config: Config): string {
  return path.resolve(config.mediaDir !== '' ? config.mediaDir : path.join(config.dataDir, 'media'))
}

export function newRecord(input: {
  mediaId: string
  category: MediaCategory
  info: Inspection
  size: number
  ownerUserId: string
  additionalOwners: string[]
  file: string
}): MediaRecord {
  const { info } = input
  return {
    media_id: input.mediaId,
    media_key: `${KEY_PREFIX[input.category]}_${input.mediaId}`,
    media_category: input.category,
    media_type: MEDIA_TYPE_OF[input.category],
    format: info.format,
    mime: info.mime,
    size: input.size,
    width: info.width,
    height: info.height,
    frames: info.frames,
    duration_ms: info.format === 'mp4' ? (info.durationMs ?? 0) : null,
    aspect_ratio: aspectRatio(info.width, info.height),
    owner_user_id: input.ownerUserId,
    additional_owners: input.additionalOwners,
    file: input.file,
    poster_media_key: null,
    created_at: new Date().toISOString()
  }
}

export async function saveMedia(ctx: ServiceContext, record: MediaRecord): Promise<void> {
  await ctx.store.setJson(MediaKeys.record(record.media_id), record)
}

export async function getMedia(ctx: ServiceContext, mediaId: string): Promise<MediaRecord | undefined> {
  return ctx.store.getJson<MediaRecord>(MediaKeys.record(mediaId))
}

/** The record a media key names; undefined for a malformed key or one whose prefix does not match. */
export async function getMediaByKey(ctx: ServiceContext, mediaKey: string): Promise<MediaRecord | undefined> {
  const m = MEDIA_KEY_PATTERN.exec(mediaKey)
  if (!m) return undefined
  const record = await getMedia(ctx, m[2] as string)
  return record?.media_key === mediaKey ? record : undefined
}

/** Whether any of `userIds` uploaded the media or was named among its owners. */
export function usableBy(record: MediaRecord, userIds: Iterable<string>): boolean {
  for (const id of userIds) if (record.owner_user_id === id || record.additional_owners.includes(id)) return true
  return false
}

/** The public URL of a media file, served by GET /media/:file. */
export function mediaUrl(base: string, record: Pick<MediaRecord, 'file'>): string {
  return `${base}/media/${record.file}`
}
