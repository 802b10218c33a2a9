import type { FastifyInstance } from 'fastify'
import type { ServiceContext } from '../../../common/context'
import { Ads } from '../../../common/errors'
import { requireAccount } from '../accounts'
import { lineItems } from '../campaigns/line-items'
import { withLock } from '../catalog/lock'
import { actorOf, ADS_AUTH, listOptions, paginate, Params, sendData } from '../conventions'
import { creativeRepos } from '../creatives/repos'
import { checkEligible, MAX_TWEET_IDS, NOT_FOUND_CODE, type PromotedPost, promotedPosts, visibleWith } from './promoted-posts'

/**
 * Promoted posts (`/12/accounts/:account_id/promoted_tweets`): list, read,
 * create (one line item, up to 50 posts of the account, all or nothing),
 * delete. There is no update, as on the public platform. A post already
 * promoted by the line item is not promoted twice: the existing promoted
 * post is returned in its place.
 */

const IDS = /^[0-9a-z]{1,32}$/
const LONG = /^[0-9]{1,19}$/
const SORTABLE = ['created_at', 'updated_at', 'id', 'line_item_id', 'tweet_id']

export async function registerPromotedPostRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  const repo = promotedPosts(ctx)
  const repos = creativeRepos(ctx)
  type AccountPath = { Params: { account_id: string } }
  type PromotedPath = { Params: { account_id: string; promoted_tweet_id: string } }

  /** Ids of the account's deleted line items: their promoted posts are hidden unless with_deleted. */
  const deletedLineItems = async (accountId: string): Promise<Set<string>> =>
    new Set((await lineItems(ctx).list(accountId)).filter((li) => li.deleted).map((li) => li.id))

  app.get<AccountPath>('/12/accounts/:account_id/promoted_tweets', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const p = Params.query(request)
    const lineItemIds = p.list('line_item_ids', { max: 200, itemPattern: IDS })
    const ids = p.list('promoted_tweet_ids', { max: 200, itemPattern: IDS })
    const tweetIds = p.list('tweet_ids', { max: 200, itemPattern: LONG })
    const opts = listOptions(p, { countDefault: 200, countMax: 1000, sortable: SORTABLE })
    const gone = await deletedLineItems(account.id)
    const matches = (pt: PromotedPost): boolean =>
      (lineItemIds === undefined || lineItemIds.includes(pt.line_item_id)) &&
      (ids === undefined || ids.includes(pt.id)) &&
      (tweetIds === undefined || tweetIds.includes(pt.tweet_id)) &&
      visibleWith(pt, gone.has(pt.line_item_id), opts.withDeleted)
    const page = paginate((await repo.list(account.id)).filter(matches), opts)
    return sendData(request, reply, page.data, 'promoted_tweet', { next_cursor: page.next_cursor, ...(page.total_count !== undefined ? { total_count: page.total_count } : {}) })
  })

  app.get<PromotedPath>('/12/accounts/:account_id/promoted_tweets/:promoted_tweet_id', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const withDeleted = Params.query(request).bool('with_deleted', { default: false }) ?? false
    const id = request.params.promoted_tweet_id
    const pt = IDS.test(id) ? await repo.get(account.id, id, { withDeleted: true }) : undefined
    const lineItem = pt ? await lineItems(ctx).get(account.id, pt.line_item_id, { withDeleted: true }) : undefined
    if (!pt || !visibleWith(pt, lineItem?.deleted ?? false, withDeleted)) throw Ads.notFound(NOT_FOUND_CODE, `Promoted tweet ${id.slice(0, 64)} was not found`)
    return sendData(request, reply, pt, 'promoted_tweet')
  })

  app.post<AccountPath>('/12/accounts/:account_id/promoted_tweets', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const p = Params.query(request)
    const lineItemId = p.string('line_item_id', { required: true, max: 64 }) as string
    const tweetIds = [...new Set(p.list('tweet_ids', { required: true, max: MAX_TWEET_IDS, itemPattern: LONG }))]
    const li = IDS.test(lineItemId) ? await lineItems(ctx).get(account.id, lineItemId) : undefined
    if (!li) throw Ads.invalid('line_item_id', `Line item ${lineItemId.slice(0, 64)} was not found in account ${account.id}`)
    if (li.product_type === 'MEDIA') throw Ads.invalid('line_item_id', `Line item ${li.id} has product_type MEDIA, which serves media creatives, not promoted posts`)
    // Every post is checked before anything is written: one bad post fails the request.
    for (const tweetId of tweetIds) {
      const post = await repos.posts.get(account.id, tweetId)
      if (!post) throw Ads.invalid('tweet_ids', `Post ${tweetId} was not found in account ${account.id} (create it with POST accounts/:account_id/tweet)`)
      await checkEligible(repos, account.id, li, post)
    }
    const data = await withLock(ctx.store, `ads:promoted-tweet-lock:${account.id}:${li.id}`, async () => {
      const existing = new Map((await repo.list(account.id)).filter((pt) => !pt.deleted && pt.line_item_id === li.id).map((pt) => [pt.tweet_id, pt]))
      const out: PromotedPost[] = []
      for (const tweetId of tweetIds) {
        out.push(existing.get(tweetId) ?? (await repo.create(account.id, { line_item_id: li.id, tweet_id: tweetId, entity_status: 'ACTIVE', approval_status: 'ACCEPTED' }, actorOf(request))))
      }
      return out
    })
    return sendData(request, reply, data, 'promoted_tweet', { total_count: data.length })
  })

  app.delete<PromotedPath>('/12/accounts/:account_id/promoted_tweets/:promoted_tweet_id', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const id = request.params.promoted_tweet_id
    const deleted = await repo.softDelete(account.id, IDS.test(id) ? id : '-', actorOf(request), { notFoundCode: NOT_FOUND_CODE })
    return sendData(request, reply, deleted, 'promoted_tweet')
  })
}
