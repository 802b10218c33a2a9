import { Ads, AdsError } from '../../common/errors'
import type { Params } from '../../common/ads/params'
import { parseIsoTime } from '../../common/ads/times'

/**
 * Conventions of the advertising interface as the gateway's ads modules
 * import them. The ones account history shares (authentication, the
 * response envelope, parameter readers, times) live in services/common/ads
 * and are re-exported here; list options and opaque keyset cursors, which
 * only the gateway's lists use, are defined here.
 */

export { ADS_API_VERSION, ADS_AUTH, type Actor, actorOf, userIdOf, type ListExtras, sendData, requireJsonBody } from '../../common/ads/conventions'
export { Params } from '../../common/ads/params'
export { type TimeRules, parseIsoTime, formatIsoTime } from '../../common/ads/times'

// ------------------------------------------------------------------ lists

export interface SortBy {
  field: string
  direction: 'asc' | 'desc'
}

export interface ListOptions {
  count: number
  cursor?: string
  sortBy?: SortBy
  withDeleted: boolean
  withTotalCount: boolean
}

export interface ListRules {
  countDefault: number
  countMin?: number
  countMax: number
  /** Attributes `sort_by` accepts. */
  sortable?: string[]
  /** Whether `with_deleted` is accepted (default true). */
  deletable?: boolean
}

export function listOptions(p: Params, rules: ListRules): ListOptions {
  const count = p.int('count', { min: rules.countMin ?? 1, max: rules.countMax }) ?? rules.countDefault
  const cursor = p.string('cursor', { max: 512 })
  const withTotalCount = p.bool('with_total_count', { default: false }) ?? false
  if (withTotalCount && cursor !== undefined) throw Ads.exclusive('with_total_count', 'cursor')
  const withDeleted = rules.deletable === false ? false : (p.bool('with_deleted', { default: false }) ?? false)
  let sortBy: SortBy | undefined
  const rawSort = p.string('sort_by', { max: 100 })
  if (rawSort !== undefined) {
    const m = /^([a-z_]+)-(asc|desc)$/.exec(rawSort)
    const sortable = rules.sortable ?? ['created_at', 'updated_at', 'name', 'id']
    if (!m || !sortable.includes(m[1] as string)) {
      throw Ads.invalid('sort_by', `Invalid sort_by "${rawSort}": expected <attribute>-<asc|desc> with attribute one of ${sortable.join(', ')}`)
    }
    sortBy = { field: m[1] as string, direction: m[2] as 'asc' | 'desc' }
  }
  return { count, ...(cursor !== undefined ? { cursor } : {}), ...(sortBy ? { sortBy } : {}), withDeleted, withTotalCount }
}

/**
 * Cursors are keyset positions, never offsets, so an item deleted (or added)
 * between two page requests neither skips nor repeats another item:
 *
 *  - with `sort_by`: the sort value and id of the last item served; the next
 *    page starts at the first item after that pair in (value, id) order;
 *  - in the default creation order: the id of the last item served and the
 *    ids that followed it in the full (deleted included) list. The next page
 *    starts after the last item, or at the first of its followers still
 *    there when it was removed for good; with all of them gone, after the
 *    last item's `created_at`.
 *
 * The cursor is base64url JSON, opaque to clients; anything that does not
 * decode to a position made for the same sort is INVALID_PARAMETER.
 */
interface CursorState {
  /** Format version. */
  v: 1
  /** The sort the cursor was made for: a cursor is only valid with the same sort. */
  s: string
  /** sort_by: [sort value, id] of the last item served. */
  k?: [string | number | boolean | null, string]
  /** Creation order: the last item's id, then up to FOLLOWERS ids after it. */
  a?: string[]
  /** Creation order: the last item's created_at (last resort when every id of `a` is gone). */
  t?: string | null
}

const FOLLOWERS = 4
const MAX_CURSOR = 512
const CURSOR_ID = /^[A-Za-z0-9_.:-]{1,100}$/

type Keyed = { id?: unknown; created_at?: unknown; deleted?: unknown }

function sortSignature(opts: ListOptions): string {
  return opts.sortBy ? `${opts.sortBy.field}-${opts.sortBy.direction}` : 'default'
}

function encodeState(state: CursorState): string {
  return Buffer.from(JSON.stringify(state)).toString('base64url')
}

function invalidCursor(cursor: string): AdsError {
  return Ads.invalid('cursor', `Invalid cursor "${cursor.slice(0, 60)}"`)
}

function isSortValue(v: unknown): v is string | number | boolean | null {
  return v === null || typeof v === 'string' || typeof v === 'boolean' || (typeof v === 'number' && Number.isFinite(v))
}

/** Decodes a cursor made by paginate for the same sort; anything else is INVALID_PARAMETER. */
export function decodeCursor(cursor: string, opts: ListOptions): CursorState {
  let state: unknown
  try {
    if (!/^[A-Za-z0-9_-]+$/.test(cursor)) throw invalidCursor(cursor)
    state = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'))
  } catch {
    throw invalidCursor(cursor)
  }
  const c = state as Partial<CursorState> | null
  if (c === null || typeof c !== 'object' || Array.isArray(c) || c.v !== 1 || c.s !== sortSignature(opts)) throw invalidCursor(cursor)
  if (opts.sortBy) {
    const k = c.k
    if (!Array.isArray(k) || k.length !== 2 || !isSortValue(k[0]) || typeof k[1] !== 'string' || !CURSOR_ID.test(k[1]) || c.a !== undefined) throw invalidCursor(cursor)
  } else {
    const a = c.a
    if (!Array.isArray(a) || a.length < 1 || a.length > FOLLOWERS + 1 || a.some((id) => typeof id !== 'string' || !CURSOR_ID.test(id)) || c.k !== undefined) throw invalidCursor(cursor)
    if (c.t !== undefined && c.t !== null && parseIsoTime(c.t) === undefined) throw invalidCursor(cursor)
  }
  return c as CursorState
}

function compareValues(a: unknown, b: unknown): number {
  a = a ?? null
  b = b ?? null
  if (a === b) return 0
  if (a === null) return -1
  if (b === null) return 1
  if (typeof a === 'number' && typeof b === 'number') return a - b
  return String(a).localeCompare(String(b))
}

function sortValueOf(item: object, field: string): string | number | boolean | null {
  const v = Object.hasOwn(item, field) ? (item as Record<string, unknown>)[field] : null
  return isSortValue(v) ? v : v === undefined ? null : String(v)
}

function idOf(item: object): string {
  const id = (item as Keyed).id
  return typeof id === 'string' ? id : String(id ?? '')
}

export interface Page<T> {
  data: T[]
  next_cursor: string | null
  total_count?: number
}

/** sort_by: items in (value, id) order, resumed after the cursor's pair. */
function sortedPage<T extends object>(live: T[], opts: ListOptions & { sortBy: SortBy }): { rest: T[]; cursorFor: (last: T) => string } {
  const { field, direction } = opts.sortBy
  const sign = direction === 'asc' ? 1 : -1
  const order = (a: { v: unknown; id: string }, b: { v: unknown; id: string }): number => sign * compareValues(a.v, b.v) || compareValues(a.id, b.id)
  const sorted = [...live].sort((a, b) => order({ v: sortValueOf(a, field), id: idOf(a) }, { v: sortValueOf(b, field), id: idOf(b) }))
  let rest = sorted
  if (opts.cursor !== undefined) {
    const [v, id] = decodeCursor(opts.cursor, opts).k as [unknown, string]
    rest = sorted.filter((item) => order({ v: sortValueOf(item, field), id: idOf(item) }, { v, id }) > 0)
  }
  return { rest, cursorFor: (last) => encodeState({ v: 1, s: sortSignature(opts), k: [sortValueOf(last, field), idOf(last)] }) }
}

/** Where the creation-order list resumes: after the anchor, at a surviving follower, or after its created_at. */
function resumeIndex<T extends object>(items: T[], state: CursorState): number {
  const position = new Map(items.map((item, i) => [idOf(item), i]))
  const [anchor, ...followers] = state.a as string[]
  const at = position.get(anchor as string)
  if (at !== undefined) return at + 1
  for (const id of followers) {
    const i = position.get(id)
    if (i !== undefined) return i
  }
  const t = state.t
  if (typeof t !== 'string') return items.length
  // ISO 8601 UTC strings of one format order like their instants.
  const i = items.findIndex((item) => {
    const createdAt = (item as Keyed).created_at
    return typeof createdAt === 'string' && createdAt > t
  })
  return i < 0 ? items.length : i
}

/** Default order: the items as given (creation order), resumed by the anchor ids of the cursor. */
function creationPage<T extends object>(items: T[], keep: (item: T) => boolean, opts: ListOptions): { rest: T[]; cursorFor: (last: T) => string } {
  const start = opts.cursor === undefined ? 0 : resumeIndex(items, decodeCursor(opts.cursor, opts))
  const rest = items.slice(start).filter(keep)
  const cursorFor = (last: T): string => {
    const i = items.indexOf(last)
    const followers = items.slice(i + 1, i + 1 + FOLLOWERS).map(idOf).filter((id) => CURSOR_ID.test(id))
    const createdAt = (last as Keyed).created_at
    const t = typeof createdAt === 'string' && parseIsoTime(createdAt) !== undefined ? createdAt : null
    // Keep the cursor short: drop followers until it fits.
    for (let n = followers.length; n >= 0; n--) {
      const encoded = encodeState({ v: 1, s: sortSignature(opts), a: [idOf(last), ...followers.slice(0, n)], t })
      if (encoded.length <= MAX_CURSOR) return encoded
    }
    return encodeState({ v: 1, s: sortSignature(opts), a: [idOf(last)], t })
  }
  return { rest, cursorFor }
}

/**
 * One page of `items` (given in creation order; deleted ones included):
 * deleted ones dropped unless with_deleted, sorted by sort_by (default:
 * creation order), resumed at the cursor's keyset position.
 */
export function paginate<T extends object>(items: T[], opts: ListOptions): Page<T> {
  const keep = (i: T): boolean => opts.withDeleted || (i as Keyed).deleted !== true
  const live = items.filter(keep)
  const sortBy = opts.sortBy
  const { rest, cursorFor } = sortBy ? sortedPage(live, { ...opts, sortBy }) : creationPage(items, keep, opts)
  const data = rest.slice(0, opts.count)
  const last = data[data.length - 1]
  const page: Page<T> = { data, next_cursor: rest.length > opts.count && last !== undefined ? cursorFor(last) : null }
  if (opts.withTotalCount) page.total_count = live.length
  return page
}
