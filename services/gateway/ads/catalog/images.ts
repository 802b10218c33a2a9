import { createHash } from 'node:crypto'
import dns from 'node:dns'
import net from 'node:net'
import { Agent, fetch as undiciFetch } from 'undici'
import type { Store } from '../../../common/store/types'

/**
 * The byte-level part of the product image rule: JPG, GIF, WEBP or PNG, at
 * least 500x500 px, at most 5 MB. The image is fetched (bounded by a timeout
 * and by the size limit), its header decoded for format and dimensions.
 * Results are cached per URL so a re-sent catalog does not re-download.
 *
 * The fetch goes through an agent whose DNS lookup refuses loopback, private
 * and link-local addresses (server-side request forgery), unless the operator
 * allows them for development.
 */

export const MIN_IMAGE_SIDE = 500
export const MAX_IMAGE_BYTES = 5 * 1024 * 1024

export type ImageFormat = 'JPG' | 'GIF' | 'WEBP' | 'PNG'

export type ImageCheck = { ok: true; format: ImageFormat; width: number; height: number; bytes: number } | { ok: false; message: string }

export interface ImageCheckerOptions {
  timeoutMs: number
  allowPrivate: boolean
  store?: Store
  /** Cache lifetime of a result; failures are kept shorter so a fixed image is seen soon. */
  cacheTtlMs?: number
}

const CACHE_PREFIX = 'ads:catalog:image:'
const FAILURE_TTL_MS = 60_000
const MAX_REDIRECTS = 3

// ------------------------------------------------------------------ header decoding

function u16be(b: Buffer, o: number): number {
  return b.readUInt16BE(o)
}

/** Format and dimensions from the first bytes of a file, or undefined when not one of the four formats. */
export function decodeImageHeader(buf: Buffer): { format: ImageFormat; width: number; height: number } | undefined {
  if (buf.length >= 24 && buf.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])) && buf.toString('latin1', 12, 16) === 'IHDR') {
    return { format: 'PNG', width: buf.readUInt32BE(16), height: buf.readUInt32BE(20) }
  }
  if (buf.length >= 10 && /^GIF8[79]a$/.test(buf.toString('latin1', 0, 6))) {
    return { format: 'GIF', width: buf.readUInt16LE(6), height: buf.readUInt16LE(8) }
  }
  if (buf.length >= 30 && buf.toString('latin1', 0, 4) === 'RIFF' && buf.toString('latin1', 8, 12) === 'WEBP') {
    const chunk = buf.toString('latin1', 12, 16)
    if (chunk === 'VP8 ' && buf.length >= 30) return { format: 'WEBP', width: buf.readUInt16LE(26) & 0x3fff, height: buf.readUInt16LE(28) & 0x3fff }
    if (chunk === 'VP8L' && buf.length >= 25) {
      const bits = buf.readUInt32LE(21)
      return { format: 'WEBP', width: (bits & 0x3fff) + 1, height: ((bits >> 14) & 0x3fff) + 1 }
    }
    if (chunk === 'VP8X' && buf.length >= 30) return { format: 'WEBP', width: buf.readUIntLE(24, 3) + 1, height: buf.readUIntLE(27, 3) + 1 }
    return undefined
  }
  if (buf.length >= 4 && buf[0] === 0xff && buf[1] === 0xd8) {
    let o = 2
    while (o + 9 < buf.length) {
      if (buf[o] !== 0xff) return undefined
      const marker = buf[o + 1] as number
      if (marker === 0xff) {
        o++
        continue
      }
      const length = u16be(buf, o + 2)
      // SOF0..SOF15 carry the frame size, except DHT (C4), JPG (C8) and DAC (CC).
      if (marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc) {
        return { format: 'JPG', height: u16be(buf, o + 5), width: u16be(buf, o + 7) }
      }
      o += 2 + length
    }
    return undefined
  }
  return undefined
}

/** Whether a JPEG's frame header is beyond `buf` (more bytes are needed). */
function needsMore(buf: Buffer): boolean {
  return buf.length < 64 * 1024 && buf.length >= 2 && buf[0] === 0xff && buf[1] === 0xd8 && decodeImageHeader(buf) === undefined
}

// ------------------------------------------------------------------ address policy

export function isPublicAddress(address: string): boolean {
  if (net.isIPv4(address)) {
    const [a, b] = address.split('.').map(Number) as [number, number]
    if (a === 10 || a === 127 || a === 0 || a >= 224) return false
    if (a === 169 && b === 254) return false
    if (a === 172 && b >= 16 && b <= 31) return false
    if (a === 192 && b === 168) return false
    if (a === 100 && b >= 64 && b <= 127) return false
    return true
  }
  if (net.isIPv6(address)) {
    const v = address.toLowerCase()
    if (v === '::1' || v === '::') return false
    if (v.startsWith('fc') || v.startsWith('fd') || v.startsWith('fe80')) return false
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(v)
    if (mapped) return isPublicAddress(mapped[1] as string)
    return true
  }
  return false
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | dns.LookupAddress[], family?: number) => void

function guardedLookup(hostname: string, options: dns.LookupOptions, callback: LookupCallback): void {
  dns.lookup(hostname, { ...options, all: true }, (err, addresses) => {
    if (err) return callback(err, [])
    const list = addresses as dns.LookupAddress[]
    const refused = list.find((a) => !isPublicAddress(a.address))
    if (refused) {
      const e = new Error(`address ${refused.address} of ${hostname} is not public`) as NodeJS.ErrnoException
      e.code = 'EADDRNOTPUBLIC'
      return callback(e, [])
    }
    if (options.all) return callback(null, list)
    const first = list[0] as dns.LookupAddress
    callback(null, first.address, first.family)
  })
}

// ------------------------------------------------------------------ checker

export class ImageChecker {
  private readonly agent: Agent
  constructor(private readonly options: ImageCheckerOptions) {
    this.agent = new Agent({
      connect: options.allowPrivate ? {} : { lookup: guardedLookup as never },
      headersTimeout: options.timeoutMs,
      bodyTimeout: options.timeoutMs
    })
  }

  async close(): Promise<void> {
    await this.agent.close()
  }

  /** Checks several URLs with bounded concurrency; the map is keyed by URL. */
  async checkAll(urls: string[], concurrency = 8): Promise<Map<string, ImageCheck>> {
    const unique = [...new Set(urls)]
    const out = new Map<string, ImageCheck>()
    let next = 0
    const worker = async (): Promise<void> => {
      while (next < unique.length) {
        const url = unique[next++] as string
        out.set(url, await this.check(url))
      }
    }
    await Promise.all(Array.from({ length: Math.min(concurrency, unique.length) }, worker))
    return out
  }

  async check(url: string): Promise<ImageCheck> {
    const cacheKey = CACHE_PREFIX + createHash('sha256').update(url).digest('hex')
    const cached = this.options.store ? await this.options.store.getJson<ImageCheck>(cacheKey) : undefined
    if (cached) return cached
    const result = await this.fetchAndInspect(url)
    if (this.options.store) await this.options.store.setJson(cacheKey, result, result.ok ? (this.options.cacheTtlMs ?? 3_600_000) : FAILURE_TTL_MS)
    return result
  }

  /** Literal addresses never pass through the lookup hook: they are checked here, on every hop. */
  private refusedHost(url: string): string | undefined {
    if (this.options.allowPrivate) return undefined
    const host = new URL(url).hostname.replace(/^\[|\]$/g, '')
    return net.isIP(host) && !isPublicAddress(host) ? host : undefined
  }

  private async fetchAndInspect(url: string): Promise<ImageCheck> {
    const controller = new AbortController()
    const timer = setTimeout(() => controller.abort(), this.options.timeoutMs)
    try {
      let target = url
      let res: Awaited<ReturnType<typeof undiciFetch>> | undefined
      for (let hop = 0; ; hop++) {
        const refused = this.refusedHost(target)
        if (refused !== undefined) return { ok: false, message: `could not be fetched: ${refused} is not a public address` }
        res = await undiciFetch(target, { dispatcher: this.agent, signal: controller.signal, redirect: 'manual', headers: { accept: 'image/*' } })
        const location = res.headers.get('location')
        if (res.status < 300 || res.status >= 400 || location === null) break
        await res.body?.cancel().catch(() => undefined)
        if (hop >= MAX_REDIRECTS) return { ok: false, message: `could not be fetched: more than ${MAX_REDIRECTS} redirects` }
        target = new URL(location, target).toString()
        if (!/^https?:$/.test(new URL(target).protocol)) return { ok: false, message: 'could not be fetched: redirected to a non-http URL' }
      }
      if (res.status !== 200) {
        await res.body?.cancel().catch(() => undefined)
        return { ok: false, message: `could not be fetched: HTTP ${res.status}` }
      }
      const declared = Number(res.headers.get('content-length') ?? NaN)
      if (Number.isFinite(declared) && declared > MAX_IMAGE_BYTES) {
        await res.body?.cancel().catch(() => undefined)
        return { ok: false, message: `is ${declared} bytes; the maximum is 5 MB` }
      }
      const chunks: Buffer[] = []
      let bytes = 0
      let header: ReturnType<typeof decodeImageHeader>
      if (res.body) {
        for await (const chunk of res.body) {
          const b = Buffer.from(chunk as Uint8Array)
          bytes += b.length
          if (bytes > MAX_IMAGE_BYTES) return { ok: false, message: 'is larger than 5 MB' }
          if (header === undefined) {
            chunks.push(b)
            const head = Buffer.concat(chunks)
            header = decodeImageHeader(head)
            if (header === undefined && !needsMore(head) && head.length >= 64) return { ok: false, message: 'must be a JPG, GIF, WEBP or PNG image' }
            // With a trustworthy length there is no need to read the rest.
            if (header !== undefined && Number.isFinite(declared)) {
              bytes = declared
              break
            }
          }
        }
      }
      if (header === undefined) header = decodeImageHeader(Buffer.concat(chunks))
      if (header === undefined) return { ok: false, message: 'must be a JPG, GIF, WEBP or PNG image' }
      if (header.width < MIN_IMAGE_SIDE || header.height < MIN_IMAGE_SIDE) {
        return { ok: false, message: `is ${header.width}x${header.height} px; the minimum is ${MIN_IMAGE_SIDE}x${MIN_IMAGE_SIDE}` }
      }
      return { ok: true, format: header.format, width: header.width, height: header.height, bytes }
    } catch (err) {
      const e = err as Error & { cause?: { code?: string; message?: string } }
      if (controller.signal.aborted) return { ok: false, message: `could not be fetched within ${this.options.timeoutMs} ms` }
      const reason = e.cause?.code === 'EADDRNOTPUBLIC' ? e.cause.message : (e.cause?.code ?? e.message)
      return { ok: false, message: `could not be fetched: ${reason}` }
    } finally {
      clearTimeout(timer)
    }
  }
}
