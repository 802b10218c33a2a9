import type { Store, StoreOp } from '../common/store/types'
import { withLock } from './app-lock'
import { WebhookKeys } from './keys'

/**
 * Webhook configurations. Each is a hash so that concurrent writers (a CRC
 * result, a 410 that disables the webhook, an operator) update their own
 * fields without overwriting each other's.
 */

export interface Webhook {
  id: string
  app_id: string
  url: string
  /** Normalised URL the duplicate check is keyed on. */
  url_key: string
  valid: boolean
  created_at: string
  last_crc_at?: string
  /** Last passing CRC: the 28-hour rule for transient failures counts from here. */
  last_crc_ok_at?: string
  /** Why the webhook is invalid (CRC failure, 410 Gone). */
  invalid_reason?: string
  /** Set when a delivery got 410 Gone: nothing is sent until a CRC passes. */
  disabled_at?: string
  /**
   * Standard Webhooks signing (opt-in, standard-webhooks.ts): the current
   * `whsec_` secret; absent when the webhook does not use it. Never in an
   * answer after the one that created it, never logged (the logger censors
   * these field names).
   */
  signing_secret?: string
  /** The secret before the last rotation, still signed with until `previous_signing_secret_until`. */
  previous_signing_secret?: string
  previous_signing_secret_until?: string
}

type OptionalField = 'last_crc_at' | 'last_crc_ok_at' | 'invalid_reason' | 'disabled_at' | 'signing_secret' | 'previous_signing_secret' | 'previous_signing_secret_until'
const OPTIONAL_FIELDS: readonly OptionalField[] = ['last_crc_at', 'last_crc_ok_at', 'invalid_reason', 'disabled_at', 'signing_secret', 'previous_signing_secret', 'previous_signing_secret_until']

export interface WebhookUpdate {
  valid?: boolean
  /** A new address (its normalised form is also its duplicate key). */
  url?: string
  set?: Partial<Record<OptionalField, string>>
  clear?: OptionalField[]
}

/** The public WebhookConfig of docs/webhooks.md. */
export function publicView(w: Webhook): { id: string; url: string; valid: boolean; created_at: string } {
  return { id: w.id, url: w.url, valid: w.valid, created_at: w.created_at }
}

/** The stored webhook without its signing secrets: what an operator's view may show. */
export function withoutSecrets(w: Webhook): Omit<Webhook, 'signing_secret' | 'previous_signing_secret'> & { standard_webhooks: boolean } {
  const { signing_secret: current, previous_signing_secret: _previous, ...rest } = w
  return { ...rest, standard_webhooks: current !== undefined }
}

/**
 * The form URLs are stored and compared in for DuplicateUrlFailed: the
 * WHATWG serialisation (lower-case host, default port dropped, whitespace
 * trimmed) without the fragment, which never reaches the receiver.
 */
export function normalizeUrl(url: URL): string {
  const copy = new URL(url.href)
  copy.hash = ''
  return copy.href
}

function fromHash(h: Record<string, string>): Webhook | undefined {
  if (!h.id || !h.app_id || !h.url || !h.created_at) return undefined
  const w: Webhook = { id: h.id, app_id: h.app_id, url: h.url, url_key: h.url_key ?? h.url, valid: h.valid === 'true', created_at: h.created_at }
  for (const k of OPTIONAL_FIELDS) {
    const v = h[k]
    if (v) w[k] = v
  }
  return w
}

function toHash(w: Webhook): Record<string, string> {
  const h: Record<string, string> = { id: w.id, app_id: w.app_id, url: w.url, url_key: w.url_key, valid: String(w.valid), created_at: w.created_at }
  for (const k of OPTIONAL_FIELDS) {
    const v = w[k]
    if (v !== undefined) h[k] = v
  }
  return h
}

export class WebhookRegistry {
  constructor(private readonly store: Store) {}

  async get(id: string): Promise<Webhook | undefined> {
    return fromHash(await this.store.hgetall(WebhookKeys.config(id)))
  }

  /** The webhook when it exists and belongs to `appId`. */
  async getOwned(id: string, appId: string): Promise<Webhook | undefined> {
    const w = await this.get(id)
    return w && w.app_id === appId ? w : undefined
  }

  private async getMany(ids: string[]): Promise<Webhook[]> {
    const found = await Promise.all(ids.map((id) => this.get(id)))
    return found.filter((w): w is Webhook => w !== undefined).sort((a, b) => a.created_at.localeCompare(b.created_at) || a.id.localeCompare(b.id))
  }

  async listByApp(appId: string): Promise<Webhook[]> {
    return this.getMany(await this.store.smembers(WebhookKeys.byApp(appId)))
  }

  async listAll(): Promise<Webhook[]> {
    return this.getMany(await this.store.smembers(WebhookKeys.all()))
  }

  async countByApp(appId: string): Promise<number> {
    return this.store.scard(WebhookKeys.byApp(appId))
  }

  /** Claims `urlKey` for `id` in the app; returns the id already holding it when taken. */
  async reserveUrl(appId: string, urlKey: string, id: string): Promise<string | undefined> {
    const key = WebhookKeys.url(appId, urlKey)
    if (await this.store.setIfAbsent(key, id)) return undefined
    const holder = await this.store.get(key)
    if (holder !== undefined && !(await this.store.exists(WebhookKeys.config(holder)))) {
      // A reservation left by a create that crashed half-way: take it over.
      await this.store.set(key, id)
      return undefined
    }
    return holder ?? undefined
  }

  async releaseUrl(appId: string, urlKey: string, id: string): Promise<void> {
    const key = WebhookKeys.url(appId, urlKey)
    if ((await this.store.get(key)) === id) await this.store.del(key)
  }

  /**
   * Inserts `w` unless its app already has `limit` webhooks; false when at
   * the limit. Count and insert hold the app's limit lock, so concurrent
   * creates (in any process) cannot overshoot.
   */
  async insertWithinLimit(w: Webhook, nextCrcAt: number, limit: number): Promise<boolean> {
    return withLock(this.store, WebhookKeys.limitLock(w.app_id), async () => {
      if ((await this.countByApp(w.app_id)) >= limit) return false
      await this.insert(w, nextCrcAt)
      return true
    })
  }

  async insert(w: Webhook, nextCrcAt: number): Promise<void> {
    await this.store.batch([
      { op: 'hset', key: WebhookKeys.config(w.id), fields: toHash(w) },
      { op: 'sadd', key: WebhookKeys.byApp(w.app_id), members: [w.id] },
      { op: 'sadd', key: WebhookKeys.all(), members: [w.id] },
      { op: 'zadd', key: WebhookKeys.crcSchedule(), score: nextCrcAt, member: w.id }
    ])
  }

  /** Applies `update` when the webhook still exists; returns the result. */
  async update(id: string, update: WebhookUpdate): Promise<Webhook | undefined> {
    if (!(await this.store.exists(WebhookKeys.config(id)))) return undefined
    const fields: Record<string, string> = { ...(update.set ?? {}) } as Record<string, string>
    if (update.valid !== undefined) fields.valid = String(update.valid)
    if (update.url !== undefined) Object.assign(fields, { url: update.url, url_key: update.url })
    const ops: StoreOp[] = []
    if (Object.keys(fields).length > 0) ops.push({ op: 'hset', key: WebhookKeys.config(id), fields })
    if (update.clear && update.clear.length > 0) ops.push({ op: 'hdel', key: WebhookKeys.config(id), fields: update.clear })
    if (ops.length > 0) await this.store.batch(ops)
    const after = await this.get(id)
    // A delete that raced with this update leaves a partial hash behind: remove it.
    if (!after) await this.store.del(WebhookKeys.config(id))
    return after
  }

  /**
   * Points the webhook at `urlKey` after its CRC passed there (the caller
   * holds the URL's reservation): valid, checked now, no longer disabled.
   */
  async changeUrl(id: string, urlKey: string, now = Date.now()): Promise<Webhook | undefined> {
    const at = new Date(now).toISOString()
    return this.update(id, { valid: true, set: { last_crc_at: at, last_crc_ok_at: at }, clear: ['invalid_reason', 'disabled_at'], url: urlKey })
  }

  /** Deletes the webhook with its indexes and Account Activity subscriptions. */
  async remove(w: Webhook): Promise<void> {
    const users = await this.store.smembers(WebhookKeys.subscribers(w.id))
    const ops: StoreOp[] = [
      { op: 'del', key: WebhookKeys.config(w.id) },
      { op: 'srem', key: WebhookKeys.byApp(w.app_id), members: [w.id] },
      { op: 'srem', key: WebhookKeys.all(), members: [w.id] },
      { op: 'zrem', key: WebhookKeys.crcSchedule(), members: [w.id] },
      { op: 'del', key: WebhookKeys.subscribers(w.id) },
      { op: 'del', key: WebhookKeys.crcHistory(w.id) },
      // The log index goes with the webhook; its records expire with WEBHOOK_LOG_RETENTION.
      { op: 'del', key: WebhookKeys.log(w.id) }
    ]
    for (const user of users) ops.push({ op: 'srem', key: WebhookKeys.userWebhooks(user), members: [w.id] })
    await this.store.batch(ops)
    await this.releaseUrl(w.app_id, w.url_key, w.id)
  }
}
