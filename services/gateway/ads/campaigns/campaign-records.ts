import type { ServiceContext } from '../../../common/context'
import { withLock } from '../catalog/lock'
import { type AdsEntity, EntityRepo } from '../entities'

/**
 * The stored campaign (`ads:campaign:{account_id}:{id}`), its repository and
 * its lease, shared by the campaign routes (./campaigns) and the line item
 * rules (./line-items, ./line-item-routes).
 */

export const BUDGET_OPTIMIZATIONS = ['CAMPAIGN', 'LINE_ITEM'] as const
export type BudgetOptimization = (typeof BUDGET_OPTIMIZATIONS)[number]
export const CAMPAIGN_CREATE_STATUSES = ['ACTIVE', 'DRAFT', 'PAUSED'] as const
export const CAMPAIGN_UPDATE_STATUSES = ['ACTIVE', 'PAUSED'] as const
export type CampaignStatus = (typeof CAMPAIGN_CREATE_STATUSES)[number]

export interface Campaign extends AdsEntity {
  name: string
  funding_instrument_id: string
  budget_optimization: BudgetOptimization
  daily_budget_amount_local_micro: number | null
  total_budget_amount_local_micro: number | null
  entity_status: CampaignStatus
  purchase_order_number: string | null
  standard_delivery: boolean | null
  start_time: string | null
  end_time: string | null
  duration_in_days: number | null
  frequency_cap: number | null
  currency: string
}

/**
 * The campaign repository. No `render`: the stored campaign has no internal
 * field, and the fields a read adds (servable, reasons_not_servable,
 * effective_status) are derived from other entities at read time, so they
 * are not part of the campaign's change history.
 */
export function campaigns(ctx: ServiceContext): EntityRepo<Campaign> {
  return new EntityRepo<Campaign>(ctx, 'CAMPAIGN', 'campaign')
}

/**
 * Runs `fn` holding the campaign's entity lease: the lease of every change
 * of the campaign (EntityRepo), taken also by the line item writes whose
 * rules depend on the campaign (create, PUT), so those rules and a
 * budget-optimization switch never pass on copies that another request is
 * changing. Lock order: campaign, then line item.
 */
export function withCampaignLock<T>(ctx: ServiceContext, accountId: string, campaignId: string, fn: () => Promise<T>): Promise<T> {
  return withLock(ctx.store, campaigns(ctx).lockKey(accountId, campaignId), fn)
}
