import { once } from 'node:events'
import { createReadStream, createWriteStream } from 'node:fs'
import fs from 'node:fs/promises'
import path from 'node:path'
import type { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import multipart, { type Multipart } from '@fastify/multipart'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { AuthRequirement } from '../../common/auth/authenticate'
import type { ServiceContext } from '../../common/context'
import { ApiError, Problems } from '../../common/errors'
import { newUuid } from '../../common/ids'
import { registerChunkedRoutes } from './chunked-routes'
import { removeExpiredUploads } from './chunked'
import { NUMERIC_ID, openObject, v2Ok } from '../../common/openapi'
import { mediaDir, type MediaRecord } from './records'
import { storeMedia, type Received } from './store-media'

/**
 * `POST /2/media/upload` (one-shot): multipart/form-data with the file in
 * `media` (or base64 in a `media` / `media_data` field), or a JSON body with
 * base64 `media`. The bytes are streamed to the media directory, inspected,
 * checked against the category's rules, and kept under an unguessable name;
 * the answer carries the media key the ads interface takes. `GET /media/:file`
 * serves the stored bytes (the `media_url` of library objects).
 */

const MEDIA_AUTH: AuthRequirement = { schemes: ['oauth1-user', 'oauth2-user'], scopes: ['media.write'], access: 'write' }

/** Base64 uploads are for images and GIFs (15 MB of bytes, a third more as text). */
const BASE64_MAX_CHARS = Math.ceil((15 * 1024 * 1024 * 4) / 3) + 1024
const FIELDS = new Set(['media', 'media_data', 'media_category', 'media_type', 'additional_owners', 'shared'])
const STALE_UPLOAD_MS = 60 * 60 * 1000
const FILE_NAME = /^[A-Za-z0-9_-]{8,64}\.(png|jpg|gif|webp|mp4)$/
const CONTENT_TYPES: Record<string, string> = { png: 'image/png', jpg: 'image/jpeg', gif: 'image/gif', webp: 'image/webp', mp4: 'video/mp4' }

function invalid(parameter: string, message: string, value = ''): Error {
  return Problems.invalidParameter(parameter, value, message)
}

async function writeBase64(text: string, tmp: string, parameter: string): Promise<number> {
  const compact = text.replace(/\s+/g, '')
  if (compact === '' || !/^[A-Za-z0-9+/]*={0,2}$/.test(compact) || compact.length % 4 === 1) {
    throw invalid(parameter, `The \`${parameter}\` field must be the file's bytes, base64 encoded.`)
  }
  const bytes = Buffer.from(compact, 'base64')
  await fs.writeFile(tmp, bytes)
  return bytes.length
}

const FORM_LIMIT_CODES = new Set(['FST_FILES_LIMIT', 'FST_PARTS_LIMIT', 'FST_FIELDS_LIMIT'])

/**
 * What a failure while reading the form means for the client. Everything the
 * multipart parser raises is about the bytes the client sent (no or a bad
 * boundary, a part cut short, a field named after a prototype property, a
 * JSON field that is not JSON), so it is a 400 naming the body; only the
 * size limits keep their own answers.
 */
function formError(err: unknown, maxBytes: number): unknown {
  if (err instanceof ApiError) return err
  const code = (err as { code?: unknown }).code
  if (code === 'FST_REQ_FILE_TOO_LARGE') return tooLarge(maxBytes)
  if (typeof code === 'string' && FORM_LIMIT_CODES.has(code)) return invalid('media', 'Too many parts: send one `media` file and the documented fields.')
  const reason = err instanceof Error ? err.message.replace(/^Multipart: /, '').slice(0, 200) : String(err)
  return Problems.invalidRequest([{ message: `The multipart/form-data body could not be read: ${reason}.`, parameters: { body: [] } }])
}

/** The parts of the form, one at a time; a failure of the parser itself is the client's (formError). */
async function* formParts(request: FastifyRequest, maxBytes: number): AsyncGenerator<Multipart> {
  const parts = request.parts({ limits: { fileSize: maxBytes, files: 1, fields: 10, fieldSize: BASE64_MAX_CHARS, parts: 12 } })
  try {
    for (;;) {
      let next: IteratorResult<Multipart>
      try {
        next = await parts.next()
      } catch (err) {
        throw formError(err, maxBytes)
      }
      if (next.done === true) return
      yield next.value
    }
  } finally {
    await parts.return?.(undefined)
  }
}

/**
 * Streams the file part to `tmp`. The copy has two ends: the part (the
 * client's bytes: cut short, over the size limit) and the file (this
 * server's disk, whose errors carry a syscall and stay server errors).
 */
async function saveFilePart(file: Readable & { truncated?: boolean }, tmp: string, maxBytes: number): Promise<number> {
  const out = createWriteStream(tmp)
  try {
    await pipeline(file, out)
  } catch (err) {
    // pipeline rejects at the part's error while the file may still be opening: it is created after
    // the caller's cleanup removed nothing, and stays (seen once in CI). Wait until it is closed.
    if (!out.closed) await once(out, 'close').catch(() => undefined)
    if (typeof (err as NodeJS.ErrnoException).syscall === 'string') throw err
    // Past the size limit first, then cut short: the size is what the client must change.
    throw file.truncated === true ? tooLarge(maxBytes) : formError(err, maxBytes)
  }
  if (file.truncated === true) throw tooLarge(maxBytes)
  return (await fs.stat(tmp)).size
}

async function receiveMultipart(request: FastifyRequest, tmp: string, maxBytes: number): Promise<Received> {
  const fields: Record<string, string> = {}
  let size: number | undefined
  for await (const part of formParts(request, maxBytes)) {
    if (!FIELDS.has(part.fieldname)) {
      if (part.type === 'file') part.file.resume()
      throw invalid(part.fieldname, `The \`${part.fieldname}\` field is not accepted by this endpoint.`)
    }
    if (part.type === 'file') {
      if (part.fieldname !== 'media' || size !== undefined) {
        part.file.resume()
        throw invalid(part.fieldname, 'Send exactly one file, in the `media` field.')
      }
      size = await saveFilePart(part.file, tmp, maxBytes)
      continue
    }
    if (part.valueTruncated) throw invalid(part.fieldname, `The \`${part.fieldname}\` field is too long.`)
    const value = String(part.value)
    if (part.fieldname === 'media' || part.fieldname === 'media_data') {
      if (size !== undefined) throw invalid(part.fieldname, 'Send exactly one file, in the `media` field.')
      size = await writeBase64(value, tmp, part.fieldname)
      continue
    }
    fields[part.fieldname] = fields[part.fieldname] === undefined ? value : `${fields[part.fieldname]},${value}`
  }
  if (size === undefined) throw Problems.invalidRequest([{ message: 'The `media` field is required.', parameters: { media: [] } }])
  return { tmp, size, fields }
}

async function receiveObject(body: unknown, tmp: string): Promise<Received> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw invalid('body', 'Expected multipart/form-data or a JSON object.')
  const fields: Record<string, string> = {}
  let size: number | undefined
  for (const [name, value] of Object.entries(body as Record<string, unknown>)) {
    if (!FIELDS.has(name)) throw invalid(name, `The \`${name}\` field is not accepted by this endpoint.`)
    if (name === 'media' || name === 'media_data') {
      if (typeof value !== 'string') throw invalid(name, `The \`${name}\` field must be a base64 string.`)
      if (size !== undefined) throw invalid(name, 'Send exactly one file, in the `media` field.')
      size = await writeBase64(value, tmp, name)
      continue
    }
    if (Array.isArray(value) && value.every((v) => typeof v === 'string')) fields[name] = value.join(',')
    else if (typeof value === 'string' || typeof value === 'boolean') fields[name] = String(value)
    else throw invalid(name, `The \`${name}\` field has an invalid type.`)
  }
  if (size === undefined) throw Problems.invalidRequest([{ message: 'The `media` field is required.', parameters: { media: [] } }])
  return { tmp, size, fields }
}

function tooLarge(maxBytes: number): Error {
  return Problems.generic(413, `The media exceeds the upload limit of ${maxBytes} bytes.`)
}

async function upload(ctx: ServiceContext, request: FastifyRequest): Promise<MediaRecord> {
  const auth = request.auth
  if (!auth || auth.scheme === 'bearer-app') throw Problems.generic(401, 'Unauthorized')
  const dir = mediaDir(ctx.config)
  const tmpDir = path.join(dir, 'tmp')
  await fs.mkdir(tmpDir, { recursive: true })
  const tmp = path.join(tmpDir, newUuid())
  try {
    const received = request.isMultipart()
      ? await receiveMultipart(request, tmp, ctx.config.mediaMaxBytes)
      : await receiveObject(request.body, tmp)
    return await storeMedia(ctx, auth.userId, received)
  } finally {
    await fs.rm(tmp, { force: true })
  }
}

async function serveFile(ctx: ServiceContext, request: FastifyRequest<{ Params: { file: string } }>, reply: FastifyReply): Promise<FastifyReply> {
  const { file } = request.params
  const m = FILE_NAME.exec(file)
  if (!m) throw Problems.generic(404, `No media file ${file.slice(0, 80)}.`)
  const full = path.join(mediaDir(ctx.config), file)
  let size: number
  try {
    size = (await fs.stat(full)).size
  } catch {
    throw Problems.generic(404, `No media file ${file}.`)
  }
  reply.header('content-type', CONTENT_TYPES[m[1] as string] ?? 'application/octet-stream')
  reply.header('content-length', String(size))
  reply.header('cache-control', 'public, max-age=31536000, immutable')
  return reply.send(createReadStream(full))
}

/** Leftovers of uploads cut short by a crash; an hour is far beyond any upload in flight (processes may share the directory). */
async function removeStaleUploads(ctx: ServiceContext): Promise<void> {
  const tmpDir = path.join(mediaDir(ctx.config), 'tmp')
  const entries = await fs.readdir(tmpDir).catch(() => [] as string[])
  for (const name of entries) {
    const file = path.join(tmpDir, name)
    const stat = await fs.stat(file).catch(() => undefined)
    if (stat && Date.now() - stat.mtimeMs > STALE_UPLOAD_MS) await fs.rm(file, { force: true })
  }
}

export async function registerMediaRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  await removeStaleUploads(ctx)
  await removeExpiredUploads(ctx)
  // Multipart parsing is scoped to these routes: nothing else on the server accepts it.
  await app.register(async (scope) => {
    await scope.register(multipart, { limits: { fileSize: ctx.config.mediaMaxBytes } })
    const uploaded = v2Ok('The media, stored.', openObject({ id: NUMERIC_ID, media_key: { type: 'string' }, size: { type: 'number' } }))
    scope.post('/2/media/upload', { config: { auth: MEDIA_AUTH }, bodyLimit: BASE64_MAX_CHARS + 64 * 1024, schema: { response: uploaded } }, async (request, reply) => {
      let record: MediaRecord
      try {
        record = await upload(ctx, request)
      } catch (err) {
        // Refused before the whole body was read: what is left of it must not be taken for the next request.
        if (!request.raw.complete) reply.header('connection', 'close')
        throw err
      }
      return reply.code(200).type('application/json; charset=utf-8').send({ data: { id: record.media_id, media_key: record.media_key, size: record.size } })
    })
    scope.get<{ Params: { file: string } }>('/media/:file', async (request, reply) => serveFile(ctx, request, reply))
    registerChunkedRoutes(scope, ctx)
  })
}
