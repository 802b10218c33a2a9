import type { FastifyReply, FastifyRequest } from 'fastify'
import type { ServiceContext } from '../../../common/context'
import { AdsError } from '../../../common/errors'
import { adsRequestParams } from '../../../common/server'
import { ADS_API_VERSION, requireJsonBody } from '../conventions'
import type { MembershipOperation } from './membership'
import { checkBatchShape, type UploadPlan, type UploadRules, validateUpload } from './uploads'

/**
 * The shared path of both upload endpoints (rate limited by their route's
 * `rateLimit` family, see UPLOAD_RATE_LIMITS): JSON array shape
 * (request-level `errors`), per-operation validation (`operation_errors`,
 * indexed like the input), then one atomic application to the membership,
 * committed with the list's entity change (one store batch: the gateway
 * outbox publishes the change afterwards).
 * The success counts are the records the store really holds afterwards;
 * any difference from the records sent is answered as an error to retry.
 */

/**
 * Both upload endpoints: 1500 requests per 1-minute window (docs/ads.md
 * Limits), counted per user by the shared limiter (services/common/ratelimit.ts;
 * operators override through RATE_LIMITS).
 */
export const UPLOAD_RATE_LIMITS = {
  customAudience: { family: 'custom-audience-users' },
  doNotReach: { family: 'do-not-reach-users', limit: 1500, windowMs: 60_000 }
} as const

export interface UploadOutcome {
  plan: UploadPlan
  /** Per operation, the user objects the store really holds as planned after the write (Membership.apply). */
  applied: number[]
}

/** Records sent and records applied, per operation and in total. */
export function uploadCounts(outcome: UploadOutcome): { perOperation: Array<{ success_count: number; total_count: number }>; success: number; total: number } {
  const perOperation = outcome.plan.counts.map((total, i) => ({ success_count: outcome.applied[i] ?? 0, total_count: total }))
  return {
    perOperation,
    success: perOperation.reduce((a, c) => a + c.success_count, 0),
    total: perOperation.reduce((a, c) => a + c.total_count, 0)
  }
}

/**
 * The contract's batch rule (docs/contract.md "Audiences"): success_count == total_count == records sent, or
 * the request is an error the client must retry. A mismatch is never
 * answered as a success (Update and Delete are idempotent, so a retry
 * converges).
 */
export function requireFullyApplied(ctx: ServiceContext, outcome: UploadOutcome, what: string): void {
  const { success, total } = uploadCounts(outcome)
  if (success === total) return
  ctx.log.error({ what, applied: outcome.applied, sent: outcome.plan.counts }, 'upload applied a different number of records than sent')
  throw new AdsError(500, { code: 'INTERNAL_ERROR', message: `The upload was not fully applied (${success} of ${total} records); retry the request` })
}

export interface UploadOptions {
  rules: UploadRules
  /**
   * Applies the validated operations (Membership.apply, whose commit puts
   * the list's entity change in the upload's batch) and returns what it
   * returns.
   */
  apply: (operations: MembershipOperation[]) => Promise<number[]>
  requestEcho: (plan: UploadPlan | undefined, body: unknown[]) => unknown
}

export async function runUpload(ctx: ServiceContext, request: FastifyRequest, reply: FastifyReply, options: UploadOptions): Promise<UploadOutcome | undefined> {
  const body = checkBatchShape(requireJsonBody(request))
  const validation = validateUpload(body, options.rules)
  if (!validation.ok) {
    reply
      .code(400)
      .header('x-current-api-version', ADS_API_VERSION)
      .type('application/json; charset=utf-8')
      .send({ operation_errors: validation.operationErrors, request: options.requestEcho(undefined, body) })
    return undefined
  }
  const applied = await options.apply(validation.plan.operations)
  return { plan: validation.plan, applied }
}

/** `request` of the single-object responses: path params. */
export function pathEcho(request: FastifyRequest): { params: Record<string, unknown> } {
  return { params: adsRequestParams(request) }
}
