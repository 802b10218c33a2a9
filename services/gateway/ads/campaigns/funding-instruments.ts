import type { FastifyInstance } from 'fastify'
import type { ServiceContext } from '../../../common/context'
import { Ads } from '../../../common/errors'
import { requireAccount } from '../accounts'
import { actorOf, ADS_AUTH, listOptions, Params, sendData } from '../conventions'
import { type AdsEntity, EntityRepo } from '../entities'
import type { Actor } from '../conventions'
import { filterByIds, pageExtras } from './lists'

/**
 * Funding instruments: where a campaign's budget comes from. Read and list
 * on every host; the sandbox creates a default one with each account and
 * can add or delete more (public platform's sandbox-only operations).
 */

export const FUNDING_INSTRUMENT_TYPES = ['AGENCY_CREDIT_LINE', 'CREDIT_CARD', 'CREDIT_LINE', 'INSERTION_ORDER', 'PARTNER_MANAGED'] as const
export type FundingInstrumentType = (typeof FUNDING_INSTRUMENT_TYPES)[number]

export interface FundingInstrument extends AdsEntity {
  account_id: string
  type: FundingInstrumentType
  description: string
  currency: string
  start_time: string
  end_time: string | null
  entity_status: 'ACTIVE' | 'PAUSED'
  able_to_fund: boolean
  reasons_not_able_to_fund: string[]
  io_header: string | null
  credit_limit_local_micro: number | null
  credit_remaining_local_micro: number | null
  funded_amount_local_micro: number | null
}

export function fundingInstruments(ctx: ServiceContext): EntityRepo<FundingInstrument> {
  return new EntityRepo<FundingInstrument>(ctx, 'FUNDING_INSTRUMENT', 'funding_instrument')
}

const CURRENCY = /^[A-Z]{3}$/

export interface NewFundingInstrument {
  type: FundingInstrumentType
  currency: string
  start_time: string
  end_time?: string | null
  credit_limit_local_micro?: number | null
  funded_amount_local_micro?: number | null
}

export async function createFundingInstrument(ctx: ServiceContext, accountId: string, input: NewFundingInstrument, actor: Actor): Promise<FundingInstrument> {
  const credit = input.type === 'CREDIT_CARD' || input.type === 'CREDIT_LINE' || input.type === 'AGENCY_CREDIT_LINE' ? (input.credit_limit_local_micro ?? null) : null
  return fundingInstruments(ctx).create(
    accountId,
    {
      account_id: accountId,
      type: input.type,
      description: '(sandbox funding instrument: no charges are made)',
      currency: input.currency,
      start_time: input.start_time,
      end_time: input.end_time ?? null,
      entity_status: 'ACTIVE',
      able_to_fund: true,
      reasons_not_able_to_fund: [],
      io_header: null,
      credit_limit_local_micro: credit,
      credit_remaining_local_micro: input.type === 'CREDIT_LINE' || input.type === 'AGENCY_CREDIT_LINE' ? credit : null,
      funded_amount_local_micro: input.type === 'INSERTION_ORDER' ? (input.funded_amount_local_micro ?? null) : null
    },
    actor
  )
}

/** The instrument every sandbox account starts with, so campaigns can be created at once. */
export async function createDefaultFundingInstrument(ctx: ServiceContext, accountId: string, actor: Actor): Promise<FundingInstrument> {
  return createFundingInstrument(ctx, accountId, { type: 'CREDIT_CARD', currency: 'USD', start_time: new Date().toISOString().replace(/\.\d{3}Z$/, 'Z'), credit_limit_local_micro: 1_000_000_000_000 }, actor)
}

/** A funding instrument can pay for new spend when it is live, not deleted and not past its end. */
export function ableToFund(fi: FundingInstrument, now = Date.now()): { able: boolean; reasons: string[] } {
  const reasons: string[] = []
  if (fi.deleted) reasons.push('DELETED')
  if (fi.end_time !== null && Date.parse(fi.end_time) <= now) reasons.push('EXPIRED')
  if (fi.entity_status !== 'ACTIVE') reasons.push('PAUSED')
  return { able: reasons.length === 0, reasons }
}

export function renderFundingInstrument(fi: FundingInstrument): FundingInstrument {
  const { able, reasons } = ableToFund(fi)
  return { ...fi, able_to_fund: able, reasons_not_able_to_fund: reasons }
}

/** GET list/read on every host. */
export async function registerFundingInstrumentRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  const repo = fundingInstruments(ctx)

  app.get<{ Params: { account_id: string } }>('/12/accounts/:account_id/funding_instruments', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const p = Params.query(request)
    const ids = p.list('funding_instrument_ids', { max: 200 })
    const opts = listOptions(p, { countDefault: 200, countMax: 1000, sortable: ['created_at', 'updated_at', 'start_time', 'end_time', 'id', 'type'] })
    const page = filterByIds(await repo.list(account.id), ids, opts)
    return sendData(request, reply, page.data.map(renderFundingInstrument), 'funding_instrument', pageExtras(page))
  })

  app.get<{ Params: { account_id: string; funding_instrument_id: string } }>(
    '/12/accounts/:account_id/funding_instruments/:funding_instrument_id',
    { config: { auth: ADS_AUTH } },
    async (request, reply) => {
      const account = await requireAccount(ctx, request, request.params.account_id)
      const withDeleted = Params.query(request).bool('with_deleted', { default: false })
      const fi = await repo.require(account.id, request.params.funding_instrument_id, { withDeleted, notFoundCode: 'FUNDING_INSTRUMENT_NOT_FOUND' })
      return sendData(request, reply, renderFundingInstrument(fi), 'funding_instrument')
    }
  )
}

/** Sandbox-only: add and delete funding instruments. */
export async function registerSandboxFundingInstrumentRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  const repo = fundingInstruments(ctx)

  app.post<{ Params: { account_id: string } }>('/12/accounts/:account_id/funding_instruments', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const p = Params.query(request)
    const currency = p.string('currency', { required: true, pattern: CURRENCY }) as string
    const startTime = p.time('start_time', { required: true }) as string
    const type = p.enumOf('type', FUNDING_INSTRUMENT_TYPES, { required: true }) as FundingInstrumentType
    const endTime = p.time('end_time') ?? null
    if (endTime !== null && Date.parse(endTime) <= Date.parse(startTime)) throw Ads.invalid('end_time', 'end_time must be later than start_time')
    const creditLimit = p.long('credit_limit_local_micro', { min: 1 }) ?? null
    const fundedAmount = p.long('funded_amount_local_micro', { min: 1 }) ?? null
    const fi = await createFundingInstrument(
      ctx,
      account.id,
      { type, currency, start_time: startTime, end_time: endTime, credit_limit_local_micro: creditLimit, funded_amount_local_micro: fundedAmount },
      actorOf(request)
    )
    return sendData(request, reply, renderFundingInstrument(fi), 'funding_instrument')
  })

  app.delete<{ Params: { account_id: string; funding_instrument_id: string } }>(
    '/12/accounts/:account_id/funding_instruments/:funding_instrument_id',
    { config: { auth: ADS_AUTH } },
    async (request, reply) => {
      const account = await requireAccount(ctx, request, request.params.account_id)
      const fi = await repo.softDelete(account.id, request.params.funding_instrument_id, actorOf(request), { notFoundCode: 'FUNDING_INSTRUMENT_NOT_FOUND' })
      return sendData(request, reply, renderFundingInstrument(fi), 'funding_instrument')
    }
  )
}
