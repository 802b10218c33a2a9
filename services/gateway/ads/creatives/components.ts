import { Ads, AdsError } from '../../../common/errors'
import type { MediaType } from '../../media/rules'
import { COUNTRY_CODES } from './countries'
import { charLength, isHttpUrl } from './params'

/**
 * Card components (docs/contract.md "Creatives"): what each component type requires,
 * which destination goes with which description component, the shape of a
 * card (one media component, then DETAILS or BUTTON) and of a
 * multi-destination carousel (slides), and the card_type that follows from
 * the media and the destination. Errors name the exact JSON path, e.g.
 * `components[1].destination.country_code`.
 */

export const CARD_TYPES = [
  'IMAGE_APP', 'IMAGE_CAROUSEL_APP', 'IMAGE_CAROUSEL_WEBSITE', 'IMAGE_MULTI_DEST_CAROUSEL_WEBSITE', 'IMAGE_WEBSITE',
  'MIXED_MEDIA_MULTI_DEST_CAROUSEL_WEBSITE', 'MIXED_MEDIA_SINGLE_DEST_CAROUSEL_APP', 'MIXED_MEDIA_SINGLE_DEST_CAROUSEL_WEBSITE',
  'VIDEO_APP', 'VIDEO_CAROUSEL_APP', 'VIDEO_CAROUSEL_WEBSITE', 'VIDEO_MULTI_DEST_CAROUSEL_WEBSITE', 'VIDEO_WEBSITE'
] as const
export type CardType = (typeof CARD_TYPES)[number]

export const BUTTON_LABELS = ['BOOK', 'CONNECT', 'INSTALL', 'OPEN', 'ORDER', 'PLAY', 'SHOP'] as const

export interface WebsiteDestination {
  type: 'WEBSITE'
  url: string
}

export interface AppDestination {
  type: 'APP'
  country_code: string
  androidstore_app_id?: string
  ios_app_store_identifier?: string
  androidstore_deep_link?: string
  ios_deep_link?: string
}

export type Component =
  | { type: 'MEDIA'; media_key: string }
  | { type: 'SWIPEABLE_MEDIA'; media_keys: string[] }
  | { type: 'DETAILS'; title: string; destination: WebsiteDestination }
  | { type: 'BUTTON'; label: { type: 'ENUM'; value: (typeof BUTTON_LABELS)[number] }; destination: AppDestination }

/** Looks a media key up in the account's library; throws the parameter error naming `path` when absent. */
export type MediaResolver = (mediaKey: string, path: string) => Promise<{ media_type: MediaType }>

const SWIPEABLE_MIN = 2
const SWIPEABLE_MAX = 6
const SLIDES_MIN = 2
const SLIDES_MAX = 6
const DETAILS_TITLE_MAX = 70

const FIELDS: Record<Component['type'], string[]> = {
  MEDIA: ['type', 'media_key'],
  SWIPEABLE_MEDIA: ['type', 'media_keys'],
  DETAILS: ['type', 'title', 'destination'],
  BUTTON: ['type', 'label', 'destination']
}

/**
 * The public documentation spells the Android fields `googleplay_*`; both
 * spellings are accepted. Maps (not object literals) so that client keys such
 * as `constructor` or `toString` never reach Object's own members.
 */
const APP_ALIASES: ReadonlyMap<string, string> = new Map([
  ['googleplay_app_id', 'androidstore_app_id'],
  ['googleplay_deep_link', 'androidstore_deep_link']
])
const APP_FIELDS = ['type', 'country_code', 'androidstore_app_id', 'ios_app_store_identifier', 'androidstore_deep_link', 'ios_deep_link']

const ANDROID_PACKAGE = /^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)+$/
const IOS_APP_ID = /^[0-9]{1,15}$/
const DEEP_LINK = /^[A-Za-z][A-Za-z0-9+.-]*:\S+$/

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

function requireString(obj: Record<string, unknown>, field: string, path: string): string {
  const v = obj[field]
  if (v === undefined || v === null || v === '') throw Ads.missing(`${path}.${field}`)
  if (typeof v !== 'string') throw Ads.invalid(`${path}.${field}`, `Expected String, got ${JSON.stringify(v)} for ${path}.${field}`)
  return v
}

function optionalString(obj: Record<string, unknown>, field: string, path: string): string | undefined {
  const v = obj[field]
  if (v === undefined || v === null) return undefined
  if (typeof v !== 'string' || v === '') throw Ads.invalid(`${path}.${field}`, `Expected a non-empty String for ${path}.${field}`)
  return v
}

function rejectUnknown(obj: Record<string, unknown>, allowed: string[], path: string, hint: (field: string) => string | undefined = () => undefined): void {
  for (const field of Object.keys(obj)) {
    if (!allowed.includes(field)) throw Ads.invalid(`${path}.${field}`, hint(field) ?? `Unexpected field ${path}.${field}`)
  }
}

function websiteDestination(raw: Record<string, unknown>, path: string): WebsiteDestination {
  rejectUnknown(raw, ['type', 'url'], path)
  const url = requireString(raw, 'url', path)
  if (!isHttpUrl(url)) throw Ads.invalid(`${path}.url`, `Invalid URL "${url.slice(0, 100)}" for ${path}.url: expected an absolute http(s) URL`)
  return { type: 'WEBSITE', url }
}

function appDestination(raw: Record<string, unknown>, path: string): AppDestination {
  const obj: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(raw)) {
    const name = APP_ALIASES.get(k) ?? k
    if (!APP_FIELDS.includes(name)) throw Ads.invalid(`${path}.${k}`, `Unexpected field ${path}.${k}`)
    if (Object.hasOwn(obj, name)) throw Ads.invalid(`${path}.${k}`, `${path}.${k} is given twice (as ${name} and its alias)`)
    obj[name] = v
  }
  const country = requireString(obj, 'country_code', path)
  if (!COUNTRY_CODES.has(country)) throw Ads.invalid(`${path}.country_code`, `Invalid country_code "${country.slice(0, 10)}": expected an ISO 3166-1 alpha-2 code such as US`)
  const dest: AppDestination = { type: 'APP', country_code: country }
  const android = optionalString(obj, 'androidstore_app_id', path)
  const ios = optionalString(obj, 'ios_app_store_identifier', path)
  if (android === undefined && ios === undefined) {
    throw new AdsError(400, { code: 'MISSING_PARAMETER', message: `${path} needs at least one of androidstore_app_id and ios_app_store_identifier`, parameter: `${path}.androidstore_app_id` })
  }
  if (android !== undefined) {
    if (!ANDROID_PACKAGE.test(android)) throw Ads.invalid(`${path}.androidstore_app_id`, `Invalid Android package name "${android.slice(0, 100)}"`)
    dest.androidstore_app_id = android
  }
  if (ios !== undefined) {
    if (!IOS_APP_ID.test(ios)) throw Ads.invalid(`${path}.ios_app_store_identifier`, `Invalid App Store identifier "${ios.slice(0, 30)}": expected digits`)
    dest.ios_app_store_identifier = ios
  }
  const androidLink = optionalString(obj, 'androidstore_deep_link', path)
  if (androidLink !== undefined) {
    if (android === undefined) throw Ads.inclusive(`${path}.androidstore_deep_link`, `${path}.androidstore_app_id`)
    if (!DEEP_LINK.test(androidLink)) throw Ads.invalid(`${path}.androidstore_deep_link`, `Invalid deep link "${androidLink.slice(0, 100)}"`)
    dest.androidstore_deep_link = androidLink
  }
  const iosLink = optionalString(obj, 'ios_deep_link', path)
  if (iosLink !== undefined) {
    if (ios === undefined) throw Ads.inclusive(`${path}.ios_deep_link`, `${path}.ios_app_store_identifier`)
    if (!DEEP_LINK.test(iosLink)) throw Ads.invalid(`${path}.ios_deep_link`, `Invalid deep link "${iosLink.slice(0, 100)}"`)
    dest.ios_deep_link = iosLink
  }
  return dest
}

function destination(raw: unknown, path: string, wanted: 'WEBSITE' | 'APP', owner: 'DETAILS' | 'BUTTON'): WebsiteDestination | AppDestination {
  if (raw === undefined || raw === null) throw Ads.missing(path)
  if (!isObject(raw)) throw Ads.invalid(path, `Expected an object for ${path}`)
  const type = raw.type
  if (type === undefined) throw Ads.missing(`${path}.type`)
  if (type !== 'WEBSITE' && type !== 'APP') throw Ads.invalid(`${path}.type`, `Expected one of WEBSITE, APP for ${path}.type`)
  if (type !== wanted) {
    throw Ads.invalid(`${path}.type`, `${type} destinations can only be used with ${type === 'WEBSITE' ? 'DETAILS' : 'BUTTON'} components, not ${owner}`)
  }
  return type === 'WEBSITE' ? websiteDestination(raw, path) : appDestination(raw, path)
}

/** What one validated component contributes to the card type. */
interface Parsed {
  component: Component
  media: MediaType[]
}

async function component(raw: unknown, path: string, resolve: MediaResolver): Promise<Parsed> {
  if (!isObject(raw)) throw Ads.invalid(path, `Expected a component object for ${path}`)
  const type = raw.type
  if (type === undefined) throw Ads.missing(`${path}.type`)
  if (typeof type !== 'string' || !Object.hasOwn(FIELDS, type)) throw Ads.invalid(`${path}.type`, `Expected one of MEDIA, SWIPEABLE_MEDIA, DETAILS, BUTTON for ${path}.type`)
  rejectUnknown(raw, FIELDS[type as Component['type']], path, (field) => {
    if (field === 'label') return 'Only BUTTON components take a label'
    if (field === 'destination') return `${type} components take no destination; DETAILS and BUTTON do`
    return undefined
  })
  switch (type as Component['type']) {
    case 'MEDIA': {
      const key = requireString(raw, 'media_key', path)
      const media = await resolve(key, `${path}.media_key`)
      if (media.media_type === 'GIF') throw Ads.invalid(`${path}.media_key`, `Media ${key} is a GIF; MEDIA takes an image or a video`)
      return { component: { type: 'MEDIA', media_key: key }, media: [media.media_type] }
    }
    case 'SWIPEABLE_MEDIA': {
      const keys = raw.media_keys
      if (keys === undefined || keys === null) throw Ads.missing(`${path}.media_keys`)
      if (!Array.isArray(keys) || keys.some((k) => typeof k !== 'string' || k === '')) throw Ads.invalid(`${path}.media_keys`, `Expected an array of media keys for ${path}.media_keys`)
      if (keys.length < SWIPEABLE_MIN || keys.length > SWIPEABLE_MAX) {
        throw Ads.invalid(`${path}.media_keys`, `SWIPEABLE_MEDIA takes ${SWIPEABLE_MIN} to ${SWIPEABLE_MAX} media keys, got ${keys.length}`)
      }
      const types: MediaType[] = []
      for (const [i, key] of (keys as string[]).entries()) {
        const media = await resolve(key, `${path}.media_keys[${i}]`)
        if (media.media_type === 'GIF') throw Ads.invalid(`${path}.media_keys[${i}]`, `Media ${key} is a GIF; SWIPEABLE_MEDIA takes images and videos`)
        types.push(media.media_type)
      }
      return { component: { type: 'SWIPEABLE_MEDIA', media_keys: keys as string[] }, media: types }
    }
    case 'DETAILS': {
      const title = requireString(raw, 'title', path)
      if (charLength(title) > DETAILS_TITLE_MAX) throw Ads.invalid(`${path}.title`, `${path}.title must be at most ${DETAILS_TITLE_MAX} characters, got ${charLength(title)}`)
      const dest = destination(raw.destination, `${path}.destination`, 'WEBSITE', 'DETAILS') as WebsiteDestination
      return { component: { type: 'DETAILS', title, destination: dest }, media: [] }
    }
    case 'BUTTON': {
      const label = raw.label
      if (label === undefined || label === null) throw Ads.missing(`${path}.label`)
      if (!isObject(label)) throw Ads.invalid(`${path}.label`, `Expected an object for ${path}.label`)
      rejectUnknown(label, ['type', 'value'], `${path}.label`)
      if (label.type === undefined) throw Ads.missing(`${path}.label.type`)
      if (label.type !== 'ENUM') throw Ads.invalid(`${path}.label.type`, `${path}.label.type must be ENUM`)
      if (label.value === undefined) throw Ads.missing(`${path}.label.value`)
      if (typeof label.value !== 'string' || !(BUTTON_LABELS as readonly string[]).includes(label.value)) {
        throw Ads.invalid(`${path}.label.value`, `Expected one of ${BUTTON_LABELS.join(', ')} for ${path}.label.value`)
      }
      const dest = destination(raw.destination, `${path}.destination`, 'APP', 'BUTTON') as AppDestination
      return { component: { type: 'BUTTON', label: { type: 'ENUM', value: label.value as (typeof BUTTON_LABELS)[number] }, destination: dest }, media: [] }
    }
  }
}

const SHAPE = 'A card is one media component (MEDIA or SWIPEABLE_MEDIA) followed by one DETAILS or BUTTON component'

function mediaKind(types: MediaType[]): 'IMAGE' | 'VIDEO' | 'MIXED_MEDIA' {
  if (types.every((t) => t === 'IMAGE')) return 'IMAGE'
  if (types.every((t) => t === 'VIDEO')) return 'VIDEO'
  return 'MIXED_MEDIA'
}

export interface ValidatedCard {
  card_type: CardType
  components?: Component[]
  slides?: Component[][]
}

/** Validates a `components` array (one card) and derives its card_type. */
export async function validateComponents(raw: unknown, resolve: MediaResolver, path = 'components'): Promise<ValidatedCard> {
  if (!Array.isArray(raw)) throw Ads.invalid(path, `Expected an array of components for ${path}`)
  if (raw.length !== 2) throw Ads.invalid(path, `${SHAPE}; got ${raw.length} component(s)`)
  const first = await component(raw[0], `${path}[0]`, resolve)
  const second = await component(raw[1], `${path}[1]`, resolve)
  const media = first.component
  const description = second.component
  if ((media.type !== 'MEDIA' && media.type !== 'SWIPEABLE_MEDIA') || (description.type !== 'DETAILS' && description.type !== 'BUTTON')) {
    throw Ads.invalid(path, `${SHAPE}, in that order (top to bottom)`)
  }
  const kind = mediaKind(first.media)
  const dest = description.type === 'DETAILS' ? 'WEBSITE' : 'APP'
  let cardType: string
  if (media.type === 'MEDIA') cardType = `${kind}_${dest}`
  else cardType = kind === 'MIXED_MEDIA' ? `MIXED_MEDIA_SINGLE_DEST_CAROUSEL_${dest}` : `${kind}_CAROUSEL_${dest}`
  return { card_type: cardType as CardType, components: [media, description] }
}

/** Validates `slides` (a multi-destination carousel: each slide a MEDIA + DETAILS card) and derives its card_type. */
export async function validateSlides(raw: unknown, resolve: MediaResolver): Promise<ValidatedCard> {
  if (!Array.isArray(raw)) throw Ads.invalid('slides', 'Expected an array of slides (arrays of components) for slides')
  if (raw.length < SLIDES_MIN || raw.length > SLIDES_MAX) throw Ads.invalid('slides', `A multi-destination carousel takes ${SLIDES_MIN} to ${SLIDES_MAX} slides, got ${raw.length}`)
  const slides: Component[][] = []
  const types: MediaType[] = []
  for (const [i, slide] of raw.entries()) {
    const card = await validateComponents(slide, resolve, `slides[${i}]`)
    const [media, description] = card.components as [Component, Component]
    if (media.type !== 'MEDIA') throw Ads.invalid(`slides[${i}][0].type`, 'Each slide shows one MEDIA component; SWIPEABLE_MEDIA cannot be used in slides')
    if (description.type !== 'DETAILS') throw Ads.invalid(`slides[${i}][1].type`, 'Multi-destination carousels take website destinations: each slide needs a DETAILS component')
    types.push(card.card_type.startsWith('VIDEO') ? 'VIDEO' : 'IMAGE')
    slides.push([media, description])
  }
  return { card_type: `${mediaKind(types)}_MULTI_DEST_CAROUSEL_WEBSITE` as CardType, slides }
}
