import type { FastifyInstance } from 'fastify'
import type { ServiceContext } from '../../../common/context'
import { requireAccount } from '../accounts'
import { actorOf, ADS_AUTH, listOptions, paginate, Params, sendData } from '../conventions'
import { CREATIVE_TYPES, renderAccountMedia } from './records'
import type { CreativeRepos } from './repos'

/**
 * Account media: creatives registered with the account by type. A promoted
 * video added to the media library shows up here as PREROLL (library.ts);
 * this module lists, reads and deletes them.
 */

const ID = /^[0-9a-z]{1,32}$/

export function registerAccountMediaRoutes(app: FastifyInstance, ctx: ServiceContext, repos: CreativeRepos): void {
  type AccountParams = { Params: { account_id: string } }
  type OneParams = { Params: { account_id: string; account_media_id: string } }

  app.get<AccountParams>('/12/accounts/:account_id/account_media', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const p = Params.query(request)
    const opts = listOptions(p, { countDefault: 200, countMax: 1000, sortable: ['created_at', 'updated_at', 'creative_type', 'id'] })
    const ids = p.list('account_media_ids', { max: 200, itemPattern: ID })
    const types = p.list('creative_types', { values: CREATIVE_TYPES })
    let items = await repos.accountMedia.list(account.id)
    if (ids) items = items.filter((m) => ids.includes(m.id))
    if (types) items = items.filter((m) => types.includes(m.creative_type))
    const page = paginate(items, opts)
    return sendData(request, reply, page.data.map(renderAccountMedia), 'account_media', {
      next_cursor: page.next_cursor,
      ...(page.total_count !== undefined ? { total_count: page.total_count } : {})
    })
  })

  app.get<OneParams>('/12/accounts/:account_id/account_media/:account_media_id', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const withDeleted = Params.query(request).bool('with_deleted', { default: false })
    const media = await repos.accountMedia.require(account.id, request.params.account_media_id, { withDeleted, notFoundCode: 'ACCOUNT_MEDIA_NOT_FOUND' })
    return sendData(request, reply, renderAccountMedia(media), 'account_media')
  })

  app.delete<OneParams>('/12/accounts/:account_id/account_media/:account_media_id', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const media = await repos.accountMedia.softDelete(account.id, request.params.account_media_id, actorOf(request), { notFoundCode: 'ACCOUNT_MEDIA_NOT_FOUND' })
    return sendData(request, reply, renderAccountMedia(media), 'account_media')
  })
}
