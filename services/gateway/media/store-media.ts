import fs from 'node:fs/promises'
import path from 'node:path'
import type { ServiceContext } from '../../common/context'
import { Problems } from '../../common/errors'
import { newNumericId, newSecret } from '../../common/ids'
import { EXTENSION_OF, inspectFile, MediaFormatError, type Inspection } from './inspect'
import { extractPoster } from './poster'
import { mediaDir, newRecord, saveMedia, type MediaRecord } from './records'
import { checkMedia, defaultCategory, MEDIA_CATEGORIES, parseCategory, type MediaCategory } from './rules'

/**
 * Keeps one received file as media: inspected, checked against its
 * category's rules, moved under an unguessable name, its record saved. The
 * one-shot uploads share it: `POST /2/media/upload` and the v1.1 simple
 * upload (`POST /1.1/media/upload.json` without `command`). Refusals are v2
 * invalid-request Problems naming the parameter; the v1.1 route renders them
 * in its own shape.
 */

export interface Received {
  /** The file as received (moved away when kept). */
  tmp: string
  size: number
  /** The form's other fields: media_category, media_type, additional_owners. */
  fields: Record<string, string>
}

const MEDIA_TYPES = ['image/jpeg', 'image/pjpeg', 'image/png', 'image/gif', 'image/webp', 'video/mp4']

function invalid(parameter: string, message: string, value = ''): Error {
  return Problems.invalidParameter(parameter, value, message)
}

function readCategory(fields: Record<string, string>, info: Inspection): MediaCategory {
  const raw = fields.media_category
  if (raw === undefined || raw === '') return defaultCategory(info)
  const category = parseCategory(raw)
  if (!category) {
    const accepted = [...MEDIA_CATEGORIES.map((c) => c.toLowerCase()), 'amplify_video'].join(', ')
    throw invalid('media_category', `The \`media_category\` field must be one of ${accepted}; got "${raw.slice(0, 40)}".`, raw.slice(0, 40))
  }
  return category
}

function readOwners(fields: Record<string, string>): string[] {
  const raw = fields.additional_owners
  if (raw === undefined || raw === '') return []
  const ids = [...new Set(raw.split(',').map((s) => s.trim()))]
  if (ids.length > 100 || ids.some((id) => !/^[0-9]{1,19}$/.test(id))) {
    throw invalid('additional_owners', 'The `additional_owners` field is a list of up to 100 user ids.', raw.slice(0, 60))
  }
  return ids
}

function checkClaimedType(fields: Record<string, string>, info: Inspection): void {
  const claimed = fields.media_type?.toLowerCase()
  if (claimed === undefined || claimed === '') return
  if (!MEDIA_TYPES.includes(claimed)) throw invalid('media_type', `The \`media_type\` field must be one of ${MEDIA_TYPES.join(', ')}.`, claimed.slice(0, 40))
  const normalized = claimed === 'image/pjpeg' ? 'image/jpeg' : claimed
  if (normalized !== info.mime) throw invalid('media_type', `The \`media_type\` is ${claimed} but the file is ${info.mime}.`, claimed)
}

export async function storeMedia(ctx: ServiceContext, userId: string, received: Received): Promise<MediaRecord> {
  let info: Inspection
  try {
    info = await inspectFile(received.tmp, ctx.config.mediaFfprobe)
  } catch (err) {
    if (err instanceof MediaFormatError) throw invalid('media', `Unsupported or malformed media: ${err.message}.`)
    throw err
  }
  checkClaimedType(received.fields, info)
  const category = readCategory(received.fields, info)
  const additionalOwners = readOwners(received.fields)
  const violation = checkMedia(category, info, received.size, ctx.config.mediaMaxBytes)
  if (violation) throw invalid(violation.parameter, violation.message, violation.parameter === 'media_category' ? (received.fields.media_category ?? '') : '')

  const file = `${newSecret(12)}.${EXTENSION_OF[info.format]}`
  await fs.rename(received.tmp, path.join(mediaDir(ctx.config), file))
  const record = newRecord({ mediaId: newNumericId(), category, info, size: received.size, ownerUserId: userId, additionalOwners, file })
  if (record.media_type !== 'IMAGE') record.poster_media_key = (await extractPoster(ctx, record))?.media_key ?? null
  await saveMedia(ctx, record)
  return record
}
