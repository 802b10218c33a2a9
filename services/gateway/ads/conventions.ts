import type { FastifyReply, FastifyRequest } from 'fastify'
import type { AuthRequirement } from '../../common/auth/authenticate'
import { Ads, AdsError } from '../../common/errors'
import { adsRequestParams, recordAdsEcho } from '../../common/http'

/**
 * Conventions shared by every operation of the advertising interface
 * (service-spec "Conventions of the advertising interface", platform-facts §7):
 * authentication, typed parameter readers that fail with the ads error codes
 * naming the parameter, list options and opaque cursors, and the response
 * envelope `{request:{params}, data, data_type, next_cursor?, total_count?}`.
 */

export const ADS_API_VERSION = '12'

/** Every ads call is OAuth 1.0a user context (platform-facts §7). */
export const ADS_AUTH: AuthRequirement = { schemes: ['oauth1-user'] }

export interface Actor {
  user_id: string
  platform: string
}

/** Who made a change, for entity-change events and account history. */
export function actorOf(request: FastifyRequest): Actor {
  const auth = request.auth
  if (!auth || auth.scheme === 'bearer-app') return { user_id: '0', platform: 'API' }
  return { user_id: auth.userId, platform: 'API' }
}

/** The authenticated user's id; ads routes are user context only. */
export function userIdOf(request: FastifyRequest): string {
  const auth = request.auth
  if (!auth || auth.scheme === 'bearer-app') throw Ads.unauthorized()
  return auth.userId
}

// ------------------------------------------------------------------ responses

export interface ListExtras {
  next_cursor?: string | null
  total_count?: number
}

export function sendData(request: FastifyRequest, reply: FastifyReply, data: unknown, dataType: string, extras: ListExtras = {}): FastifyReply {
  const body: Record<string, unknown> = { request: { params: adsRequestParams(request) }, data_type: dataType, data }
  if ('next_cursor' in extras) body.next_cursor = extras.next_cursor ?? null
  if (extras.total_count !== undefined) body.total_count = extras.total_count
  reply.header('x-current-api-version', ADS_API_VERSION)
  return reply.type('application/json; charset=utf-8').send(body)
}

// ------------------------------------------------------------------ parameters

interface StringRule {
  required?: boolean
  min?: number
  max?: number
  pattern?: RegExp
}

interface NumberRule {
  required?: boolean
  min?: number
  max?: number
}

// ------------------------------------------------------------------ times

const ISO_TIME = /^(\d{4})-(\d{2})-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(Z|[+-]\d{2}:?\d{2})?)?$/

export interface TimeRules {
  /** The time of day is required (a bare date is refused). */
  requireTime?: boolean
  /** An explicit zone (`Z` or an offset) is required. */
  requireZone?: boolean
  /** Only UTC is accepted: `Z`, `+00:00`, `-00:00` or no zone. */
  utcOnly?: boolean
}

function daysInMonth(year: number, month: number): number {
  if (month === 2) return isLeapYear(year) ? 29 : 28
  return month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31
}

function isLeapYear(year: number): boolean {
  return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0
}

/** Minutes east of UTC of a zone designator, or undefined when out of range. */
function zoneOffsetMinutes(zone: string | undefined): number | undefined {
  if (zone === undefined || zone === 'Z') return 0
  const m = /^([+-])(\d{2}):?(\d{2})$/.exec(zone)
  if (!m) return undefined
  const hours = Number(m[2])
  const minutes = Number(m[3])
  if (hours > 23 || minutes > 59) return undefined
  return (m[1] === '-' ? -1 : 1) * (hours * 60 + minutes)
}

/**
 * The one ISO 8601 parser of the ads interface: `YYYY-MM-DD`, optionally
 * `THH:MM[:SS[.fraction]]` and a zone (`Z`, `±HH:MM`, `±HHMM`; none means
 * UTC). Returns epoch milliseconds, or undefined for anything malformed or
 * impossible. Unlike Date.parse it never rolls over: 2030-02-31, 24:00 or
 * 12:60 are refused, not turned into another instant.
 */
export function parseIsoTime(raw: unknown, rules: TimeRules = {}): number | undefined {
  if (typeof raw !== 'string') return undefined
  const m = ISO_TIME.exec(raw)
  if (!m) return undefined
  const [, y, mo, d, h, mi, sec, fraction, zone] = m as unknown as [string, string, string, string, string | undefined, string | undefined, string | undefined, string | undefined, string | undefined]
  if (h === undefined && rules.requireTime) return undefined
  if (zone === undefined && rules.requireZone) return undefined
  const offset = zoneOffsetMinutes(zone)
  if (offset === undefined || (rules.utcOnly && offset !== 0)) return undefined
  const year = Number(y)
  const month = Number(mo)
  const day = Number(d)
  const hour = Number(h ?? 0)
  const minute = Number(mi ?? 0)
  const second = Number(sec ?? 0)
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) return undefined
  if (hour > 23 || minute > 59 || second > 59) return undefined
  const date = new Date(0)
  // setUTCFullYear, unlike Date.UTC, keeps years 0000-0099 as written.
  date.setUTCFullYear(year, month - 1, day)
  date.setUTCHours(hour, minute, second, Number((fraction ?? '0').padEnd(3, '0').slice(0, 3)))
  return date.getTime() - offset * 60_000
}

/** A time as the ads interface returns and echoes it: UTC, `Z`, milliseconds only when not zero. */
export function formatIsoTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.000Z$/, 'Z')
}


/**
 * Typed readers over one parameter source (query string or JSON body). Each
 * reader validates and throws the ads error naming the parameter, so route
 * code reads like the spec's parameter tables. Query readers also record how
 * the parameter is echoed in `request.params` (lists as arrays, times
 * normalized), so a route's echo follows from the parameters it parses.
 */
export class Params {
  private constructor(
    /** Own properties only: a parameter name never resolves to an inherited member (constructor, __proto__...). */
    private readonly values: Map<string, unknown>,
    /** Body parameters are typed JSON; query parameters are always strings. */
    private readonly source: 'query' | 'body',
    /** The request whose `request.params` echo query readers record into. */
    private readonly request?: FastifyRequest
  ) {}

  static query(request: FastifyRequest): Params {
    const q = (request.query ?? {}) as Record<string, unknown>
    const out = new Map<string, unknown>()
    for (const [k, v] of Object.entries(q)) {
      if (k.startsWith('oauth_')) continue
      // A repeated query key is ambiguous; the last value wins like the public platform's parser.
      out.set(k, Array.isArray(v) ? v[v.length - 1] : v)
    }
    return new Params(out, 'query', request)
  }

  static body(request: FastifyRequest): Params {
    const b = request.body
    if (b === undefined || b === null) return new Params(new Map(), 'body')
    if (typeof b !== 'object' || Array.isArray(b)) throw Ads.invalid('body', 'Expected a JSON object body')
    return new Params(new Map(Object.entries(b)), 'body')
  }

  static of(values: Record<string, unknown>): Params {
    return new Params(new Map(Object.entries(values)), 'body')
  }

  has(name: string): boolean {
    const v = this.values.get(name)
    return v !== undefined && v !== null
  }

  raw(name: string): unknown {
    return this.values.get(name)
  }

  /** An explicitly empty value (PUT: unsets the field). */
  isEmpty(name: string): boolean {
    return this.values.get(name) === '' || (this.source === 'body' && this.values.get(name) === null && this.values.has(name))
  }

  names(): string[] {
    return [...this.values.keys()]
  }

  private present(name: string, required: boolean | undefined): unknown {
    const v = this.values.get(name)
    if (v === undefined || v === null || v === '') {
      if (required) throw Ads.missing(name)
      return undefined
    }
    return v
  }

  /** Query parameters only: how `name` appears in the response's `request.params`. */
  private echo(name: string, value: unknown): void {
    if (this.source === 'query' && this.request) recordAdsEcho(this.request, name, value)
  }

  string(name: string, rule: StringRule = {}): string | undefined {
    const v = this.present(name, rule.required)
    if (v === undefined) return undefined
    if (typeof v !== 'string') throw Ads.invalid(name, `Expected String, got ${JSON.stringify(v)} for ${name}`)
    const length = [...v].length
    if (rule.min !== undefined && length < rule.min) throw Ads.invalid(name, `${name} must be at least ${rule.min} characters`)
    if (rule.max !== undefined && length > rule.max) throw Ads.invalid(name, `${name} must be at most ${rule.max} characters, got ${length}`)
    if (rule.pattern && !rule.pattern.test(v)) throw Ads.invalid(name, `Invalid value "${v.slice(0, 100)}" for ${name}`)
    return v
  }

  private number(name: string, rule: NumberRule, kind: 'Integer' | 'Long'): number | undefined {
    const v = this.present(name, rule.required)
    if (v === undefined) return undefined
    const text = typeof v === 'number' ? String(v) : typeof v === 'string' ? v.trim() : undefined
    if (text === undefined || !/^-?\d+$/.test(text) || !Number.isSafeInteger(Number(text))) {
      throw Ads.invalid(name, `Expected ${kind}, got ${JSON.stringify(v)} for ${name}`)
    }
    const n = Number(text)
    if (rule.min !== undefined && n < rule.min) throw Ads.invalid(name, `${name} must be greater than or equal to ${rule.min}, got ${n}`)
    if (rule.max !== undefined && n > rule.max) throw Ads.invalid(name, `${name} must be less than or equal to ${rule.max}, got ${n}`)
    return n
  }

  int(name: string, rule: NumberRule = {}): number | undefined {
    return this.number(name, rule, 'Integer')
  }

  long(name: string, rule: NumberRule = {}): number | undefined {
    return this.number(name, rule, 'Long')
  }

  bool(name: string, rule: { required?: boolean; default?: boolean } = {}): boolean | undefined {
    const v = this.present(name, rule.required)
    if (v === undefined) return rule.default
    if (v === true || v === 'true' || v === '1') return true
    if (v === false || v === 'false' || v === '0') return false
    throw Ads.invalid(name, `Expected Boolean, got ${JSON.stringify(v)} for ${name}`)
  }

  enumOf<T extends string>(name: string, values: readonly T[], rule: { required?: boolean } = {}): T | undefined {
    const v = this.present(name, rule.required)
    if (v === undefined) return undefined
    if (typeof v !== 'string' || !(values as readonly string[]).includes(v)) {
      throw Ads.invalid(name, `Expected one of ${values.join(', ')}, got ${JSON.stringify(v)} for ${name}`)
    }
    return v as T
  }

  /** A comma list (query; echoed as an array) or an array of strings (body). */
  list(name: string, rule: { required?: boolean; max?: number; itemPattern?: RegExp; values?: readonly string[] } = {}): string[] | undefined {
    const v = this.values.get(name)
    // Recorded before validation: an error response echoes the list as an array too.
    if (typeof v === 'string') this.echo(name, v === '' ? [] : v.split(',').map((s) => s.trim()))
    const present = this.present(name, rule.required)
    if (present === undefined) return undefined
    let items: string[]
    if (Array.isArray(present) && present.every((x) => typeof x === 'string')) items = present as string[]
    else if (typeof present === 'string') items = present.split(',').map((s) => s.trim())
    else throw Ads.invalid(name, `Expected a comma-separated list for ${name}`)
    if (items.every((i) => i === '')) {
      if (rule.required) throw Ads.missing(name)
      throw Ads.invalid(name, `Empty value for ${name}`)
    }
    if (items.some((i) => i === '')) throw Ads.invalid(name, `Empty item in ${name}`)
    if (rule.max !== undefined && items.length > rule.max) throw Ads.invalid(name, `${name} accepts at most ${rule.max} items, got ${items.length}`)
    for (const item of items) {
      if (rule.itemPattern && !rule.itemPattern.test(item)) throw Ads.invalid(name, `Invalid value "${item.slice(0, 100)}" in ${name}`)
      if (rule.values && !rule.values.includes(item)) throw Ads.invalid(name, `Expected items of ${rule.values.join(', ')}, got "${item.slice(0, 100)}" in ${name}`)
    }
    return items
  }

  /**
   * An ISO 8601 timestamp (parseIsoTime: impossible dates refused), returned
   * normalized to UTC (`2026-01-02T03:04:05Z`) and echoed in that form.
   */
  time(name: string, rule: { required?: boolean } = {}): string | undefined {
    const v = this.present(name, rule.required)
    if (v === undefined) return undefined
    const ms = parseIsoTime(v)
    if (ms === undefined) throw Ads.invalid(name, `Expected time in ISO 8601 format, got ${JSON.stringify(v)} for ${name}`)
    const normalized = formatIsoTime(ms)
    this.echo(name, normalized)
    return normalized
  }
}

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

/** A JSON body is required (`Content-Type: application/json`) for the batch endpoints. */
export function requireJsonBody(request: FastifyRequest): unknown {
  const type = request.headers['content-type'] ?? ''
  if (!type.toLowerCase().startsWith('application/json')) {
    throw new AdsError(400, { code: 'INVALID_PARAMETER', message: 'Content-Type must be application/json', parameter: 'content-type' })
  }
  if (request.body === undefined) throw Ads.missing('body')
  return request.body
}
