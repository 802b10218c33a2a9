import { execFile } from 'node:child_process'
import fs from 'node:fs/promises'
import { fileTypeFromFile } from 'file-type'
import { imageSize } from 'image-size'

/**
 * What the media rules need from the bytes, read by maintained tools, never
 * from the client's claimed type or file name: the container by its
 * signature (file-type), a still image's dimensions from its header
 * (image-size), and everything that needs a demuxer — GIF frames, whether a
 * WEBP decodes as one still frame, a video's duration and display size —
 * from ffprobe (Debian's ffmpeg). Nothing is decoded beyond that.
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

/** file-type's extension → the format we accept; anything else is refused. */
export const FORMAT_OF_EXT: ReadonlyMap<string, MediaFormat> = new Map([
  ['png', 'png'],
  ['jpg', 'jpeg'],
  ['gif', 'gif'],
  ['webp', 'webp'],
  ['mp4', 'mp4'],
  ['m4v', 'mp4']
])

export interface Inspection {
  format: MediaFormat
  mime: string
  width: number
  height: number
  /** Frames of a GIF (1 for a still one); 1 for other images. */
  frames: number
  animated: boolean
  /** Video and animated GIF: presentation duration in milliseconds. */
  durationMs?: number
}

/** The bytes are not a (well-formed) file of a supported format. */
export class MediaFormatError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'MediaFormatError'
  }
}

/** Images larger than this are refused before being read into memory (the largest limit is a 15 MB GIF). */
export const MAX_IMAGE_INSPECT_BYTES = 32 * 1024 * 1024
const FFPROBE_TIMEOUT_MS = 30_000

interface ProbeStream {
  codec_type?: string
  width?: number
  height?: number
  duration?: string
  nb_read_packets?: string
  side_data_list?: Array<{ rotation?: number }>
  tags?: { rotate?: string }
}

interface Probe {
  streams?: ProbeStream[]
  format?: { format_name?: string; duration?: string }
}

/**
 * Runs ffprobe on the file. A file it cannot read is the client's
 * (MediaFormatError with ffprobe's first line); a missing or hanging
 * ffprobe is ours and stays a plain error.
 */
function ffprobe(executable: string, file: string, args: string[]): Promise<Probe> {
  const argv = ['-v', 'error', '-hide_banner', '-of', 'json', ...args, `file:${file}`]
  return new Promise((resolve, reject) => {
    execFile(executable, argv, { timeout: FFPROBE_TIMEOUT_MS, maxBuffer: 1024 * 1024, windowsHide: true }, (err, stdout, stderr) => {
      if (err && (typeof err.code !== 'number' || err.killed === true)) return reject(err)
      const reason = stderr.split('\n').find((l) => l.trim() !== '')?.replace(/^.*?: /, '').slice(0, 160)
      if (err) return reject(new MediaFormatError(reason ?? 'unreadable media'))
      try {
        resolve(JSON.parse(stdout) as Probe)
      } catch {
        reject(new MediaFormatError('unreadable media'))
      }
    })
  })
}

function ms(seconds: string | undefined): number | undefined {
  const n = Number(seconds)
  return seconds !== undefined && Number.isFinite(n) && n >= 0 ? Math.round(n * 1000) : undefined
}

async function inspectVideo(executable: string, file: string): Promise<Inspection> {
  const probe = await ffprobe(executable, file, ['-show_entries', 'format=format_name,duration:stream=codec_type,width,height,duration:stream_side_data=rotation:stream_tags=rotate'])
  if (!probe.format?.format_name?.split(',').includes('mp4')) throw new MediaFormatError('not an MP4 container')
  const video = probe.streams?.find((s) => s.codec_type === 'video' && (s.width ?? 0) > 0 && (s.height ?? 0) > 0)
  if (!video) throw new MediaFormatError('MP4 file without a video track')
  let width = video.width as number
  let height = video.height as number
  // A display matrix turned by 90° or 270° presents the frame sideways.
  const rotation = video.side_data_list?.find((d) => typeof d.rotation === 'number')?.rotation ?? Number(video.tags?.rotate ?? 0)
  if (Math.abs(rotation) % 180 === 90) [width, height] = [height, width]
  const durationMs = ms(probe.format.duration) ?? ms(video.duration) ?? 0
  return { format: 'mp4', mime: MIME_OF.mp4, width, height, frames: 1, animated: true, durationMs }
}

async function inspectImage(executable: string, file: string, format: MediaFormat, size: number): Promise<Inspection> {
  if (size > MAX_IMAGE_INSPECT_BYTES) throw new MediaFormatError(`image of ${size} bytes is too large`)
  let dims: { width: number; height: number }
  try {
    dims = imageSize(await fs.readFile(file))
  } catch (err) {
    throw new MediaFormatError(`${format.toUpperCase()} header unreadable (${(err as Error).message})`)
  }
  const { width, height } = dims
  if (!(width > 0) || !(height > 0)) throw new MediaFormatError(`image with an empty dimension (${width}x${height})`)
  const result: Inspection = { format, mime: MIME_OF[format], width, height, frames: 1, animated: false }
  if (format === 'gif') {
    const probe = await ffprobe(executable, file, ['-count_packets', '-show_entries', 'stream=nb_read_packets,duration'])
    const frames = Number(probe.streams?.[0]?.nb_read_packets ?? 0)
    if (!(frames > 0)) throw new MediaFormatError('GIF without any image')
    result.frames = frames
    result.animated = frames > 1
    if (frames > 1) result.durationMs = ms(probe.streams?.[0]?.duration) ?? 0
  } else if (format === 'webp') {
    // Debian's ffmpeg decodes still WEBP only: one that yields no frame is animated (or broken), not a still image.
    const probe = await ffprobe(executable, file, ['-show_entries', 'stream=width,height'])
    if (!((probe.streams?.[0]?.width ?? 0) > 0)) result.animated = true
  }
  return result
}

/** Inspects a file on disk with file-type, image-size and the `ffprobe` executable. */
export async function inspectFile(file: string, executable = 'ffprobe'): Promise<Inspection> {
  const { size } = await fs.stat(file)
  const type = await fileTypeFromFile(file)
  const format = type ? FORMAT_OF_EXT.get(type.ext) : undefined
  if (format === undefined) {
    const found = type ? ` (found ${type.mime})` : ''
    throw new MediaFormatError(`unsupported media: expected a JPEG, PNG, GIF or WEBP image or an MP4 video${found}`)
  }
  return format === 'mp4' ? inspectVideo(executable, file) : inspectImage(executable, file, format, size)
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
