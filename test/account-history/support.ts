import type { Test } from 'tap'
import type { Bus } from '../../services/common/bus/types'
import type { Runtime } from '../../services/common/runtime'
import type { Store } from '../../services/common/store/types'
import { accountHistoryService } from '../../services/account-history/service'
import { grantFeatures } from '../../services/gateway/ads/accounts'
import { createDefaultFundingInstrument, type FundingInstrument } from '../../services/gateway/ads/campaigns/funding-instruments'
import { gatewayService } from '../../services/gateway/service'
import { eventually, oauth1Request, startTestRuntime, type TestIdentity, type TestResponse } from '../helper'
import { createAdsIdentity } from '../ads/helper'
import type { Account } from '../../services/gateway/ads/accounts'

/**
 * Account history tests run the gateway and the history service as two
 * runtimes sharing one bus and one store, like two processes of the
 * distributed mode, so the history service can be restarted on its own.
 */

export interface HistoryEntryBody {
  entity: string
  entity_id: string
  change_time: string
  change_type: 'CREATE' | 'UPDATE' | 'DELETE'
  change_by: { user_id: string; platform: string }
  changes: Record<string, { old: unknown; new: unknown }>
  entity_data: Record<string, unknown>
}

/** A bus whose close() leaves the shared bus open (each runtime closes what it was given). */
export function sharedBus(bus: Bus): Bus {
  return {
    get kind() {
      return bus.kind
    },
    publish: (topic, key, value, headers) => bus.publish(topic, key, value, headers),
    publishMany: (topic, messages) => bus.publishMany(topic, messages),
    subscribe: (options) => bus.subscribe(options),
    ...(bus.health ? { health: () => bus.health?.() ?? Promise.resolve() } : {}),
    close: async () => undefined
  }
}

/** A store whose close() leaves the shared store open. */
export function sharedStore(store: Store): Store {
  return new Proxy(store, {
    get(target, prop, receiver) {
      if (prop === 'close') return async () => undefined
      const v = Reflect.get(target, prop, receiver) as unknown
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v
    }
  })
}

export async function startGateway(t: Test, bus: Bus, store: Store): Promise<Runtime> {
  return startTestRuntime(t, { services: [gatewayService], bus, store, serviceName: 'gateway' })
}

export async function startHistory(t: Test, bus: Bus, store: Store): Promise<Runtime> {
  return startTestRuntime(t, { services: [accountHistoryService], bus, store, serviceName: 'account-history' })
}

export interface Advertiser {
  id: TestIdentity
  account: Account
  fi: FundingInstrument
  /** Signed call to the gateway for `/12/accounts/:account_id{path}`. */
  ads(method: string, path: string, query?: Record<string, string>): Promise<Record<string, unknown>>
  /** Reads the history of one entity from the history service, every page. */
  history(rt: Runtime, entityType: string, entityId: string, query?: Record<string, string>): Promise<HistoryEntryBody[]>
  historyRaw(rt: Runtime, query: Record<string, string>): Promise<TestResponse>
}

/** Whole hours around now, the window history reads accept. */
export function window(): { start_time: string; end_time: string } {
  const hour = 3_600_000
  const start = Math.floor(Date.now() / hour) * hour - hour
  return { start_time: new Date(start).toISOString(), end_time: new Date(start + 3 * hour).toISOString() }
}

export async function advertiser(gateway: Runtime, options: { allowlisted?: boolean } = {}): Promise<Advertiser> {
  const { id, account } = await createAdsIdentity(gateway.ctx)
  const fi = await createDefaultFundingInstrument(gateway.ctx, account.id, { user_id: id.user.id, platform: 'API' })
  if (options.allowlisted !== false) await grantFeatures(gateway.ctx, account.id, ['ACCOUNT_HISTORY_ACCESS'])
  const historyRaw = (rt: Runtime, query: Record<string, string>) => oauth1Request('GET', `${rt.baseUrl}/12/accounts/${account.id}/account_history`, id, { query })
  return {
    id,
    account,
    fi,
    async ads(method, path, query) {
      const res = await oauth1Request(method, `${gateway.baseUrl}/12/accounts/${account.id}${path}`, id, query ? { query } : {})
      if (res.status !== 200) throw new Error(`${method} ${path}: ${res.status} ${res.text}`)
      return res.json<{ data: Record<string, unknown> }>().data
    },
    historyRaw,
    async history(rt, entityType, entityId, query = {}) {
      const out: HistoryEntryBody[] = []
      let cursor: string | null = null
      for (let page = 0; page < 100; page++) {
        const res = await historyRaw(rt, { entity_type: entityType, entity_id: entityId, ...window(), ...query, ...(cursor ? { cursor } : {}) })
        if (res.status !== 200) throw new Error(`history: ${res.status} ${res.text}`)
        const body = res.json<{ data: HistoryEntryBody[]; next_cursor: string | null }>()
        out.push(...body.data)
        cursor = body.next_cursor
        if (!cursor) return out
      }
      throw new Error('history: too many pages')
    }
  }
}

/** Polls the history until it holds `n` entries for the entity. */
export async function historyOf(a: Advertiser, rt: Runtime, entityType: string, entityId: string, n: number, timeoutMs = 15_000): Promise<HistoryEntryBody[]> {
  return eventually(async () => {
    const entries = await a.history(rt, entityType, entityId)
    return entries.length >= n ? entries : undefined
  }, timeoutMs, 50)
}

/**
 * The scenario both modes run: a campaign and a line item created, updated
 * and deleted. Returns their ids and what the history must show.
 */
export async function campaignAndLineItemLifecycle(a: Advertiser): Promise<{ campaignId: string; lineItemId: string }> {
  const campaign = await a.ads('POST', '/campaigns', { funding_instrument_id: a.fi.id, name: 'history campaign', daily_budget_amount_local_micro: '1000000', entity_status: 'PAUSED' })
  const campaignId = campaign.id as string
  const item = await a.ads('POST', '/line_items', { campaign_id: campaignId, objective: 'ENGAGEMENTS', product_type: 'PROMOTED_TWEETS', placements: 'ALL_ON_SVC', bid_amount_local_micro: '2000000', name: 'li' })
  const lineItemId = item.id as string
  await a.ads('PUT', `/campaigns/${campaignId}`, { name: 'renamed campaign', daily_budget_amount_local_micro: '3000000' })
  await a.ads('PUT', `/line_items/${lineItemId}`, { bid_amount_local_micro: '2500000', entity_status: 'PAUSED' })
  await a.ads('DELETE', `/line_items/${lineItemId}`)
  await a.ads('DELETE', `/campaigns/${campaignId}`)
  return { campaignId, lineItemId }
}

/** Checks the six changes of campaignAndLineItemLifecycle as the history returns them. */
export async function checkLifecycleHistory(t: Test, a: Advertiser, rt: Runtime, ids: { campaignId: string; lineItemId: string }): Promise<void> {
  const campaign = await historyOf(a, rt, 'CAMPAIGN', ids.campaignId, 3)
  t.same(campaign.map((e) => e.change_type), ['CREATE', 'UPDATE', 'DELETE'], 'campaign changes in order')
  for (const e of campaign) {
    t.equal(e.entity, 'CAMPAIGN')
    t.equal(e.entity_id, ids.campaignId)
    t.same(e.change_by, { user_id: a.id.user.id, platform: 'API' })
    t.match(e.change_time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/)
  }
  const [created, updated, deleted] = campaign as [HistoryEntryBody, HistoryEntryBody, HistoryEntryBody]
  t.match(created.entity_data, { name: 'history campaign', daily_budget_amount_local_micro: 1000000, entity_status: 'PAUSED', standard_delivery: true, deleted: false, created_at: String, updated_at: String })
  t.same(created.changes.name, { old: null, new: 'history campaign' })
  t.same(updated.changes, { name: { old: 'history campaign', new: 'renamed campaign' }, daily_budget_amount_local_micro: { old: 1000000, new: 3000000 } }, 'the update diff names exactly what changed')
  t.match(updated.entity_data, { name: 'renamed campaign', daily_budget_amount_local_micro: 3000000, deleted: false })
  t.same(deleted.changes, { deleted: { old: false, new: true } })
  t.match(deleted.entity_data, { name: 'renamed campaign', deleted: true })

  const item = await historyOf(a, rt, 'LINE_ITEM', ids.lineItemId, 3)
  t.same(item.map((e) => e.change_type), ['CREATE', 'UPDATE', 'DELETE'], 'line item changes in order')
  const [liCreated, liUpdated, liDeleted] = item as [HistoryEntryBody, HistoryEntryBody, HistoryEntryBody]
  t.match(liCreated.entity_data, { campaign_id: ids.campaignId, objective: 'ENGAGEMENTS', bid_strategy: 'MAX', bid_amount_local_micro: 2000000, entity_status: 'ACTIVE', name: 'li' })
  t.same(liUpdated.changes, { bid_amount_local_micro: { old: 2000000, new: 2500000 }, entity_status: { old: 'ACTIVE', new: 'PAUSED' } })
  t.match(liUpdated.entity_data, { bid_amount_local_micro: 2500000, entity_status: 'PAUSED', deleted: false })
  t.same(liDeleted.changes, { deleted: { old: false, new: true } })
  t.match(liDeleted.entity_data, { deleted: true, bid_amount_local_micro: 2500000 })
}
