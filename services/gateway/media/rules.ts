import type { Inspection } from './inspect'

/**
 * What each media category accepts (the public platform's media best
 * practices): the container, the file size, and the dimension, frame and
 * duration bounds, checked against what was read from the bytes.
 */

export const MEDIA_CATEGORIES = ['TWEET_IMAGE', 'TWEET_GIF', 'TWEET_VIDEO', 'PROMO_VIDEO'] as const
export type MediaCategory = (typeof MEDIA_CATEGORIES)[number]

export type MediaType = 'IMAGE' | 'GIF' | 'VIDEO'

/**
 * The public platform's lowercase spellings; `amplify_video` is its name for
 * promoted video. A Map, not an object literal, so that a client's
 * `constructor` or `__proto__` finds nothing instead of Object's own members.
 */
const CATEGORY_ALIASES: ReadonlyMap<string, MediaCategory> = new Map([
  ['tweet_image', 'TWEET_IMAGE'],
  ['tweet_gif', 'TWEET_GIF'],
  ['tweet_video', 'TWEET_VIDEO'],
  ['promo_video', 'PROMO_VIDEO'],
  ['amplify_video', 'PROMO_VIDEO']
])

/** Also the CamelCase spellings v1.1 clients send (`TweetVideo`, `AmplifyVideo`). */
export function parseCategory(raw: string): MediaCategory | undefined {
  return CATEGORY_ALIASES.get(raw.trim().replace(/([a-z])([A-Z])/g, '$1_$2').toLowerCase())
}

export const MEDIA_TYPE_OF: Record<MediaCategory, MediaType> = {
  TWEET_IMAGE: 'IMAGE',
  TWEET_GIF: 'GIF',
  TWEET_VIDEO: 'VIDEO',
  PROMO_VIDEO: 'VIDEO'
}

/** The number before the `_` of a media key tells its kind, as on the public platform. */
export const KEY_PREFIX: Record<MediaCategory, string> = {
  TWEET_IMAGE: '3',
  TWEET_GIF: '16',
  TWEET_VIDEO: '7',
  PROMO_VIDEO: '13'
}

export const LIMITS = {
  imageBytes: 5 * 1024 * 1024,
  imageMaxSide: 8192,
  gifBytes: 15 * 1024 * 1024,
  gifMaxWidth: 1280,
  gifMaxHeight: 1080,
  gifMaxFrames: 350,
  gifMaxPixels: 300_000_000,
  videoMinMs: 500,
  videoMaxMs: 20 * 60 * 1000,
  videoMinSide: 32,
  /** Longer and shorter side bounds: 1280x1024 in either orientation (720x1280 portrait fits). */
  videoMaxLongSide: 1280,
  videoMaxShortSide: 1024,
  videoMinRatio: 1 / 3,
  videoMaxRatio: 3
} as const

/** The category a file gets when the upload names none (as the public platform infers it). */
export function defaultCategory(info: Inspection): MediaCategory {
  if (info.format === 'mp4') return 'TWEET_VIDEO'
  if (info.format === 'gif' && info.animated) return 'TWEET_GIF'
  return 'TWEET_IMAGE'
}

export interface RuleViolation {
  parameter: 'media' | 'media_category'
  message: string
}

function mb(bytes: number): string {
  return `${Math.round((bytes / (1024 * 1024)) * 10) / 10} MB`
}

/** The first rule of `category` that the file breaks, or undefined when it is acceptable. */
export function checkMedia(category: MediaCategory, info: Inspection, size: number, maxVideoBytes: number): RuleViolation | undefined {
  const name = category.toLowerCase()
  switch (MEDIA_TYPE_OF[category]) {
    case 'IMAGE': {
      if (info.format === 'mp4') return { parameter: 'media_category', message: `A video cannot be uploaded as ${name}; use tweet_video or amplify_video.` }
      if (info.format === 'gif' && info.animated) return { parameter: 'media_category', message: `An animated GIF cannot be uploaded as ${name}; use tweet_gif.` }
      // The platform takes animations only as GIFs (tweet_gif); an animated WEBP (VP8X animation flag) is no still image.
      if (info.animated) return { parameter: 'media', message: `An animated ${info.format.toUpperCase()} cannot be uploaded as ${name}: animations are accepted as GIF files (tweet_gif).` }
      if (size > LIMITS.imageBytes) return { parameter: 'media', message: `Image of ${size} bytes exceeds the ${mb(LIMITS.imageBytes)} limit of ${name}.` }
      if (info.width > LIMITS.imageMaxSide || info.height > LIMITS.imageMaxSide) {
        return { parameter: 'media', message: `Image of ${info.width}x${info.height} exceeds ${LIMITS.imageMaxSide}x${LIMITS.imageMaxSide} pixels.` }
      }
      return undefined
    }
    case 'GIF': {
      if (info.format !== 'gif') return { parameter: 'media_category', message: `${name} takes a GIF file; got ${info.mime}.` }
      if (size > LIMITS.gifBytes) return { parameter: 'media', message: `GIF of ${size} bytes exceeds the ${mb(LIMITS.gifBytes)} limit of ${name}.` }
      if (info.width > LIMITS.gifMaxWidth || info.height > LIMITS.gifMaxHeight) {
        return { parameter: 'media', message: `GIF of ${info.width}x${info.height} exceeds ${LIMITS.gifMaxWidth}x${LIMITS.gifMaxHeight} pixels.` }
      }
      if (info.frames > LIMITS.gifMaxFrames) return { parameter: 'media', message: `GIF of ${info.frames} frames exceeds ${LIMITS.gifMaxFrames} frames.` }
      if (info.width * info.height * info.frames > LIMITS.gifMaxPixels) {
        return { parameter: 'media', message: `GIF of ${info.width}x${info.height}x${info.frames} exceeds ${LIMITS.gifMaxPixels} pixels in total.` }
      }
      return undefined
    }
    case 'VIDEO': {
      if (info.format !== 'mp4') return { parameter: 'media_category', message: `${name} takes an MP4 video; got ${info.mime}.` }
      if (size > maxVideoBytes) return { parameter: 'media', message: `Video of ${size} bytes exceeds the ${mb(maxVideoBytes)} limit.` }
      const ms = info.durationMs ?? 0
      if (ms < LIMITS.videoMinMs || ms > LIMITS.videoMaxMs) {
        return { parameter: 'media', message: `Video duration ${ms / 1000} s is outside 0.5 s to ${LIMITS.videoMaxMs / 60000} minutes.` }
      }
      const long = Math.max(info.width, info.height)
      const short = Math.min(info.width, info.height)
      if (short < LIMITS.videoMinSide || long > LIMITS.videoMaxLongSide || short > LIMITS.videoMaxShortSide) {
        return { parameter: 'media', message: `Video of ${info.width}x${info.height} is outside 32x32 to 1280x1024.` }
      }
      const ratio = info.width / info.height
      if (ratio < LIMITS.videoMinRatio || ratio > LIMITS.videoMaxRatio) {
        return { parameter: 'media', message: `Video aspect ratio ${info.width}:${info.height} is outside 1:3 to 3:1.` }
      }
      return undefined
    }
  }
}
