import type { FastifyInstance } from 'fastify'
import type { ServiceContext } from '../../../common/context'
import { Ads, AdsError } from '../../../common/errors'
import { newNumericId } from '../../../common/ids'
import { hasRatio } from '../../media/inspect'
import { requireAccount } from '../accounts'
import { actorOf, ADS_AUTH, listOptions, paginate, Params, sendData } from '../conventions'
import type { NewFields } from '../entities'
import { requireLibraryMedia } from './library'
import { mediaBase, readCta, readUrl } from './params'
import { type ConversationEntity, type ConversationKind, type MediaSnapshot, ORDINALS, renderConversation, snapshotOf } from './records'
import type { CreativeRepos } from './repos'

/**
 * Conversation cards: a video (16:9) or, in the legacy form, an image
 * (1.91:1, at least 800 px wide) with up to four call-to-action hashtags,
 * each posting its own text. Conditional rules: a title or a second CTA;
 * every `*_cta` with its `*_cta_tweet` and no tweet without its CTA; the
 * third CTA after the second, the fourth after the third. An update is
 * checked as the card it would produce. Deleting one removes it for good.
 */

const TEXT_MAX = 23
const CTA_TWEET_MAX = 280
const REQUIRED = ['name', 'first_cta', 'first_cta_tweet', 'thank_you_text', 'media_key'] as const

type Draft = Partial<NewFields<ConversationEntity>>

/** Reads what the request sets: everything required on create, only what is given (or emptied) on update of `stored`. */
async function readDraft(repos: CreativeRepos, accountId: string, kind: ConversationKind, p: Params, stored?: ConversationEntity): Promise<Draft> {
  const create = stored === undefined
  const draft: Draft = {}
  for (const field of REQUIRED) {
    if (!create && p.isEmpty(field)) throw Ads.invalid(field, `${field} is required and cannot be unset`)
  }
  const unset = (field: string): boolean => !create && p.isEmpty(field)

  const name = p.string('name', { required: create, max: 80 })
  if (name !== undefined) draft.name = name
  const firstCta = readCta(p, 'first_cta', { required: create })
  if (firstCta !== undefined) draft.first_cta = firstCta
  const firstTweet = p.string('first_cta_tweet', { required: create, max: CTA_TWEET_MAX })
  if (firstTweet !== undefined) draft.first_cta_tweet = firstTweet
  const thanks = p.string('thank_you_text', { required: create, max: TEXT_MAX })
  if (thanks !== undefined) draft.thank_you_text = thanks

  if (unset('title')) draft.title = null
  else {
    const title = p.string('title', { max: TEXT_MAX })
    if (title !== undefined) draft.title = title
  }
  for (const n of ORDINALS) {
    if (unset(`${n}_cta`)) draft[`${n}_cta`] = null
    else {
      const cta = readCta(p, `${n}_cta`)
      if (cta !== undefined) draft[`${n}_cta`] = cta
    }
    if (unset(`${n}_cta_tweet`)) draft[`${n}_cta_tweet`] = null
    else {
      const tweet = p.string(`${n}_cta_tweet`, { max: CTA_TWEET_MAX })
      if (tweet !== undefined) draft[`${n}_cta_tweet`] = tweet
    }
  }
  if (unset('thank_you_url')) draft.thank_you_url = null
  else {
    const url = readUrl(p, 'thank_you_url')
    if (url !== undefined) draft.thank_you_url = url
  }

  const mediaKey = p.string('media_key', { required: create })
  if (mediaKey !== undefined) {
    const media = await requireLibraryMedia(repos, accountId, mediaKey, 'media_key', [kind === 'video' ? 'VIDEO' : 'IMAGE'])
    if (kind === 'video' && !hasRatio(media.width, media.height, 16, 9)) {
      throw Ads.invalid('media_key', `A video conversation card needs a 16:9 video; media ${mediaKey} is ${media.aspect_ratio}`)
    }
    if (kind === 'image' && (media.width < 800 || !hasRatio(media.width, media.height, 1.91, 1))) {
      throw Ads.invalid('media_key', `An image conversation card needs an image at least 800 px wide with a 1.91:1 aspect ratio; got ${media.width}x${media.height}`)
    }
    draft.media_key = mediaKey
    draft.media = snapshotOf(media)
    if (kind === 'video') {
      // A new video brings its own poster unless a poster is chosen in the same request (read below).
      draft.poster_media_key = media.poster_media_key
      draft.poster_file = media.poster_file
    }
  }
  const posterKey = p.string('poster_media_key')
  if (posterKey !== undefined || unset('poster_media_key')) {
    if (kind !== 'video') throw Ads.invalid('poster_media_key', 'poster_media_key can only be used with video conversation cards')
    if (posterKey === undefined) {
      // Unset: back to the video's own poster (its first frame unless the library chose another).
      const media = draft.media ?? stored?.media
      draft.poster_media_key = null
      draft.poster_file = media?.poster_file ?? null
    } else {
      const poster = await requireLibraryMedia(repos, accountId, posterKey, 'poster_media_key', ['IMAGE'])
      draft.poster_media_key = posterKey
      draft.poster_file = poster.file
    }
  }
  if (unset('unlocked_image_media_key')) draft.unlocked_image = null
  else {
    const key = p.string('unlocked_image_media_key')
    if (key !== undefined) {
      const image = await requireLibraryMedia(repos, accountId, key, 'unlocked_image_media_key', ['IMAGE'])
      if (kind === 'image' && (image.width < 800 || !hasRatio(image.width, image.height, 5, 2))) {
        throw Ads.invalid('unlocked_image_media_key', `The unlocked image must be at least 800 px wide with a 5:2 aspect ratio; got ${image.width}x${image.height}`)
      }
      draft.unlocked_image = snapshotOf(image)
    }
  }
  if (p.has('unlocked_video_media_key') || unset('unlocked_video_media_key')) {
    if (kind !== 'video') throw Ads.invalid('unlocked_video_media_key', 'unlocked_video_media_key can only be used with video conversation cards')
    const key = p.string('unlocked_video_media_key')
    if (key === undefined) draft.unlocked_video_media_key = null
    else {
      await requireLibraryMedia(repos, accountId, key, 'unlocked_video_media_key', ['VIDEO'])
      draft.unlocked_video_media_key = key
    }
  }
  return draft
}

type CtaState = Pick<ConversationEntity, 'title' | 'second_cta' | 'second_cta_tweet' | 'third_cta' | 'third_cta_tweet' | 'fourth_cta' | 'fourth_cta_tweet'>

/** The conditional rules over the card as it would be stored. */
export function checkConditionalRules(card: CtaState): void {
  if (card.title === null && card.second_cta === null) {
    throw new AdsError(400, { code: 'MISSING_PARAMETER', message: 'title is required when second_cta is not set (and second_cta when title is not set)', parameter: 'title' })
  }
  for (const n of ORDINALS) {
    const cta = card[`${n}_cta`]
    const tweet = card[`${n}_cta_tweet`]
    if (cta !== null && tweet === null) throw new AdsError(400, { code: 'MISSING_PARAMETER', message: `${n}_cta_tweet is required when ${n}_cta is set`, parameter: `${n}_cta_tweet` })
    if (cta === null && tweet !== null) throw Ads.inclusive(`${n}_cta_tweet`, `${n}_cta`)
  }
  if (card.third_cta !== null && card.second_cta === null) throw Ads.inclusive('third_cta', 'second_cta')
  if (card.fourth_cta !== null && card.third_cta === null) throw Ads.inclusive('fourth_cta', 'third_cta')
}

function repoOf(repos: CreativeRepos, kind: ConversationKind): CreativeRepos['videoConversations'] {
  return kind === 'video' ? repos.videoConversations : repos.imageConversations
}

async function createCard(repos: CreativeRepos, accountId: string, kind: ConversationKind, p: Params, actor: ReturnType<typeof actorOf>): Promise<ConversationEntity> {
  const draft = await readDraft(repos, accountId, kind, p)
  const id = newNumericId()
  const card: NewFields<ConversationEntity> = {
    id,
    name: draft.name as string,
    card_uri: `card://${id}`,
    card_type: kind === 'video' ? 'VIDEO_CONVERSATION' : 'IMAGE_CONVERSATION',
    title: draft.title ?? null,
    first_cta: draft.first_cta as string,
    first_cta_tweet: draft.first_cta_tweet as string,
    second_cta: draft.second_cta ?? null,
    second_cta_tweet: draft.second_cta_tweet ?? null,
    third_cta: draft.third_cta ?? null,
    third_cta_tweet: draft.third_cta_tweet ?? null,
    fourth_cta: draft.fourth_cta ?? null,
    fourth_cta_tweet: draft.fourth_cta_tweet ?? null,
    thank_you_text: draft.thank_you_text as string,
    thank_you_url: draft.thank_you_url ?? null,
    media_key: draft.media_key as string,
    media: draft.media as MediaSnapshot,
    poster_media_key: draft.poster_media_key ?? null,
    poster_file: draft.poster_file ?? null,
    unlocked_image: draft.unlocked_image ?? null,
    unlocked_video_media_key: draft.unlocked_video_media_key ?? null
  }
  checkConditionalRules(card)
  return repoOf(repos, kind).create(accountId, card, actor)
}

async function updateCard(repos: CreativeRepos, accountId: string, kind: ConversationKind, id: string, p: Params, actor: ReturnType<typeof actorOf>): Promise<ConversationEntity> {
  const repo = repoOf(repos, kind)
  const stored = await repo.require(accountId, id, { notFoundCode: 'CARD_NOT_FOUND' })
  const draft = await readDraft(repos, accountId, kind, p, stored)
  checkConditionalRules({ ...stored, ...draft })
  return repo.update(accountId, id, draft as Partial<ConversationEntity>, actor, { notFoundCode: 'CARD_NOT_FOUND' })
}

const CARD_ID = /^[0-9]{1,19}$/

function registerKind(app: FastifyInstance, ctx: ServiceContext, repos: CreativeRepos, kind: ConversationKind): void {
  type AccountParams = { Params: { account_id: string } }
  type CardParams = { Params: { account_id: string; card_id: string } }
  const path = `/12/accounts/:account_id/cards/${kind}_conversation`
  const dataType = `${kind}_conversation_card`
  const repo = repoOf(repos, kind)

  app.get<AccountParams>(path, { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const p = Params.query(request)
    const opts = listOptions(p, { countDefault: 200, countMax: 1000, sortable: ['created_at', 'updated_at', 'name'] })
    const ids = p.list('card_ids', { max: 200, itemPattern: CARD_ID })
    const q = p.string('q', { max: 80 })?.toLowerCase()
    let items = await repo.list(account.id)
    if (ids) items = items.filter((c) => ids.includes(c.id))
    if (q !== undefined) items = items.filter((c) => c.name.toLowerCase().startsWith(q))
    const page = paginate(items, opts)
    const base = mediaBase(ctx, request)
    return sendData(request, reply, page.data.map((c) => renderConversation(c, base)), dataType, {
      next_cursor: page.next_cursor,
      ...(page.total_count !== undefined ? { total_count: page.total_count } : {})
    })
  })

  app.get<CardParams>(`${path}/:card_id`, { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const withDeleted = Params.query(request).bool('with_deleted', { default: false })
    const card = await repo.require(account.id, request.params.card_id, { withDeleted, notFoundCode: 'CARD_NOT_FOUND' })
    return sendData(request, reply, renderConversation(card, mediaBase(ctx, request)), dataType)
  })

  app.post<AccountParams>(path, { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const card = await createCard(repos, account.id, kind, Params.query(request), actorOf(request))
    return sendData(request, reply, renderConversation(card, mediaBase(ctx, request)), dataType)
  })

  app.put<CardParams>(`${path}/:card_id`, { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const card = await updateCard(repos, account.id, kind, request.params.card_id, Params.query(request), actorOf(request))
    return sendData(request, reply, renderConversation(card, mediaBase(ctx, request)), dataType)
  })

  app.delete<CardParams>(`${path}/:card_id`, { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const card = await repo.hardDelete(account.id, request.params.card_id, actorOf(request), { notFoundCode: 'CARD_NOT_FOUND' })
    return sendData(request, reply, renderConversation(card, mediaBase(ctx, request)), dataType)
  })
}

export function registerConversationRoutes(app: FastifyInstance, ctx: ServiceContext, repos: CreativeRepos): void {
  registerKind(app, ctx, repos, 'video')
  // The legacy image form, kept for cards made before components (include_legacy_cards, legacy delete).
  registerKind(app, ctx, repos, 'image')
}
