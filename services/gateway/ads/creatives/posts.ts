import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { User } from '../../../common/auth/records'
import type { ServiceContext } from '../../../common/context'
import { adsRequestParams } from '../../../common/server'
import { getUser } from '../../identity'
import { requireAccount } from '../accounts'
import { actorOf, ADS_API_VERSION, ADS_AUTH, listOptions, paginate, Params } from '../conventions'
import { mediaBase, readLongId } from './params'
import { createPost, postsRepo } from './post-create'
import { renderPost, toJson } from './post-render'
import type { CreativeRepos } from './repos'

/**
 * Posts published on behalf of an advertiser (`as_user_id`, who must have
 * given the caller's account access). Nullcast ("promoted-only") posts are
 * the default; an organic post (`nullcast=false`, only as the caller
 * themselves) is published as `post.create` on activity.events so activity
 * subscribers of that user receive it; a post of a sandbox account stays in
 * the sandbox world and is never published there. Responses use the classic
 * post shape, whose `id` is a 64-bit JSON integer (written exactly, next to
 * `id_str`).
 *
 * This module holds the routes; creation and its checks are in
 * post-create.ts, the renderings in post-render.ts.
 */

const TWEET_TYPES = ['DRAFT', 'PUBLISHED', 'SCHEDULED'] as const
const TIMELINE_TYPES = ['ALL', 'NULLCAST', 'ORGANIC'] as const
const LONG = /^[0-9]{1,19}$/

function sendPosts(request: FastifyRequest, reply: FastifyReply, data: unknown, extras: { next_cursor?: string | null } = {}): FastifyReply {
  const body: Record<string, unknown> = { request: { params: adsRequestParams(request) }, data_type: 'tweet', data }
  if ('next_cursor' in extras) body.next_cursor = extras.next_cursor ?? null
  reply.header('x-current-api-version', ADS_API_VERSION)
  return reply.type('application/json; charset=utf-8').send(toJson(body))
}

function readMode(p: Params, fallback: 'compat' | 'extended'): 'compat' | 'extended' {
  return p.enumOf('tweet_mode', ['compat', 'extended'] as const) ?? fallback
}

export function registerPostRoutes(app: FastifyInstance, ctx: ServiceContext, repos: CreativeRepos): void {
  type AccountParams = { Params: { account_id: string } }
  type PostParams = { Params: { account_id: string; tweet_id: string } }

  app.post<AccountParams>('/12/accounts/:account_id/tweet', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const p = Params.query(request)
    const trimUser = p.bool('trim_user', { default: false }) as boolean
    const mode = readMode(p, 'compat')
    const { post, author } = await createPost(ctx, repos, request, account, p)
    return sendPosts(request, reply, renderPost(post, { mode, trimUser, read: false, author, base: mediaBase(ctx, request) }))
  })

  app.get<AccountParams>('/12/accounts/:account_id/tweets', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const p = Params.query(request)
    const tweetType = p.enumOf('tweet_type', TWEET_TYPES, { required: true })
    const opts = listOptions(p, { countDefault: 200, countMax: 1000, deletable: false })
    const ids = p.list('tweet_ids', { max: 200, itemPattern: LONG })
    const userId = readLongId(p, 'user_id') ?? account.owner_user_id
    const timeline = p.enumOf('timeline_type', TIMELINE_TYPES) ?? 'NULLCAST'
    const name = p.string('name', { max: 80 })?.toLowerCase()
    p.bool('include_mentions_and_replies', { default: false })
    const trimUser = p.bool('trim_user', { default: false }) as boolean
    const mode = readMode(p, 'extended')
    // Drafts and scheduled posts are made elsewhere: this interface only publishes.
    let items = tweetType === 'PUBLISHED' ? (await repos.posts.list(account.id)).reverse() : []
    items = items.filter((t) => t.user_id === userId)
    if (timeline !== 'ALL') items = items.filter((t) => t.nullcast === (timeline === 'NULLCAST'))
    if (ids) items = items.filter((t) => ids.includes(t.id))
    if (name !== undefined) items = items.filter((t) => (t.name ?? '').toLowerCase().startsWith(name))
    const page = paginate(items, opts)
    const authors = new Map<string, User | undefined>()
    for (const t of page.data) if (!authors.has(t.user_id)) authors.set(t.user_id, await getUser(ctx.store, t.user_id))
    const base = mediaBase(ctx, request)
    const data = page.data.map((t) => renderPost(t, { mode, trimUser, read: true, author: authors.get(t.user_id), base }))
    return sendPosts(request, reply, data, { next_cursor: page.next_cursor })
  })

  app.put<PostParams>('/12/accounts/:account_id/tweets/:tweet_id/name', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const tweetId = readLongId(Params.of({ tweet_id: request.params.tweet_id }), 'tweet_id', { required: true }) as string
    const p = Params.query(request)
    const name = p.string('name', { max: 80 }) ?? null
    // The author never changes: read first, so the change is rendered with the post's user.
    const { user_id: authorId } = await repos.posts.require(account.id, tweetId, { notFoundCode: 'TWEET_NOT_FOUND' })
    const author = await getUser(ctx.store, authorId)
    const post = await postsRepo(ctx, author).update(account.id, tweetId, { name }, actorOf(request), { notFoundCode: 'TWEET_NOT_FOUND' })
    return sendPosts(request, reply, renderPost(post, { mode: readMode(p, 'extended'), trimUser: false, read: true, author, base: mediaBase(ctx, request) }))
  })
}
