import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { ServiceContext } from '../../../common/context'
import { Ads, AdsError } from '../../../common/errors'
import { requireAccount } from '../accounts'
import { type Actor, ADS_API_VERSION, ADS_AUTH, actorOf, listOptions, paginate, Params, sendData } from '../conventions'
import { commitEntityChanges } from '../entities'
import { withLock } from '../catalog/lock'
import { type AudienceAccess, audienceMembers, audienceRepo, publicAudience, type PublicAudience, renderAudience, requireAudience, sharedWith } from './audiences'
import type { MembershipOperation } from './membership'
import { registerDoNotReachRoutes } from './do-not-reach'
import { registerInsightsRoutes } from './insights'
import { registerPermissionRoutes } from './permissions'
import { registerTargetedRoutes } from './targeted'
import { pathEcho, requireFullyApplied, runUpload, UPLOAD_RATE_LIMITS, uploadCounts } from './upload-routes'
import { CUSTOM_AUDIENCE_RULES, MAX_UPLOAD_BODY_BYTES } from './uploads'

/**
 * The audiences part of the advertising interface: keyword insights, custom
 * audiences with their sharing permissions, targeted campaigns and user
 * uploads, and do-not-reach lists. Background work: audiences/background-work.ts.
 */

const MAX_NAME = 255
const MAX_DESCRIPTION = 1000
const MAX_FILTER_IDS = 200

const pathOf = (request: FastifyRequest): Record<string, string> => request.params as Record<string, string>

function requireOwner(access: AudienceAccess, what: string): void {
  if (!access.isOwner) {
    throw new AdsError(403, { code: 'ACTION_NOT_ALLOWED', message: `Only the owning account (${access.audience.owner_account_id}) can ${what} audience ${access.audience.id}`, parameter: 'custom_audience_id' })
  }
}

async function nameTaken(ctx: ServiceContext, accountId: string, name: string, exceptId?: string): Promise<boolean> {
  const all = await audienceRepo(ctx).list(accountId)
  return all.some((a) => !a.deleted && a.id !== exceptId && a.name === name)
}

/** Uploads need ownership or a READ_WRITE grant. */
function requireUploadAccess(access: AudienceAccess): AudienceAccess {
  if (!access.isOwner && access.level !== 'READ_WRITE') {
    throw new AdsError(403, { code: 'ACTION_NOT_ALLOWED', message: `Audience ${access.audience.id} is shared with this account READ_ONLY; uploads need READ_WRITE`, parameter: 'custom_audience_id' })
  }
  return access
}

function duplicateName(name: string): AdsError {
  return new AdsError(409, { code: 'DUPLICATE', message: `An audience named "${name.slice(0, 100)}" already exists in this account; names must be unique`, parameter: 'name' })
}

/**
 * Applies an upload to the audience's members. The members and the
 * audience's UPDATE change (its size before and after) commit in one batch,
 * under the audience's entity lease: a rename or a delete of the audience
 * is not interleaved, and an audience deleted meanwhile is 404.
 */
async function applyAudienceUpload(ctx: ServiceContext, accountId: string, access: AudienceAccess, operations: MembershipOperation[], actor: Actor): Promise<number[]> {
  const { owner_account_id: owner, id } = access.audience
  return withLock(ctx.store, audienceRepo(ctx).lockKey(owner, id), async () => {
    const current = requireUploadAccess(await requireAudience(ctx, accountId, id))
    return audienceMembers(ctx, id).apply(operations, Date.now(), async (ops, { before, after }) => {
      const [was, now] = [renderAudience(current, before), renderAudience(current, after)]
      await commitEntityChanges(ctx, ops, [
        {
          account_id: owner,
          entity_type: 'CUSTOM_AUDIENCE',
          entity_id: id,
          change_type: 'UPDATE',
          changed_by: actor,
          changes: was.audience_size === now.audience_size ? {} : { audience_size: { old: was.audience_size, new: now.audience_size } },
          entity_data: { ...now }
        }
      ])
    })
  })
}

export async function registerAudienceRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  const route = { config: { auth: ADS_AUTH } }
  const repo = audienceRepo(ctx)

  app.get('/12/accounts/:account_id/custom_audiences', { config: { auth: ADS_AUTH, adsListParams: ['custom_audience_ids'] } }, async (request, reply) => {
    const p = Params.query(request)
    const opts = listOptions(p, { countDefault: 200, countMin: 1, countMax: 1000, sortable: ['created_at', 'updated_at', 'name', 'id'] })
    const scope = p.enumOf('permission_scope', ['OWNER', 'SHARED'] as const) ?? 'OWNER'
    const q = p.string('q', { min: 1, max: 255 })
    const ids = p.list('custom_audience_ids', { max: MAX_FILTER_IDS, itemPattern: /^[0-9a-z]{1,32}$/ })
    const account = await requireAccount(ctx, request, pathOf(request).account_id ?? '')
    const accesses: AudienceAccess[] =
      scope === 'OWNER' ? (await repo.list(account.id)).map((audience) => ({ audience, isOwner: true, level: 'READ_WRITE' as const })) : await sharedWith(ctx, account.id, { withDeleted: opts.withDeleted })
    const filtered = accesses.filter((a) => (!ids || ids.includes(a.audience.id)) && (q === undefined || a.audience.name.toLowerCase().startsWith(q.toLowerCase())))
    // paginate() sorts and filters on the entity fields; the computed ones are added per page.
    const page = paginate(
      filtered.map((a) => ({ ...a.audience, access: a })),
      opts
    )
    const data: PublicAudience[] = await Promise.all(page.data.map((e) => publicAudience(ctx, e.access)))
    return sendData(request, reply, data, 'custom_audience', { next_cursor: page.next_cursor, ...(page.total_count !== undefined ? { total_count: page.total_count } : {}) })
  })

  app.get('/12/accounts/:account_id/custom_audiences/:custom_audience_id', route, async (request, reply) => {
    const p = Params.query(request)
    const withDeleted = p.bool('with_deleted', { default: false }) ?? false
    const account = await requireAccount(ctx, request, pathOf(request).account_id ?? '')
    const access = await requireAudience(ctx, account.id, pathOf(request).custom_audience_id ?? '', { withDeleted })
    return sendData(request, reply, await publicAudience(ctx, access), 'custom_audience')
  })

  app.post('/12/accounts/:account_id/custom_audiences', route, async (request, reply) => {
    const p = Params.query(request)
    const name = (p.string('name', { required: true, max: MAX_NAME }) as string).trim()
    if (name === '') throw Ads.invalid('name', 'name must not be blank')
    const description = p.string('description', { max: MAX_DESCRIPTION }) ?? null
    const account = await requireAccount(ctx, request, pathOf(request).account_id ?? '')
    const created = await withLock(ctx.store, `ads:custom_audience:${account.id}:lock`, async () => {
      if (await nameTaken(ctx, account.id, name)) throw duplicateName(name)
      return repo.create(
        account.id,
        { name, description, audience_type: 'CRM', partner_source: 'OTHER', targetable_types: ['CRM', 'EXCLUDED_CRM'], owner_account_id: account.id },
        actorOf(request)
      )
    })
    return sendData(request, reply, await publicAudience(ctx, { audience: created, isOwner: true, level: 'READ_WRITE' }), 'custom_audience')
  })

  app.put('/12/accounts/:account_id/custom_audiences/:custom_audience_id', route, async (request, reply) => {
    const p = Params.query(request)
    const rawName = p.string('name', { max: MAX_NAME })
    const name = rawName?.trim()
    if (name === '') throw Ads.invalid('name', 'name must not be blank')
    const description = p.isEmpty('description') ? null : p.string('description', { max: MAX_DESCRIPTION })
    if (name === undefined && description === undefined) throw new AdsError(400, { code: 'MISSING_PARAMETER', message: 'Nothing to update: send name or description', parameter: 'name' })
    const account = await requireAccount(ctx, request, pathOf(request).account_id ?? '')
    const access = await requireAudience(ctx, account.id, pathOf(request).custom_audience_id ?? '')
    requireOwner(access, 'update')
    const updated = await withLock(ctx.store, `ads:custom_audience:${account.id}:lock`, async () => {
      if (name !== undefined && (await nameTaken(ctx, account.id, name, access.audience.id))) throw duplicateName(name)
      return repo.update(account.id, access.audience.id, { ...(name !== undefined ? { name } : {}), ...(description !== undefined ? { description } : {}) }, actorOf(request))
    })
    return sendData(request, reply, await publicAudience(ctx, { ...access, audience: updated }), 'custom_audience')
  })

  app.delete('/12/accounts/:account_id/custom_audiences/:custom_audience_id', route, async (request, reply) => {
    const account = await requireAccount(ctx, request, pathOf(request).account_id ?? '')
    const access = await requireAudience(ctx, account.id, pathOf(request).custom_audience_id ?? '')
    requireOwner(access, 'delete')
    const deleted = await repo.softDelete(account.id, access.audience.id, actorOf(request))
    return sendData(request, reply, await publicAudience(ctx, { ...access, audience: deleted }), 'custom_audience')
  })

  app.post('/12/accounts/:account_id/custom_audiences/:custom_audience_id/users', { config: { auth: ADS_AUTH, rateLimit: UPLOAD_RATE_LIMITS.customAudience }, bodyLimit: MAX_UPLOAD_BODY_BYTES }, async (request, reply) => {
    const account = await requireAccount(ctx, request, pathOf(request).account_id ?? '')
    const access = await requireAudience(ctx, account.id, pathOf(request).custom_audience_id ?? '')
    requireUploadAccess(access)
    const outcome = await runUpload(ctx, request, reply, {
      rules: CUSTOM_AUDIENCE_RULES,
      apply: (operations) => applyAudienceUpload(ctx, account.id, access, operations, actorOf(request)),
      requestEcho: () => pathEcho(request)
    })
    if (!outcome) return reply
    requireFullyApplied(ctx, outcome, `custom audience ${access.audience.id}`)
    const { success, total } = uploadCounts(outcome)
    return reply
      .header('x-current-api-version', ADS_API_VERSION)
      .type('application/json; charset=utf-8')
      .send({ request: pathEcho(request), data: { success_count: success, total_count: total }, data_type: 'custom_audience_users' })
  })

  await registerPermissionRoutes(app, ctx)
  await registerTargetedRoutes(app, ctx)
  await registerDoNotReachRoutes(app, ctx)
  await registerInsightsRoutes(app, ctx)
}
