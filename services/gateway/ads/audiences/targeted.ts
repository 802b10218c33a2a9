import type { FastifyInstance } from 'fastify'
import type { BusMessage, Consumer } from '../../../common/bus/types'
import { TOPICS } from '../../../common/bus/types'
import type { ServiceContext } from '../../../common/context'
import { Ads } from '../../../common/errors'
import type { Worker } from '../../../common/service'
import type { StoreOp } from '../../../common/store/types'
import { requireAccount } from '../accounts'
import { ADS_AUTH, Params, sendData } from '../conventions'
import type { EntityChange } from '../entities'
import { requireAudience } from './audiences'

/**
 * `GET /12/accounts/:account_id/custom_audiences/:custom_audience_id/targeted`:
 * the campaigns and line items of the account that target an audience.
 *
 * Campaigns, line items and targeting criteria belong to campaign management;
 * this module learns about them the way docs/architecture.md intends services to share
 * data, from `ads.entity-changes` (group `gateway-audience-targeting`), and
 * keeps a small index of its own:
 *
 *   ads:targeting:audience:{audience}            hash `{account}:{line_item}:{criterion}` -> '1'
 *   ads:targeting:criterion:{account}:{id}       {line_item_id, audience_id}
 *   ads:targeting:line-item:{account}:{id}       {id, name, campaign_id, entity_status, end_time, deleted}
 *   ads:targeting:campaign:{account}:{id}        {id, name, entity_status, deleted}
 *
 * A targeting criterion counts when its entity_type is TARGETING_CRITERIA (or
 * TARGETING_CRITERION) and its targeting_type names a custom audience
 * (CUSTOM_AUDIENCE, CUSTOM_AUDIENCE_EXPANDED, EXCLUDED_CUSTOM_AUDIENCE and the
 * older TAILORED_AUDIENCE forms); targeting_value is the audience id.
 */

export const TARGETING_GROUP = 'gateway-audience-targeting'
const AUDIENCE_TARGETING_TYPES = /^(EXCLUDED_)?(CUSTOM|TAILORED)_AUDIENCE(_EXPANDED|_LOOKALIKE)?$/
const PAGE = 200

interface CriterionRef {
  line_item_id: string
  audience_id: string
}

interface LineItemInfo {
  id: string
  name: string | null
  campaign_id: string | null
  entity_status: string | null
  end_time: string | null
  deleted: boolean
}

interface CampaignInfo {
  id: string
  name: string | null
  entity_status: string | null
  deleted: boolean
}

const Keys = {
  audience: (a: string) => `ads:targeting:audience:${a}`,
  criterion: (acct: string, id: string) => `ads:targeting:criterion:${acct}:${id}`,
  lineItem: (acct: string, id: string) => `ads:targeting:line-item:${acct}:${id}`,
  campaign: (acct: string, id: string) => `ads:targeting:campaign:${acct}:${id}`
}

const str = (v: unknown): string | null => (typeof v === 'string' && v !== '' ? v : typeof v === 'number' ? String(v) : null)

/** Applies one entity change to the index (idempotent: a redelivered change writes the same state). */
export async function indexEntityChange(ctx: ServiceContext, change: EntityChange): Promise<void> {
  const data = change.entity_data ?? {}
  const acct = change.account_id
  const deleted = change.change_type === 'DELETE' || data.deleted === true
  switch (change.entity_type) {
    case 'CAMPAIGN': {
      const info: CampaignInfo = { id: change.entity_id, name: str(data.name), entity_status: str(data.entity_status), deleted }
      await ctx.store.setJson(Keys.campaign(acct, change.entity_id), info)
      return
    }
    case 'LINE_ITEM': {
      const info: LineItemInfo = {
        id: change.entity_id,
        name: str(data.name),
        campaign_id: str(data.campaign_id),
        entity_status: str(data.entity_status),
        end_time: str(data.end_time),
        deleted
      }
      await ctx.store.setJson(Keys.lineItem(acct, change.entity_id), info)
      return
    }
    case 'TARGETING_CRITERIA':
    case 'TARGETING_CRITERION': {
      const previous = await ctx.store.getJson<CriterionRef>(Keys.criterion(acct, change.entity_id))
      const ops: StoreOp[] = []
      if (previous) {
        ops.push({ op: 'hdel', key: Keys.audience(previous.audience_id), fields: [`${acct}:${previous.line_item_id}:${change.entity_id}`] })
        ops.push({ op: 'del', key: Keys.criterion(acct, change.entity_id) })
      }
      const type = str(data.targeting_type) ?? ''
      const audienceId = str(data.targeting_value)
      const lineItemId = str(data.line_item_id)
      if (!deleted && AUDIENCE_TARGETING_TYPES.test(type) && audienceId && lineItemId) {
        ops.push({ op: 'set', key: Keys.criterion(acct, change.entity_id), value: JSON.stringify({ line_item_id: lineItemId, audience_id: audienceId } satisfies CriterionRef) })
        ops.push({ op: 'hset', key: Keys.audience(audienceId), fields: { [`${acct}:${lineItemId}:${change.entity_id}`]: '1' } })
      }
      if (ops.length > 0) await ctx.store.batch(ops)
      return
    }
    default:
      return
  }
}

export async function startTargetingIndexer(ctx: ServiceContext): Promise<Worker> {
  const consumer: Consumer = await ctx.bus.subscribe({
    groupId: TARGETING_GROUP,
    topics: [TOPICS.adsEntityChanges],
    fromBeginning: true,
    background: true,
    handler: async (message: BusMessage) => {
      const change = message.value as EntityChange
      if (!change || typeof change !== 'object' || typeof change.entity_type !== 'string') return
      await indexEntityChange(ctx, change)
    }
  })
  return { name: 'audience-targeting-indexer', close: () => consumer.close() }
}

export interface TargetedEntry {
  campaign_id: string
  campaign_name: string | null
  line_items: Array<{ id: string; name: string | null; servable: boolean }>
}

function servable(li: LineItemInfo, campaign: CampaignInfo | undefined, now: number): boolean {
  if (li.deleted || li.entity_status !== 'ACTIVE') return false
  if (li.end_time && Date.parse(li.end_time) <= now) return false
  if (campaign && (campaign.deleted || (campaign.entity_status !== null && campaign.entity_status !== 'ACTIVE'))) return false
  return true
}

/** Campaigns of `accountId` with line items targeting the audience, grouped and ordered by campaign id. */
export async function targetedEntries(ctx: ServiceContext, accountId: string, audienceId: string, withActive: boolean): Promise<TargetedEntry[]> {
  const refs = Object.keys(await ctx.store.hgetall(Keys.audience(audienceId)))
  const lineItemIds = [...new Set(refs.filter((r) => r.startsWith(`${accountId}:`)).map((r) => r.split(':')[1] as string))]
  const lineItems = (await ctx.store.mgetJson<LineItemInfo>(lineItemIds.map((id) => Keys.lineItem(accountId, id)))).map(
    (li, i): LineItemInfo => li ?? { id: lineItemIds[i] as string, name: null, campaign_id: null, entity_status: null, end_time: null, deleted: false }
  )
  const campaignIds = [...new Set(lineItems.map((li) => li.campaign_id).filter((c): c is string => c !== null))]
  const campaigns = await ctx.store.mgetJson<CampaignInfo>(campaignIds.map((id) => Keys.campaign(accountId, id)))
  const campaignById = new Map(campaignIds.map((id, i) => [id, campaigns[i]]))
  const now = Date.now()
  const byCampaign = new Map<string, TargetedEntry>()
  for (const li of lineItems) {
    // A line item whose campaign is not known yet cannot be placed in the answer.
    if (li.campaign_id === null) continue
    const campaign = campaignById.get(li.campaign_id)
    const isServable = servable(li, campaign, now)
    if (withActive && !isServable) continue
    if (li.deleted && withActive) continue
    const entry = byCampaign.get(li.campaign_id) ?? { campaign_id: li.campaign_id, campaign_name: campaign?.name ?? null, line_items: [] }
    entry.line_items.push({ id: li.id, name: li.name, servable: isServable })
    byCampaign.set(li.campaign_id, entry)
  }
  const out = [...byCampaign.values()].sort((a, b) => byId(a.campaign_id, b.campaign_id))
  for (const e of out) e.line_items.sort((a, b) => byId(a.id, b.id))
  return out
}

/** Code-unit order of ids: the listing's order and the cursor's comparison must be the same total order. */
function byId(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0
}

const CAMPAIGN_CURSOR = /^c:([0-9A-Za-z_-]{1,64})$/

function encodeTargetedCursor(campaignId: string): string {
  return Buffer.from(`c:${campaignId}`).toString('base64url')
}

function decodeTargetedCursor(cursor: string): string {
  const m = /^[A-Za-z0-9_-]+$/.test(cursor) ? CAMPAIGN_CURSOR.exec(Buffer.from(cursor, 'base64url').toString('utf8')) : null
  if (!m) throw Ads.invalid('cursor', `Invalid cursor "${cursor.slice(0, 60)}"`)
  return m[1] as string
}

export async function registerTargetedRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  app.get('/12/accounts/:account_id/custom_audiences/:custom_audience_id/targeted', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const p = Params.query(request)
    const withActive = p.bool('with_active', { default: true }) ?? true
    const cursor = p.string('cursor', { max: 100 })
    const path = request.params as Record<string, string>
    const account = await requireAccount(ctx, request, path.account_id ?? '')
    const access = await requireAudience(ctx, account.id, path.custom_audience_id ?? '')
    const entries = await targetedEntries(ctx, account.id, access.audience.id, withActive)
    // Keyset: the page resumes after the last campaign served, whatever was removed in between.
    const after = cursor === undefined ? undefined : decodeTargetedCursor(cursor)
    const rest = after === undefined ? entries : entries.filter((e) => byId(e.campaign_id, after) > 0)
    const data = rest.slice(0, PAGE)
    const last = data[data.length - 1]
    const next = rest.length > PAGE && last ? encodeTargetedCursor(last.campaign_id) : null
    return sendData(request, reply, data, 'targeted_audience', { next_cursor: next })
  })
}
