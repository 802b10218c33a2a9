import type { FastifyReply, FastifyRequest } from 'fastify'
import type { ServiceContext } from '../../../common/context'
import { adsRequestParams } from '../../../common/http'
import { ADS_API_VERSION, requireJsonBody } from '../conventions'
import type { Membership } from './membership'
import { checkBatchShape, type UploadPlan, type UploadRules, validateUpload } from './uploads'

/**
 * The shared path of both upload endpoints (rate limited by their route's
 * `rateLimit` family, see UPLOAD_RATE_LIMITS): JSON array shape
 * (request-level `errors`), per-operation validation (`operation_errors`,
 * indexed like the input), then one atomic application to the membership.
 * The counts returned are the records processed, which equal the records
 * sent: a client seeing anything else must treat the request as failed.
 */

/**
 * Both upload endpoints: 1500 requests per 1-minute window (service-spec
 * Limits), counted per user by the shared limiter (services/common/ratelimit.ts;
 * operators override through RATE_LIMITS).
 */
export const UPLOAD_RATE_LIMITS = {
  customAudience: { family: 'custom-audience-users' },
  doNotReach: { family: 'do-not-reach-users', limit: 1500, windowMs: 60_000 }
} as const

export interface UploadOutcome {
  plan: UploadPlan
  processed: number
}

export async function runUpload(
  ctx: ServiceContext,
  request: FastifyRequest,
  reply: FastifyReply,
  options: { rules: UploadRules; membership: () => Promise<Membership>; requestEcho: (plan: UploadPlan | undefined, body: unknown[]) => unknown }
): Promise<UploadOutcome | undefined> {
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
  const membership = await options.membership()
  const processed = await membership.apply(validation.plan.operations)
  return { plan: validation.plan, processed }
}

/** `request` of the single-object responses: path params. */
export function pathEcho(request: FastifyRequest): { params: Record<string, unknown> } {
  return { params: adsRequestParams(request) }
}
