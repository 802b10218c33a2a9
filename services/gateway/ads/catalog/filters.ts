import { parsePrice, priceError, type Product } from './products'

/**
 * Product set filters (docs/contract.md "Catalog management"): which attribute, which
 * operator, which value, and how a FILTERED set's membership is computed
 * from them. Filters combine with AND. Operators by attribute kind:
 *
 *  - money (`price`, `sale_price`): GREATER_THAN, LESS_THAN, EQUAL_TO with a
 *    `<number> <currency>` value; comparing different currencies is not
 *    possible, so an evaluation meeting one fails rather than guessing;
 *  - count (`inventory`): GREATER_THAN, LESS_THAN, EQUAL_TO with an integer;
 *  - text (`product_type`, `ext_product_category`, `custom_label_0..4`):
 *    EQUAL_TO (exact), MATCH (case-insensitive; on the two taxonomy
 *    attributes a category also matches its sub-categories), CONTAINS and
 *    NOT_CONTAINS (case-insensitive substring; an unset value contains nothing).
 */

export const FILTER_ATTRIBUTES = [
  'price',
  'product_type',
  'ext_product_category',
  'sale_price',
  'inventory',
  'custom_label_0',
  'custom_label_1',
  'custom_label_2',
  'custom_label_3',
  'custom_label_4'
] as const
export const FILTER_OPERATORS = ['GREATER_THAN', 'EQUAL_TO', 'LESS_THAN', 'MATCH', 'NOT_CONTAINS', 'CONTAINS'] as const
export const MAX_FILTERS = 20

export type FilterAttribute = (typeof FILTER_ATTRIBUTES)[number]
export type FilterOperator = (typeof FILTER_OPERATORS)[number]

export interface Filter {
  attribute: FilterAttribute
  operator: FilterOperator
  value: string
}

type Kind = 'money' | 'count' | 'text'

function kindOf(attribute: FilterAttribute): Kind {
  if (attribute === 'price' || attribute === 'sale_price') return 'money'
  if (attribute === 'inventory') return 'count'
  return 'text'
}

const OPERATORS_BY_KIND: Record<Kind, readonly FilterOperator[]> = {
  money: ['GREATER_THAN', 'LESS_THAN', 'EQUAL_TO'],
  count: ['GREATER_THAN', 'LESS_THAN', 'EQUAL_TO'],
  text: ['EQUAL_TO', 'MATCH', 'CONTAINS', 'NOT_CONTAINS']
}

/** A Map: a user-sent attribute such as "constructor" must not resolve to an inherited member. */
const ALIASES = new Map<string, FilterAttribute>([['google_product_category', 'ext_product_category']])

export interface FilterError {
  parameter: string
  message: string
  missing?: boolean
}

/** Validates the `filters` body property of a FILTERED product set. */
export function parseFilters(raw: unknown): { ok: true; filters: Filter[] } | { ok: false; error: FilterError } {
  if (raw === undefined || raw === null) return { ok: false, error: { parameter: 'filters', message: '"filters" is missing', missing: true } }
  if (!Array.isArray(raw)) return { ok: false, error: { parameter: 'filters', message: 'filters must be an array of {attribute, operator, value} objects' } }
  if (raw.length === 0) return { ok: false, error: { parameter: 'filters', message: 'A FILTERED product set needs at least one filter' } }
  if (raw.length > MAX_FILTERS) return { ok: false, error: { parameter: 'filters', message: `At most ${MAX_FILTERS} filters are allowed, got ${raw.length}` } }
  const filters: Filter[] = []
  for (const [i, f] of raw.entries()) {
    const at = `filters[${i}]`
    if (f === null || typeof f !== 'object' || Array.isArray(f)) return { ok: false, error: { parameter: at, message: `${at} must be an object with attribute, operator and value` } }
    const o = f as Record<string, unknown>
    for (const field of ['attribute', 'operator', 'value']) {
      if (o[field] === undefined || o[field] === null || o[field] === '') return { ok: false, error: { parameter: `${at}.${field}`, message: `"${at}.${field}" is missing`, missing: true } }
    }
    const attrName = typeof o.attribute === 'string' ? (ALIASES.get(o.attribute) ?? o.attribute) : ''
    if (!(FILTER_ATTRIBUTES as readonly string[]).includes(attrName)) {
      return { ok: false, error: { parameter: `${at}.attribute`, message: `Expected one of ${FILTER_ATTRIBUTES.join(', ')}, got ${JSON.stringify(o.attribute)} for ${at}.attribute` } }
    }
    const attribute = attrName as FilterAttribute
    if (typeof o.operator !== 'string' || !(FILTER_OPERATORS as readonly string[]).includes(o.operator)) {
      return { ok: false, error: { parameter: `${at}.operator`, message: `Expected one of ${FILTER_OPERATORS.join(', ')}, got ${JSON.stringify(o.operator)} for ${at}.operator` } }
    }
    const operator = o.operator as FilterOperator
    const kind = kindOf(attribute)
    if (!OPERATORS_BY_KIND[kind].includes(operator)) {
      return { ok: false, error: { parameter: `${at}.operator`, message: `${operator} cannot be used with ${attribute}; use one of ${OPERATORS_BY_KIND[kind].join(', ')}` } }
    }
    const value = typeof o.value === 'number' && Number.isFinite(o.value) ? String(o.value) : o.value
    if (typeof value !== 'string') return { ok: false, error: { parameter: `${at}.value`, message: `${at}.value must be a string` } }
    if (kind === 'money') {
      const e = priceError(`${at}.value`, value.trim())
      if (e) return { ok: false, error: { parameter: `${at}.value`, message: e.message } }
    }
    if (kind === 'count' && !/^\d{1,15}$/.test(value.trim())) {
      return { ok: false, error: { parameter: `${at}.value`, message: `Expected a non-negative integer, got "${value}" for ${at}.value` } }
    }
    if (value.length > 750) return { ok: false, error: { parameter: `${at}.value`, message: `${at}.value must be at most 750 characters` } }
    filters.push({ attribute, operator, value: value.trim() })
  }
  return { ok: true, filters }
}

export type Evaluation = { ok: true; productIds: string[] } | { ok: false; reason: string }

class Unevaluable extends Error {}

function compare(operator: FilterOperator, a: number, b: number): boolean {
  if (operator === 'GREATER_THAN') return a > b
  if (operator === 'LESS_THAN') return a < b
  return a === b
}

function isUnder(category: string, wanted: string): boolean {
  const c = category.toLowerCase()
  const w = wanted.toLowerCase()
  return c === w || c.startsWith(`${w} > `)
}

function matches(product: Product, f: Filter): boolean {
  const kind = kindOf(f.attribute)
  if (kind === 'money') {
    const raw = product[f.attribute]
    if (raw === null) return false
    const have = parsePrice(raw as string)
    const want = parsePrice(f.value)
    if (!have || !want) return false
    if (have.currency !== want.currency) {
      throw new Unevaluable(`product "${product.id}" has ${f.attribute} in ${have.currency}; the filter compares ${want.currency}`)
    }
    return compare(f.operator, have.value, want.value)
  }
  if (kind === 'count') {
    const n = product.inventory
    return n !== null && compare(f.operator, n, Number(f.value))
  }
  const text = product[f.attribute] as string | null
  switch (f.operator) {
    case 'EQUAL_TO':
      return text === f.value
    case 'MATCH':
      if (text === null) return false
      return f.attribute === 'product_type' || f.attribute === 'ext_product_category' ? isUnder(text, f.value) : text.toLowerCase() === f.value.toLowerCase()
    case 'CONTAINS':
      return text !== null && text.toLowerCase().includes(f.value.toLowerCase())
    case 'NOT_CONTAINS':
      return text === null || !text.toLowerCase().includes(f.value.toLowerCase())
    default:
      return false
  }
}

/** The item ids of every product meeting all filters, in catalog order; fails when a filter cannot be decided. */
export function evaluateFilters(filters: Filter[], products: Product[]): Evaluation {
  try {
    const ids = products.filter((p) => filters.every((f) => matches(p, f))).map((p) => p.id)
    return { ok: true, productIds: ids }
  } catch (err) {
    if (err instanceof Unevaluable) return { ok: false, reason: err.message }
    throw err
  }
}
