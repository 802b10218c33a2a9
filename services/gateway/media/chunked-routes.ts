import fs from 'node:fs/promises'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { AuthRequirement } from '../../common/auth/authenticate'
import type { ServiceContext } from '../../common/context'
import { Problems, ProblemError } from '../../common/errors'
import { NUMERIC_ID, openObject, pathParams, v2Ok } from '../../common/openapi'
import { appendSegment, finalizeUpload, initUpload, ownUpload, parseSegmentIndex, removeExpiredUploads, settleUploads, type UploadSession } from './chunked'
import { getMedia, type MediaRecord } from './records'
import { storeMedia } from './store-media'
import { readSegmentInput, SEGMENT_BODY_LIMIT, type SegmentInput } from './segment-input'
import { classicOfProblem, Refuse, toClassic, toProblem, UploadError } from './upload-errors'

/**
 * The chunked upload as clients send it.
 *
 *   v2:   POST /2/media/upload/initialize (JSON), POST /2/media/upload/{id}/append
 *         (multipart: segment_index + media), POST /2/media/upload/{id}/finalize,
 *         GET /2/media/upload?command=STATUS&media_id=...
 *   v1.1: POST /1.1/media/upload.json with command=INIT|APPEND|FINALIZE
 *         (multipart or form-encoded, the segment as `media` or base64
 *         `media_data`), GET /1.1/media/upload.json?command=STATUS&media_id=...;
 *         without `command` it is the simple upload of a whole file (up to a
 *         segment's 5 MB), kept at once like POST /2/media/upload.
 *
 * Answers follow MediaUploadResponse (v2, under `data`) and the v1.1 upload
 * objects (`media_id` as an exact 64-bit number beside `media_id_string`);
 * APPEND answers v1.1 with an empty 204. `processing_info` is present for
 * video, whose processing continues after FINALIZE; `check_after_secs` is 1.
 */

const MEDIA_AUTH: AuthRequirement = { schemes: ['oauth1-user', 'oauth2-user'], scopes: ['media.write'], access: 'write' }
const CHECK_AFTER_SECS = 1

type Shape = 'v2' | 'v1'

function userOf(request: FastifyRequest): string {
  const auth = request.auth
  if (!auth || auth.scheme === 'bearer-app') throw Problems.generic(401, 'Unauthorized')
  return auth.userId
}

function expiresAfterSecs(s: UploadSession): number {
  return Math.max(0, Math.floor((s.expires_at - Date.now()) / 1000))
}

function processingInfo(s: UploadSession): Record<string, unknown> | undefined {
  if (s.state === 'open' || (s.category !== 'TWEET_VIDEO' && s.category !== 'PROMO_VIDEO')) return undefined
  const info: Record<string, unknown> = { state: s.state, progress_percent: s.progress_percent }
  if (s.state === 'pending' || s.state === 'in_progress') info.check_after_secs = CHECK_AFTER_SECS
  if (s.state === 'failed' && s.error) info.error = s.error
  return info
}

/** What v2View answers, for the route schemas: numbers as `number` (serialized as they are). */
export const UPLOAD_RESPONSE = v2Ok('The upload and its processing state.', openObject({
  id: NUMERIC_ID,
  media_key: { type: 'string' },
  expires_after_secs: { type: 'number' },
  size: { type: 'number' },
  processing_info: openObject()
}))

function v2View(s: UploadSession): Record<string, unknown> {
  const data: Record<string, unknown> = { id: s.media_id, media_key: s.media_key, expires_after_secs: expiresAfterSecs(s) }
  if (s.size !== null) data.size = s.size
  const info = processingInfo(s)
  if (info) data.processing_info = info
  return { data }
}

async function v1View(ctx: ServiceContext, s: UploadSession): Promise<Record<string, unknown>> {
  const body: Record<string, unknown> = { media_id: s.media_id, media_id_string: s.media_id, media_key: s.media_key }
  if (s.size !== null) body.size = s.size
  body.expires_after_secs = expiresAfterSecs(s)
  const info = processingInfo(s)
  if (info) body.processing_info = info
  if (s.state === 'succeeded') {
    const record = await getMedia(ctx, s.media_id)
    if (record?.media_type === 'VIDEO') body.video = { video_type: record.mime }
    else if (record) body.image = { image_type: record.mime, w: record.width, h: record.height }
  }
  return body
}

/** The simple upload keeps the file at once; refusals in the v1.1 shape (324 for the media itself, 44 for another parameter). */
async function simpleUpload(ctx: ServiceContext, userId: string, input: SegmentInput): Promise<MediaRecord> {
  const segment = input.segment as NonNullable<SegmentInput['segment']>
  try {
    return await storeMedia(ctx, userId, { tmp: segment.file, size: segment.size, fields: input.fields })
  } catch (err) {
    throw err instanceof ProblemError ? classicOfProblem(err) : err
  }
}

/** As the platform answers a simple upload: the chunked FINALIZE's object, kept media has no processing left. */
function simpleView(ctx: ServiceContext, record: MediaRecord): Record<string, unknown> {
  const body: Record<string, unknown> = {
    media_id: record.media_id,
    media_id_string: record.media_id,
    media_key: record.media_key,
    size: record.size,
    expires_after_secs: Math.floor(ctx.config.mediaUploadTtlMs / 1000)
  }
  if (record.media_type === 'VIDEO') body.video = { video_type: record.mime }
  else body.image = { image_type: record.mime, w: record.width, h: record.height }
  return body
}

/** v1.1 ids are 64-bit numbers: written from the digits, never through a double. */
function sendV1(reply: FastifyReply, status: number, body: Record<string, unknown>): FastifyReply {
  const text = JSON.stringify(body).replace(/^\{"media_id":"([0-9]{1,19})"/, '{"media_id":$1')
  return reply.code(status).type('application/json; charset=utf-8').send(text)
}

function sendV2(reply: FastifyReply, body: Record<string, unknown>): FastifyReply {
  return reply.code(200).type('application/json; charset=utf-8').send(body)
}

/** Runs a handler, rendering refusals in the interface's shape and removing a segment nobody kept. */
async function handle(shape: Shape, request: FastifyRequest, reply: FastifyReply, work: (input: SegmentInput) => Promise<FastifyReply>, ctx: ServiceContext): Promise<FastifyReply> {
  let input: SegmentInput | undefined
  try {
    input = await readSegmentInput(ctx, request)
    return await work(input)
  } catch (err) {
    // Refused before the whole body was read: what is left of it must not be taken for the next request.
    if (!request.raw.complete) reply.header('connection', 'close')
    if (err instanceof UploadError) throw shape === 'v2' ? toProblem(err) : toClassic(err)
    throw err
  } finally {
    if (input?.segment) await fs.rm(input.segment.file, { force: true })
  }
}

function noSegment(input: SegmentInput, command: string): void {
  if (input.segment) throw Refuse.invalid('media', `${command} takes no media; send segments with APPEND.`)
}

async function append(ctx: ServiceContext, request: FastifyRequest, input: SegmentInput, mediaId: string | undefined, idParameter: string): Promise<UploadSession> {
  const session = await ownUpload(ctx, userOf(request), mediaId, idParameter)
  const index = parseSegmentIndex(input.fields.segment_index)
  if (!input.segment) throw Refuse.missing('media')
  await appendSegment(ctx, session, index, input.segment.file, input.segment.size)
  return session
}

export function registerChunkedRoutes(scope: FastifyInstance, ctx: ServiceContext): void {
  const post = { config: { auth: MEDIA_AUTH }, bodyLimit: SEGMENT_BODY_LIMIT }
  // The schemas document the routes (GET /openapi.json); the handlers check their input themselves (attachValidation).
  const idParams = { params: pathParams({ id: NUMERIC_ID }) }
  const get = {
    config: { auth: MEDIA_AUTH },
    schema: {
      querystring: { type: 'object', required: ['media_id'], properties: { media_id: NUMERIC_ID, command: { type: 'string', enum: ['STATUS'] } } },
      response: UPLOAD_RESPONSE
    },
    attachValidation: true
  }

  scope.post('/2/media/upload/initialize', { ...post, schema: { response: UPLOAD_RESPONSE } }, (request, reply) =>
    handle('v2', request, reply, async (input) => {
      noSegment(input, 'initialize')
      const s = await initUpload(ctx, userOf(request), input.fields)
      return sendV2(reply, v2View(s))
    }, ctx))

  const appended = v2Ok('The segment is stored.', openObject({ expires_at: { type: 'number', description: 'When the upload expires (Unix seconds).' } }))
  scope.post<{ Params: { id: string } }>('/2/media/upload/:id/append', { ...post, schema: { ...idParams, response: appended }, attachValidation: true }, (request, reply) =>
    handle('v2', request, reply, async (input) => {
      const s = await append(ctx, request, input, request.params.id, 'id')
      return sendV2(reply, { data: { expires_at: Math.floor(s.expires_at / 1000) } })
    }, ctx))

  scope.post<{ Params: { id: string } }>('/2/media/upload/:id/finalize', { ...post, schema: { ...idParams, response: UPLOAD_RESPONSE }, attachValidation: true }, (request, reply) =>
    handle('v2', request, reply, async (input) => {
      noSegment(input, 'finalize')
      const s = await finalizeUpload(ctx, await ownUpload(ctx, userOf(request), request.params.id, 'id'))
      return sendV2(reply, v2View(s))
    }, ctx))

  scope.get('/2/media/upload', get, (request, reply) =>
    handle('v2', request, reply, async (input) => {
      const command = input.fields.command ?? 'STATUS'
      if (command !== 'STATUS') throw Refuse.invalid('command', 'command must be STATUS.', command)
      return sendV2(reply, v2View(await ownUpload(ctx, userOf(request), input.fields.media_id, 'media_id')))
    }, ctx))

  scope.post('/1.1/media/upload.json', post, (request, reply) =>
    handle('v1', request, reply, async (input) => {
      const command = input.fields.command
      if (command === undefined || command === '') {
        // The simple upload: the whole file in `media` (or base64 `media_data`) and no command.
        if (!input.segment) throw Refuse.missing('command')
        return sendV1(reply, 200, simpleView(ctx, await simpleUpload(ctx, userOf(request), input)))
      }
      if (command === 'INIT') {
        noSegment(input, 'INIT')
        return sendV1(reply, 200, await v1View(ctx, await initUpload(ctx, userOf(request), input.fields)))
      }
      if (command === 'APPEND') {
        await append(ctx, request, input, input.fields.media_id, 'media_id')
        return reply.code(204).send()
      }
      if (command === 'FINALIZE') {
        noSegment(input, 'FINALIZE')
        const s = await finalizeUpload(ctx, await ownUpload(ctx, userOf(request), input.fields.media_id, 'media_id'))
        return sendV1(reply, 200, await v1View(ctx, s))
      }
      throw Refuse.invalid('command', 'command must be INIT, APPEND or FINALIZE (STATUS is a GET).', command)
    }, ctx))

  scope.get('/1.1/media/upload.json', get, (request, reply) =>
    handle('v1', request, reply, async (input) => {
      const command = input.fields.command
      if (command === undefined || command === '') throw Refuse.missing('command')
      if (command !== 'STATUS') throw Refuse.invalid('command', 'command must be STATUS on GET.', command)
      return sendV1(reply, 200, await v1View(ctx, await ownUpload(ctx, userOf(request), input.fields.media_id, 'media_id')))
    }, ctx))

  // Segments of abandoned uploads go when their session expires.
  const every = Math.min(Math.max(ctx.config.mediaUploadTtlMs / 2, 1000), 5 * 60_000)
  const timer = setInterval(() => {
    removeExpiredUploads(ctx).catch((err: unknown) => ctx.log.warn({ err: (err as Error).message }, 'removing expired uploads failed'))
  }, every)
  timer.unref()
  scope.addHook('onClose', async () => {
    clearInterval(timer)
    await settleUploads()
  })
}
