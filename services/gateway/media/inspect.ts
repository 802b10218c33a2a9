import fs from 'node:fs/promises'

/**
 * Reads what the media rules need straight from the bytes: the container
 * format (never the client's claimed type or file name), pixel dimensions,
 * GIF frame count, and for MP4 the duration and presentation size from the
 * `mvhd` / `tkhd` boxes. Only headers and box structure are parsed; nothing
 * is decoded.
 */

export type MediaFormat = 'png' | 'jpeg' | 'gif' | 'webp' | 'mp4'

export const MIME_OF: Record<MediaFormat, string> = {
  png: 'image/png',
  jpeg: 'image/jpeg',
  gif: 'image/gif',
  webp: 'image/webp',
  mp4: 'video/mp4'
}

export const EXTENSION_OF: Record<MediaFormat, string> = {
  png: 'png',
  jpeg: 'jpg',
  gif: 'gif',
  webp: 'webp',
  mp4: 'mp4'
}

export interface Inspection {
  format: MediaFormat
  mime: string
  width: number
  height: number
  /** Frames of a GIF (1 for a still one); 1 for other images. */
  frames: number
  animated: boolean
  /** Video only: presentation duration in milliseconds. */
  durationMs?: number
}

/** The bytes are not a (well-formed) file of a supported format. */
export class MediaFormatError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'MediaFormatError'
  }
}

/** Random access to the bytes being inspected (a file on disk or a buffer). */
export interface ByteSource {
  readonly size: number
  read(offset: number, length: number): Promise<Buffer>
}

export function bufferSource(buf: Buffer): ByteSource {
  return {
    size: buf.length,
    read: async (offset, length) => buf.subarray(offset, Math.min(buf.length, offset + length))
  }
}

/** Identifies the container from its magic bytes; undefined when unsupported. */
export function sniff(head: Buffer): MediaFormat | undefined {
  if (head.length >= 8 && head.readUInt32BE(0) === 0x89504e47 && head.readUInt32BE(4) === 0x0d0a1a0a) return 'png'
  if (head.length >= 3 && head[0] === 0xff && head[1] === 0xd8 && head[2] === 0xff) return 'jpeg'
  if (head.length >= 6 && (head.toString('latin1', 0, 6) === 'GIF87a' || head.toString('latin1', 0, 6) === 'GIF89a')) return 'gif'
  if (head.length >= 12 && head.toString('latin1', 0, 4) === 'RIFF' && head.toString('latin1', 8, 12) === 'WEBP') return 'webp'
  if (head.length >= 8 && head.toString('latin1', 4, 8) === 'ftyp') return 'mp4'
  return undefined
}

// ------------------------------------------------------------------ images

function need(buf: Buffer, end: number, what: string): void {
  if (buf.length < end) throw new MediaFormatError(`truncated ${what}`)
}

function inspectPng(buf: Buffer): Inspection {
  // Signature (8), then the IHDR chunk: length (4) "IHDR" (4) width (4) height (4).
  need(buf, 24, 'PNG header')
  if (buf.toString('latin1', 12, 16) !== 'IHDR') throw new MediaFormatError('PNG without an IHDR chunk')
  const width = buf.readUInt32BE(16)
  const height = buf.readUInt32BE(20)
  return { format: 'png', mime: MIME_OF.png, width, height, frames: 1, animated: false }
}

/** SOFn markers carry the frame size; C4 (DHT), C8 (JPG) and CC (DAC) share the range but are not frames. */
function isStartOfFrame(marker: number): boolean {
  return marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc
}

function inspectJpeg(buf: Buffer): Inspection {
  let offset = 2
  while (offset < buf.length) {
    if (buf[offset] !== 0xff) throw new MediaFormatError(`JPEG marker expected at byte ${offset}`)
    // Any number of 0xFF fill bytes may precede a marker.
    while (buf[offset] === 0xff) offset++
    need(buf, offset + 1, 'JPEG marker')
    const marker = buf[offset] as number
    offset++
    // Standalone markers have no length field.
    if (marker === 0x01 || (marker >= 0xd0 && marker <= 0xd7)) continue
    if (marker === 0xd9 || marker === 0xda) break
    need(buf, offset + 2, 'JPEG segment')
    const length = buf.readUInt16BE(offset)
    if (length < 2) throw new MediaFormatError('JPEG segment with an invalid length')
    if (isStartOfFrame(marker)) {
      // length (2) precision (1) height (2) width (2)
      need(buf, offset + 7, 'JPEG frame header')
      const height = buf.readUInt16BE(offset + 3)
      const width = buf.readUInt16BE(offset + 5)
      return { format: 'jpeg', mime: MIME_OF.jpeg, width, height, frames: 1, animated: false }
    }
    offset += length
  }
  throw new MediaFormatError('JPEG without a frame header')
}

function skipSubBlocks(buf: Buffer, offset: number): number {
  for (;;) {
    need(buf, offset + 1, 'GIF data block')
    const size = buf[offset] as number
    offset += 1 + size
    if (size === 0) return offset
  }
}

function inspectGif(buf: Buffer): Inspection {
  need(buf, 13, 'GIF header')
  const width = buf.readUInt16LE(6)
  const height = buf.readUInt16LE(8)
  const packed = buf[10] as number
  let offset = 13
  if (packed & 0x80) offset += 3 * 2 ** ((packed & 0x07) + 1)
  let frames = 0
  let durationCs = 0
  for (;;) {
    need(buf, offset + 1, 'GIF block')
    const introducer = buf[offset] as number
    if (introducer === 0x3b) break
    if (introducer === 0x21) {
      need(buf, offset + 2, 'GIF extension')
      const label = buf[offset + 1] as number
      // Graphic control extension: block size 4, packed, delay (1/100 s, LE), transparent index.
      if (label === 0xf9 && buf[offset + 2] === 4) {
        need(buf, offset + 6, 'GIF graphic control extension')
        durationCs += buf.readUInt16LE(offset + 4)
      }
      offset = skipSubBlocks(buf, offset + 2)
      continue
    }
    if (introducer === 0x2c) {
      // Image descriptor: left, top, width, height (2 each), packed; then the LZW minimum code size.
      need(buf, offset + 10, 'GIF image descriptor')
      const local = buf[offset + 9] as number
      offset += 10
      if (local & 0x80) offset += 3 * 2 ** ((local & 0x07) + 1)
      offset = skipSubBlocks(buf, offset + 1)
      frames++
      continue
    }
    throw new MediaFormatError(`unexpected GIF block 0x${introducer.toString(16)} at byte ${offset}`)
  }
  if (frames === 0) throw new MediaFormatError('GIF without any image')
  const result: Inspection = { format: 'gif', mime: MIME_OF.gif, width, height, frames, animated: frames > 1 }
  if (frames > 1) result.durationMs = durationCs * 10
  return result
}

function inspectWebp(buf: Buffer): Inspection {
  need(buf, 30, 'WEBP header')
  const chunk = buf.toString('latin1', 12, 16)
  const data = 20
  if (chunk === 'VP8 ') {
    // Frame tag (3 bytes), start code 9D 01 2A, then 14-bit width and height.
    if (buf[data + 3] !== 0x9d || buf[data + 4] !== 0x01 || buf[data + 5] !== 0x2a) throw new MediaFormatError('WEBP VP8 frame without its start code')
    const width = buf.readUInt16LE(data + 6) & 0x3fff
    const height = buf.readUInt16LE(data + 8) & 0x3fff
    return { format: 'webp', mime: MIME_OF.webp, width, height, frames: 1, animated: false }
  }
  if (chunk === 'VP8L') {
    if (buf[data] !== 0x2f) throw new MediaFormatError('WEBP VP8L stream without its signature')
    const bits = buf.readUInt32LE(data + 1)
    const width = (bits & 0x3fff) + 1
    const height = ((bits >>> 14) & 0x3fff) + 1
    return { format: 'webp', mime: MIME_OF.webp, width, height, frames: 1, animated: false }
  }
  if (chunk === 'VP8X') {
    const flags = buf[data] as number
    const width = buf.readUIntLE(data + 4, 3) + 1
    const height = buf.readUIntLE(data + 7, 3) + 1
    const animated = (flags & 0x02) !== 0
    return { format: 'webp', mime: MIME_OF.webp, width, height, frames: 1, animated }
  }
  throw new MediaFormatError(`unsupported WEBP chunk "${chunk.replace(/[^\x20-\x7e]/g, '?')}"`)
}

/** Dimensions (and for GIF, frames) of a PNG, JPEG, GIF or WEBP image held in memory. */
export function inspectImage(buf: Buffer): Inspection {
  const format = sniff(buf)
  let result: Inspection
  switch (format) {
    case 'png': result = inspectPng(buf); break
    case 'jpeg': result = inspectJpeg(buf); break
    case 'gif': result = inspectGif(buf); break
    case 'webp': result = inspectWebp(buf); break
    default: throw new MediaFormatError('not a PNG, JPEG, GIF or WEBP image')
  }
  if (result.width === 0 || result.height === 0) throw new MediaFormatError(`image with an empty dimension (${result.width}x${result.height})`)
  return result
}

// ------------------------------------------------------------------ MP4

interface Box {
  type: string
  /** Offset of the box's payload. */
  start: number
  /** Offset just past the box. */
  end: number
}

/** The boxes laid out between `start` and `end` (ISO/IEC 14496-12 §4.2). */
async function readBoxes(src: ByteSource, start: number, end: number): Promise<Box[]> {
  const boxes: Box[] = []
  let offset = start
  while (offset + 8 <= end) {
    const header = await src.read(offset, 16)
    if (header.length < 8) throw new MediaFormatError('truncated MP4 box header')
    let size = header.readUInt32BE(0)
    const type = header.toString('latin1', 4, 8)
    let headerSize = 8
    if (size === 1) {
      if (header.length < 16) throw new MediaFormatError('truncated MP4 64-bit box size')
      const large = header.readBigUInt64BE(8)
      if (large > BigInt(Number.MAX_SAFE_INTEGER)) throw new MediaFormatError('MP4 box too large')
      size = Number(large)
      headerSize = 16
    } else if (size === 0) {
      size = end - offset
    }
    if (size < headerSize || offset + size > end) throw new MediaFormatError(`MP4 box "${type.replace(/[^\x20-\x7e]/g, '?')}" overruns its container`)
    boxes.push({ type, start: offset + headerSize, end: offset + size })
    offset += size
  }
  return boxes
}

function child(boxes: Box[], type: string): Box | undefined {
  return boxes.find((b) => b.type === type)
}

/** Largest moov we read into memory; real ones are kilobytes to a few megabytes. */
const MAX_MOOV_BYTES = 64 * 1024 * 1024

interface TrackHeader {
  handler: string
  width: number
  height: number
}

function parseTkhd(buf: Buffer): { width: number; height: number } {
  const version = buf[0]
  // version/flags (4); v1: creation, modification (8 each), track_ID, reserved (4 each), duration (8);
  // v0: the same with 4-byte times and duration. Then reserved (8), layer, alternate_group, volume,
  // reserved (2 each), the 3x3 matrix (36), width and height (16.16 fixed point).
  const matrixAt = version === 1 ? 4 + 8 + 8 + 4 + 4 + 8 + 8 + 8 : 4 + 4 + 4 + 4 + 4 + 4 + 8 + 8
  need(buf, matrixAt + 44, 'MP4 tkhd box')
  const a = buf.readInt32BE(matrixAt)
  const b = buf.readInt32BE(matrixAt + 4)
  let width = Math.round(buf.readUInt32BE(matrixAt + 36) / 65536)
  let height = Math.round(buf.readUInt32BE(matrixAt + 40) / 65536)
  // A 90° or 270° rotation in the matrix (a = 0, |b| = 1.0) presents the frame sideways.
  if (a === 0 && Math.abs(b) === 0x10000) [width, height] = [height, width]
  return { width, height }
}

function parseMvhd(buf: Buffer): number {
  const version = buf[0]
  let timescale: number
  let duration: number
  if (version === 1) {
    need(buf, 4 + 8 + 8 + 4 + 8, 'MP4 mvhd box')
    timescale = buf.readUInt32BE(20)
    duration = Number(buf.readBigUInt64BE(24))
  } else {
    need(buf, 4 + 4 + 4 + 4 + 4, 'MP4 mvhd box')
    timescale = buf.readUInt32BE(12)
    duration = buf.readUInt32BE(16)
  }
  if (timescale === 0) throw new MediaFormatError('MP4 movie header with a zero timescale')
  return Math.round((duration * 1000) / timescale)
}

async function readTrack(src: ByteSource, trak: Box): Promise<TrackHeader | undefined> {
  const boxes = await readBoxes(src, trak.start, trak.end)
  const tkhd = child(boxes, 'tkhd')
  const mdia = child(boxes, 'mdia')
  if (!tkhd || !mdia) return undefined
  const hdlr = child(await readBoxes(src, mdia.start, mdia.end), 'hdlr')
  // hdlr: version/flags (4), pre_defined (4), handler_type (4).
  const handler = hdlr ? (await src.read(hdlr.start + 8, 4)).toString('latin1') : ''
  const dims = parseTkhd(await src.read(tkhd.start, tkhd.end - tkhd.start))
  return { handler, ...dims }
}

/** Duration and presentation size of an MP4 (or QuickTime) file from its moov box. */
export async function inspectMp4(src: ByteSource): Promise<Inspection> {
  const top = await readBoxes(src, 0, src.size)
  if (top[0]?.type !== 'ftyp') throw new MediaFormatError('MP4 file must start with an ftyp box')
  const moov = child(top, 'moov')
  if (!moov) throw new MediaFormatError('MP4 file without a moov box')
  if (moov.end - moov.start > MAX_MOOV_BYTES) throw new MediaFormatError('MP4 moov box too large')
  const moovChildren = await readBoxes(src, moov.start, moov.end)
  const mvhd = child(moovChildren, 'mvhd')
  if (!mvhd) throw new MediaFormatError('MP4 file without a movie header (mvhd)')
  const durationMs = parseMvhd(await src.read(mvhd.start, mvhd.end - mvhd.start))
  const tracks: TrackHeader[] = []
  for (const trak of moovChildren.filter((b) => b.type === 'trak')) {
    const track = await readTrack(src, trak)
    if (track) tracks.push(track)
  }
  const video = tracks.find((t) => t.handler === 'vide' && t.width > 0 && t.height > 0)
  if (!video) throw new MediaFormatError('MP4 file without a video track')
  return { format: 'mp4', mime: MIME_OF.mp4, width: video.width, height: video.height, frames: 1, animated: true, durationMs }
}

// ------------------------------------------------------------------ files

/** Images larger than this are refused before being read into memory. */
export const MAX_IMAGE_INSPECT_BYTES = 32 * 1024 * 1024

/** Inspects a file on disk: images are read whole (they are small), MP4 by box. */
export async function inspectFile(path: string): Promise<Inspection> {
  const handle = await fs.open(path, 'r')
  try {
    const { size } = await handle.stat()
    const head = Buffer.alloc(Math.min(size, 16))
    await handle.read(head, 0, head.length, 0)
    const format = sniff(head)
    if (format === undefined) throw new MediaFormatError('unsupported media: expected a JPEG, PNG, GIF or WEBP image or an MP4 video')
    if (format === 'mp4') {
      return await inspectMp4({
        size,
        read: async (offset, length) => {
          const buf = Buffer.alloc(Math.max(0, Math.min(length, size - offset)))
          if (buf.length > 0) await handle.read(buf, 0, buf.length, offset)
          return buf
        }
      })
    }
    if (size > MAX_IMAGE_INSPECT_BYTES) throw new MediaFormatError(`image of ${size} bytes is too large`)
    return inspectImage(await fs.readFile(path))
  } finally {
    await handle.close()
  }
}

// ------------------------------------------------------------------ ratios

function gcd(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b]
  return a
}

/** `16:9` for 1280x720: width and height reduced by their greatest common divisor. */
export function aspectRatio(width: number, height: number): string {
  const d = gcd(width, height) || 1
  return `${width / d}:${height / d}`
}

/** Whether width:height is within `tolerance` (relative) of `w`:`h`; scaled sizes such as 854x480 count as 16:9. */
export function hasRatio(width: number, height: number, w: number, h: number, tolerance = 0.01): boolean {
  if (height === 0) return false
  const actual = width / height
  const wanted = w / h
  return Math.abs(actual - wanted) / wanted <= tolerance
}
