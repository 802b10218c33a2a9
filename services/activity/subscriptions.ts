import { newNumericId } from '../common/ids'
import type { Store, StoreOp } from '../common/store/types'
import type { Direction, EventType } from './event-types'

/**
 * Subscriptions and their match index, in the `activity:` keyspace:
 *
 *   activity:sub:{subscription_id}          Subscription (JSON)
 *   activity:app-subs:{app_id}              sorted set: subscription ids by creation time (listing)
 *   activity:app-count:{app_id}             counter reserving places under SUBSCRIPTION_LIMIT_PER_APP
 *   activity:match:{event_type}:{user_id}   hash subscription_id -> Subscription (JSON): the matcher's
 *                                           O(1) lookup, one HGETALL per event
 *
 * The match index holds whole subscriptions so the matcher needs one store
 * round trip per event, not a set read followed by a multi-get. Every
 * change writes the record and its index entry in one atomic batch, and
 * every matcher instance sees a change as soon as it is written (the index
 * is read from the shared store per event).
 *
 * Before the hash, the index was a set of ids (`activity:index:{type}:{user}`);
 * `migrateLegacyIndex` rewrites such sets once, at the matcher's start.
 */

export interface SubscriptionFilter {
  user_id: string
  keyword?: string
  direction?: Direction
}

export interface Subscription {
  subscription_id: string
  app_id: string
  event_type: EventType
  filter: SubscriptionFilter
  tag?: string
  webhook_id?: string
  created_at: string
  updated_at: string
}

/** The public shape (docs/contract.md "Activity subscriptions"): the owning app is not shown. */
export interface PublicSubscription {
  subscription_id: string
  event_type: string
  filter: SubscriptionFilter
  tag?: string
  webhook_id?: string
  created_at: string
  updated_at: string
}

export const ActivityKeys = {
  sub: (id: string) => `activity:sub:${id}`,
  appSubs: (appId: string) => `activity:app-subs:${appId}`,
  appCount: (appId: string) => `activity:app-count:${appId}`,
  match: (eventType: string, userId: string) => `activity:match:${eventType}:${userId}`,
  /** The set-of-ids index of earlier versions (read only by the migration). */
  legacyIndex: (eventType: string, userId: string) => `activity:index:${eventType}:${userId}`
}

export const LEGACY_INDEX_PREFIX = 'activity:index:'

/** The writes that store a new subscription: its record, its listing entry, its match index entry. */
export function createOps(sub: Subscription, score: number): StoreOp[] {
  const json = JSON.stringify(sub)
  return [
    { op: 'set', key: ActivityKeys.sub(sub.subscription_id), value: json },
    { op: 'zadd', key: ActivityKeys.appSubs(sub.app_id), score, member: sub.subscription_id },
    { op: 'hset', key: ActivityKeys.match(sub.event_type, sub.filter.user_id), fields: { [sub.subscription_id]: json } }
  ]
}

export function toPublic(sub: Subscription): PublicSubscription {
  return {
    subscription_id: sub.subscription_id,
    event_type: sub.event_type,
    filter: { ...sub.filter },
    ...(sub.tag !== undefined ? { tag: sub.tag } : {}),
    ...(sub.webhook_id !== undefined ? { webhook_id: sub.webhook_id } : {}),
    created_at: sub.created_at,
    updated_at: sub.updated_at
  }
}

export class SubscriptionLimitError extends Error {
  constructor(readonly limit: number) {
    super(`subscription limit of ${limit} reached`)
  }
}

export interface NewSubscription {
  app_id: string
  event_type: EventType
  filter: SubscriptionFilter
  tag?: string
  webhook_id?: string
}

export interface Page {
  items: Subscription[]
  next?: { score: number; id: string }
}

const MAX_SCORE = Number.MAX_SAFE_INTEGER

export class SubscriptionStore {
  constructor(
    private readonly store: Store,
    private readonly limitPerApp: number
  ) {}

  async create(input: NewSubscription, now = new Date()): Promise<Subscription> {
    // Reserve a place first: concurrent creates can never pass the limit together.
    const reserved = await this.store.incr(ActivityKeys.appCount(input.app_id), 1)
    if (reserved > this.limitPerApp) {
      await this.store.incr(ActivityKeys.appCount(input.app_id), -1)
      throw new SubscriptionLimitError(this.limitPerApp)
    }
    const iso = now.toISOString()
    const sub: Subscription = {
      subscription_id: newNumericId(now.getTime()),
      app_id: input.app_id,
      event_type: input.event_type,
      filter: cleanFilter(input.filter),
      ...(input.tag !== undefined ? { tag: input.tag } : {}),
      ...(input.webhook_id !== undefined ? { webhook_id: input.webhook_id } : {}),
      created_at: iso,
      updated_at: iso
    }
    try {
      await this.store.batch(createOps(sub, now.getTime()))
    } catch (err) {
      await this.store.incr(ActivityKeys.appCount(input.app_id), -1)
      throw err
    }
    return sub
  }

  async get(id: string): Promise<Subscription | undefined> {
    return this.store.getJson<Subscription>(ActivityKeys.sub(id))
  }

  /** The subscription when it exists and belongs to `appId`. */
  async getOwned(appId: string, id: string): Promise<Subscription | undefined> {
    const sub = await this.get(id)
    return sub && sub.app_id === appId ? sub : undefined
  }

  /** Applies `changes`; undefined when the subscription was deleted meanwhile. */
  async update(sub: Subscription, changes: { tag?: string; webhook_id?: string }, now = new Date()): Promise<Subscription | undefined> {
    const next: Subscription = { ...sub, ...changes, updated_at: now.toISOString() }
    const json = JSON.stringify(next)
    const match = ActivityKeys.match(sub.event_type, sub.filter.user_id)
    await this.store.batch([
      { op: 'set', key: ActivityKeys.sub(sub.subscription_id), value: json },
      { op: 'hset', key: match, fields: { [sub.subscription_id]: json } }
    ])
    // A delete that ran concurrently may have finished before this write: never resurrect the record or its index entry.
    if ((await this.store.zscore(ActivityKeys.appSubs(sub.app_id), sub.subscription_id)) === undefined) {
      await this.store.batch([
        { op: 'del', key: ActivityKeys.sub(sub.subscription_id) },
        { op: 'hdel', key: match, fields: [sub.subscription_id] }
      ])
      return undefined
    }
    return next
  }

  /**
   * Deletes the given subscriptions; returns those this call removed. The
   * record goes first (claiming it, so two concurrent deletes never both
   * decrement the app's count), then the listing and index entries in one
   * batch, which deletes the record again in case a concurrent update wrote
   * it back in between. A matcher may still match the subscription while its
   * delete is in progress, never after the delete returned.
   */
  async delete(subs: Subscription[]): Promise<Subscription[]> {
    const claimed: Subscription[] = []
    for (const sub of subs) if ((await this.store.del(ActivityKeys.sub(sub.subscription_id))) === 1) claimed.push(sub)
    if (claimed.length === 0) return claimed
    const ops: StoreOp[] = []
    const byApp = new Map<string, number>()
    for (const sub of claimed) {
      ops.push(
        { op: 'zrem', key: ActivityKeys.appSubs(sub.app_id), members: [sub.subscription_id] },
        { op: 'hdel', key: ActivityKeys.match(sub.event_type, sub.filter.user_id), fields: [sub.subscription_id] },
        { op: 'del', key: ActivityKeys.sub(sub.subscription_id) }
      )
      byApp.set(sub.app_id, (byApp.get(sub.app_id) ?? 0) + 1)
    }
    for (const [appId, n] of byApp) ops.push({ op: 'incr', key: ActivityKeys.appCount(appId), by: -n })
    await this.store.batch(ops)
    return claimed
  }

  async count(appId: string): Promise<number> {
    return this.store.zcard(ActivityKeys.appSubs(appId))
  }

  /**
   * One page of an app's subscriptions, oldest first. The cursor is the
   * (creation time, id) of the last item returned, so deletions between
   * pages never make a page skip or repeat a subscription.
   */
  async list(appId: string, maxResults: number, after?: { score: number; id: string }): Promise<Page> {
    const key = ActivityKeys.appSubs(appId)
    const wanted = maxResults + 1
    const members: Array<{ member: string; score: number }> = []
    let offset = 0
    const batch = Math.max(wanted, 100)
    for (;;) {
      const chunk = await this.store.zrangeByScore(key, after?.score ?? 0, MAX_SCORE, { offset, limit: batch })
      for (const m of chunk) {
        if (after && m.score === after.score && m.member <= after.id) continue
        members.push(m)
        if (members.length >= wanted) break
      }
      if (members.length >= wanted || chunk.length < batch) break
      offset += chunk.length
    }
    const pageMembers = members.slice(0, maxResults)
    const subs = await this.store.mgetJson<Subscription>(pageMembers.map((m) => ActivityKeys.sub(m.member)))
    const items = subs.filter((s): s is Subscription => s !== undefined)
    const last = pageMembers[pageMembers.length - 1]
    return { items, ...(members.length > maxResults && last ? { next: { score: last.score, id: last.member } } : {}) }
  }

  /** The matcher's lookup: subscriptions of (event_type, user_id), in one store round trip. */
  async candidates(eventType: string, userId: string): Promise<Subscription[]> {
    const entries = await this.store.hgetall(ActivityKeys.match(eventType, userId))
    const out: Subscription[] = []
    for (const json of Object.values(entries)) {
      try {
        out.push(JSON.parse(json) as Subscription)
      } catch {
        // Only this service writes the index; an unreadable entry is skipped rather than failing every event of the user.
      }
    }
    return out
  }

  /**
   * Rewrites the set-of-ids index of earlier versions as match hashes (once:
   * each legacy set is deleted in the same batch that writes its hash).
   * Returns how many sets were converted.
   */
  async migrateLegacyIndex(): Promise<number> {
    let converted = 0
    for await (const key of this.store.scanPrefix(LEGACY_INDEX_PREFIX)) {
      const ids = await this.store.smembers(key)
      const subs = (await this.store.mgetJson<Subscription>(ids.map((id) => ActivityKeys.sub(id)))).filter((s): s is Subscription => s !== undefined)
      const ops: StoreOp[] = subs.map((sub) => ({ op: 'hset', key: ActivityKeys.match(sub.event_type, sub.filter.user_id), fields: { [sub.subscription_id]: JSON.stringify(sub) } }))
      ops.push({ op: 'del', key })
      await this.store.batch(ops)
      converted++
    }
    return converted
  }
}

function cleanFilter(filter: SubscriptionFilter): SubscriptionFilter {
  const out: SubscriptionFilter = { user_id: filter.user_id }
  if (filter.keyword !== undefined) out.keyword = filter.keyword
  if (filter.direction !== undefined) out.direction = filter.direction
  return out
}

// ---------------------------------------------------------------- pagination tokens

const ALPHABET = 'abcdefghijklmnopqrstuvwxyz234567'

/** RFC 4648 base32 (lowercase, unpadded): the OpenAPI's PaginationToken32. */
export function base32Encode(data: Buffer): string {
  let out = ''
  let bits = 0
  let value = 0
  for (const byte of data) {
    value = (value << 8) | byte
    bits += 8
    while (bits >= 5) {
      out += ALPHABET[(value >>> (bits - 5)) & 31]
      bits -= 5
    }
  }
  if (bits > 0) out += ALPHABET[(value << (5 - bits)) & 31]
  return out
}

export function base32Decode(text: string): Buffer | undefined {
  const bytes: number[] = []
  let bits = 0
  let value = 0
  for (const ch of text) {
    const v = ALPHABET.indexOf(ch)
    if (v < 0) return undefined
    value = ((value << 5) | v) & 0xffff
    bits += 5
    if (bits >= 8) {
      bytes.push((value >>> (bits - 8)) & 0xff)
      bits -= 8
    }
  }
  return Buffer.from(bytes)
}

export function encodeCursor(cursor: { score: number; id: string }): string {
  return base32Encode(Buffer.from(`${cursor.score}:${cursor.id}`, 'utf8'))
}

export function decodeCursor(token: string): { score: number; id: string } | undefined {
  const raw = base32Decode(token)?.toString('utf8')
  const m = raw === undefined ? null : /^(\d{1,16}):(\d{1,19})$/.exec(raw)
  if (!m) return undefined
  return { score: Number(m[1]), id: m[2] as string }
}
