import type { User } from '../../../common/auth/records'
import { mediaUrl } from '../../media/records'
import type { MediaType } from '../../media/rules'
import { displayUrl } from './post-text'
import type { PostEntity } from './records'
import { classicDate } from '../../classic-date'

/**
 * What a post looks like outside: the classic post shape of the Ads API
 * (compat or extended text, classic timestamps and entities), whose `id` is
 * a 64-bit JSON integer written exactly next to `id_str` (LongInt, toJson);
 * the same rendering with string ids as entity changes carry it
 * (postSnapshot); and the v2 post object of `post.create` on
 * activity.events (v2Post).
 */

const COMPAT_MAX = 140

/** An integer too large for a JS number, written into JSON digit for digit. */
export class LongInt {
  constructor(readonly digits: string) {}
}

export function toJson(value: unknown): string {
  if (value instanceof LongInt) return value.digits
  if (value === null || value === undefined) return 'null'
  if (Array.isArray(value)) return `[${value.map(toJson).join(',')}]`
  if (typeof value === 'object') {
    const parts: string[] = []
    for (const [k, v] of Object.entries(value as Record<string, unknown>)) if (v !== undefined) parts.push(`${JSON.stringify(k)}:${toJson(v)}`)
    return `{${parts.join(',')}}`
  }
  return JSON.stringify(value)
}


function escapeHtml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;')
}

export interface RenderOptions {
  mode: 'compat' | 'extended'
  trimUser: boolean
  /** Reads carry conversation_settings, nullcast and the scheduling fields; the create response does not. */
  read: boolean
  author: User | undefined
  base: string
}

function classicEntities(post: PostEntity, limit: number): Record<string, unknown[]> {
  const within = post.entities.filter((e) => e.end <= limit)
  const mentions = new Map(post.mentions.map((m) => [m.screen_name.toLowerCase(), m]))
  return {
    hashtags: within.filter((e) => e.kind === 'hashtag').map((e) => ({ text: e.value, indices: [e.start, e.end] })),
    symbols: within.filter((e) => e.kind === 'symbol').map((e) => ({ text: e.value, indices: [e.start, e.end] })),
    user_mentions: within.flatMap((e) => {
      const m = e.kind === 'mention' ? mentions.get(e.value.toLowerCase()) : undefined
      return m ? [{ screen_name: m.screen_name, name: m.screen_name, id: new LongInt(m.id), id_str: m.id, indices: [e.start, e.end] }] : []
    }),
    urls: within.filter((e) => e.kind === 'url').map((e) => ({ url: e.value, expanded_url: e.value, display_url: displayUrl(e.value), indices: [e.start, e.end] }))
  }
}

function userObject(userId: string, author: User | undefined, trim: boolean): Record<string, unknown> {
  const user: Record<string, unknown> = { id: new LongInt(userId), id_str: userId }
  if (trim || !author) return user
  return { ...user, name: author.screen_name, screen_name: author.screen_name, created_at: classicDate(author.created_at), protected: false }
}

const MEDIA_KIND: Record<MediaType, string> = { IMAGE: 'photo', GIF: 'animated_gif', VIDEO: 'video' }

export function renderPost(post: PostEntity, o: RenderOptions): Record<string, unknown> {
  const chars = [...post.text]
  const truncated = o.mode === 'compat' && chars.length > COMPAT_MAX
  const shown = truncated ? `${chars.slice(0, COMPAT_MAX - 1).join('')}…` : post.text
  const out: Record<string, unknown> = {
    created_at: classicDate(post.created_at),
    id: new LongInt(post.id),
    id_str: post.id,
    ...(o.mode === 'extended' ? { full_text: post.text, display_text_range: [0, chars.length] } : { text: shown }),
    name: post.name,
    truncated,
    entities: classicEntities(post, truncated ? COMPAT_MAX - 1 : chars.length),
    source: `<a href="${escapeHtml(o.base)}" rel="nofollow">${escapeHtml(post.app_name)}</a>`,
    in_reply_to_status_id: null,
    in_reply_to_status_id_str: null,
    in_reply_to_user_id: null,
    in_reply_to_user_id_str: null,
    in_reply_to_screen_name: null,
    user: userObject(post.user_id, o.author, o.trimUser),
    geo: null,
    coordinates: null,
    place: null,
    contributors: post.created_by !== post.user_id ? [new LongInt(post.created_by)] : null,
    retweet_count: 0,
    favorite_count: 0,
    favorited: false,
    retweeted: false,
    scopes: { followers: !post.nullcast },
    lang: 'und'
  }
  if (post.card_uri !== null) out.card_uri = post.card_uri
  if (post.media.length > 0) {
    out.extended_entities = {
      media: post.media.map((m) => {
        const id = m.media_key.split('_')[1] as string
        const url = mediaUrl(o.base, m)
        return { id: new LongInt(id), id_str: id, media_key: m.media_key, type: MEDIA_KIND[m.media_type], media_url: url, media_url_https: url, original_info: { width: m.width, height: m.height } }
      })
    }
  }
  if (o.read) {
    Object.assign(out, {
      conversation_settings: post.conversation_settings,
      nullcast: post.nullcast,
      tweet_type: 'PUBLISHED',
      scheduled_at: null,
      scheduled_status: null,
      display_text_range: [0, chars.length],
      tweet_id: post.id
    })
  }
  return out
}

/** `value` with every LongInt as its digits: plain JSON data (an entity change travels as ordinary JSON). */
function plainJson(value: unknown): unknown {
  if (value instanceof LongInt) return value.digits
  if (Array.isArray(value)) return value.map(plainJson)
  if (value !== null && typeof value === 'object') return Object.fromEntries(Object.entries(value as Record<string, unknown>).map(([k, v]) => [k, plainJson(v)]))
  return value
}

/**
 * The post as its entity changes carry it: the read rendering (extended
 * text, the full user) the public interface returns, never the stored
 * record with its internal fields (the media's stored file names). The
 * 64-bit ids are strings there, as JSON numbers cannot carry them exactly.
 */
export function postSnapshot(post: PostEntity, author: User | undefined, base: string): Record<string, unknown> {
  return plainJson(renderPost(post, { mode: 'extended', trimUser: false, read: true, author, base })) as Record<string, unknown>
}

/** The post as a v2 post object, the payload of `post.create` on activity.events. */
export function v2Post(post: PostEntity): Record<string, unknown> {
  const mentions = new Map(post.mentions.map((m) => [m.screen_name.toLowerCase(), m]))
  const entities: Record<string, unknown[]> = {}
  const add = (kind: string, item: Record<string, unknown>): void => {
    entities[kind] = [...(entities[kind] ?? []), item]
  }
  for (const e of post.entities) {
    if (e.kind === 'hashtag') add('hashtags', { start: e.start, end: e.end, tag: e.value })
    else if (e.kind === 'symbol') add('cashtags', { start: e.start, end: e.end, tag: e.value })
    else if (e.kind === 'url') add('urls', { start: e.start, end: e.end, url: e.value, expanded_url: e.value, display_url: displayUrl(e.value) })
    else {
      const m = mentions.get(e.value.toLowerCase())
      if (m) add('mentions', { start: e.start, end: e.end, username: m.screen_name, id: m.id })
    }
  }
  return {
    id: post.id,
    text: post.text,
    author_id: post.user_id,
    created_at: post.created_at,
    conversation_id: post.id,
    edit_history_tweet_ids: [post.id],
    lang: 'und',
    reply_settings: post.conversation_settings === 'EVERYONE' ? 'everyone' : post.conversation_settings === 'FOLLOWING' ? 'following' : 'mentionedUsers',
    ...(Object.keys(entities).length > 0 ? { entities } : {}),
    ...(post.media_keys.length > 0 ? { attachments: { media_keys: post.media_keys } } : {}),
    ...(post.card_uri !== null ? { card_uri: post.card_uri } : {})
  }
}
