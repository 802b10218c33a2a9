/**
 * The activity event kinds (docs/contract.md "Activity events").
 *
 * Every kind is stored, published and delivered under its dotted lowercase
 * name; the deprecated PascalCase names are accepted on input (subscriptions
 * and the ingest route) and normalised here. Each kind's payload is
 * described by schemas/events/activity/<event_type>.json.
 */

export const EVENT_TYPES = [
  'post.create',
  'post.delete',
  'dm.sent',
  'dm.received',
  'dm.read',
  'dm.indicate_typing',
  'spaces.start',
  'spaces.end',
  'profile.update.bio',
  'profile.update.profile_picture',
  'profile.update.banner_picture',
  'profile.update.geo',
  'profile.update.url',
  'profile.update.screenname',
  'profile.update.verified',
  'profile.update.affiliate'
] as const

export type EventType = (typeof EVENT_TYPES)[number]

/** Deprecated PascalCase names and the dotted name each is stored under. */
export const PASCAL_CASE_ALIASES: Readonly<Record<string, EventType>> = {
  ProfileBioUpdate: 'profile.update.bio',
  ProfilePictureUpdate: 'profile.update.profile_picture',
  ProfileBannerUpdate: 'profile.update.banner_picture',
  ProfileGeoUpdate: 'profile.update.geo',
  ProfileUrlUpdate: 'profile.update.url'
}

const KNOWN = new Set<string>(EVENT_TYPES)

/** The dotted name of `name` (itself, or the target of a PascalCase alias); undefined when unknown. */
export function normalizeEventType(name: string): EventType | undefined {
  if (KNOWN.has(name)) return name as EventType
  return Object.prototype.hasOwnProperty.call(PASCAL_CASE_ALIASES, name) ? PASCAL_CASE_ALIASES[name] : undefined
}

/** Every accepted spelling, for error messages. */
export function acceptedEventTypeNames(): string[] {
  return [...EVENT_TYPES, ...Object.keys(PASCAL_CASE_ALIASES)]
}

export type Direction = 'sent' | 'received'

/** Direct-message events carry a sender and a recipient, so a subscription may filter on direction. */
export function supportsDirection(type: EventType): boolean {
  return type.startsWith('dm.')
}

/**
 * Kinds whose payload carries text a keyword can be searched in (subscription-filter.ts
 * textFields). A keyword on the others (a deleted post's ids, read receipts,
 * typing indicators) could never match, so a subscription asking for one is refused.
 */
export function supportsKeyword(type: EventType): boolean {
  return type !== 'post.delete' && type !== 'dm.read' && type !== 'dm.indicate_typing'
}

/** `sent`/`received` as the contract spells them (docs/contract.md "Activity events"); the public API's `outbound`/`inbound` map onto them. */
export function normalizeDirection(value: string): Direction | undefined {
  switch (value) {
    case 'sent':
    case 'outbound':
      return 'sent'
    case 'received':
    case 'inbound':
      return 'received'
    default:
      return undefined
  }
}
