import type { FastifyReply, FastifyRequest } from 'fastify'
import type { AuthRequirement } from '../../common/auth/authenticate'
import { Ads, AdsError } from '../../common/errors'
import { adsRequestParams } from '../../common/http'

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

const ISO_8601 = /^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})?)?$/

/**
 * Typed readers over one parameter source (query string or JSON body). Each
 * reader validates and throws the ads error naming the parameter, so route
 * code reads like the spec's parameter tables.
 */
export class Params {
  private constructor(
    private readonly values: Record<string, unknown>,
    /** Body parameters are typed JSON; query parameters are always strings. */
    private readonly source: 'query' | 'body'
  ) {}

  static query(request: FastifyRequest): Params {
    const q = (request.query ?? {}) as Record<string, unknown>
    const out: Record<string, unknown> = {}
    for (const [k, v] of Object.entries(q)) {
      if (k.startsWith('oauth_')) continue
      // A repeated query key is ambiguous; the last value wins like the public platform's parser.
      out[k] = Array.isArray(v) ? v[v.length - 1] : v
    }
    return new Params(out, 'query')
  }

  static body(request: FastifyRequest): Params {
    const b = request.body
    if (b === undefined || b === null) return new Params({}, 'body')
    if (typeof b !== 'object' || Array.isArray(b)) throw Ads.invalid('body', 'Expected a JSON object body')
    return new Params(b as Record<string, unknown>, 'body')
  }

  static of(values: Record<string, unknown>): Params {
    return new Params(values, 'body')
  }

  has(name: string): boolean {
    const v = this.values[name]
    return v !== undefined && v !== null
  }

  raw(name: string): unknown {
    return this.values[name]
  }

  /** An explicitly empty value (PUT: unsets the field). */
  isEmpty(name: string): boolean {
    return this.values[name] === '' || (this.source === 'body' && this.values[name] === null && name in this.values)
  }

  names(): string[] {
    return Object.keys(this.values)
  }

  private present(name: string, required: boolean | undefined): unknown {
    const v = this.values[name]
    if (v === undefined || v === null || v === '') {
      if (required) throw Ads.missing(name)
      return undefined
    }
    return v
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

  /** A comma list (query) or an array of strings (body). */
  list(name: string, rule: { required?: boolean; max?: number; itemPattern?: RegExp; values?: readonly string[] } = {}): string[] | undefined {
    const v = this.present(name, rule.required)
    if (v === undefined) return undefined
    let items: string[]
    if (Array.isArray(v) && v.every((x) => typeof x === 'string')) items = v as string[]
    else if (typeof v === 'string') items = v.split(',').map((s) => s.trim())
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

  /** An ISO 8601 timestamp, returned normalized to UTC (`2026-01-02T03:04:05Z`). */
  time(name: string, rule: { required?: boolean } = {}): string | undefined {
    const v = this.present(name, rule.required)
    if (v === undefined) return undefined
    if (typeof v !== 'string' || !ISO_8601.test(v) || Number.isNaN(Date.parse(v))) {
      throw Ads.invalid(name, `Expected time in ISO 8601 format, got ${JSON.stringify(v)} for ${name}`)
    }
    return new Date(Date.parse(v)).toISOString().replace(/\.000Z$/, 'Z')
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

interface CursorState {
  /** Offset of the next item. */
  o: number
  /** The sort the cursor was made for: a cursor is only valid with the same sort. */
  s: string
}

function sortSignature(opts: ListOptions): string {
  return opts.sortBy ? `${opts.sortBy.field}-${opts.sortBy.direction}` : 'default'
}

export function encodeCursor(offset: number, opts: ListOptions): string {
  return Buffer.from(JSON.stringify({ o: offset, s: sortSignature(opts) } satisfies CursorState)).toString('base64url')
}

export function decodeCursor(cursor: string, opts: ListOptions): number {
  try {
    const state = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as CursorState
    if (typeof state.o === 'number' && Number.isInteger(state.o) && state.o >= 0 && state.s === sortSignature(opts)) return state.o
  } catch {
    // fall through to the error below
  }
  throw Ads.invalid('cursor', `Invalid cursor "${cursor.slice(0, 60)}"`)
}

function compareValues(a: unknown, b: unknown): number {
  if (a === b) return 0
  if (a === null || a === undefined) return -1
  if (b === null || b === undefined) return 1
  if (typeof a === 'number' && typeof b === 'number') return a - b
  return String(a).localeCompare(String(b))
}

export interface Page<T> {
  data: T[]
  next_cursor: string | null
  total_count?: number
}

/**
 * One page of `items`: deleted ones dropped unless with_deleted, sorted by
 * sort_by (default: creation order), cut at the cursor's offset.
 */
export function paginate<T extends object>(items: T[], opts: ListOptions): Page<T> {
  let list = opts.withDeleted ? [...items] : items.filter((i) => (i as { deleted?: boolean }).deleted !== true)
  if (opts.sortBy) {
    const { field, direction } = opts.sortBy
    const sign = direction === 'asc' ? 1 : -1
    list = list.sort((a, b) => sign * compareValues((a as Record<string, unknown>)[field], (b as Record<string, unknown>)[field]) || compareValues((a as { id?: string }).id, (b as { id?: string }).id))
  }
  const offset = opts.cursor === undefined ? 0 : decodeCursor(opts.cursor, opts)
  const data = list.slice(offset, offset + opts.count)
  const next = offset + opts.count < list.length ? encodeCursor(offset + opts.count, opts) : null
  const page: Page<T> = { data, next_cursor: next }
  if (opts.withTotalCount) page.total_count = list.length
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
