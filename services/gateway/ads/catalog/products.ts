import { parseIsoTime } from '../conventions'

/**
 * The product fields of docs/contract.md "Catalog management": every field,
 * its type and its rule. `validateProduct` turns one item of a batch PUT into a
 * normalized record or a list of item errors (the batch answers per item,
 * never with a request-level 400 for a bad product). Image rules that need
 * the bytes (dimensions, size) are checked separately by images.ts.
 */

export const AVAILABILITY = ['in stock', 'available for order', 'preorder', 'out of stock', 'discontinued'] as const
export const CONDITION = ['new', 'used', 'refurbished'] as const
export const GENDER = ['female', 'male', 'unisex'] as const
export const AGE_GROUP = ['adult', 'all ages', 'teen', 'kids', 'toddler', 'infant', 'newborn'] as const

export const MAX_TITLE = 150
export const MAX_DESCRIPTION = 5000
export const MAX_ADDITIONAL_IMAGES = 10
/** Lengths the contract leaves open, kept at the public merchant-feed conventions. */
export const MAX_ID = 100
export const MAX_SHORT_TEXT = 100
export const MAX_LONG_TEXT = 750
export const MAX_URL = 2000

/** Every field of a stored (and fetched) product, in the order reads return them. */
export const PRODUCT_FIELDS = [
  'id',
  'product_key',
  'title',
  'description',
  'availability',
  'condition',
  'price',
  'link',
  'image_link',
  'brand',
  'gtin',
  'mpn',
  'mobile_link',
  'additional_image_link',
  'ext_product_category',
  'product_type',
  'inventory',
  'sale_price',
  'sale_price_effective_date',
  'item_group_id',
  'item_group_key',
  'gender',
  'color',
  'size',
  'age_group',
  'custom_label_0',
  'custom_label_1',
  'custom_label_2',
  'custom_label_3',
  'custom_label_4'
] as const

export type ProductField = (typeof PRODUCT_FIELDS)[number]

/** A product as stored and returned: every field present, null when unset. */
export type Product = { [K in ProductField]: K extends 'inventory' ? number | null : string | null } & { id: string; product_key: string }

/** What a valid input item becomes before the service assigns product_key / item_group_key. */
export type ProductInput = Omit<Product, 'product_key' | 'item_group_key'>

export interface ItemMessage {
  code: string
  message: string
  parameter?: string
}

export type ValidationResult =
  | { ok: true; product: ProductInput; warnings: ItemMessage[]; sentProductKey: string | null; sentItemGroupKey: string | null }
  | { ok: false; errors: ItemMessage[]; warnings: ItemMessage[] }

const REQUIRED = ['id', 'title', 'description', 'availability', 'condition', 'price', 'link', 'image_link'] as const
const OPTIONAL_TEXT = ['ext_product_category', 'item_group_id', 'size', 'custom_label_0', 'custom_label_1', 'custom_label_2', 'custom_label_3', 'custom_label_4'] as const
/** Accepted input spellings that map onto a field of the table (the public platform's older name). */
const ALIASES: Record<string, ProductField> = { google_product_category: 'ext_product_category' }
const KNOWN_INPUT = new Set<string>([...PRODUCT_FIELDS, ...Object.keys(ALIASES)])

const ISO_4217 = new Set(Intl.supportedValuesOf('currency'))

const invalid = (parameter: string, message: string): ItemMessage => ({ code: 'INVALID_PARAMETER', message, parameter })
const missing = (parameter: string): ItemMessage => ({ code: 'MISSING_PARAMETER', message: `"${parameter}" is missing`, parameter })

export interface Money {
  /** Amount in the currency's units, as an exact decimal string. */
  amount: string
  value: number
  currency: string
}

/** `<number> <ISO 4217>` with `.` as the decimal point and exactly one space. */
export function parsePrice(raw: string): Money | undefined {
  const m = /^(\d{1,15}(?:\.\d{1,4})?) ([A-Z]{3})$/.exec(raw)
  if (!m) return undefined
  const [, amount, currency] = m as unknown as [string, string, string]
  if (!ISO_4217.has(currency)) return undefined
  return { amount, value: Number(amount), currency }
}

export function priceError(parameter: string, raw: string): ItemMessage | undefined {
  if (/^\d{1,15}(?:\.\d{1,4})? [A-Z]{3}$/.test(raw) && !parsePrice(raw)) {
    return invalid(parameter, `"${raw.slice(-3)}" is not an ISO 4217 currency code for ${parameter}`)
  }
  if (!parsePrice(raw)) return invalid(parameter, `Expected "<number> <ISO 4217 currency code>" such as "20.00 USD", got "${raw}" for ${parameter}`)
  return undefined
}

function httpsUrlError(parameter: string, raw: string): ItemMessage | undefined {
  if (raw.length > MAX_URL) return invalid(parameter, `${parameter} must be at most ${MAX_URL} characters`)
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    return invalid(parameter, `Expected a URL, got "${raw}" for ${parameter}`)
  }
  if (url.protocol !== 'https:') return invalid(parameter, `${parameter} must use https`)
  return undefined
}

const IMAGE_EXTENSIONS = /\.(jpe?g|gif|webp|png)$/i

/** The URL part of the image rule; bytes are inspected later (images.ts). */
export function imageUrlError(parameter: string, raw: string): ItemMessage | undefined {
  if (raw.length > MAX_URL) return invalid(parameter, `${parameter} must be at most ${MAX_URL} characters`)
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    return invalid(parameter, `Expected an image URL, got "${raw}" for ${parameter}`)
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return invalid(parameter, `${parameter} must be an http(s) URL`)
  // A path without an extension is allowed (the bytes decide); a foreign extension is refused up front.
  const last = url.pathname.split('/').pop() ?? ''
  if (last.includes('.') && !IMAGE_EXTENSIONS.test(last)) {
    return invalid(parameter, `${parameter} must be a JPG, GIF, WEBP or PNG image, got "${last}"`)
  }
  return undefined
}

/** GTIN-8/12/13/14 (UPC, EAN, JAN) with its mod-10 check digit, or ISBN-10 with its mod-11 check. */
export function isValidGtin(raw: string): boolean {
  const s = raw.replace(/[-\s]/g, '')
  if (/^\d{9}[\dX]$/.test(s)) {
    let sum = 0
    for (let i = 0; i < 10; i++) sum += (s[i] === 'X' ? 10 : Number(s[i])) * (10 - i)
    if (sum % 11 === 0) return true
  }
  if (!/^(\d{8}|\d{12}|\d{13}|\d{14})$/.test(s)) return false
  const digits = [...s].map(Number)
  const check = digits.pop() as number
  let sum = 0
  for (let i = digits.length - 1, w = 3; i >= 0; i--, w = w === 3 ? 1 : 3) sum += (digits[i] as number) * w
  return (10 - (sum % 10)) % 10 === check
}

/** Looks like markup: a tag, a comment or a character entity. */
export function containsHtml(text: string): boolean {
  return /<\s*\/?\s*[a-zA-Z!][^>]*>/.test(text) || /&(#\d+|#x[0-9a-fA-F]+|[a-zA-Z]{2,8});/.test(text)
}

/** One end of sale_price_effective_date: date, time of day and zone all required; impossible dates refused. */
function parseDateTime(raw: string): number | undefined {
  return parseIsoTime(raw, { requireTime: true, requireZone: true })
}

export function effectiveDateError(raw: string): ItemMessage | undefined {
  const parts = raw.split('/')
  const format = 'Expected an ISO 8601 range "YYYY-MM-DDTHH:MM+HH:MM/YYYY-MM-DDTHH:MM+HH:MM"'
  if (parts.length !== 2) return invalid('sale_price_effective_date', `${format}, got "${raw}"`)
  const [from, to] = parts.map(parseDateTime)
  if (from === undefined || to === undefined) return invalid('sale_price_effective_date', `${format}, got "${raw}"`)
  if (to <= from) return invalid('sale_price_effective_date', 'The end of sale_price_effective_date must be later than its start')
  return undefined
}

function productTypeError(raw: string): ItemMessage | undefined {
  const segments = raw.split(' > ')
  for (const s of segments) {
    if (s.trim() === '' || s !== s.trim()) return invalid('product_type', 'product_type sub-categories must be non-empty and separated by " > "')
    if (s.includes('>')) return invalid('product_type', 'product_type sub-categories must be separated by " > " (a space on each side)')
  }
  if (raw.length > MAX_LONG_TEXT) return invalid('product_type', `product_type must be at most ${MAX_LONG_TEXT} characters`)
  return undefined
}

function colorError(raw: string): ItemMessage | undefined {
  if (/^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$/.test(raw) && /\d|#/.test(raw)) return invalid('color', 'color must be a color name, not a hex code')
  if (raw.length > MAX_SHORT_TEXT) return invalid('color', `color must be at most ${MAX_SHORT_TEXT} characters`)
  return undefined
}

/** Reads a string field: undefined/null/"" are unset; other types are an error. */
function readString(raw: Record<string, unknown>, name: string, errors: ItemMessage[]): string | null {
  const v = raw[name]
  if (v === undefined || v === null) return null
  if (typeof v === 'number' && Number.isFinite(v)) return String(v)
  if (typeof v !== 'string') {
    errors.push(invalid(name, `Expected a string for ${name}`))
    return null
  }
  const trimmed = v.trim()
  return trimmed === '' ? null : trimmed
}

function readInventory(raw: Record<string, unknown>, errors: ItemMessage[]): number | null {
  const v = raw.inventory
  if (v === undefined || v === null || v === '') return null
  const n = typeof v === 'string' && /^\s*-?\d+\s*$/.test(v) ? Number(v) : v
  if (typeof n !== 'number' || !Number.isSafeInteger(n)) {
    errors.push(invalid('inventory', `Expected Int, got ${JSON.stringify(v)} for inventory`))
    return null
  }
  if (n < 0) {
    errors.push(invalid('inventory', 'inventory must not be negative'))
    return null
  }
  return n
}

function enumOf<T extends string>(name: string, value: string | null, values: readonly T[], errors: ItemMessage[]): T | null {
  if (value === null) return null
  if (!(values as readonly string[]).includes(value)) {
    errors.push(invalid(name, `Expected one of ${values.map((v) => `"${v}"`).join(', ')}, got "${value}" for ${name}`))
    return null
  }
  return value as T
}

function maxLength(name: string, value: string | null, max: number, errors: ItemMessage[]): void {
  if (value !== null && [...value].length > max) errors.push(invalid(name, `${name} must be at most ${max} characters, got ${[...value].length}`))
}

/** Validates one item of a batch PUT against every rule of the Product table. */
export function validateProduct(item: unknown): ValidationResult {
  const errors: ItemMessage[] = []
  const warnings: ItemMessage[] = []
  if (item === null || typeof item !== 'object' || Array.isArray(item)) {
    return { ok: false, errors: [invalid('products', 'Each product must be a JSON object')], warnings }
  }
  const raw = { ...(item as Record<string, unknown>) }
  for (const [alias, field] of Object.entries(ALIASES)) {
    if (raw[alias] !== undefined && raw[field] === undefined) raw[field] = raw[alias]
  }
  for (const key of Object.keys(raw)) {
    if (!KNOWN_INPUT.has(key)) warnings.push({ code: 'UNKNOWN_ATTRIBUTE', message: `Unknown attribute "${key}" was ignored`, parameter: key })
  }

  const s = (name: string): string | null => readString(raw, name, errors)
  const p = {} as Record<ProductField, string | number | null>

  for (const name of REQUIRED) {
    const value = s(name)
    if (value === null && !errors.some((e) => e.parameter === name)) errors.push(missing(name))
    p[name] = value
  }
  const id = p.id as string | null
  if (id !== null && id.length > MAX_ID) errors.push(invalid('id', `id must be at most ${MAX_ID} characters`))
  maxLength('title', p.title as string | null, MAX_TITLE, errors)
  const description = p.description as string | null
  maxLength('description', description, MAX_DESCRIPTION, errors)
  if (description !== null && containsHtml(description)) errors.push(invalid('description', 'description must be plain text without HTML'))
  p.availability = enumOf('availability', p.availability as string | null, AVAILABILITY, errors)
  p.condition = enumOf('condition', p.condition as string | null, CONDITION, errors)
  const price = p.price as string | null
  if (price !== null) {
    const e = priceError('price', price)
    if (e) errors.push(e)
  }
  const link = p.link as string | null
  if (link !== null) {
    const e = httpsUrlError('link', link)
    if (e) errors.push(e)
  }
  const imageLink = p.image_link as string | null
  if (imageLink !== null) {
    const e = imageUrlError('image_link', imageLink)
    if (e) errors.push(e)
  }

  p.brand = s('brand')
  p.gtin = s('gtin')
  p.mpn = s('mpn')
  maxLength('brand', p.brand, MAX_SHORT_TEXT, errors)
  maxLength('mpn', p.mpn, MAX_SHORT_TEXT, errors)
  if (p.gtin !== null && !isValidGtin(p.gtin)) errors.push(invalid('gtin', `"${p.gtin}" is not a valid UPC, EAN, JAN or ISBN number (length or check digit)`))
  if (p.brand === null && p.gtin === null && p.mpn === null && !errors.some((e) => ['brand', 'gtin', 'mpn'].includes(e.parameter ?? ''))) {
    errors.push({ code: 'MISSING_PARAMETER', message: 'One of brand, gtin or mpn is required: brand is required when both gtin and mpn are absent', parameter: 'brand' })
  }

  p.mobile_link = s('mobile_link')
  if (p.mobile_link !== null) {
    const e = httpsUrlError('mobile_link', p.mobile_link)
    if (e) errors.push(e)
  }

  p.additional_image_link = s('additional_image_link')
  if (p.additional_image_link !== null) {
    const urls = additionalImages(p.additional_image_link)
    if (urls.length > MAX_ADDITIONAL_IMAGES) {
      errors.push(invalid('additional_image_link', `At most ${MAX_ADDITIONAL_IMAGES} additional images are allowed, got ${urls.length}`))
    } else {
      for (const u of urls) {
        const e = imageUrlError('additional_image_link', u)
        if (e) {
          errors.push(e)
          break
        }
      }
      p.additional_image_link = urls.join(',')
    }
  }

  for (const name of OPTIONAL_TEXT) {
    p[name] = s(name)
    maxLength(name, p[name] as string | null, name === 'ext_product_category' ? MAX_LONG_TEXT : MAX_SHORT_TEXT, errors)
  }
  p.product_type = s('product_type')
  if (p.product_type !== null) {
    const e = productTypeError(p.product_type)
    if (e) errors.push(e)
  }

  p.inventory = readInventory(raw, errors)
  if (p.availability === 'in stock' && p.inventory !== null && p.inventory < 1) {
    errors.push(invalid('inventory', 'inventory must be at least 1 when availability is "in stock"'))
  }

  p.sale_price = s('sale_price')
  if (p.sale_price !== null) {
    const e = priceError('sale_price', p.sale_price)
    if (e) errors.push(e)
    else if (price !== null) {
      const sale = parsePrice(p.sale_price) as Money
      const regular = parsePrice(price)
      if (regular && regular.currency !== sale.currency) errors.push(invalid('sale_price', `sale_price must use the currency of price (${regular.currency})`))
      else if (regular && sale.value >= regular.value) errors.push(invalid('sale_price', 'sale_price must be lower than price'))
    }
  }
  p.sale_price_effective_date = s('sale_price_effective_date')
  if (p.sale_price_effective_date !== null) {
    const e = effectiveDateError(p.sale_price_effective_date)
    if (e) errors.push(e)
  }

  p.gender = enumOf('gender', s('gender'), GENDER, errors)
  p.age_group = enumOf('age_group', s('age_group'), AGE_GROUP, errors)
  p.color = s('color')
  if (p.color !== null) {
    const e = colorError(p.color)
    if (e) errors.push(e)
  }

  const sentProductKey = s('product_key')
  const sentItemGroupKey = s('item_group_key')

  if (errors.length > 0) return { ok: false, errors, warnings }
  const product = {} as Record<string, unknown>
  for (const f of PRODUCT_FIELDS) if (f !== 'product_key' && f !== 'item_group_key') product[f] = p[f] ?? null
  return { ok: true, product: product as ProductInput, warnings, sentProductKey, sentItemGroupKey }
}

export function additionalImages(raw: string): string[] {
  return raw.split(',').map((u) => u.trim()).filter((u) => u !== '')
}

/** True when two products have the same value in every field. */
export function sameProduct(a: Product, b: Product): boolean {
  return PRODUCT_FIELDS.every((f) => a[f] === b[f])
}
