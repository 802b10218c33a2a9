import type { FastifyInstance } from 'fastify'
import type { ServiceContext } from '../../../common/context'
import { Ads, AdsError } from '../../../common/errors'
import { newNumericId } from '../../../common/ids'
import { accountFeatures, requireAccount } from '../accounts'
import { MEDIA_POLLS_FEATURE } from '../../../common/ads/features'
import { actorOf, ADS_AUTH, listOptions, paginate, Params, sendData } from '../conventions'
import { clock, isoSeconds } from './clock'
import { requireLibraryMedia } from './library'
import { mediaBase } from './params'
import { type MediaSnapshot, POLL_DURATION, type PollEntity, renderPoll, snapshotOf } from './records'
import type { CreativeRepos } from './repos'
import { hasRatio } from '../../media/inspect'

/**
 * Poll cards. A poll opens when it is created and closes `duration_in_minutes`
 * later (its end_time): reads show `voting_status` open or closed from the
 * creatives clock. Polls cannot be updated; deleting one removes it for good.
 * Numeric-looking values are strings on the wire, as on the public platform.
 */

const CHOICE_MAX = 25

async function createPoll(ctx: ServiceContext, repos: CreativeRepos, accountId: string, p: Params, actor: ReturnType<typeof actorOf>): Promise<PollEntity> {
  const name = p.string('name', { required: true, max: 80 }) as string
  const duration = p.int('duration_in_minutes', { required: true, min: POLL_DURATION.min, max: POLL_DURATION.max }) as number
  const first = p.string('first_choice', { required: true, max: CHOICE_MAX }) as string
  const second = p.string('second_choice', { required: true, max: CHOICE_MAX }) as string
  const third = p.string('third_choice', { max: CHOICE_MAX }) ?? null
  const fourth = p.string('fourth_choice', { max: CHOICE_MAX }) ?? null
  if (fourth !== null && third === null) throw Ads.inclusive('fourth_choice', 'third_choice')

  let media: MediaSnapshot | null = null
  const key = p.string('media_key')
  if (key !== undefined) {
    if (!(await accountFeatures(ctx, accountId)).has(MEDIA_POLLS_FEATURE)) {
      throw new AdsError(403, { code: 'FEATURE_NOT_ENABLED', message: `Polls with media need the ${MEDIA_POLLS_FEATURE} account feature`, parameter: 'media_key' })
    }
    const entity = await requireLibraryMedia(repos, accountId, key, 'media_key', ['IMAGE', 'VIDEO'])
    if (entity.media_type === 'IMAGE' && (entity.width < 800 || !hasRatio(entity.width, entity.height, 1.91, 1))) {
      throw Ads.invalid('media_key', `A poll image must be at least 800 px wide with a 1.91:1 aspect ratio; got ${entity.width}x${entity.height}`)
    }
    media = snapshotOf(entity)
  }

  const start = clock.now()
  const id = newNumericId()
  return repos.polls.create(accountId, {
    id,
    name,
    card_uri: `card://${id}`,
    card_type: media === null ? 'TEXT_POLLS' : media.media_type === 'VIDEO' ? 'VIDEO_POLLS' : 'IMAGE_POLLS',
    first_choice: first,
    second_choice: second,
    third_choice: third,
    fourth_choice: fourth,
    duration_in_minutes: duration,
    start_time: isoSeconds(start),
    end_time: isoSeconds(start + duration * 60_000),
    media
  }, actor)
}

const CARD_ID = /^[0-9]{1,19}$/

export function registerPollRoutes(app: FastifyInstance, ctx: ServiceContext, repos: CreativeRepos): void {
  type AccountParams = { Params: { account_id: string } }
  type CardParams = { Params: { account_id: string; card_id: string } }
  const notFound = (id: string): AdsError => new AdsError(404, { code: 'CARD_NOT_FOUND', message: `Poll card ${id.slice(0, 40)} was not found` })

  app.get<AccountParams>('/12/accounts/:account_id/cards/poll', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const p = Params.query(request)
    const opts = listOptions(p, { countDefault: 200, countMax: 1000, sortable: ['created_at', 'updated_at', 'name', 'end_time'] })
    const ids = p.list('card_ids', { max: 200, itemPattern: CARD_ID })
    const q = p.string('q', { max: 80 })?.toLowerCase()
    let items = await repos.polls.list(account.id)
    if (ids) items = items.filter((c) => ids.includes(c.id))
    if (q !== undefined) items = items.filter((c) => c.name.toLowerCase().startsWith(q))
    const page = paginate(items, opts)
    const base = mediaBase(ctx, request)
    const now = clock.now()
    return sendData(request, reply, page.data.map((c) => renderPoll(c, base, now)), 'poll_card', {
      next_cursor: page.next_cursor,
      ...(page.total_count !== undefined ? { total_count: page.total_count } : {})
    })
  })

  app.get<CardParams>('/12/accounts/:account_id/cards/poll/:card_id', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    Params.query(request).bool('with_deleted')
    const poll = await repos.polls.get(account.id, request.params.card_id)
    if (!poll) throw notFound(request.params.card_id)
    return sendData(request, reply, renderPoll(poll, mediaBase(ctx, request), clock.now()), 'poll_card')
  })

  app.post<AccountParams>('/12/accounts/:account_id/cards/poll', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const poll = await createPoll(ctx, repos, account.id, Params.query(request), actorOf(request))
    return sendData(request, reply, renderPoll(poll, mediaBase(ctx, request), clock.now()), 'poll_card')
  })

  app.put<CardParams>('/12/accounts/:account_id/cards/poll/:card_id', { config: { auth: ADS_AUTH } }, async (request) => {
    await requireAccount(ctx, request, request.params.account_id)
    throw new AdsError(405, { code: 'METHOD_NOT_ALLOWED', message: 'Poll cards cannot be updated; create a new poll card instead' })
  })

  app.delete<CardParams>('/12/accounts/:account_id/cards/poll/:card_id', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    if (!(await repos.polls.get(account.id, request.params.card_id))) throw notFound(request.params.card_id)
    const poll = await repos.polls.hardDelete(account.id, request.params.card_id, actorOf(request))
    return sendData(request, reply, renderPoll(poll, mediaBase(ctx, request), clock.now()), 'poll_card')
  })
}
