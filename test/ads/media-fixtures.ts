import { execFileSync } from 'node:child_process'
import { createHmac, randomBytes } from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import OAuth from 'oauth-1.0a'
import { PNG } from 'pngjs'
import type { Test } from 'tap'
import type { AccessToken, App } from '../../services/common/auth/records'
import type { Account } from '../../services/gateway/ads/accounts'
import { oauth1Request, tempDir, type TestResponse } from '../helper'

/**
 * Real media for the creatives tests: PNGs drawn with pngjs, JPEG / GIF /
 * WEBP / MP4 made by the Debian ffmpeg CLI into a temp dir, and a real
 * multipart upload to POST /2/media/upload signed with OAuth 1.0a (only the
 * oauth_* and query parameters are signed for multipart, as clients do).
 */

export type Ident = { app: App; token: AccessToken }

export function hasFfmpeg(): boolean {
  try {
    execFileSync('ffmpeg', ['-version'], { stdio: 'ignore' })
    return true
  } catch {
    return false
  }
}

/** A PNG of `width` x `height`; `noise` makes it incompressible (for size limits). */
export function png(width: number, height: number, noise = false): Buffer {
  const img = new PNG({ width, height })
  if (noise) randomBytes(img.data.length).copy(img.data)
  else for (let i = 0; i < img.data.length; i += 4) img.data.set([(i / 4) % 256, 120, 200, 255], i)
  return PNG.sync.write(img)
}

export class Media {
  private readonly cache = new Map<string, Buffer>()
  constructor(private readonly dir: string) {}

  static create(t: Test): Media {
    return new Media(tempDir(t, 'media-'))
  }

  /** Runs ffmpeg with a lavfi test source; the output file's bytes. */
  private ffmpeg(name: string, input: string, args: string[]): Buffer {
    const hit = this.cache.get(name)
    if (hit) return hit
    const out = path.join(this.dir, name)
    execFileSync('ffmpeg', ['-nostdin', '-v', 'error', '-y', '-f', 'lavfi', '-i', input, ...args, out], { stdio: 'ignore', timeout: 30_000 })
    const bytes = fs.readFileSync(out)
    this.cache.set(name, bytes)
    return bytes
  }

  jpeg(width: number, height: number): Buffer {
    return this.ffmpeg(`i-${width}x${height}.jpg`, `testsrc=size=${width}x${height}`, ['-frames:v', '1'])
  }

  webp(width: number, height: number, lossless = false): Buffer {
    return this.ffmpeg(`i-${width}x${height}-${lossless ? 'll' : 'ly'}.webp`, `testsrc=size=${width}x${height}`, ['-frames:v', '1', ...(lossless ? ['-lossless', '1'] : [])])
  }

  gif(width: number, height: number, frames: number): Buffer {
    return this.ffmpeg(`g-${width}x${height}-${frames}.gif`, `testsrc=size=${width}x${height}:rate=10`, ['-frames:v', String(frames)])
  }

  mp4(width: number, height: number, seconds: number, extra: string[] = []): Buffer {
    return this.ffmpeg(`v-${width}x${height}-${seconds}-${extra.join('')}.mp4`, `testsrc=size=${width}x${height}:rate=10`, ['-t', String(seconds), '-pix_fmt', 'yuv420p', ...extra])
  }
}

export interface UploadOptions {
  category?: string
  mediaType?: string
  filename?: string
  contentType?: string
  additionalOwners?: string[]
  /** Extra multipart fields. */
  fields?: Record<string, string>
}

function oauthHeader(method: string, url: string, id: Ident): Record<string, string> {
  const oauth = new OAuth({
    consumer: { key: id.app.consumer_key, secret: id.app.consumer_secret },
    signature_method: 'HMAC-SHA1',
    hash_function: (base, key) => createHmac('sha1', key).update(base).digest('base64')
  })
  return { ...oauth.toHeader(oauth.authorize({ url, method, data: {} }, { key: id.token.token, secret: id.token.secret })) }
}

async function toResponse(res: Response): Promise<TestResponse> {
  const text = await res.text()
  return { status: res.status, headers: res.headers, text, json: <T>() => JSON.parse(text) as T }
}

/** Multipart upload of `bytes` in the `media` field, OAuth 1.0a signed. */
export async function upload(baseUrl: string, id: Ident, bytes: Buffer, o: UploadOptions = {}): Promise<TestResponse> {
  const url = `${baseUrl}/2/media/upload`
  const form = new FormData()
  form.append('media', new Blob([bytes], { type: o.contentType ?? 'application/octet-stream' }), o.filename ?? 'upload.bin')
  if (o.category !== undefined) form.append('media_category', o.category)
  if (o.mediaType !== undefined) form.append('media_type', o.mediaType)
  if (o.additionalOwners) form.append('additional_owners', o.additionalOwners.join(','))
  for (const [k, v] of Object.entries(o.fields ?? {})) form.append(k, v)
  return toResponse(await fetch(url, { method: 'POST', headers: oauthHeader('POST', url, id), body: form }))
}

/** Uploads and returns the media key; throws with the body when the upload is refused. */
export async function uploadKey(baseUrl: string, id: Ident, bytes: Buffer, o: UploadOptions = {}): Promise<string> {
  const res = await upload(baseUrl, id, bytes, o)
  if (res.status !== 200) throw new Error(`upload refused: ${res.status} ${res.text}`)
  return res.json<{ data: { media_key: string } }>().data.media_key
}

export async function addToLibrary(baseUrl: string, id: Ident, account: Account, mediaKey: string, query: Record<string, string> = {}): Promise<TestResponse> {
  return oauth1Request('POST', `${baseUrl}/12/accounts/${account.id}/media_library`, id, { query: { media_key: mediaKey, ...query } })
}

/** Upload + add to the account's library; the media key. */
export async function libraryMedia(baseUrl: string, id: Ident, account: Account, bytes: Buffer, o: UploadOptions = {}): Promise<string> {
  const key = await uploadKey(baseUrl, id, bytes, o)
  const res = await addToLibrary(baseUrl, id, account, key)
  if (res.status !== 200) throw new Error(`library add refused: ${res.status} ${res.text}`)
  return key
}

export interface AdsErrorBody {
  errors: Array<{ code: string; message: string; parameter?: string }>
  request: { params: Record<string, unknown> }
}

/** Asserts an ads error: status, code and (when given) parameter. */
export function expectAdsError(t: Test, res: TestResponse, status: number, code: string, parameter?: string, label = ''): void {
  const where = label ? `${label}: ` : ''
  t.equal(res.status, status, `${where}status ${status} (${res.text.slice(0, 300)})`)
  let body: AdsErrorBody | undefined
  try {
    body = res.json<AdsErrorBody>()
  } catch {
    t.fail(`${where}error body is JSON`)
    return
  }
  t.equal(body.errors?.[0]?.code, code, `${where}code ${code}`)
  if (parameter !== undefined) t.equal(body.errors?.[0]?.parameter, parameter, `${where}parameter ${parameter}`)
}

/** One APPEND of the v2 chunked upload: multipart `segment_index` + binary `media`, OAuth 1.0a signed. */
export async function appendSegment(baseUrl: string, id: Ident, mediaId: string, index: number | string, bytes: Buffer): Promise<TestResponse> {
  const url = `${baseUrl}/2/media/upload/${mediaId}/append`
  const form = new FormData()
  form.append('segment_index', String(index))
  form.append('media', new Blob([bytes], { type: 'application/octet-stream' }), 'blob')
  return toResponse(await fetch(url, { method: 'POST', headers: oauthHeader('POST', url, id), body: form }))
}

export interface ChunkedResult {
  mediaId: string
  mediaKey: string
  /** processing_info.state of FINALIZE and of each STATUS. */
  states: string[]
}

/**
 * The v2 chunked upload as a client sends it: JSON initialize, multipart
 * appends of `segmentBytes`, finalize, then STATUS every check_after_secs
 * until the media succeeded (or failed: thrown with the body).
 */
export async function chunkedUpload(baseUrl: string, id: Ident, bytes: Buffer, o: { mediaType: string; category?: string; segmentBytes?: number }): Promise<ChunkedResult> {
  const init = await oauth1Request('POST', `${baseUrl}/2/media/upload/initialize`, id, {
    json: { media_type: o.mediaType, total_bytes: bytes.length, ...(o.category !== undefined ? { media_category: o.category } : {}) }
  })
  if (init.status !== 200) throw new Error(`initialize refused: ${init.status} ${init.text}`)
  const { id: mediaId, media_key: mediaKey } = init.json<{ data: { id: string; media_key: string } }>().data
  const step = o.segmentBytes ?? 1024 * 1024
  for (let i = 0; i * step < bytes.length; i++) {
    const res = await appendSegment(baseUrl, id, mediaId, i, bytes.subarray(i * step, (i + 1) * step))
    if (res.status !== 200) throw new Error(`append ${i} refused: ${res.status} ${res.text}`)
  }
  type Status = { data: { processing_info?: { state: string; check_after_secs?: number } } }
  let res = await oauth1Request('POST', `${baseUrl}/2/media/upload/${mediaId}/finalize`, id)
  const states: string[] = []
  for (let polls = 0; ; polls++) {
    if (res.status !== 200) throw new Error(`upload refused: ${res.status} ${res.text}`)
    const info = res.json<Status>().data.processing_info
    if (!info) return { mediaId, mediaKey, states }
    states.push(info.state)
    if (info.state === 'succeeded') return { mediaId, mediaKey, states }
    if (info.state === 'failed' || polls > 120) throw new Error(`processing ended ${info.state}: ${res.text}`)
    await new Promise((resolve) => setTimeout(resolve, (info.check_after_secs ?? 1) * 1000))
    res = await oauth1Request('GET', `${baseUrl}/2/media/upload`, id, { query: { command: 'STATUS', media_id: mediaId } })
  }
}
