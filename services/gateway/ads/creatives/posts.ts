import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { User } from '../../../common/auth/records'
import { TOPICS } from '../../../common/bus/types'
import { baseUrl } from '../../../common/config'
import type { ServiceContext } from '../../../common/context'
import { Ads, AdsError } from '../../../common/errors'
import { adsRequestParams } from '../../../common/http'
import { newNumericId } from '../../../common/ids'
import { findUserByScreenName, getUser } from '../../identity'
import { mediaUrl } from '../../media/records'
import type { MediaType } from '../../media/rules'
import { type Account, accountWorld, requireAccount } from '../accounts'
import { actorOf, ADS_API_VERSION, ADS_AUTH, listOptions, paginate, Params, userIdOf } from '../conventions'
import { EntityRepo } from '../entities'
import type { OutboxMessage } from '../../outbox'
import { findCardByUri } from './cards'
import { clock } from './clock'
import { requireLibraryMedia } from './library'
import { charLength, mediaBase, readLongId, readUrl } from './params'
import { displayUrl, extractEntities, type TextEntity } from './post-text'
import { CONVERSATION_SETTINGS, type Mention, type PostEntity, type PostMedia, votingStatus } from './records'
import type { CreativeRepos } from './repos'

/**
 * Posts published on behalf of an advertiser (`as_user_id`, who must have
 * given the caller's account access). Nullcast ("promoted-only") posts are
 * the default; an organic post (`nullcast=false`, only as the caller
 * themselves) is published as `post.create` on activity.events so activity
 * subscribers of that user receive it; a post of a sandbox account stays in
 * the sandbox world and is never published there. Responses use the classic post shape,
 * whose `id` is a 64-bit JSON integer (written exactly, next to `id_str`).
 */

const VIDEO_CTAS = ['VISIT_SITE', 'WATCH_NOW'] as const
const TWEET_TYPES = ['DRAFT', 'PUBLISHED', 'SCHEDULED'] as const
const TIMELINE_TYPES = ['ALL', 'NULLCAST', 'ORGANIC'] as const
const TEXT_MAX = 280
const COMPAT_MAX = 140
const LONG = /^[0-9]{1,19}$/

// ------------------------------------------------------------------ JSON with 64-bit integers

/** An integer too large for a JS number, written into JSON digit for digit. */
class LongInt {
  constructor(readonly digits: string) {}
}

function toJson(value: unknown): string {
  if (value instanceof LongInt) return value.digits
  if (value === null || value === undefined) return 'null'
  if (Array.isArray(value)) return `[${value.map(toJson).join(',')}]`
  if (typeof value === 'object') {
    const parts: string[] = []
    for (const [k, v] of Object.entries(value as Record<string, unknown>)) if (v !== undefined) parts.push(`${JSON.stringify(k)}:${toJson(v)}`)
    return `{${parts.join(',')}}`
  }
  return JSON.stringify(value)
}

function sendPosts(request: FastifyRequest, reply: FastifyReply, data: unknown, extras: { next_cursor?: string | null } = {}): FastifyReply {
  const body: Record<string, unknown> = { request: { params: adsRequestParams(request) }, data_type: 'tweet', data }
  if ('next_cursor' in extras) body.next_cursor = extras.next_cursor ?? null
  reply.header('x-current-api-version', ADS_API_VERSION)
  return reply.type('application/json; charset=utf-8').send(toJson(body))
}

// ------------------------------------------------------------------ rendering

const DAYS = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat']
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec']

/** `Sat Jun 24 05:08:30 +0000 2017`, the classic timestamp format. */
export function classicDate(iso: string): string {
  const d = new Date(iso)
  const pad = (n: number): string => String(n).padStart(2, '0')
  return `${DAYS[d.getUTCDay()]} ${MONTHS[d.getUTCMonth()]} ${pad(d.getUTCDate())} ${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())} +0000 ${d.getUTCFullYear()}`
}

function escapeHtml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;')
}

interface RenderOptions {
  mode: 'compat' | 'extended'
  trimUser: boolean
  /** Reads carry conversation_settings, nullcast and the scheduling fields; the create response does not. */
  read: boolean
  author: User | undefined
  base: string
}

function classicEntities(post: PostEntity, limit: number): Record<string, unknown[]> {
  const within = post.entities.filter((e) => e.end <= limit)
  const mentions = new Map(post.mentions.map((m) => [m.screen_name.toLowerCase(), m]))
  return {
    hashtags: within.filter((e) => e.kind === 'hashtag').map((e) => ({ text: e.value, indices: [e.start, e.end] })),
    symbols: within.filter((e) => e.kind === 'symbol').map((e) => ({ text: e.value, indices: [e.start, e.end] })),
    user_mentions: within.flatMap((e) => {
      const m = e.kind === 'mention' ? mentions.get(e.value.toLowerCase()) : undefined
      return m ? [{ screen_name: m.screen_name, name: m.screen_name, id: new LongInt(m.id), id_str: m.id, indices: [e.start, e.end] }] : []
    }),
    urls: within.filter((e) => e.kind === 'url').map((e) => ({ url: e.value, expanded_url: e.value, display_url: displayUrl(e.value), indices: [e.start, e.end] }))
  }
}

function userObject(userId: string, author: User | undefined, trim: boolean): Record<string, unknown> {
  const user: Record<string, unknown> = { id: new LongInt(userId), id_str: userId }
  if (trim || !author) return user
  return { ...user, name: author.screen_name, screen_name: author.screen_name, created_at: classicDate(author.created_at), protected: false }
}

const MEDIA_KIND: Record<MediaType, string> = { IMAGE: 'photo', GIF: 'animated_gif', VIDEO: 'video' }

export function renderPost(post: PostEntity, o: RenderOptions): Record<string, unknown> {
  const chars = [...post.text]
  const truncated = o.mode === 'compat' && chars.length > COMPAT_MAX
  const shown = truncated ? `${chars.slice(0, COMPAT_MAX - 1).join('')}…` : post.text
  const out: Record<string, unknown> = {
    created_at: classicDate(post.created_at),
    id: new LongInt(post.id),
    id_str: post.id,
    ...(o.mode === 'extended' ? { full_text: post.text, display_text_range: [0, chars.length] } : { text: shown }),
    name: post.name,
    truncated,
    entities: classicEntities(post, truncated ? COMPAT_MAX - 1 : chars.length),
    source: `<a href="${escapeHtml(o.base)}" rel="nofollow">${escapeHtml(post.app_name)}</a>`,
    in_reply_to_status_id: null,
    in_reply_to_status_id_str: null,
    in_reply_to_user_id: null,
    in_reply_to_user_id_str: null,
    in_reply_to_screen_name: null,
    user: userObject(post.user_id, o.author, o.trimUser),
    geo: null,
    coordinates: null,
    place: null,
    contributors: post.created_by !== post.user_id ? [new LongInt(post.created_by)] : null,
    retweet_count: 0,
    favorite_count: 0,
    favorited: false,
    retweeted: false,
    scopes: { followers: !post.nullcast },
    lang: 'und'
  }
  if (post.card_uri !== null) out.card_uri = post.card_uri
  if (post.media.length > 0) {
    out.extended_entities = {
      media: post.media.map((m) => {
        const id = m.media_key.split('_')[1] as string
        const url = mediaUrl(o.base, m)
        return { id: new LongInt(id), id_str: id, media_key: m.media_key, type: MEDIA_KIND[m.media_type], media_url: url, media_url_https: url, original_info: { width: m.width, height: m.height } }
      })
    }
  }
  if (o.read) {
    Object.assign(out, {
      conversation_settings: post.conversation_settings,
      nullcast: post.nullcast,
      tweet_type: 'PUBLISHED',
      scheduled_at: null,
      scheduled_status: null,
      display_text_range: [0, chars.length],
      tweet_id: post.id
    })
  }
  return out
}

/** `value` with every LongInt as its digits: plain JSON data (an entity change travels as ordinary JSON). */
function plainJson(value: unknown): unknown {
  if (value instanceof LongInt) return value.digits
  if (Array.isArray(value)) return value.map(plainJson)
  if (value !== null && typeof value === 'object') return Object.fromEntries(Object.entries(value as Record<string, unknown>).map(([k, v]) => [k, plainJson(v)]))
  return value
}

/**
 * The post as its entity changes carry it: the read rendering (extended
 * text, the full user) the public interface returns, never the stored
 * record with its internal fields (the media's stored file names). The
 * 64-bit ids are strings there, as JSON numbers cannot carry them exactly.
 */
export function postSnapshot(post: PostEntity, author: User | undefined, base: string): Record<string, unknown> {
  return plainJson(renderPost(post, { mode: 'extended', trimUser: false, read: true, author, base })) as Record<string, unknown>
}

/**
 * The posts repository for writes of posts by `author`: its entity changes
 * carry postSnapshot, with media URLs on the configured public base (no
 * request is at hand there). Reads may use any posts repository.
 */
export function postsRepo(ctx: ServiceContext, author: User | undefined): EntityRepo<PostEntity> {
  const base = baseUrl(ctx.config)
  return new EntityRepo<PostEntity>(ctx, 'TWEET', 'tweet', { render: (post) => postSnapshot(post, author, base) })
}

/** The post as a v2 post object, the payload of `post.create` on activity.events. */
export function v2Post(post: PostEntity): Record<string, unknown> {
  const mentions = new Map(post.mentions.map((m) => [m.screen_name.toLowerCase(), m]))
  const entities: Record<string, unknown[]> = {}
  const add = (kind: string, item: Record<string, unknown>): void => {
    entities[kind] = [...(entities[kind] ?? []), item]
  }
  for (const e of post.entities) {
    if (e.kind === 'hashtag') add('hashtags', { start: e.start, end: e.end, tag: e.value })
    else if (e.kind === 'symbol') add('cashtags', { start: e.start, end: e.end, tag: e.value })
    else if (e.kind === 'url') add('urls', { start: e.start, end: e.end, url: e.value, expanded_url: e.value, display_url: displayUrl(e.value) })
    else {
      const m = mentions.get(e.value.toLowerCase())
      if (m) add('mentions', { start: e.start, end: e.end, username: m.screen_name, id: m.id })
    }
  }
  return {
    id: post.id,
    text: post.text,
    author_id: post.user_id,
    created_at: post.created_at,
    conversation_id: post.id,
    edit_history_tweet_ids: [post.id],
    lang: 'und',
    reply_settings: post.conversation_settings === 'EVERYONE' ? 'everyone' : post.conversation_settings === 'FOLLOWING' ? 'following' : 'mentionedUsers',
    ...(Object.keys(entities).length > 0 ? { entities } : {}),
    ...(post.media_keys.length > 0 ? { attachments: { media_keys: post.media_keys } } : {}),
    ...(post.card_uri !== null ? { card_uri: post.card_uri } : {})
  }
}

/** `post.create` on activity.events, committed with the post itself (the gateway outbox publishes it). */
function postCreateMessage(post: PostEntity, author: User): OutboxMessage {
  const value = {
    event_uuid: newNumericId(),
    event_type: 'post.create',
    user_id: post.user_id,
    created_at: new Date(post.created_at).toISOString(),
    payload: v2Post(post),
    includes: { users: [{ id: author.id, name: author.screen_name, username: author.screen_name }] },
    source: 'ads'
  }
  return { topic: TOPICS.activityEvents, key: post.user_id, value }
}

// ------------------------------------------------------------------ creation

/** 4 images, or 1 GIF, or 1 video, all from the account's media library. */
async function readMedia(repos: CreativeRepos, accountId: string, p: Params): Promise<PostMedia[]> {
  const keys = p.list('media_keys', { max: 4 })
  if (!keys) return []
  if (new Set(keys).size !== keys.length) throw Ads.invalid('media_keys', 'media_keys lists a media key twice')
  const media: PostMedia[] = []
  for (const key of keys) {
    const e = await requireLibraryMedia(repos, accountId, key, 'media_keys')
    media.push({ media_key: key, media_type: e.media_type, file: e.file, width: e.width, height: e.height })
  }
  const kinds = new Set(media.map((m) => m.media_type))
  if (kinds.size > 1 || ((kinds.has('GIF') || kinds.has('VIDEO')) && media.length > 1)) {
    throw Ads.invalid('media_keys', 'A post takes up to 4 images, or 1 GIF, or 1 video')
  }
  return media
}

interface VideoFields {
  video_cta: string | null
  video_cta_value: string | null
  video_title: string | null
  video_description: string | null
}

function readVideoFields(p: Params, media: PostMedia[]): VideoFields {
  const fields: VideoFields = {
    video_cta: p.enumOf('video_cta', VIDEO_CTAS) ?? null,
    video_cta_value: readUrl(p, 'video_cta_value') ?? null,
    video_title: p.string('video_title', { max: 70 }) ?? null,
    video_description: p.string('video_description', { max: 200 }) ?? null
  }
  const given = (Object.keys(fields) as Array<keyof VideoFields>).find((k) => fields[k] !== null)
  if (given && media[0]?.media_type !== 'VIDEO') throw Ads.invalid(given, `${given} can only be used with a video in media_keys`)
  if (fields.video_cta !== null && fields.video_cta_value === null) throw Ads.inclusive('video_cta', 'video_cta_value')
  if (fields.video_cta_value !== null && fields.video_cta === null) throw Ads.inclusive('video_cta_value', 'video_cta')
  return fields
}

async function readCardUri(repos: CreativeRepos, accountId: string, p: Params): Promise<string | null> {
  const uri = p.string('card_uri', { max: 40 })
  if (uri === undefined) return null
  const card = await findCardByUri(repos, accountId, uri)
  if (!card) throw Ads.invalid('card_uri', `Card ${uri} was not found in this account`)
  if (card.end_time !== undefined && votingStatus({ end_time: card.end_time }, clock.now()) === 'closed') {
    throw Ads.invalid('card_uri', `The poll of card ${uri} closed at ${card.end_time}`)
  }
  return uri
}

async function mentionsOf(ctx: ServiceContext, entities: TextEntity[]): Promise<Mention[]> {
  const names = [...new Set(entities.filter((e) => e.kind === 'mention').map((e) => e.value.toLowerCase()))]
  const out: Mention[] = []
  for (const name of names) {
    const user = await findUserByScreenName(ctx.store, name)
    if (user) out.push({ screen_name: user.screen_name, id: user.id })
  }
  return out
}

/**
 * The author (`as_user_id`) must be the advertiser who granted the caller
 * access: the account's FULL promotable user, its owner here, the only user
 * who grants others access (grantAccountAccess). The public reference
 * creates posts "for the account's full promotable user"; a user granted
 * access posts on that user's behalf, never as a fellow grantee who gave
 * them nothing. The owner posting as themselves is the same rule.
 */
async function requireAuthor(ctx: ServiceContext, account: Account, p: Params): Promise<User> {
  const authorId = readLongId(p, 'as_user_id', { required: true }) as string
  const author = await getUser(ctx.store, authorId)
  if (!author) throw Ads.invalid('as_user_id', `User ${authorId} was not found`)
  if (authorId !== account.owner_user_id) {
    throw new AdsError(403, {
      code: 'ACCOUNT_NOT_FOUND',
      message: `User ${authorId} has not granted you access to account ${account.id}: as_user_id must be the account's advertiser (its FULL promotable user)`,
      parameter: 'as_user_id'
    })
  }
  return author
}

async function createPost(ctx: ServiceContext, repos: CreativeRepos, request: FastifyRequest, account: Account, p: Params): Promise<{ post: PostEntity; author: User }> {
  const callerId = userIdOf(request)
  const author = await requireAuthor(ctx, account, p)
  const media = await readMedia(repos, account.id, p)
  const text = p.string('text', { required: media.length === 0 }) ?? ''
  if (charLength(text) > TEXT_MAX) throw Ads.invalid('text', `text must be at most ${TEXT_MAX} characters, got ${charLength(text)}`)
  const name = p.string('name', { max: 80 }) ?? null
  const nullcast = p.bool('nullcast', { default: true }) as boolean
  if (!nullcast && author.id !== callerId) throw Ads.invalid('nullcast', 'Organic posts (nullcast=false) can only be created for the authenticated user')
  const conversation = p.enumOf('conversation_settings', CONVERSATION_SETTINGS) ?? 'EVERYONE'
  const cardUri = await readCardUri(repos, account.id, p)
  const video = readVideoFields(p, media)
  const entities = extractEntities(text)
  const post = await postsRepo(ctx, author).create(account.id, {
    id: newNumericId(),
    text,
    name,
    user_id: author.id,
    created_by: callerId,
    app_name: request.auth?.app.name ?? 'API',
    nullcast,
    card_uri: cardUri,
    media_keys: media.map((m) => m.media_key),
    media,
    conversation_settings: conversation,
    ...video,
    entities,
    mentions: await mentionsOf(ctx, entities)
  }, actorOf(request), { alsoPublish: (created) => (created.nullcast || accountWorld(account) === 'sandbox' ? [] : [postCreateMessage(created, author)]) })
  for (const m of media) {
    const entry = await repos.library.get(account.id, m.media_key)
    if (entry && !entry.tweeted) await repos.library.update(account.id, m.media_key, { tweeted: true }, actorOf(request))
  }
  return { post, author }
}

// ------------------------------------------------------------------ routes

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
