import type { FastifyInstance } from 'fastify'
import type { ServiceContext } from '../common/context'
import { Ads } from '../common/errors'
import { accountFeatures, requireAccount } from '../common/ads/accounts'
import { ADS_AUTH, sendData } from '../common/ads/conventions'
import { Params } from '../common/ads/params'
import { ACCOUNT_HISTORY_FEATURE } from '../common/ads/features'
import { type HistoryEntry, queryEntries, type TopicPosition } from './history'

/**
 * GET /12/accounts/:account_id/account_history (beta): the changes made to
 * one entity within a window of whole hours. The account is checked like
 * every ads route (shared `auth:` tokens, the documented `ads:account:{id}`
 * record); then the account must be allowlisted (the operator-granted
 * ACCOUNT_HISTORY_ACCESS feature), else 403 FEATURE_NOT_ENABLED.
 */

export const HISTORY_ENTITY_TYPES = ['CAMPAIGN', 'LINE_ITEM', 'PROMOTED_TWEET', 'TARGETING_CRITERIA', 'PROMOTED_ACCOUNT'] as const
const HOUR_MS = 3_600_000
const USER_ID = /^\d{1,19}$/

function wholeHour(p: Params, name: string): number {
  const iso = p.time(name, { required: true }) as string
  const ms = Date.parse(iso)
  if (ms % HOUR_MS !== 0) throw Ads.invalid(name, `${name} must be expressed in whole hours (0 minutes and 0 seconds), got ${iso}`)
  return ms
}

/**
 * Keyset cursors: the topic position of the last entry of the page,
 * base64url JSON, opaque to clients. The next page is what comes after that
 * position, so entries recorded meanwhile never shift or repeat a page.
 */
export function encodeHistoryCursor(position: TopicPosition): string {
  return Buffer.from(JSON.stringify({ v: 1, p: position.partition, o: position.offset }), 'utf8').toString('base64url')
}

export function decodeHistoryCursor(cursor: string): TopicPosition {
  const invalid = () => Ads.invalid('cursor', `Invalid cursor "${cursor.slice(0, 60)}"`)
  if (!/^[A-Za-z0-9_-]+$/.test(cursor)) throw invalid()
  let state: unknown
  try {
    state = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'))
  } catch {
    throw invalid()
  }
  const c = state as { v?: unknown; p?: unknown; o?: unknown } | null
  if (c === null || typeof c !== 'object' || c.v !== 1 || !Number.isSafeInteger(c.p) || (c.p as number) < 0 || typeof c.o !== 'string' || !/^\d{1,19}$/.test(c.o)) throw invalid()
  return { partition: c.p as number, offset: c.o }
}

/** Second-precision UTC like every ads timestamp. */
function adsTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z')
}

function render(e: HistoryEntry): Record<string, unknown> {
  return {
    entity: e.entity_type,
    entity_id: e.entity_id,
    change_time: adsTime(e.changed_at_ms),
    change_type: e.change_type,
    change_by: e.change_by,
    changes: e.changes,
    entity_data: e.entity_data
  }
}

export async function registerHistoryRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  app.get<{ Params: { account_id: string } }>('/12/accounts/:account_id/account_history', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    if (!(await accountFeatures(ctx, account.id)).has(ACCOUNT_HISTORY_FEATURE)) {
      throw Ads.featureNotEnabled('account history (beta; the account must be allowlisted)')
    }
    const p = Params.query(request)
    const entityType = p.enumOf('entity_type', HISTORY_ENTITY_TYPES, { required: true }) as string
    const entityId = p.string('entity_id', { required: true, max: 128 }) as string
    const fromMs = wholeHour(p, 'start_time')
    const toMs = wholeHour(p, 'end_time')
    if (toMs <= fromMs) throw Ads.invalid('end_time', 'end_time must be later than start_time')
    const count = p.int('count', { min: 1, max: 1000 }) ?? 200
    const cursor = p.string('cursor', { max: 512 })
    const after = cursor !== undefined ? decodeHistoryCursor(cursor) : undefined
    const userId = p.string('user_id', { max: 19 })
    if (userId !== undefined && !USER_ID.test(userId)) throw Ads.invalid('user_id', `Expected Long, got ${JSON.stringify(userId)} for user_id`)
    const entries = await queryEntries(ctx.store, { accountId: account.id, entityType, entityId, fromMs, toMs, ...(userId !== undefined ? { userId } : {}), ...(after ? { after } : {}) })
    const page = entries.slice(0, count)
    const last = page[page.length - 1]
    const nextCursor = entries.length > count && last ? encodeHistoryCursor(last) : null
    return sendData(request, reply, page.map(render), 'account_history', { next_cursor: nextCursor })
  })
}
