import { createHash } from 'node:crypto'
import { AuthKeys } from '../../../common/auth/records'
import type { ServiceContext } from '../../../common/context'
import { AdsError } from '../../../common/errors'
import { type AdsEntity, EntityRepo } from '../entities'
import { Membership, type MembershipSummary } from './membership'

/**
 * Custom audiences (the public platform's shape: name, description,
 * audience_size, targetable, reasons_not_targetable, is_owner...) and the
 * sharing grants that let another account use one.
 *
 * An audience lives under its owner account (EntityRepo CUSTOM_AUDIENCE).
 * A grant is a permission entity under the owner account plus an entry in
 * the grantee's share index, which answers "may this account use that
 * audience?" in one read:
 *
 *   ads:audience-shares:{granted_account_id}   hash audience id -> Share (JSON)
 */

/** Below this many members an audience (or a do-not-reach list) is not targetable. */
export const MIN_TARGETABLE_SIZE = 100

export type PermissionLevel = 'READ_ONLY' | 'READ_WRITE'

export interface StoredAudience extends AdsEntity {
  name: string
  description: string | null
  audience_type: 'CRM'
  partner_source: 'OTHER'
  targetable_types: string[]
  owner_account_id: string
}

export interface PublicAudience {
  id: string
  name: string
  description: string | null
  audience_type: string
  targetable: boolean
  targetable_types: string[]
  reasons_not_targetable: string[]
  audience_size: number | null
  permission_level: PermissionLevel
  owner_account_id: string
  is_owner: boolean
  partner_source: string
  created_at: string
  updated_at: string
  deleted: boolean
}

export interface StoredPermission extends AdsEntity {
  tailored_audience_id: string
  granted_account_id: string
  permission_level: PermissionLevel
}

export interface Share {
  owner_account_id: string
  permission_id: string
  permission_level: PermissionLevel
}

export const sharesKey = (grantee: string): string => `ads:audience-shares:${grantee}`

export function audienceRepo(ctx: ServiceContext): EntityRepo<StoredAudience> {
  return new EntityRepo<StoredAudience>(ctx, 'CUSTOM_AUDIENCE', 'custom_audience')
}

export function permissionRepo(ctx: ServiceContext): EntityRepo<StoredPermission> {
  return new EntityRepo<StoredPermission>(ctx, 'TAILORED_AUDIENCE_PERMISSION', 'tailored_audience_permission')
}

export function audienceMembers(ctx: ServiceContext, audienceId: string): Membership {
  return new Membership(ctx.store, 'custom_audience', audienceId)
}

/** How an account sees an audience: as its owner, or through a grant. */
export interface AudienceAccess {
  audience: StoredAudience
  isOwner: boolean
  level: PermissionLevel
}

/** The audience as `accountId` may see it, or undefined (unknown, deleted unless asked, or not shared). */
export async function audienceAccess(ctx: ServiceContext, accountId: string, audienceId: string, options: { withDeleted?: boolean } = {}): Promise<AudienceAccess | undefined> {
  if (!/^[0-9a-z]{1,32}$/.test(audienceId)) return undefined
  const own = await audienceRepo(ctx).get(accountId, audienceId, options)
  if (own) return { audience: own, isOwner: true, level: 'READ_WRITE' }
  const raw = await ctx.store.hget(sharesKey(accountId), audienceId)
  if (raw === undefined) return undefined
  const share = JSON.parse(raw) as Share
  const audience = await audienceRepo(ctx).get(share.owner_account_id, audienceId, options)
  return audience ? { audience, isOwner: false, level: share.permission_level } : undefined
}

export async function requireAudience(ctx: ServiceContext, accountId: string, audienceId: string, options: { withDeleted?: boolean; code?: string; parameter?: string } = {}): Promise<AudienceAccess> {
  const access = await audienceAccess(ctx, accountId, audienceId, options)
  if (!access) {
    throw new AdsError(404, {
      code: (options.code ?? 'CUSTOM_AUDIENCE_NOT_FOUND') as 'NOT_FOUND',
      message: `Custom audience ${audienceId.slice(0, 40)} was not found for account ${accountId}`,
      parameter: options.parameter ?? 'custom_audience_id'
    })
  }
  return access
}

/**
 * Whether `accountId` may target the audience in a new campaign or line item:
 * it owns the audience, or holds a grant that has not been revoked. For the
 * campaign-management routes (targeting criteria).
 */
export async function canTarget(ctx: ServiceContext, accountId: string, audienceId: string): Promise<boolean> {
  return (await audienceAccess(ctx, accountId, audienceId)) !== undefined
}

export async function publicAudience(ctx: ServiceContext, access: AudienceAccess): Promise<PublicAudience> {
  return renderAudience(access, await audienceMembers(ctx, access.audience.id).summary())
}

/** The audience as `access` sees it, with its membership as `members` summarizes it. */
export function renderAudience(access: AudienceAccess, members: MembershipSummary): PublicAudience {
  const a = access.audience
  const reasons: string[] = []
  if (members.uploads === 0) reasons.push('PROCESSING')
  if (members.size < MIN_TARGETABLE_SIZE) reasons.push('TOO_SMALL')
  return {
    id: a.id,
    name: a.name,
    description: a.description,
    audience_type: a.audience_type,
    targetable: reasons.length === 0 && !a.deleted,
    targetable_types: a.targetable_types,
    reasons_not_targetable: reasons,
    // Unknown until the first upload has been processed.
    audience_size: members.uploads === 0 ? null : members.size,
    permission_level: access.level,
    owner_account_id: a.owner_account_id,
    is_owner: access.isOwner,
    partner_source: a.partner_source,
    created_at: a.created_at,
    updated_at: a.updated_at,
    deleted: a.deleted
  }
}

/** Audiences shared with `accountId` (live grants only). */
export async function sharedWith(ctx: ServiceContext, accountId: string, options: { withDeleted?: boolean } = {}): Promise<AudienceAccess[]> {
  const shares = await ctx.store.hgetall(sharesKey(accountId))
  const out: AudienceAccess[] = []
  for (const [audienceId, raw] of Object.entries(shares)) {
    const share = JSON.parse(raw) as Share
    const audience = await audienceRepo(ctx).get(share.owner_account_id, audienceId, options)
    if (audience) out.push({ audience, isOwner: false, level: share.permission_level })
  }
  return out.sort((x, y) => x.audience.created_at.localeCompare(y.audience.created_at) || x.audience.id.localeCompare(y.audience.id))
}

/**
 * The people of an audience as the audience estimate counts them: a member
 * whose svc_id hash is the SHA-256 of a registered user's id is that user;
 * any other member is a stable key of its own. Undefined when the account
 * may not use the audience.
 */
export async function audienceMemberKeys(ctx: ServiceContext, accountId: string, audienceId: string): Promise<Set<string> | undefined> {
  const access = await audienceAccess(ctx, accountId, audienceId)
  if (!access) return undefined
  const members = await audienceMembers(ctx, audienceId).members()
  if (members.length === 0) return new Set()
  const userByHash = new Map<string, string>()
  for (const { member } of await ctx.store.zrange(AuthKeys.users(), 0, -1)) userByHash.set(`svc_id:${createHash('sha256').update(member).digest('hex')}`, member)
  const keys = new Set<string>()
  for (const m of members) {
    const user = m.record.ids.map((id) => userByHash.get(id)).find((u) => u !== undefined)
    keys.add(user ?? `custom-audience-member:${audienceId}:${m.id}`)
  }
  return keys
}
