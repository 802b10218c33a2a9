import type { ServiceContext } from '../../../common/context'
import { Ads, AdsError } from '../../../common/errors'
import { getUser } from '../../identity'
import { audienceAccess, canTarget, publicAudience } from '../audiences/audiences'
import { withLock } from '../catalog/lock'
import { campaigns } from '../campaigns/campaign-records'
import { type LineItem, lineItems } from '../campaigns/line-items'
import type { Actor, Params } from '../conventions'
import type { NewFields } from '../entities'
import { type CriterionInput, NOT_FOUND_CODE, readCriterionInput, ruleOf, sameTarget, type TargetingCriterion, targetingCriteria } from './criteria'
import { genderName, languageName } from './names'

/**
 * Changes to an account's targeting criteria, checked against what is
 * stored and then applied in order. The single-criterion operations and the
 * batch endpoint share it: every operation is checked against the state
 * the operations before it leave (a batch may add a LOCATION and then a
 * TV_SHOW that needs it, but not two AGE buckets), nothing is written until
 * every operation passed (all or nothing), and the whole runs under the
 * account's targeting lease so concurrent requests cannot both pass a
 * once-per-line-item rule.
 *
 * Checks against stored state:
 *  - the line item exists in the account and is not deleted;
 *  - CUSTOM_AUDIENCE values: the account may target the audience now
 *    (`canTarget`: it owns it or holds a grant that was not revoked) and
 *    the audience is targetable (large enough, processed). A revoked grant
 *    therefore blocks new criteria while the existing ones stay;
 *  - user values name a registered user; campaign values a campaign of the account;
 *  - LANGUAGE values name a real language;
 *  - per line item: no duplicate (same type, value and operator), one AGE
 *    bucket, one EVENT, and a TV_SHOW only once the line item has a LOCATION.
 */

export type PlannedOperation =
  | { kind: 'create'; fields: NewFields<TargetingCriterion> }
  | { kind: 'delete'; id: string }

type Live = Pick<TargetingCriterion, 'id' | 'line_item_id' | 'targeting_type' | 'targeting_value' | 'operator_type'>

export class CriteriaPlan {
  readonly operations: PlannedOperation[] = []
  private live: Map<string, Live[]> | undefined
  private readonly deleted = new Set<string>()
  private readonly lineItemCache = new Map<string, LineItem | undefined>()

  constructor(
    private readonly ctx: ServiceContext,
    private readonly accountId: string
  ) {}

  private async liveByLineItem(): Promise<Map<string, Live[]>> {
    if (!this.live) {
      this.live = new Map()
      for (const c of await targetingCriteria(this.ctx).list(this.accountId)) {
        if (!c.deleted) this.live.set(c.line_item_id, [...(this.live.get(c.line_item_id) ?? []), c])
      }
    }
    return this.live
  }

  private async lineItem(id: string): Promise<LineItem | undefined> {
    if (!this.lineItemCache.has(id)) this.lineItemCache.set(id, /^[0-9a-z]{1,32}$/.test(id) ? await lineItems(this.ctx).get(this.accountId, id) : undefined)
    return this.lineItemCache.get(id)
  }

  /** Checks one new criterion (throws the AdsError naming the parameter) and queues it. */
  async create(p: Params): Promise<NewFields<TargetingCriterion>> {
    const input = readCriterionInput(p)
    const li = await this.lineItem(input.line_item_id)
    if (!li) throw Ads.invalid('line_item_id', `Line item ${input.line_item_id.slice(0, 64)} was not found in account ${this.accountId}`)
    const name = await this.checkValue(input)
    const siblings = (await this.liveByLineItem()).get(li.id) ?? []
    this.checkLineItemRules(input, siblings)
    const fields: NewFields<TargetingCriterion> = {
      line_item_id: li.id,
      name,
      targeting_type: input.targeting_type,
      targeting_value: input.targeting_value,
      operator_type: input.operator_type
    }
    siblings.push({ id: '', ...input, line_item_id: li.id })
    ;(await this.liveByLineItem()).set(li.id, siblings)
    this.operations.push({ kind: 'create', fields })
    return fields
  }

  /** Checks that the criterion exists and is live (not deleted, nor deleted earlier in this plan) and queues its delete. */
  async delete(id: string, parameter = 'targeting_criterion_id'): Promise<void> {
    const existing = /^[0-9a-z]{1,32}$/.test(id) ? await targetingCriteria(this.ctx).get(this.accountId, id) : undefined
    if (!existing || this.deleted.has(id)) {
      throw new AdsError(404, { code: NOT_FOUND_CODE, message: `Targeting criterion ${id.slice(0, 64)} was not found`, parameter })
    }
    this.deleted.add(id)
    const live = await this.liveByLineItem()
    live.set(existing.line_item_id, (live.get(existing.line_item_id) ?? []).filter((c) => c.id !== id))
    this.operations.push({ kind: 'delete', id })
  }

  /** Writes every queued operation in order; returns the criteria as they are afterwards. */
  async apply(actor: Actor): Promise<TargetingCriterion[]> {
    const repo = targetingCriteria(this.ctx)
    const out: TargetingCriterion[] = []
    for (const op of this.operations) {
      if (op.kind === 'create') out.push(await repo.create(this.accountId, op.fields, actor))
      else out.push(await repo.softDelete(this.accountId, op.id, actor, { notFoundCode: NOT_FOUND_CODE }))
    }
    return out
  }

  /** Checks what the value refers to and returns the criterion's display name. */
  private async checkValue(input: CriterionInput): Promise<string> {
    const { targeting_type: type, targeting_value: value } = input
    switch (ruleOf(type).references) {
      case 'audience': {
        if (!(await canTarget(this.ctx, this.accountId, value))) {
          throw Ads.invalid('targeting_value', `Custom audience ${value} is not available to account ${this.accountId}: it was not found, or it is not shared with this account (any more)`)
        }
        const access = await audienceAccess(this.ctx, this.accountId, value)
        if (!access) throw Ads.invalid('targeting_value', `Custom audience ${value} is not available to account ${this.accountId}`)
        const audience = await publicAudience(this.ctx, access)
        if (!audience.targetable) {
          throw Ads.invalid('targeting_value', `Custom audience ${value} is not targetable yet (reasons_not_targetable: ${audience.reasons_not_targetable.join(', ')})`)
        }
        return audience.name
      }
      case 'user': {
        const user = await getUser(this.ctx.store, value)
        if (!user) throw Ads.invalid('targeting_value', `User ${value} was not found`)
        return `@${user.screen_name}`
      }
      case 'campaign': {
        const campaign = await campaigns(this.ctx).get(this.accountId, value, { withDeleted: true })
        if (!campaign) throw Ads.invalid('targeting_value', `Campaign ${value} was not found in account ${this.accountId}`)
        return campaign.name
      }
      case 'language': {
        const name = languageName(value)
        if (!name) throw Ads.invalid('targeting_value', `Unknown language code "${value}" (expected ISO 639-1)`)
        return name
      }
      case 'none':
        return type === 'GENDER' ? genderName(value) : value
    }
  }

  private checkLineItemRules(input: CriterionInput, siblings: Live[]): void {
    const lineItemId = input.line_item_id
    const duplicate = siblings.find((c) => sameTarget(c, input))
    if (duplicate) {
      throw new AdsError(400, {
        code: 'DUPLICATE',
        message: `Line item ${lineItemId} already targets ${input.targeting_type} ${input.targeting_value.slice(0, 100)} with operator ${input.operator_type}${duplicate.id ? ` (criterion ${duplicate.id})` : ' (earlier in this batch)'}`,
        parameter: 'targeting_value'
      })
    }
    if (ruleOf(input.targeting_type).single && siblings.some((c) => c.targeting_type === input.targeting_type)) {
      throw Ads.invalid('targeting_type', `A line item can target a single ${input.targeting_type}; line item ${lineItemId} already has one (delete it first)`)
    }
    if (input.targeting_type === 'TV_SHOW' && input.operator_type === 'EQ' && !siblings.some((c) => c.targeting_type === 'LOCATION' && c.operator_type === 'EQ')) {
      throw Ads.invalid('targeting_type', `TV_SHOW targeting needs a LOCATION criterion on line item ${lineItemId} first`)
    }
  }
}

/** Runs `fn` holding the account's targeting lease (see CriteriaPlan). */
export function withTargetingLock<T>(ctx: ServiceContext, accountId: string, fn: () => Promise<T>): Promise<T> {
  return withLock(ctx.store, `ads:targeting-lock:${accountId}`, fn)
}
