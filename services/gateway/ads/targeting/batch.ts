import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { ServiceContext } from '../../../common/context'
import { Ads, AdsError, type AdsErrorItem } from '../../../common/errors'
import { requireAccount } from '../accounts'
import { actorOf, ADS_API_VERSION, ADS_AUTH, Params, requireJsonBody } from '../conventions'
import { CriteriaPlan, withTargetingLock } from './plan'

/**
 * `POST /12/batch/accounts/:account_id/targeting_criteria`: up to 500
 * Create / Delete operations in one JSON array, all or nothing, answered in
 * the order they were sent.
 *
 *  - request-level errors (not an array, empty, too many operations) are
 *    answered under `errors`;
 *  - operation errors under `operation_errors`, one list per operation in
 *    input order (empty for the good ones); parameters inside `params` are
 *    named `params.<name>`. Nothing is written when any operation fails.
 *
 * Each operation is checked against the state the operations before it
 * leave (CriteriaPlan), so a batch can delete a criterion and add its
 * replacement, or add a LOCATION and then a TV_SHOW.
 */

export const MAX_BATCH_OPERATIONS = 500
const OPERATION_TYPES = ['Create', 'Delete'] as const
const CREATE_PARAMS = new Set(['line_item_id', 'targeting_type', 'targeting_value', 'operator_type', 'tailored_audience_expansion'])
const DELETE_PARAMS = new Set(['targeting_criterion_id'])

interface Echo {
  params: Record<string, unknown>
  operation_type: unknown
}

function checkShape(body: unknown): unknown[] {
  if (!Array.isArray(body)) throw Ads.invalid('body', 'The body must be a JSON array of operations ({"operation_type": "Create" | "Delete", "params": {...}})')
  if (body.length === 0) throw Ads.invalid('body', 'The batch holds no operation')
  if (body.length > MAX_BATCH_OPERATIONS) throw Ads.invalid('body', `Batch size exceeded: at most ${MAX_BATCH_OPERATIONS} operations per request, got ${body.length}`)
  return body
}

const inParams = (item: AdsErrorItem): AdsErrorItem => ({ ...item, ...(item.parameter !== undefined ? { parameter: `params.${item.parameter}` } : {}) })

/** Checks one operation and adds it to the plan; returns its errors (empty when it is good). */
async function planOperation(plan: CriteriaPlan, raw: unknown, index: number): Promise<AdsErrorItem[]> {
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) {
    return [{ code: 'INVALID_PARAMETER', message: `Operation ${index} must be an object with operation_type and params`, parameter: 'operation' }]
  }
  const op = raw as Record<string, unknown>
  const errors: AdsErrorItem[] = []
  for (const key of Object.keys(op)) {
    if (key !== 'operation_type' && key !== 'params') errors.push({ code: 'INVALID_PARAMETER', message: `Unknown attribute "${key.slice(0, 40)}" in the operation`, parameter: key.slice(0, 40) })
  }
  const type = op.operation_type
  if (type === undefined || type === null || type === '') errors.push({ code: 'MISSING_PARAMETER', message: '"operation_type" is missing', parameter: 'operation_type' })
  else if (!(OPERATION_TYPES as readonly unknown[]).includes(type)) {
    errors.push({ code: 'INVALID_PARAMETER', message: `Expected one of ${OPERATION_TYPES.join(', ')}, got ${JSON.stringify(type).slice(0, 40)} for operation_type`, parameter: 'operation_type' })
  }
  const params = op.params
  if (params === undefined || params === null) errors.push({ code: 'MISSING_PARAMETER', message: '"params" is missing', parameter: 'params' })
  else if (typeof params !== 'object' || Array.isArray(params)) errors.push({ code: 'INVALID_PARAMETER', message: 'params must be an object', parameter: 'params' })
  if (errors.length > 0) return errors

  const values = params as Record<string, unknown>
  const accepted = type === 'Create' ? CREATE_PARAMS : DELETE_PARAMS
  const unknown = Object.keys(values).filter((k) => !accepted.has(k))
  if (unknown.length > 0) {
    return unknown.map((k) => ({ code: 'INVALID_PARAMETER', message: `Unknown parameter "${k.slice(0, 40)}" for a ${String(type)} operation (accepted: ${[...accepted].join(', ')})`, parameter: `params.${k.slice(0, 40)}` }))
  }
  try {
    const p = Params.of(values)
    if (type === 'Create') await plan.create(p)
    else await plan.delete(p.string('targeting_criterion_id', { required: true, max: 64 }) as string)
    return []
  } catch (err) {
    if (err instanceof AdsError) return err.items.map(inParams)
    throw err
  }
}

function echoOf(body: unknown[], accountId: string): Echo[] {
  return body.map((raw) => {
    const op = (raw !== null && typeof raw === 'object' && !Array.isArray(raw) ? raw : {}) as Record<string, unknown>
    const params = op.params !== null && typeof op.params === 'object' && !Array.isArray(op.params) ? (op.params as Record<string, unknown>) : {}
    return { params: { ...params, account_id: accountId }, operation_type: op.operation_type ?? null }
  })
}

export function registerTargetingBatchRoute(app: FastifyInstance, ctx: ServiceContext): void {
  app.post<{ Params: { account_id: string } }>('/12/batch/accounts/:account_id/targeting_criteria', { config: { auth: ADS_AUTH } }, async (request: FastifyRequest<{ Params: { account_id: string } }>, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const body = checkShape(requireJsonBody(request))
    const echo = echoOf(body, account.id)
    const outcome = await withTargetingLock(ctx, account.id, async () => {
      const plan = new CriteriaPlan(ctx, account.id)
      const operationErrors: AdsErrorItem[][] = []
      for (const [i, raw] of body.entries()) operationErrors.push(await planOperation(plan, raw, i))
      if (operationErrors.some((e) => e.length > 0)) return { ok: false as const, operationErrors }
      return { ok: true as const, data: await plan.apply(actorOf(request)) }
    })
    reply.header('x-current-api-version', ADS_API_VERSION).type('application/json; charset=utf-8')
    if (!outcome.ok) return reply.code(400).send({ operation_errors: outcome.operationErrors, request: echo })
    return reply.send({ data_type: 'targeting_criterion', data: outcome.data, request: echo })
  })
}
