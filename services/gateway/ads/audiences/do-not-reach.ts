import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { ServiceContext } from '../../../common/context'
import { AdsError } from '../../../common/errors'
import { requireAccount } from '../accounts'
import { type Actor, ADS_API_VERSION, ADS_AUTH, actorOf, listOptions, paginate, Params, sendData } from '../conventions'
import { type AdsEntity, commitEntityChanges, EntityRepo } from '../entities'
import { withLock } from '../catalog/lock'
import { MIN_TARGETABLE_SIZE } from './audiences'
import { Membership, type MembershipOperation, type MembershipSummary } from './membership'
import { requireFullyApplied, runUpload, UPLOAD_RATE_LIMITS, uploadCounts } from './upload-routes'
import { DO_NOT_REACH_RULES, MAX_UPLOAD_BODY_BYTES } from './uploads'

/**
 * Do-not-reach lists: at most one per account, exclusion targeting for every
 * campaign of the account. Create / list / read / delete in the public
 * platform's shapes, and the batch user upload with the same all-or-nothing
 * semantics as custom-audience uploads (email and phone_number only, no
 * effective_at, expires_at within 13 months).
 */

export const DNR_NAME = 'Do Not Reach List'

interface StoredDnr extends AdsEntity {
  name: string
  description: string | null
}

export interface PublicDnr {
  id: string
  name: string
  description: string | null
  targetable: boolean
  reasons_not_targetable: string[]
  list_size: number | null
  created_at: string
  updated_at: string
  deleted: boolean
}

function dnrRepo(ctx: ServiceContext): EntityRepo<StoredDnr> {
  return new EntityRepo<StoredDnr>(ctx, 'DO_NOT_REACH_LIST', 'do_not_reach_list')
}

function dnrMembers(ctx: ServiceContext, id: string): Membership {
  return new Membership(ctx.store, 'do_not_reach_list', id)
}

async function publicDnr(ctx: ServiceContext, list: StoredDnr): Promise<PublicDnr> {
  return renderDnr(list, await dnrMembers(ctx, list.id).summary())
}

function renderDnr(list: StoredDnr, members: MembershipSummary): PublicDnr {
  const reasons: string[] = []
  if (members.uploads === 0) reasons.push('PROCESSING')
  if (members.size < MIN_TARGETABLE_SIZE) reasons.push('TOO_SMALL')
  return {
    id: list.id,
    name: list.name,
    description: list.description,
    targetable: reasons.length === 0 && !list.deleted,
    reasons_not_targetable: reasons,
    list_size: members.uploads === 0 ? null : members.size,
    created_at: list.created_at,
    updated_at: list.updated_at,
    deleted: list.deleted
  }
}

async function requireDnr(ctx: ServiceContext, accountId: string, id: string, withDeleted = false): Promise<StoredDnr> {
  const list = /^[0-9a-z]{1,32}$/.test(id) ? await dnrRepo(ctx).get(accountId, id, { withDeleted }) : undefined
  if (!list) throw new AdsError(404, { code: 'DO_NOT_REACH_LIST_NOT_FOUND', message: `Do-not-reach list ${id.slice(0, 40)} was not found for account ${accountId}`, parameter: 'do_not_reach_list_id' })
  return list
}

/**
 * Applies an upload to the list's members. The members and the list's
 * UPDATE change (its size before and after) commit in one batch, under the
 * list's entity lease: a delete is not interleaved, and a list deleted
 * meanwhile is 404.
 */
async function applyDnrUpload(ctx: ServiceContext, accountId: string, listId: string, operations: MembershipOperation[], actor: Actor): Promise<number[]> {
  return withLock(ctx.store, dnrRepo(ctx).lockKey(accountId, listId), async () => {
    const list = await requireDnr(ctx, accountId, listId)
    return dnrMembers(ctx, list.id).apply(operations, Date.now(), async (ops, { before, after }) => {
      const [was, now] = [renderDnr(list, before), renderDnr(list, after)]
      await commitEntityChanges(ctx, ops, [
        {
          account_id: accountId,
          entity_type: 'DO_NOT_REACH_LIST',
          entity_id: list.id,
          change_type: 'UPDATE',
          changed_by: actor,
          changes: was.list_size === now.list_size ? {} : { list_size: { old: was.list_size, new: now.list_size } },
          entity_data: { ...now }
        }
      ])
    })
  })
}

const pathOf = (request: FastifyRequest): Record<string, string> => request.params as Record<string, string>

export async function registerDoNotReachRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  const route = { config: { auth: ADS_AUTH } }
  const repo = dnrRepo(ctx)

  app.get('/12/accounts/:account_id/do_not_reach_lists', route, async (request, reply) => {
    const p = Params.query(request)
    const opts = listOptions(p, { countDefault: 200, countMin: 1, countMax: 1000, sortable: ['created_at', 'updated_at', 'name', 'id'] })
    const account = await requireAccount(ctx, request, pathOf(request).account_id ?? '')
    const page = paginate(await repo.list(account.id), opts)
    const data = await Promise.all(page.data.map((l) => publicDnr(ctx, l)))
    return sendData(request, reply, data, 'do_not_reach_list', { next_cursor: page.next_cursor, ...(page.total_count !== undefined ? { total_count: page.total_count } : {}) })
  })

  app.get('/12/accounts/:account_id/do_not_reach_lists/:do_not_reach_list_id', route, async (request, reply) => {
    const p = Params.query(request)
    const withDeleted = p.bool('with_deleted', { default: false }) ?? false
    const account = await requireAccount(ctx, request, pathOf(request).account_id ?? '')
    const list = await requireDnr(ctx, account.id, pathOf(request).do_not_reach_list_id ?? '', withDeleted)
    return sendData(request, reply, await publicDnr(ctx, list), 'do_not_reach_list')
  })

  app.post('/12/accounts/:account_id/do_not_reach_lists', route, async (request, reply) => {
    const p = Params.query(request)
    const description = p.string('description', { max: 1000 }) ?? null
    const account = await requireAccount(ctx, request, pathOf(request).account_id ?? '')
    const created = await withLock(ctx.store, `ads:do_not_reach_list:${account.id}:lock`, async () => {
      const live = (await repo.list(account.id)).find((l) => !l.deleted)
      if (live) {
        throw new AdsError(409, { code: 'DUPLICATE', message: `An account can have at most one do-not-reach list; account ${account.id} has ${live.id}`, parameter: 'account_id' })
      }
      return repo.create(account.id, { name: DNR_NAME, description }, actorOf(request))
    })
    return sendData(request, reply, await publicDnr(ctx, created), 'do_not_reach_list')
  })

  app.delete('/12/accounts/:account_id/do_not_reach_lists/:do_not_reach_list_id', route, async (request, reply) => {
    const account = await requireAccount(ctx, request, pathOf(request).account_id ?? '')
    const list = await requireDnr(ctx, account.id, pathOf(request).do_not_reach_list_id ?? '')
    const deleted = await repo.softDelete(account.id, list.id, actorOf(request))
    return sendData(request, reply, await publicDnr(ctx, deleted), 'do_not_reach_list')
  })

  app.post(
    '/12/batch/accounts/:account_id/do_not_reach_lists/:do_not_reach_list_id/users',
    { config: { auth: ADS_AUTH, rateLimit: UPLOAD_RATE_LIMITS.doNotReach }, bodyLimit: MAX_UPLOAD_BODY_BYTES },
    async (request, reply) => {
      const path = pathOf(request)
      const account = await requireAccount(ctx, request, path.account_id ?? '')
      const list = await requireDnr(ctx, account.id, path.do_not_reach_list_id ?? '')
      const echoOf = (expires: Array<string | undefined>, types: unknown[]) =>
        types.map((type, i) => ({ params: { account_id: account.id, do_not_reach_list_id: list.id, ...(expires[i] ? { expires_at: expires[i] } : {}) }, operation_type: type }))
      const outcome = await runUpload(ctx, request, reply, {
        rules: DO_NOT_REACH_RULES,
        apply: (operations) => applyDnrUpload(ctx, account.id, list.id, operations, actorOf(request)),
        requestEcho: (_plan, body) =>
          echoOf(
            body.map((op) => {
              const e = (op as { params?: { expires_at?: unknown } } | null)?.params?.expires_at
              return typeof e === 'string' ? e : undefined
            }),
            body.map((op) => (op as { operation_type?: unknown } | null)?.operation_type ?? null)
          )
      })
      if (!outcome) return reply
      requireFullyApplied(ctx, outcome, `do-not-reach list ${list.id}`)
      const data = uploadCounts(outcome).perOperation
      const echo = outcome.plan.echo.map((e) => ({ params: { account_id: account.id, do_not_reach_list_id: list.id, ...e.params }, operation_type: e.operation_type }))
      return reply.header('x-current-api-version', ADS_API_VERSION).type('application/json; charset=utf-8').send({ data, request: echo })
    }
  )
}
