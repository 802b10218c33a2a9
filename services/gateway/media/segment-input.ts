import { createWriteStream } from 'node:fs'
import fs from 'node:fs/promises'
import path from 'node:path'
import { pipeline } from 'node:stream/promises'
import type { Multipart } from '@fastify/multipart'
import type { FastifyRequest } from 'fastify'
import type { ServiceContext } from '../../common/context'
import { newUuid } from '../../common/ids'
import { MAX_SEGMENT_BYTES } from './chunked'
import { mediaDir } from './records'
import { Refuse } from './upload-errors'

/**
 * The parameters and the one segment of a chunked-upload request, however
 * the client sent them: multipart/form-data (the segment a binary `media`
 * part, streamed to a temporary file with a 5 MB limit), or form-encoded or
 * JSON with the segment base64 in `media` / `media_data`; query parameters
 * count as well (some clients send INIT's there). The segment is always a
 * file when this returns; the caller moves or removes it.
 */

/** A 5 MB segment as base64 text, with room for the form's other fields and percent-encoding. */
export const SEGMENT_BODY_LIMIT = Math.ceil((MAX_SEGMENT_BYTES * 4) / 3 * 1.1) + 64 * 1024
const MEDIA_FIELDS = new Set(['media', 'media_data'])

export interface SegmentInput {
  fields: Record<string, string>
  segment?: { file: string; size: number }
}

function tooLarge(): Error {
  return Refuse.media('media', `A segment is at most ${MAX_SEGMENT_BYTES} bytes (5 MB); send the file in more segments.`)
}

async function writeBase64(text: string, file: string, parameter: string): Promise<number> {
  const compact = text.replace(/\s+/g, '')
  if (compact === '' || !/^[A-Za-z0-9+/]*={0,2}$/.test(compact) || compact.length % 4 === 1) {
    throw Refuse.media(parameter, `${parameter} must be the segment's bytes, base64 encoded.`)
  }
  const bytes = Buffer.from(compact, 'base64')
  if (bytes.length > MAX_SEGMENT_BYTES) throw tooLarge()
  await fs.writeFile(file, bytes)
  return bytes.length
}

function formFailure(err: unknown): Error {
  const code = (err as { code?: unknown }).code
  if (code === 'FST_REQ_FILE_TOO_LARGE') return tooLarge()
  if (typeof code === 'string' && /^FST_(FILES|PARTS|FIELDS)_LIMIT$/.test(code)) return Refuse.invalid('media', 'Too many parts: send one `media` segment and the documented fields.')
  const reason = err instanceof Error ? err.message.replace(/^Multipart: /, '').slice(0, 200) : String(err)
  return Refuse.invalid('body', `The multipart/form-data body could not be read: ${reason}.`)
}

async function nextPart(parts: AsyncIterator<Multipart>): Promise<Multipart | undefined> {
  try {
    const next = await parts.next()
    return next.done === true ? undefined : next.value
  } catch (err) {
    throw formFailure(err)
  }
}

async function readMultipart(request: FastifyRequest, file: string, input: SegmentInput): Promise<void> {
  const parts = request.parts({ limits: { fileSize: MAX_SEGMENT_BYTES, files: 1, fields: 16, fieldSize: SEGMENT_BODY_LIMIT, parts: 17 } })
  try {
    for (let part = await nextPart(parts); part !== undefined; part = await nextPart(parts)) {
      const many = MEDIA_FIELDS.has(part.fieldname) && input.segment !== undefined
      if (part.type === 'file') {
        if (!MEDIA_FIELDS.has(part.fieldname) || many) {
          part.file.resume()
          throw Refuse.invalid(part.fieldname, 'Send exactly one segment, in the `media` field.')
        }
        try {
          await pipeline(part.file, createWriteStream(file))
        } catch (err) {
          // The disk's errors carry a syscall and stay ours; the rest is the client's body.
          if (typeof (err as NodeJS.ErrnoException).syscall === 'string') throw err
          throw part.file.truncated ? tooLarge() : formFailure(err)
        }
        if (part.file.truncated) throw tooLarge()
        input.segment = { file, size: (await fs.stat(file)).size }
        continue
      }
      if (part.valueTruncated) throw Refuse.invalid(part.fieldname, `The \`${part.fieldname}\` field is too long.`)
      const value = String(part.value)
      if (MEDIA_FIELDS.has(part.fieldname)) {
        if (many) throw Refuse.invalid(part.fieldname, 'Send exactly one segment, in the `media` field.')
        input.segment = { file, size: await writeBase64(value, file, part.fieldname) }
        continue
      }
      input.fields[part.fieldname] = value
    }
  } finally {
    await parts.return?.(undefined)
  }
}

async function readObject(body: unknown, file: string, input: SegmentInput): Promise<void> {
  if (body === undefined || body === null) return
  if (typeof body !== 'object' || Array.isArray(body)) throw Refuse.invalid('body', 'Expected multipart/form-data, form-encoded parameters or a JSON object.')
  for (const [name, value] of Object.entries(body as Record<string, unknown>)) {
    if (MEDIA_FIELDS.has(name)) {
      if (typeof value !== 'string') throw Refuse.media(name, `${name} must be the segment's bytes, base64 encoded.`)
      if (input.segment !== undefined) throw Refuse.invalid(name, 'Send exactly one segment, in the `media` field.')
      input.segment = { file, size: await writeBase64(value, file, name) }
    } else if (typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean') {
      input.fields[name] = String(value)
    } else if (Array.isArray(value) && value.every((v) => typeof v === 'string' || typeof v === 'number')) {
      input.fields[name] = value.join(',')
    } else {
      throw Refuse.invalid(name, `The \`${name}\` field has an invalid type.`)
    }
  }
}

/** Reads the request; the caller must remove `segment.file` when it does not keep it. */
export async function readSegmentInput(ctx: ServiceContext, request: FastifyRequest): Promise<SegmentInput> {
  const input: SegmentInput = { fields: {} }
  for (const [name, value] of Object.entries((request.query ?? {}) as Record<string, unknown>)) {
    if (typeof value === 'string') input.fields[name] = value
  }
  const tmpDir = path.join(mediaDir(ctx.config), 'tmp')
  await fs.mkdir(tmpDir, { recursive: true })
  const file = path.join(tmpDir, newUuid())
  try {
    if (request.isMultipart()) await readMultipart(request, file, input)
    else await readObject(request.body, file, input)
  } catch (err) {
    await fs.rm(file, { force: true })
    throw err
  }
  return input
}
