import { mediaUrl } from '../../media/records'
import type { MediaCategory, MediaType } from '../../media/rules'
import type { AdsEntity } from '../entities'
import type { CardType, Component } from './components'
import type { TextEntity } from './post-text'

/**
 * The stored creatives (`ads:{kind}:{account_id}:{id}`, ./repos) and their
 * public renderings: what the ads reads return and what entity changes
 * carry. The route modules (library, account-media, cards, polls,
 * conversation-cards, posts) validate and write them; this module imports
 * none of them, so the repositories can.
 */

// ------------------------------------------------------------------ media library

export interface LibraryEntity extends AdsEntity {
  media_key: string
  media_type: MediaType
  media_category: MediaCategory
  media_status: 'TRANSCODE_COMPLETED'
  name: string | null
  file_name: string | null
  title: string | null
  description: string | null
  poster_media_key: string | null
  /** Milliseconds (videos); null otherwise. */
  duration: number | null
  aspect_ratio: string
  tweeted: boolean
  /** Internal: what cards and posts check and render. */
  width: number
  height: number
  file: string
  poster_file: string | null
  owner_user_id: string
}

export const MEDIA_TYPES = ['GIF', 'IMAGE', 'VIDEO'] as const

export function renderLibrary(e: LibraryEntity, base: string): Record<string, unknown> {
  const out: Record<string, unknown> = {
    tweeted: e.tweeted,
    name: e.name,
    file_name: e.file_name,
    media_url: mediaUrl(base, e),
    media_category: e.media_category,
    media_key: e.media_key,
    created_at: e.created_at,
    media_status: e.media_status,
    media_type: e.media_type,
    updated_at: e.updated_at,
    deleted: e.deleted
  }
  if (e.media_type !== 'IMAGE') {
    out.duration = e.duration
    out.description = e.description
    out.title = e.title
    out.poster_media_key = e.poster_media_key
    out.poster_media_url = e.poster_file ? mediaUrl(base, { file: e.poster_file }) : null
    out.aspect_ratio = e.aspect_ratio
  }
  return out
}

/** What a card keeps of the library media it was made with (the card renders even if the media leaves the library). */
export interface MediaSnapshot {
  media_key: string
  media_type: MediaType
  width: number
  height: number
  aspect_ratio: string
  duration: number | null
  file: string
  poster_file: string | null
  owner_user_id: string
}

export function snapshotOf(e: LibraryEntity): MediaSnapshot {
  return {
    media_key: e.media_key,
    media_type: e.media_type,
    width: e.width,
    height: e.height,
    aspect_ratio: e.aspect_ratio,
    duration: e.duration,
    file: e.file,
    poster_file: e.poster_file,
    owner_user_id: e.owner_user_id
  }
}

// ------------------------------------------------------------------ account media

export const CREATIVE_TYPES = [
  'BANNER', 'BANNER_TABLET', 'INTERSTITIAL', 'INTERSTITIAL_LANDSCAPE', 'INTERSTITIAL_LANDSCAPE_TABLET',
  'INTERSTITIAL_TABLET', 'MEDIUM_RECTANGLE', 'PREROLL', 'VAST_PREROLL'
] as const
export type CreativeType = (typeof CREATIVE_TYPES)[number]

export interface AccountMediaEntity extends AdsEntity {
  video_id: string | null
  media_url: string | null
  creative_type: CreativeType
  /** Internal: the library media it came from. */
  media_key: string
}

export function renderAccountMedia(e: AccountMediaEntity): Record<string, unknown> {
  return {
    video_id: e.video_id,
    media_url: e.media_url,
    creative_type: e.creative_type,
    id: e.id,
    created_at: e.created_at,
    updated_at: e.updated_at,
    deleted: e.deleted
  }
}

// ------------------------------------------------------------------ cards

export interface CardEntity extends AdsEntity {
  name: string
  card_uri: string
  card_type: CardType
  components?: Component[]
  slides?: Component[][]
}

export function renderCard(e: CardEntity): Record<string, unknown> {
  return {
    name: e.name,
    ...(e.slides ? { slides: e.slides } : { components: e.components }),
    created_at: e.created_at,
    card_uri: e.card_uri,
    id: e.id,
    updated_at: e.updated_at,
    deleted: e.deleted,
    card_type: e.card_type
  }
}

// ------------------------------------------------------------------ poll cards

export type PollCardType = 'TEXT_POLLS' | 'IMAGE_POLLS' | 'VIDEO_POLLS'
export type VotingStatus = 'open' | 'closed'

export interface PollEntity extends AdsEntity {
  name: string
  card_uri: string
  card_type: PollCardType
  first_choice: string
  second_choice: string
  third_choice: string | null
  fourth_choice: string | null
  duration_in_minutes: number
  start_time: string
  end_time: string
  /** Internal (media_key is write-only): what the card shows. */
  media: MediaSnapshot | null
}

export const POLL_DURATION = { min: 5, max: 10080 } as const
/** Open until end_time, closed from then on. */
export function votingStatus(poll: Pick<PollEntity, 'end_time'>, nowMs: number): VotingStatus {
  return nowMs < Date.parse(poll.end_time) ? 'open' : 'closed'
}

export function renderPoll(e: PollEntity, base: string, nowMs: number): Record<string, unknown> {
  const out: Record<string, unknown> = {
    name: e.name,
    start_time: e.start_time,
    first_choice: e.first_choice,
    second_choice: e.second_choice,
    end_time: e.end_time,
    id: e.id,
    created_at: e.created_at,
    duration_in_minutes: String(e.duration_in_minutes),
    card_uri: e.card_uri,
    updated_at: e.updated_at,
    deleted: e.deleted,
    card_type: e.card_type,
    voting_status: votingStatus(e, nowMs)
  }
  if (e.third_choice !== null) out.third_choice = e.third_choice
  if (e.fourth_choice !== null) out.fourth_choice = e.fourth_choice
  const media = e.media
  if (media?.media_type === 'VIDEO') {
    const [w, h] = ratioParts(media.aspect_ratio)
    Object.assign(out, {
      video_url: mediaUrl(base, media),
      video_hls_url: null,
      video_width: w,
      video_height: h,
      video_poster_url: media.poster_file ? mediaUrl(base, { file: media.poster_file }) : null,
      video_poster_width: w,
      video_poster_height: h,
      content_duration_seconds: String(Math.round((media.duration ?? 0) / 1000))
    })
  } else if (media?.media_type === 'IMAGE') {
    Object.assign(out, { media_url: mediaUrl(base, media), image_display_width: String(media.width), image_display_height: String(media.height) })
  }
  return out
}

// ------------------------------------------------------------------ conversation cards

export type ConversationKind = 'video' | 'image'
export type ConversationCardType = 'VIDEO_CONVERSATION' | 'IMAGE_CONVERSATION'

export interface ConversationEntity extends AdsEntity {
  name: string
  card_uri: string
  card_type: ConversationCardType
  title: string | null
  first_cta: string
  first_cta_tweet: string
  second_cta: string | null
  second_cta_tweet: string | null
  third_cta: string | null
  third_cta_tweet: string | null
  fourth_cta: string | null
  fourth_cta_tweet: string | null
  thank_you_text: string
  thank_you_url: string | null
  media_key: string
  media: MediaSnapshot
  poster_media_key: string | null
  poster_file: string | null
  /** Write-only key: the response carries the image's URL. */
  unlocked_image: MediaSnapshot | null
  unlocked_video_media_key: string | null
}

export const ORDINALS = ['second', 'third', 'fourth'] as const

function ratioParts(ratio: string): [string, string] {
  const [w, h] = ratio.split(':')
  return [w ?? '', h ?? '']
}

export function renderConversation(e: ConversationEntity, base: string): Record<string, unknown> {
  const out: Record<string, unknown> = {
    name: e.name,
    first_cta: e.first_cta,
    first_cta_tweet: e.first_cta_tweet,
    thank_you_text: e.thank_you_text,
    media_key: e.media_key,
    media_url: mediaUrl(base, e.media),
    id: e.id,
    created_at: e.created_at,
    card_uri: e.card_uri,
    title: e.title,
    updated_at: e.updated_at,
    deleted: e.deleted,
    card_type: e.card_type
  }
  for (const n of ORDINALS) {
    if (e[`${n}_cta`] !== null) {
      out[`${n}_cta`] = e[`${n}_cta`]
      out[`${n}_cta_tweet`] = e[`${n}_cta_tweet`]
    }
  }
  if (e.thank_you_url !== null) out.thank_you_url = e.thank_you_url
  if (e.unlocked_image) out.unlocked_image_url = mediaUrl(base, e.unlocked_image)
  if (e.card_type === 'VIDEO_CONVERSATION') {
    const [w, h] = ratioParts(e.media.aspect_ratio)
    out.video_width = w
    out.video_height = h
    out.video_owner_id = e.media.owner_user_id
    out.poster_media_url = e.poster_file ? mediaUrl(base, { file: e.poster_file }) : null
    if (e.unlocked_video_media_key !== null) out.unlocked_video_media_key = e.unlocked_video_media_key
  } else {
    out.image_display_width = String(e.media.width)
    out.image_display_height = String(e.media.height)
  }
  return out
}

// ------------------------------------------------------------------ posts

export const CONVERSATION_SETTINGS = ['EVERYONE', 'FOLLOWING', 'MENTIONED_USERS'] as const

export interface PostMedia {
  media_key: string
  media_type: MediaType
  file: string
  width: number
  height: number
}

export interface Mention {
  screen_name: string
  id: string
}

export interface PostEntity extends AdsEntity {
  text: string
  name: string | null
  /** The author: the advertiser the post was made for. */
  user_id: string
  /** The authenticated user who made the call. */
  created_by: string
  app_name: string
  nullcast: boolean
  card_uri: string | null
  media_keys: string[]
  media: PostMedia[]
  conversation_settings: (typeof CONVERSATION_SETTINGS)[number]
  video_cta: string | null
  video_cta_value: string | null
  video_title: string | null
  video_description: string | null
  entities: TextEntity[]
  mentions: Mention[]
}
