import type { EventsAdsEntityChanges } from '../generated/schema-types'

/**
 * The `ads.entity-changes` contract between its producer (the gateway's ads
 * entities, services/gateway/ads/entities.ts) and its consumer (the
 * account-history service). Key: account id.
 */

export type ChangeType = 'CREATE' | 'UPDATE' | 'DELETE'

/** The `ads.entity-changes` event, typed from schemas/events/ads.entity-changes.json. */
export type EntityChange = Omit<EventsAdsEntityChanges, 'entity_data' | 'changes'> & {
  changes: Record<string, { old: unknown; new: unknown }>
  entity_data: Record<string, unknown>
}

/** An entity change before it gets its id and time. */
export type EntityChangeInput = Omit<EntityChange, 'change_id' | 'changed_at'> & { changed_at?: string }
