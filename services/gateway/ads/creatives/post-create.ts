import type { FastifyRequest } from 'fastify'
import type { User } from '../../../common/auth/records'
import { TOPICS } from '../../../common/bus/types'
import { baseUrl } from '../../../common/config'
import type { ServiceContext } from '../../../common/context'
import { Ads, AdsError } from '../../../common/errors'
import { newNumericId } from '../../../common/ids'
import { findUserByScreenName, getUser } from '../../identity'
import { type Account, accountWorld } from '../accounts'
import { actorOf, type Params, userIdOf } from '../conventions'
import { EntityRepo } from '../entities'
import type { OutboxMessage } from '../../outbox'
import { findCardByUri } from './cards'
import { clock } from './clock'
import { requireLibraryMedia } from './library'
import { charLength, readLongId, readUrl } from './params'
import { postSnapshot, v2Post } from './post-render'
import { extractEntities, type TextEntity } from './post-text'
import { CONVERSATION_SETTINGS, type Mention, type PostEntity, type PostMedia, votingStatus } from './records'
import type { CreativeRepos } from './repos'

/**
 * Creating a post (POST /12/accounts/:account_id/tweet): its author (the
 * account's advertiser), media from the account's library, video fields,
 * card, text and mentions, checked as the Ads API checks them; the post is
 * stored with its entity change and, when organic on a live account, its
 * `post.create` on activity.events committed with it (the gateway outbox
 * publishes it).
 */

const VIDEO_CTAS = ['VISIT_SITE', 'WATCH_NOW'] as const
const TEXT_MAX = 280

/**
 * The posts repository for writes of posts by `author`: its entity changes
 * carry postSnapshot, with media URLs on the configured public base (no
 * request is at hand there). Reads may use any posts repository.
 */
export function postsRepo(ctx: ServiceContext, author: User | undefined): EntityRepo<PostEntity> {
  const base = baseUrl(ctx.config)
  return new EntityRepo<PostEntity>(ctx, 'TWEET', 'tweet', { render: (post) => postSnapshot(post, author, base) })
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

export async function createPost(ctx: ServiceContext, repos: CreativeRepos, request: FastifyRequest, account: Account, p: Params): Promise<{ post: PostEntity; author: User }> {
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
