import type { FastifyInstance } from 'fastify'
import type { ServiceContext } from '../../../common/context'
import { requireAccount } from '../accounts'
import { actorOf, ADS_AUTH, listOptions, paginate, Params, sendData } from '../conventions'
import { registerTargetingBatchRoute } from './batch'
import { NOT_FOUND_CODE, type TargetingCriterion, targetingCriteria } from './criteria'
import { localizedName, readLang } from './names'
import { CriteriaPlan, withTargetingLock } from './plan'

/**
 * Targeting criteria of line items (`/12/accounts/:account_id/targeting_criteria`):
 * list (line_item_ids required), read, create, delete, and the batch
 * endpoint (batch.ts). Every change is an entity change of type
 * TARGETING_CRITERIA on ads.entity-changes, from which account history and
 * the audiences' targeting index (`custom_audiences/:id/targeted`) learn.
 */

const IDS = /^[0-9a-z]{1,32}$/
const SORTABLE = ['created_at', 'updated_at', 'id', 'line_item_id', 'targeting_type', 'targeting_value', 'name']

type Rendered = TargetingCriterion & { localized_name?: string }

export function renderCriterion(c: TargetingCriterion, lang?: string): Rendered {
  if (lang === undefined) return c
  const localized = localizedName(c.targeting_type, c.targeting_value, lang)
  return localized === undefined ? c : { ...c, localized_name: localized }
}

export async function registerTargetingRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  const repo = targetingCriteria(ctx)
  type AccountPath = { Params: { account_id: string } }
  type CriterionPath = { Params: { account_id: string; targeting_criterion_id: string } }

  app.get<AccountPath>('/12/accounts/:account_id/targeting_criteria', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const p = Params.query(request)
    const lineItemIds = new Set(p.list('line_item_ids', { required: true, max: 200, itemPattern: IDS }))
    const ids = p.list('targeting_criterion_ids', { max: 200, itemPattern: IDS })
    const lang = readLang(p)
    const opts = listOptions(p, { countDefault: 200, countMax: 1000, sortable: SORTABLE })
    const wanted = ids === undefined ? undefined : new Set(ids)
    const all = (await repo.list(account.id)).filter((c) => lineItemIds.has(c.line_item_id) && (wanted === undefined || wanted.has(c.id)))
    const page = paginate(all, opts)
    return sendData(request, reply, page.data.map((c) => renderCriterion(c, lang)), 'targeting_criterion', {
      next_cursor: page.next_cursor,
      ...(page.total_count !== undefined ? { total_count: page.total_count } : {})
    })
  })

  app.get<CriterionPath>('/12/accounts/:account_id/targeting_criteria/:targeting_criterion_id', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const p = Params.query(request)
    const withDeleted = p.bool('with_deleted', { default: false })
    const lang = readLang(p)
    const id = request.params.targeting_criterion_id
    const c = await repo.require(account.id, IDS.test(id) ? id : '-', { withDeleted, notFoundCode: NOT_FOUND_CODE })
    return sendData(request, reply, renderCriterion(c, lang), 'targeting_criterion')
  })

  app.post<AccountPath>('/12/accounts/:account_id/targeting_criteria', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const p = Params.query(request)
    const [created] = await withTargetingLock(ctx, account.id, async () => {
      const plan = new CriteriaPlan(ctx, account.id)
      await plan.create(p)
      return plan.apply(actorOf(request))
    })
    return sendData(request, reply, created, 'targeting_criterion')
  })

  app.delete<CriterionPath>('/12/accounts/:account_id/targeting_criteria/:targeting_criterion_id', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const [deleted] = await withTargetingLock(ctx, account.id, async () => {
      const plan = new CriteriaPlan(ctx, account.id)
      await plan.delete(request.params.targeting_criterion_id)
      return plan.apply(actorOf(request))
    })
    return sendData(request, reply, deleted, 'targeting_criterion')
  })

  registerTargetingBatchRoute(app, ctx)
}
