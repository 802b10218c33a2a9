import { createReadStream, createWriteStream } from 'node:fs'
import fs from 'node:fs/promises'
import path from 'node:path'
import { pipeline } from 'node:stream/promises'
import { fileTypeFromFile } from 'file-type'
import type { ServiceContext } from '../../common/context'
import { newNumericId, newSecret, newUuid } from '../../common/ids'
import { EXTENSION_OF, FORMAT_OF_EXT, inspectFile, MediaFormatError, MIME_OF, type MediaFormat } from './inspect'
import { extractPoster } from './poster'
import { mediaDir, newRecord, saveMedia } from './records'
import { checkMedia, KEY_PREFIX, LIMITS, MEDIA_TYPE_OF, parseCategory, type MediaCategory } from './rules'
import { Refuse, UploadError } from './upload-errors'

/**
 * Chunked upload (INIT, APPEND, FINALIZE, STATUS), the same for the v2 and
 * v1.1 forms. The session is a record in the store that expires with the
 * upload; the bytes never pass through memory whole: each APPEND's segment is
 * already a file (streamed to disk by the route) and is renamed into
 * MEDIA_DIR/uploads/{media_id}/{index}.seg. FINALIZE checks the segments
 * (contiguous, adding up to total_bytes, the declared type by file-type on
 * the first one), then joins them by streaming into one file, inspects it
 * (ffprobe for video) and stores the media under the id told at INIT. Images
 * and GIFs are finished within FINALIZE; a video is processed after it, and
 * STATUS reports `processing_info` (pending, in_progress with
 * progress_percent, succeeded, failed) from the session record, so any
 * gateway instance can answer it.
 */

export type UploadState = 'open' | 'pending' | 'in_progress' | 'succeeded' | 'failed'

export interface UploadSession {
  media_id: string
  media_key: string
  owner_user_id: string
  category: MediaCategory
  media_type: string
  total_bytes: number
  additional_owners: string[]
  created_at: number
  expires_at: number
  state: UploadState
  progress_percent: number
  /** Bytes of the finished media. */
  size: number | null
  error: { code: number; name: string; message: string } | null
}

export interface InitInput {
  total_bytes?: string
  media_type?: string
  media_category?: string
  additional_owners?: string
}

/** Segment indexes the platform accepts, and the largest segment (5 MB). */
export const MAX_SEGMENT_INDEX = 999
export const MAX_SEGMENT_BYTES = 5 * 1024 * 1024

/** Declared types this service stores (the v2 schema lists more; they are refused by name). */
const FORMAT_OF_MIME: ReadonlyMap<string, MediaFormat> = new Map([
  ['image/jpeg', 'jpeg'],
  ['image/pjpeg', 'jpeg'],
  ['image/png', 'png'],
  ['image/gif', 'gif'],
  ['image/webp', 'webp'],
  ['video/mp4', 'mp4']
])

const Keys = {
  session: (id: string) => `media-upload:${id}`,
  /** Set once, by the FINALIZE that moves the upload out of `open`. */
  finalized: (id: string) => `media-upload-final:${id}`
}

/** Processing runs after FINALIZE answered; close() waits for it. */
const inFlight = new Set<Promise<void>>()

export function uploadsDir(ctx: ServiceContext): string {
  return path.join(mediaDir(ctx.config), 'uploads')
}

function segmentPath(ctx: ServiceContext, mediaId: string, index: number): string {
  return path.join(uploadsDir(ctx), mediaId, `${index}.seg`)
}

function limitOf(ctx: ServiceContext, category: MediaCategory): number {
  const type = MEDIA_TYPE_OF[category]
  return type === 'IMAGE' ? LIMITS.imageBytes : type === 'GIF' ? LIMITS.gifBytes : ctx.config.mediaMaxBytes
}

function categoryFor(format: MediaFormat): MediaCategory {
  return format === 'mp4' ? 'TWEET_VIDEO' : format === 'gif' ? 'TWEET_GIF' : 'TWEET_IMAGE'
}

function readOwners(raw: string | undefined): string[] {
  if (raw === undefined || raw === '') return []
  const ids = [...new Set(raw.split(',').map((s) => s.trim()))]
  if (ids.length > 100 || ids.some((id) => !/^[0-9]{1,19}$/.test(id))) throw Refuse.invalid('additional_owners', 'additional_owners is a list of up to 100 user ids.', raw)
  return ids
}

async function save(ctx: ServiceContext, s: UploadSession): Promise<void> {
  await ctx.store.setJson(Keys.session(s.media_id), s, Math.max(1000, s.expires_at - Date.now()))
}

export async function initUpload(ctx: ServiceContext, userId: string, input: InitInput): Promise<UploadSession> {
  if (input.total_bytes === undefined || input.total_bytes === '') throw Refuse.missing('total_bytes')
  if (input.media_type === undefined || input.media_type === '') throw Refuse.missing('media_type')
  const total = /^[0-9]{1,12}$/.test(input.total_bytes) ? Number(input.total_bytes) : NaN
  if (!(total >= 1)) throw Refuse.invalid('total_bytes', 'total_bytes must be a positive whole number of bytes.', input.total_bytes)
  const mediaType = input.media_type.toLowerCase()
  const format = FORMAT_OF_MIME.get(mediaType)
  if (format === undefined) {
    throw Refuse.media('media_type', `media_type ${input.media_type.slice(0, 40)} is not accepted: send one of ${[...FORMAT_OF_MIME.keys()].join(', ')}.`, input.media_type)
  }
  let category = categoryFor(format)
  if (input.media_category !== undefined && input.media_category !== '') {
    const named = parseCategory(input.media_category)
    if (!named) throw Refuse.invalid('media_category', 'media_category must be one of tweet_image, tweet_gif, tweet_video, amplify_video.', input.media_category)
    const kind = MEDIA_TYPE_OF[named]
    if ((kind === 'VIDEO') !== (format === 'mp4') || (kind === 'GIF' && format !== 'gif')) {
      throw Refuse.media('media_category', `media_category ${input.media_category.slice(0, 40)} does not take ${mediaType}.`, input.media_category)
    }
    category = named
  }
  const limit = limitOf(ctx, category)
  if (total > limit) throw Refuse.media('total_bytes', `File size exceeds ${limit} bytes (the limit of ${category.toLowerCase()}).`, input.total_bytes)
  const now = Date.now()
  const id = newNumericId(now)
  const session: UploadSession = {
    media_id: id,
    media_key: `${KEY_PREFIX[category]}_${id}`,
    owner_user_id: userId,
    category,
    media_type: mediaType,
    total_bytes: total,
    additional_owners: readOwners(input.additional_owners),
    created_at: now,
    expires_at: now + ctx.config.mediaUploadTtlMs,
    state: 'open',
    progress_percent: 0,
    size: null,
    error: null
  }
  await save(ctx, session)
  return session
}

/** The caller's upload: another user's id is as unknown as an expired one. */
export async function ownUpload(ctx: ServiceContext, userId: string, mediaId: string | undefined, parameter: string): Promise<UploadSession> {
  if (mediaId === undefined || mediaId === '') throw Refuse.missing(parameter)
  if (!/^[0-9]{1,19}$/.test(mediaId)) throw Refuse.invalid(parameter, `${parameter} must be the numeric id INIT returned.`, mediaId)
  const session = await ctx.store.getJson<UploadSession>(Keys.session(mediaId))
  if (!session || session.owner_user_id !== userId || session.expires_at <= Date.now()) throw Refuse.unknown(parameter, mediaId)
  return session
}

export function parseSegmentIndex(raw: string | undefined): number {
  if (raw === undefined || raw === '') throw Refuse.missing('segment_index')
  const n = /^[0-9]{1,4}$/.test(raw) ? Number(raw) : NaN
  if (!(n >= 0 && n <= MAX_SEGMENT_INDEX)) throw Refuse.invalid('segment_index', `Segment index must be between 0 and ${MAX_SEGMENT_INDEX} inclusive.`, raw)
  return n
}

async function segments(ctx: ServiceContext, mediaId: string): Promise<Array<{ index: number; size: number }>> {
  const dir = path.join(uploadsDir(ctx), mediaId)
  const names = await fs.readdir(dir).catch(() => [] as string[])
  const out: Array<{ index: number; size: number }> = []
  for (const name of names) {
    const m = /^([0-9]{1,3})\.seg$/.exec(name)
    if (!m) continue
    const stat = await fs.stat(path.join(dir, name)).catch(() => undefined)
    if (stat) out.push({ index: Number(m[1]), size: stat.size })
  }
  return out.sort((a, b) => a.index - b.index)
}

/**
 * Moves an appended segment (already streamed to `file`, `size` bytes) into
 * the upload. Re-sending an index replaces it, as clients retry segments.
 */
export async function appendSegment(ctx: ServiceContext, session: UploadSession, index: number, file: string, size: number): Promise<void> {
  if (session.state !== 'open' || (await ctx.store.exists(Keys.finalized(session.media_id)))) {
    throw Refuse.invalid('media_id', `The upload ${session.media_id} is finalized: no segment can be appended.`, session.media_id)
  }
  if (size === 0) throw Refuse.media('media', 'The segment is empty.')
  const others = (await segments(ctx, session.media_id)).filter((s) => s.index !== index).reduce((sum, s) => sum + s.size, 0)
  if (others + size > session.total_bytes) {
    throw Refuse.media('media', `The segments would add up to ${others + size} bytes, more than the total_bytes (${session.total_bytes}) given at INIT.`)
  }
  const target = segmentPath(ctx, session.media_id, index)
  await fs.mkdir(path.dirname(target), { recursive: true })
  await fs.rename(file, target)
}

function failure(message: string): UploadSession['error'] {
  return { code: 1, name: 'InvalidMedia', message }
}

/** Joins the segments into `target` by streaming each onto its end (1 MB at a time), reporting the bytes copied. */
async function join(ctx: ServiceContext, mediaId: string, count: number, target: string, onProgress: (bytes: number) => Promise<void>): Promise<number> {
  let bytes = 0
  for (let i = 0; i < count; i++) {
    const input = createReadStream(segmentPath(ctx, mediaId, i), { highWaterMark: 1024 * 1024 })
    await pipeline(input, createWriteStream(target, { flags: i === 0 ? 'w' : 'a' }))
    bytes += input.bytesRead
    await onProgress(bytes)
  }
  return bytes
}

/** Joins, inspects and stores the media; the session ends succeeded or failed. */
async function processUpload(ctx: ServiceContext, session: UploadSession, count: number): Promise<UploadSession> {
  const dir = mediaDir(ctx.config)
  const tmp = path.join(dir, 'tmp', newUuid())
  const video = MEDIA_TYPE_OF[session.category] === 'VIDEO'
  let reported = 0
  try {
    await fs.mkdir(path.dirname(tmp), { recursive: true })
    // Joining is most of the work: it is reported as 0-80 %, inspection and the poster as the rest.
    const size = await join(ctx, session.media_id, count, tmp, async (bytes) => {
      const percent = Math.floor((bytes / session.total_bytes) * 80)
      if (video && percent >= reported + 10) {
        reported = percent
        await save(ctx, { ...session, state: 'in_progress', progress_percent: percent })
      }
    })
    const info = await inspectFile(tmp, ctx.config.mediaFfprobe)
    const declared = session.media_type === 'image/pjpeg' ? 'image/jpeg' : session.media_type
    if (info.mime !== declared) throw Refuse.media('media_type', `The media_type is ${session.media_type} but the file is ${info.mime}.`)
    const violation = checkMedia(session.category, info, size, ctx.config.mediaMaxBytes)
    if (violation) throw Refuse.media(violation.parameter, violation.message)
    if (video) await save(ctx, { ...session, state: 'in_progress', progress_percent: 90 })
    const file = `${newSecret(12)}.${EXTENSION_OF[info.format]}`
    await fs.rename(tmp, path.join(dir, file))
    const record = newRecord({ mediaId: session.media_id, category: session.category, info, size, ownerUserId: session.owner_user_id, additionalOwners: session.additional_owners, file })
    if (record.media_type !== 'IMAGE') record.poster_media_key = (await extractPoster(ctx, record))?.media_key ?? null
    await saveMedia(ctx, record)
    return { ...session, state: 'succeeded', progress_percent: 100, size, error: null }
  } catch (err) {
    if (err instanceof UploadError || err instanceof MediaFormatError) {
      const message = err instanceof MediaFormatError ? `Unsupported or malformed media: ${err.message}.` : err.message
      return { ...session, state: 'failed', progress_percent: reported, error: failure(message) }
    }
    ctx.log.error({ err, media_id: session.media_id }, 'media processing failed')
    return { ...session, state: 'failed', progress_percent: reported, error: { code: 3, name: 'InternalError', message: 'The media could not be processed; upload it again.' } }
  } finally {
    await fs.rm(tmp, { force: true })
    await fs.rm(path.join(uploadsDir(ctx), session.media_id), { recursive: true, force: true })
  }
}

export async function finalizeUpload(ctx: ServiceContext, session: UploadSession): Promise<UploadSession> {
  // A repeated FINALIZE answers with the upload's state (clients retry it like any request).
  if (session.state !== 'open') return session
  const parts = await segments(ctx, session.media_id)
  if (parts.length === 0) throw Refuse.media('media', 'No segment was appended: APPEND the file before FINALIZE.')
  const gap = parts.findIndex((p, i) => p.index !== i)
  if (gap >= 0) throw Refuse.invalid('segment_index', `Segment ${gap} is missing: segments 0 to ${(parts.at(-1)?.index ?? 0)} must all be appended before FINALIZE.`, String(gap))
  const total = parts.reduce((sum, p) => sum + p.size, 0)
  if (total !== session.total_bytes) throw Refuse.media('total_bytes', `The segments add up to ${total} bytes, not the ${session.total_bytes} bytes given at INIT.`, String(session.total_bytes))
  // The declared type against the bytes, before any work: the container's signature is in the first segment.
  const type = await fileTypeFromFile(segmentPath(ctx, session.media_id, 0))
  const format = type ? FORMAT_OF_EXT.get(type.ext) : undefined
  const declared = FORMAT_OF_MIME.get(session.media_type)
  if (format === undefined || format !== declared) {
    throw Refuse.media('media_type', `The media_type is ${session.media_type} but the bytes are ${format ? MIME_OF[format] : (type?.mime ?? 'of no supported type')}.`, session.media_type)
  }
  const ttl = Math.max(1000, session.expires_at - Date.now())
  if (!(await ctx.store.setIfAbsent(Keys.finalized(session.media_id), '1', ttl))) {
    return (await ctx.store.getJson<UploadSession>(Keys.session(session.media_id))) ?? session
  }
  if (MEDIA_TYPE_OF[session.category] !== 'VIDEO') {
    const done = await processUpload(ctx, session, parts.length)
    await save(ctx, done)
    if (done.state === 'failed') throw Refuse.media('media', done.error?.message ?? 'The media could not be processed.')
    return done
  }
  const pending: UploadSession = { ...session, state: 'pending', progress_percent: 0 }
  await save(ctx, pending)
  const job = processUpload(ctx, pending, parts.length)
    .then((done) => save(ctx, done))
    .catch((err: unknown) => ctx.log.error({ err, media_id: session.media_id }, 'media processing state not saved'))
  inFlight.add(job)
  void job.finally(() => inFlight.delete(job))
  return pending
}

/** Waits for processing started by FINALIZE (runtime close). */
export async function settleUploads(): Promise<void> {
  await Promise.allSettled([...inFlight])
}

/**
 * Removes the segments of uploads whose session expired (or never reached
 * the store). A directory younger than a minute may belong to an APPEND in
 * flight on another instance sharing MEDIA_DIR (or, with a shorter
 * MEDIA_UPLOAD_TTL, younger than that).
 */
export async function removeExpiredUploads(ctx: ServiceContext): Promise<number> {
  const root = uploadsDir(ctx)
  let removed = 0
  for (const name of await fs.readdir(root).catch(() => [] as string[])) {
    if (!/^[0-9]{1,19}$/.test(name)) continue
    const stat = await fs.stat(path.join(root, name)).catch(() => undefined)
    if (!stat || Date.now() - stat.mtimeMs < Math.min(60_000, ctx.config.mediaUploadTtlMs)) continue
    const session = await ctx.store.getJson<UploadSession>(Keys.session(name))
    if (session && session.expires_at > Date.now()) continue
    await fs.rm(path.join(root, name), { recursive: true, force: true })
    removed++
  }
  return removed
}
