import type { FastifyRequest } from 'fastify'
import { Ads } from '../errors'
import { recordAdsEcho } from '../server'
import { formatIsoTime, parseIsoTime } from './times'

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

/**
 * Typed readers over one parameter source (query string or JSON body). Each
 * reader validates and throws the ads error naming the parameter, so route
 * code reads like the platform's parameter tables. Query readers also record how
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
    // Any case: the Python SDK sends str(True), "True"; 1 and 0 too, as the platform takes them.
    const text = typeof v === 'string' ? v.trim().toLowerCase() : v
    if (text === true || text === 'true' || text === '1') return true
    if (text === false || text === 'false' || text === '0') return false
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
