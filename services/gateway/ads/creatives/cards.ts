import type { FastifyInstance } from 'fastify'
import type { ServiceContext } from '../../../common/context'
import { Ads, AdsError } from '../../../common/errors'
import { newNumericId } from '../../../common/ids'
import { requireAccount } from '../accounts'
import { actorOf, ADS_AUTH, listOptions, paginate, Params, requireJsonBody, sendData } from '../conventions'
import type { AdsEntity } from '../entities'
import { clock } from './clock'
import { CARD_TYPES, type MediaResolver, validateComponents, validateSlides, type ValidatedCard } from './components'
import { requireLibraryMedia } from './library'
import { mediaBase } from './params'
import { type CardEntity, renderCard, renderConversation, renderPoll } from './records'
import type { CreativeRepos } from './repos'

/**
 * Cards made of components (POST/PUT JSON bodies): one card from
 * `components`, or a multi-destination carousel from `slides`; card_type is
 * derived, never given. The list returns these cards, and with
 * `include_legacy_cards` also the cards of the older per-type endpoints
 * (poll, video and image conversation). `cards/all` fetches any card by URI.
 */

const LEGACY_TYPES = ['TEXT_POLLS', 'IMAGE_POLLS', 'VIDEO_POLLS', 'VIDEO_CONVERSATION', 'IMAGE_CONVERSATION'] as const
const CARD_ID = /^[0-9]{1,19}$/
const CARD_URI = /^card:\/\/[0-9]{1,19}$/
const NAME_MAX = 80

/** Any card of the account, rendered, with what the list filters and sorts on. */
export interface AnyCard {
  id: string
  name: string
  card_uri: string
  card_type: string
  created_at: string
  updated_at: string
  deleted: boolean
  legacy: boolean
  render: () => Record<string, unknown>
}

export async function allCards(repos: CreativeRepos, accountId: string, base: string): Promise<AnyCard[]> {
  const now = clock.now()
  const cards: AnyCard[] = []
  for (const c of await repos.cards.list(accountId)) cards.push({ ...pick(c), legacy: false, render: () => renderCard(c) })
  for (const c of await repos.polls.list(accountId)) cards.push({ ...pick(c), legacy: true, render: () => renderPoll(c, base, now) })
  for (const c of await repos.videoConversations.list(accountId)) cards.push({ ...pick(c), legacy: true, render: () => renderConversation(c, base) })
  for (const c of await repos.imageConversations.list(accountId)) cards.push({ ...pick(c), legacy: true, render: () => renderConversation(c, base) })
  return cards.sort((a, b) => a.created_at.localeCompare(b.created_at) || a.id.localeCompare(b.id))
}

function pick(c: AdsEntity & { name: string; card_uri: string; card_type: string }): Omit<AnyCard, 'legacy' | 'render'> {
  return { id: c.id, name: c.name, card_uri: c.card_uri, card_type: c.card_type, created_at: c.created_at, updated_at: c.updated_at, deleted: c.deleted }
}

/** The card a `card://<id>` URI names in the account, whatever its kind (deleted ones excluded). */
export async function findCardByUri(repos: CreativeRepos, accountId: string, uri: string): Promise<{ card_type: string; end_time?: string } | undefined> {
  const m = /^card:\/\/([0-9]{1,19})$/.exec(uri)
  if (!m) return undefined
  const id = m[1] as string
  return (await repos.cards.get(accountId, id)) ?? (await repos.polls.get(accountId, id)) ?? (await repos.videoConversations.get(accountId, id)) ?? (await repos.imageConversations.get(accountId, id))
}

function resolver(repos: CreativeRepos, accountId: string): MediaResolver {
  return (key, path) => requireLibraryMedia(repos, accountId, key, path)
}

function bodyObject(request: Parameters<typeof requireJsonBody>[0]): Record<string, unknown> {
  const body = requireJsonBody(request)
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw Ads.invalid('body', 'Expected a JSON object body')
  return body as Record<string, unknown>
}

function rejectUnknownFields(body: Record<string, unknown>): void {
  for (const field of Object.keys(body)) {
    if (field !== 'name' && field !== 'components' && field !== 'slides') throw Ads.invalid(field, `Unexpected field ${field}: a card takes name and components or slides`)
  }
}

async function readLayout(repos: CreativeRepos, accountId: string, body: Record<string, unknown>, required: boolean): Promise<ValidatedCard | undefined> {
  const hasComponents = body.components !== undefined && body.components !== null
  const hasSlides = body.slides !== undefined && body.slides !== null
  if (hasComponents && hasSlides) throw Ads.exclusive('components', 'slides')
  if (hasComponents) return validateComponents(body.components, resolver(repos, accountId))
  if (hasSlides) return validateSlides(body.slides, resolver(repos, accountId))
  if (required) throw new AdsError(400, { code: 'MISSING_PARAMETER', message: 'One of components or slides is required', parameter: 'components' })
  return undefined
}

function readName(body: Record<string, unknown>, required: boolean): string | undefined {
  const name = body.name
  if (name === undefined || name === null || name === '') {
    if (required) throw Ads.missing('name')
    if (name === '') throw Ads.invalid('name', 'name cannot be empty')
    return undefined
  }
  if (typeof name !== 'string') throw Ads.invalid('name', `Expected String, got ${JSON.stringify(name)} for name`)
  if ([...name].length > NAME_MAX) throw Ads.invalid('name', `name must be at most ${NAME_MAX} characters, got ${[...name].length}`)
  return name
}

function layoutFields(layout: ValidatedCard): Pick<CardEntity, 'card_type' | 'components' | 'slides'> {
  return layout.slides ? { card_type: layout.card_type, slides: layout.slides, components: undefined } : { card_type: layout.card_type, components: layout.components, slides: undefined }
}

export function registerCardRoutes(app: FastifyInstance, ctx: ServiceContext, repos: CreativeRepos): void {
  type AccountParams = { Params: { account_id: string } }
  type CardParams = { Params: { account_id: string; card_id: string } }
  const notFound = (id: string): AdsError => new AdsError(404, { code: 'CARD_NOT_FOUND', message: `Card ${id.slice(0, 40)} was not found` })

  async function requireCard(accountId: string, id: string, withDeleted = false): Promise<CardEntity> {
    const card = CARD_ID.test(id) ? await repos.cards.get(accountId, id, { withDeleted }) : undefined
    if (!card) throw notFound(id)
    return card
  }

  app.get<AccountParams>('/12/accounts/:account_id/cards', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const p = Params.query(request)
    const opts = listOptions(p, { countDefault: 100, countMax: 200, sortable: ['created_at', 'updated_at', 'name', 'card_type'] })
    const types = p.list('card_types', { values: [...CARD_TYPES, ...LEGACY_TYPES] })
    const ids = p.list('card_id', { max: 200, itemPattern: CARD_ID })
    const uris = p.list('card_uris', { max: 200, itemPattern: CARD_URI })
    const q = p.string('q', { max: 80 })?.toLowerCase()
    const legacy = p.bool('include_legacy_cards', { default: false })
    let items = (await allCards(repos, account.id, mediaBase(ctx, request))).filter((c) => legacy || !c.legacy)
    if (types) items = items.filter((c) => types.includes(c.card_type))
    if (ids) items = items.filter((c) => ids.includes(c.id))
    if (uris) items = items.filter((c) => uris.includes(c.card_uri))
    if (q !== undefined) items = items.filter((c) => c.name.toLowerCase().startsWith(q))
    const page = paginate(items, opts)
    return sendData(request, reply, page.data.map((c) => c.render()), 'card', {
      next_cursor: page.next_cursor,
      ...(page.total_count !== undefined ? { total_count: page.total_count } : {})
    })
  })

  app.get<AccountParams>('/12/accounts/:account_id/cards/all', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const p = Params.query(request)
    const uris = p.list('card_uris', { required: true, max: 200, itemPattern: CARD_URI }) as string[]
    const withDeleted = p.bool('with_deleted', { default: false })
    const items = (await allCards(repos, account.id, mediaBase(ctx, request))).filter((c) => uris.includes(c.card_uri) && (withDeleted || !c.deleted))
    return sendData(request, reply, items.map((c) => c.render()), 'card')
  })

  app.get<CardParams>('/12/accounts/:account_id/cards/all/:card_id', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const withDeleted = Params.query(request).bool('with_deleted', { default: false })
    const card = (await allCards(repos, account.id, mediaBase(ctx, request))).find((c) => c.id === request.params.card_id && (withDeleted || !c.deleted))
    if (!card) throw notFound(request.params.card_id)
    return sendData(request, reply, card.render(), 'card')
  })

  app.get<CardParams>('/12/accounts/:account_id/cards/:card_id', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const withDeleted = Params.query(request).bool('with_deleted', { default: false })
    const card = await requireCard(account.id, request.params.card_id, withDeleted)
    return sendData(request, reply, [renderCard(card)], 'card')
  })

  app.post<AccountParams>('/12/accounts/:account_id/cards', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const body = bodyObject(request)
    rejectUnknownFields(body)
    const name = readName(body, true) as string
    const layout = (await readLayout(repos, account.id, body, true)) as ValidatedCard
    const id = newNumericId()
    const card = await repos.cards.create(account.id, { id, name, card_uri: `card://${id}`, ...layoutFields(layout) }, actorOf(request))
    return sendData(request, reply, renderCard(card), 'card')
  })

  app.put<CardParams>('/12/accounts/:account_id/cards/:card_id', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    await requireCard(account.id, request.params.card_id)
    const body = bodyObject(request)
    rejectUnknownFields(body)
    const patch: Partial<CardEntity> = {}
    const name = readName(body, false)
    if (name !== undefined) patch.name = name
    const layout = await readLayout(repos, account.id, body, false)
    if (layout) Object.assign(patch, layoutFields(layout))
    const card = await repos.cards.update(account.id, request.params.card_id, patch, actorOf(request), { notFoundCode: 'CARD_NOT_FOUND' })
    // The card itself, as POST answers (docs/ads.md: PUT returns Card; only the GET of one card wraps it in a
    // data array). SDKs read a save() answer as one object: the Python SDK's Card.save() does data.get(...).
    return sendData(request, reply, renderCard(card), 'card')
  })

  app.delete<CardParams>('/12/accounts/:account_id/cards/:card_id', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    await requireCard(account.id, request.params.card_id)
    const card = await repos.cards.softDelete(account.id, request.params.card_id, actorOf(request), { notFoundCode: 'CARD_NOT_FOUND' })
    return sendData(request, reply, [renderCard(card)], 'card')
  })
}
