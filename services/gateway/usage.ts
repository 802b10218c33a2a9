import type { FastifyInstance } from 'fastify'
import type { ServiceContext } from '../common/context'
import { Problems } from '../common/errors'
import { usageMeter, type UsageReport } from '../common/usage'
import { getApp } from './identity'

/**
 * Usage of posts (services/common/usage.ts), read and capped here:
 *
 *  - `GET /2/usage/tweets` (app-only bearer, as the platform): the project's
 *    posts consumed per UTC day for the last `days` (1..90, default 7), per
 *    client app and in all, the billing cycle's total and the caps. Without
 *    `usage.fields` the platform's default fields: `cap_reset_day`,
 *    `project_cap`, `project_id`, `project_usage`.
 *  - the operator API (inside /admin's guard, admin.ts): an app's caps and
 *    its usage, `GET /admin/apps/:id/usage` and `PUT /admin/apps/:id/usage-caps`
 *    (`make app-caps`).
 */

export const USAGE_FIELDS = ['cap_reset_day', 'daily_client_app_usage', 'daily_project_usage', 'project_cap', 'project_id', 'project_usage'] as const
type UsageField = (typeof USAGE_FIELDS)[number]
const DEFAULT_FIELDS: readonly UsageField[] = ['cap_reset_day', 'project_cap', 'project_id', 'project_usage']

/** The platform's figure for this endpoint: 50 requests per 15 minutes per app. */
const USAGE_LIMIT = { family: 'usage', limit: 50, windowMs: 15 * 60_000 }

function parseFields(raw: string | undefined): readonly UsageField[] {
  if (raw === undefined) return DEFAULT_FIELDS
  const names = raw.split(',')
  const bad = [...new Set(names.filter((n) => !(USAGE_FIELDS as readonly string[]).includes(n)))]
  if (bad.length > 0) {
    throw Problems.invalidRequest(
      bad.map((n) => ({
        message: `The \`usage.fields\` query parameter value [${n}] is not one of [${USAGE_FIELDS.join(',')}]`,
        parameters: { 'usage.fields': [n] }
      }))
    )
  }
  return [...new Set(names)] as UsageField[]
}

export async function registerUsageRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  const meter = usageMeter(ctx)
  app.get('/2/usage/tweets', {
    config: { auth: { schemes: ['bearer-app'] }, rateLimit: USAGE_LIMIT },
    schema: { querystring: { $ref: 'http/usage-tweets#/definitions/Query' } }
  }, async (request) => {
    const query = request.query as { days?: number; 'usage.fields'?: string }
    const fields = parseFields(query['usage.fields'])
    const report = await meter.report(query.days ?? 7)
    const data: Partial<UsageReport> = {}
    for (const f of fields) if (report[f] !== undefined) (data as Record<string, unknown>)[f] = report[f]
    return { data }
  })
}

const idParams = { type: 'object', required: ['id'], properties: { id: { type: 'string', pattern: '^[0-9]{1,19}$' } } }
const capValue = { anyOf: [{ type: 'integer', minimum: 0, maximum: Number.MAX_SAFE_INTEGER }, { type: 'null' }] }

/** Operator routes; registered by admin.ts inside its operator-token guard. */
export function registerUsageAdminRoutes(admin: FastifyInstance, ctx: ServiceContext): void {
  const meter = usageMeter(ctx)

  admin.get('/admin/apps/:id/usage', { schema: { params: idParams } }, async (request) => {
    const { id } = request.params as { id: string }
    if (!(await getApp(ctx.store, id))) throw Problems.resourceNotFound('id', id, 'app')
    return { data: { app_id: id, ...(await meter.appUsage(id)) } }
  })

  admin.put(
    '/admin/apps/:id/usage-caps',
    {
      schema: {
        params: idParams,
        // A number sets the cap (0: none for this app); null returns to the configured default.
        body: { type: 'object', additionalProperties: false, minProperties: 1, properties: { daily: capValue, monthly: capValue } }
      }
    },
    async (request) => {
      const { id } = request.params as { id: string }
      if (!(await getApp(ctx.store, id))) throw Problems.resourceNotFound('id', id, 'app')
      await meter.setCaps(id, request.body as { daily?: number | null; monthly?: number | null })
      request.log.info({ app_id: id, caps: request.body }, 'usage caps changed')
      return { data: { app_id: id, ...(await meter.appUsage(id)) } }
    }
  )
}
