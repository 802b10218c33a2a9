import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { ServiceContext } from '../../../common/context'
import { Ads, AdsError } from '../../../common/errors'
import { accountFeatures, accountWorld, getAccountIn, requireAccount, type Account } from '../accounts'
import { SHARE_OUTSIDE_BUSINESS_FEATURE } from '../../../common/ads/features'
import { ADS_AUTH, actorOf, listOptions, paginate, Params, sendData } from '../conventions'
import { withLock } from '../catalog/lock'
import { type AudienceAccess, permissionRepo, type PermissionLevel, requireAudience, type Share, sharesKey, type StoredPermission } from './audiences'

/**
 * Audience sharing permissions: `/5/accounts/:account_id/tailored_audiences/
 * :tailored_audience_id/permissions` (the version the contract names) and the same
 * operations under `/12/.../custom_audiences/:custom_audience_id/permissions`
 * (the public platform's current names). Only the owning account manages
 * them; sharing stays within one business unless the owner has the
 * SHARE_AUDIENCE_OUTSIDE_BUSINESS feature. Revoking (DELETE) removes the
 * grantee's share entry at once, so canTarget() refuses new targeting.
 */

export const MAX_FILTER_IDS = 200
const LEVELS = ['READ_ONLY', 'READ_WRITE'] as const
const ACCOUNT_ID = /^[0-9a-z]{1,32}$/

interface Flavor {
  version: '5' | '12'
  base: string
  audienceParam: 'tailored_audience_id' | 'custom_audience_id'
  permissionParam: 'tailored_audience_permission_id' | 'custom_audience_permission_id'
  idsFilter: 'tailored_audience_permission_ids' | 'custom_audience_permission_ids'
  notFound: string
  dataType: string
}

const FLAVORS: Flavor[] = [
  {
    version: '5',
    base: '/5/accounts/:account_id/tailored_audiences/:tailored_audience_id/permissions',
    audienceParam: 'tailored_audience_id',
    permissionParam: 'tailored_audience_permission_id',
    idsFilter: 'tailored_audience_permission_ids',
    notFound: 'TAILORED_AUDIENCE_NOT_FOUND',
    dataType: 'tailored_audience_permission'
  },
  {
    version: '12',
    base: '/12/accounts/:account_id/custom_audiences/:custom_audience_id/permissions',
    audienceParam: 'custom_audience_id',
    permissionParam: 'custom_audience_permission_id',
    idsFilter: 'custom_audience_permission_ids',
    notFound: 'CUSTOM_AUDIENCE_NOT_FOUND',
    dataType: 'custom_audience_permission'
  }
]

function render(flavor: Flavor, p: StoredPermission): Record<string, unknown> {
  return {
    id: p.id,
    [flavor.audienceParam]: p.tailored_audience_id,
    granted_account_id: p.granted_account_id,
    permission_level: p.permission_level,
    created_at: p.created_at,
    updated_at: p.updated_at,
    deleted: p.deleted
  }
}

/** The path's audience, which the path's account must own. */
async function ownedAudience(ctx: ServiceContext, request: FastifyRequest, flavor: Flavor): Promise<{ account: Account; access: AudienceAccess }> {
  const path = request.params as Record<string, string>
  const account = await requireAccount(ctx, request, path.account_id ?? '')
  const access = await requireAudience(ctx, account.id, path[flavor.audienceParam] ?? '', { code: flavor.notFound, parameter: flavor.audienceParam })
  if (!access.isOwner) {
    throw new AdsError(403, {
      code: 'ACTION_NOT_ALLOWED',
      message: `Only the account that owns audience ${access.audience.id} (is_owner true) can manage its permissions`,
      parameter: flavor.audienceParam
    })
  }
  return { account, access }
}

async function checkSharingAllowed(ctx: ServiceContext, owner: Account, grantedId: string): Promise<Account> {
  if (!ACCOUNT_ID.test(grantedId)) throw Ads.invalid('granted_account_id', `Invalid granted_account_id "${grantedId.slice(0, 40)}"`)
  if (grantedId === owner.id) throw Ads.invalid('granted_account_id', 'An audience cannot be shared with the account that owns it')
  // Only an account of the owner's world (production or sandbox) can be granted.
  const granted = await getAccountIn(ctx, grantedId, accountWorld(owner))
  if (!granted || granted.deleted) throw new AdsError(400, { code: 'INVALID_PARAMETER', message: `Account ${grantedId} was not found`, parameter: 'granted_account_id' })
  const sameBusiness = owner.business_id !== null && owner.business_id === granted.business_id
  if (!sameBusiness && !(await accountFeatures(ctx, owner.id)).has(SHARE_OUTSIDE_BUSINESS_FEATURE)) {
    throw new AdsError(403, {
      code: 'ACTION_NOT_ALLOWED',
      message: `Audiences can be shared only between accounts of the same business, unless the owning account has the ${SHARE_OUTSIDE_BUSINESS_FEATURE} feature`,
      parameter: 'granted_account_id'
    })
  }
  return granted
}

export async function registerPermissionRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  const route = { config: { auth: ADS_AUTH } }
  const repo = permissionRepo(ctx)

  for (const flavor of FLAVORS) {
    app.get(flavor.base, { config: { auth: ADS_AUTH, adsListParams: ['granted_account_ids', flavor.idsFilter] } }, async (request, reply) => {
      const p = Params.query(request)
      const opts = listOptions(p, { countDefault: 200, countMin: 1, countMax: 1000, sortable: ['created_at', 'updated_at', 'id', 'granted_account_id', 'permission_level'] })
      const granted = p.list('granted_account_ids', { max: MAX_FILTER_IDS, itemPattern: ACCOUNT_ID })
      const ids = p.list(flavor.idsFilter, { max: MAX_FILTER_IDS, itemPattern: ACCOUNT_ID })
      const { account, access } = await ownedAudience(ctx, request, flavor)
      const all = (await repo.list(account.id)).filter(
        (x) => x.tailored_audience_id === access.audience.id && (!granted || granted.includes(x.granted_account_id)) && (!ids || ids.includes(x.id))
      )
      const page = paginate(all, opts)
      return sendData(request, reply, page.data.map((x) => render(flavor, x)), flavor.dataType, { next_cursor: page.next_cursor, ...(page.total_count !== undefined ? { total_count: page.total_count } : {}) })
    })

    app.post(flavor.base, route, async (request, reply) => {
      const p = Params.query(request)
      const grantedId = p.string('granted_account_id', { required: true }) as string
      const level = p.enumOf('permission_level', LEVELS, { required: true }) as PermissionLevel
      const { account, access } = await ownedAudience(ctx, request, flavor)
      const granted = await checkSharingAllowed(ctx, account, grantedId)
      const audienceId = access.audience.id
      const created = await withLock(ctx.store, `ads:audience-permissions:${audienceId}:lock`, async () => {
        const live = (await repo.list(account.id)).find((x) => !x.deleted && x.tailored_audience_id === audienceId && x.granted_account_id === granted.id)
        if (live) {
          throw new AdsError(409, {
            code: 'DUPLICATE',
            message: `Audience ${audienceId} is already shared with account ${granted.id} (permission ${live.id}); delete that permission to change its level`,
            parameter: 'granted_account_id'
          })
        }
        const permission = await repo.create(account.id, { tailored_audience_id: audienceId, granted_account_id: granted.id, permission_level: level }, actorOf(request))
        const share: Share = { owner_account_id: account.id, permission_id: permission.id, permission_level: level }
        await ctx.store.hset(sharesKey(granted.id), { [audienceId]: JSON.stringify(share) })
        return permission
      })
      return sendData(request, reply, render(flavor, created), flavor.dataType)
    })

    app.delete(`${flavor.base}/:${flavor.permissionParam}`, route, async (request, reply) => {
      const { account, access } = await ownedAudience(ctx, request, flavor)
      const permissionId = (request.params as Record<string, string>)[flavor.permissionParam] ?? ''
      const notFound = new AdsError(404, { code: 'NOT_FOUND', message: `Permission ${permissionId.slice(0, 40)} was not found for audience ${access.audience.id}`, parameter: flavor.permissionParam })
      if (!ACCOUNT_ID.test(permissionId)) throw notFound
      const existing = await repo.get(account.id, permissionId)
      if (!existing || existing.tailored_audience_id !== access.audience.id) throw notFound
      const deleted = await repo.softDelete(account.id, permissionId, actorOf(request))
      // Revocation takes effect for new targeting at once; running campaigns are not touched.
      const raw = await ctx.store.hget(sharesKey(existing.granted_account_id), access.audience.id)
      if (raw !== undefined && (JSON.parse(raw) as Share).permission_id === permissionId) await ctx.store.hdel(sharesKey(existing.granted_account_id), access.audience.id)
      return sendData(request, reply, render(flavor, deleted), flavor.dataType)
    })
  }
}
