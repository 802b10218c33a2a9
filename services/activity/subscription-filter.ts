import type { Direction, EventType } from './event-types'
import type { Subscription } from './subscriptions'

/**
 * Whether one subscription wants one event. The candidates come from the
 * (event_type, user_id) index, so only the optional filters are left:
 *  - keyword: case-insensitive word or phrase match on the event's text fields
 *    ("rust" matches "Rust, Go" but not "trusted"; "new job" matches "my NEW  job!");
 *  - direction (dm events): whether the filter user sent or received the message;
 *    every item of the event counts (one event may carry several messages).
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

/** The list each direct-message kind carries its items in (one event may hold several). */
const DM_ITEM_LISTS: Partial<Record<EventType, string>> = {
  'dm.sent': 'direct_message_events',
  'dm.received': 'direct_message_events',
  'dm.read': 'direct_message_mark_read_events',
  'dm.indicate_typing': 'direct_message_indicate_typing_events'
}

/** One item of a dm event: who sent it (or read, or is typing) and its message text, if any. */
export interface DmItem {
  sender?: string
  texts: string[]
}

/** Every item of a dm event, in payload order; [] for other kinds. */
export function dmItems(event: ActivityEvent): DmItem[] {
  const field = DM_ITEM_LISTS[event.event_type]
  const list = field === undefined ? undefined : event.payload[field]
  if (!Array.isArray(list)) return []
  const withMessage = event.event_type === 'dm.sent' || event.event_type === 'dm.received'
  const out: DmItem[] = []
  for (const raw of list) {
    const item = obj(raw)
    if (!item) continue
    const create = withMessage ? obj(item.message_create) : undefined
    const sender = str(withMessage ? create?.sender_id : item.sender_id)
    const text = str(obj(create?.message_data)?.text)
    out.push({ ...(sender !== undefined ? { sender } : {}), texts: text !== undefined && text !== '' ? [text] : [] })
  }
  return out
}

function itemDirection(item: DmItem, userId: string): Direction | undefined {
  if (item.sender === undefined) return undefined
  return item.sender === userId ? 'sent' : 'received'
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
      for (const item of dmItems(event)) out.push(...item.texts)
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

/**
 * The directions of a dm event relative to `userId`, one per distinct item
 * direction (an event may carry messages both sent and received by the user);
 * [] for other kinds.
 */
export function directionsFor(event: ActivityEvent, userId: string): Direction[] {
  const out = new Set<Direction>()
  for (const item of dmItems(event)) {
    const d = itemDirection(item, userId)
    if (d !== undefined) out.add(d)
  }
  return [...out]
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
  if (direction !== undefined) {
    // Direction and keyword must hold for the same item: a received "lunch?" matches, not a sent one next to a received "hi".
    return dmItems(event).some((item) => itemDirection(item, sub.filter.user_id) === direction && (keyword === undefined || keywordMatches(keyword, item.texts)))
  }
  if (keyword !== undefined && !keywordMatches(keyword, texts ?? textFields(event))) return false
  return true
}
