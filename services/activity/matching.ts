import type { Direction, EventType } from './event-types'
import type { Subscription } from './subscriptions'

/**
 * Whether one subscription wants one event. The candidates come from the
 * (event_type, user_id) index, so only the optional filters are left:
 *  - keyword: case-insensitive word or phrase match on the event's text fields
 *    ("rust" matches "Rust, Go" but not "trusted"; "new job" matches "my NEW  job!");
 *  - direction (dm events): whether the filter user sent or received the message.
 */

/** An event as it travels on `activity.events` (schemas/events/activity.events.json). */
export interface ActivityEvent {
  event_uuid: string
  event_type: EventType
  user_id: string
  created_at: string
  payload: Record<string, unknown>
  includes?: Record<string, unknown>
  source?: string
}

type Obj = Record<string, unknown>

function obj(value: unknown): Obj | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Obj) : undefined
}

function str(value: unknown): string | undefined {
  return typeof value === 'string' ? value : undefined
}

function firstItem(payload: Obj, field: string): Obj | undefined {
  const list = payload[field]
  return Array.isArray(list) ? obj(list[0]) : undefined
}

/** The text a keyword is searched in, per event kind (documented in each payload schema). */
export function textFields(event: ActivityEvent): string[] {
  const p = event.payload
  const out: Array<string | undefined> = []
  switch (event.event_type) {
    case 'post.create':
      out.push(str(p.text), str(obj(p.note_tweet)?.text))
      break
    case 'dm.sent':
    case 'dm.received':
      for (const item of Array.isArray(p.direct_message_events) ? p.direct_message_events : []) {
        out.push(str(obj(obj(obj(item)?.message_create)?.message_data)?.text))
      }
      break
    case 'spaces.start':
    case 'spaces.end':
      out.push(str(p.title))
      break
    case 'post.delete':
    case 'dm.read':
    case 'dm.indicate_typing':
      break
    default:
      // profile.update.*: the old and the new value.
      out.push(str(p.before), str(p.after))
  }
  return out.filter((s): s is string => s !== undefined && s !== '')
}

/** Who sent the direct message (or the read receipt, or is typing); undefined for other kinds. */
export function senderOf(event: ActivityEvent): string | undefined {
  const p = event.payload
  switch (event.event_type) {
    case 'dm.sent':
    case 'dm.received':
      return str(obj(firstItem(p, 'direct_message_events')?.message_create)?.sender_id)
    case 'dm.read':
      return str(firstItem(p, 'direct_message_mark_read_events')?.sender_id)
    case 'dm.indicate_typing':
      return str(firstItem(p, 'direct_message_indicate_typing_events')?.sender_id)
    default:
      return undefined
  }
}

/** The direction of a dm event relative to `userId`: sent when they are the sender. */
export function directionFor(event: ActivityEvent, userId: string): Direction | undefined {
  const sender = senderOf(event)
  if (sender === undefined) return undefined
  return sender === userId ? 'sent' : 'received'
}

const WORD = '[\\p{L}\\p{N}_]'
/** Scripts written without spaces between words: there a keyword matches inside a run of letters. */
const UNSPACED = /[\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}\p{Script=Thai}\p{Script=Lao}\p{Script=Khmer}\p{Script=Myanmar}]/u
const WORD_CHAR = new RegExp(WORD, 'u')

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
}

function needsBoundary(ch: string): boolean {
  return WORD_CHAR.test(ch) && !UNSPACED.test(ch)
}

/**
 * A keyword as a regular expression: its words in order, separated by any
 * whitespace, not glued to further letters or digits on either side. The
 * boundary applies only where the keyword starts or ends with a word
 * character ("#rust", "c++") of a script that separates words with spaces.
 */
export function keywordPattern(keyword: string): RegExp {
  const trimmed = keyword.trim()
  const body = trimmed.split(/\s+/).map(escapeRegExp).join('\\s+')
  const first = Array.from(trimmed)[0] ?? ''
  const last = Array.from(trimmed).pop() ?? ''
  const before = needsBoundary(first) ? `(?<!${WORD})` : ''
  const after = needsBoundary(last) ? `(?!${WORD})` : ''
  return new RegExp(`${before}${body}${after}`, 'iu')
}

const PATTERN_CACHE_LIMIT = 10_000
const patterns = new Map<string, RegExp>()

function cachedPattern(keyword: string): RegExp {
  let re = patterns.get(keyword)
  if (!re) {
    if (patterns.size >= PATTERN_CACHE_LIMIT) patterns.clear()
    re = keywordPattern(keyword)
    patterns.set(keyword, re)
  }
  return re
}

export function keywordMatches(keyword: string, texts: string[]): boolean {
  const re = cachedPattern(keyword)
  return texts.some((t) => re.test(t))
}

/** Whether `sub` (already a candidate by event_type and user_id) matches `event`. */
export function subscriptionMatches(sub: Subscription, event: ActivityEvent, texts?: string[]): boolean {
  if (sub.event_type !== event.event_type || sub.filter.user_id !== event.user_id) return false
  const { keyword, direction } = sub.filter
  if (direction !== undefined && directionFor(event, sub.filter.user_id) !== direction) return false
  if (keyword !== undefined && !keywordMatches(keyword, texts ?? textFields(event))) return false
  return true
}
