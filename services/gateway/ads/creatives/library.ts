import type { FastifyInstance } from 'fastify'
import type { ServiceContext } from '../../../common/context'
import { Ads, AdsError } from '../../../common/errors'
import { getMedia, getMediaByKey, MEDIA_KEY_PATTERN, usableBy, type MediaRecord } from '../../media/records'
import type { MediaType } from '../../media/rules'
import { type Account, requireAccount } from '../accounts'
import { actorOf, ADS_AUTH, listOptions, paginate, Params, sendData, userIdOf } from '../conventions'
import type { CreativeRepos } from './repos'
import { mediaBase } from './params'
import { keepChangesOnly, type WholeObjectRules } from '../whole-object'
import { type LibraryEntity, MEDIA_TYPES, renderLibrary } from './records'

/**
 * The account's media library: uploaded media (by media key) an account can
 * use in cards and posts. Adding a PROMO_VIDEO makes it PREROLL account media
 * (States and transitions). Library objects are identified by their media
 * key; the list has no `with_deleted`, so a deleted object is gone and the
 * same media can be added again.
 */

/** Users whose uploads the account may take: the caller and the account's users. */
function accountUsers(account: Account, callerId: string): string[] {
  return [callerId, account.owner_user_id, ...account.user_ids]
}

/** An uploaded media record the caller may put in this account's library. */
async function requireUpload(ctx: ServiceContext, account: Account, callerId: string, key: string, parameter: string): Promise<MediaRecord> {
  if (!MEDIA_KEY_PATTERN.test(key)) throw Ads.invalid(parameter, `Invalid media key "${key.slice(0, 60)}" for ${parameter}`)
  const record = await getMediaByKey(ctx, key)
  if (!record || !usableBy(record, accountUsers(account, callerId))) {
    throw Ads.invalid(parameter, `Media ${key} was not found among the uploads of this account's users`)
  }
  return record
}

/** The library object of `key` in the account (not deleted), or a parameter error naming `parameter`. */
export async function requireLibraryMedia(repos: CreativeRepos, accountId: string, key: string, parameter: string, allowed?: readonly MediaType[]): Promise<LibraryEntity> {
  const entity = MEDIA_KEY_PATTERN.test(key) ? await repos.library.get(accountId, key) : undefined
  if (!entity) throw Ads.invalid(parameter, `Media ${key.slice(0, 60)} is not in the account's media library`)
  if (allowed && !allowed.includes(entity.media_type)) {
    throw Ads.invalid(parameter, `Media ${key} is ${entity.media_type}; ${parameter} takes ${allowed.join(' or ')}`)
  }
  return entity
}

interface PosterChoice {
  poster_media_key: string | null
  poster_file: string | null
}

async function defaultPoster(ctx: ServiceContext, record: MediaRecord): Promise<PosterChoice> {
  if (!record.poster_media_key) return { poster_media_key: null, poster_file: null }
  const poster = await getMediaByKey(ctx, record.poster_media_key)
  return { poster_media_key: record.poster_media_key, poster_file: poster?.file ?? null }
}

async function chosenPoster(ctx: ServiceContext, account: Account, callerId: string, key: string): Promise<PosterChoice> {
  const poster = await requireUpload(ctx, account, callerId, key, 'poster_media_key')
  if (poster.media_type !== 'IMAGE') throw Ads.invalid('poster_media_key', `Media ${key} is ${poster.media_type}; a poster must be an image`)
  return { poster_media_key: poster.media_key, poster_file: poster.file }
}

/**
 * name / file_name / title / description as given. Title and description
 * are the headline and text under a video or GIF: the public reference
 * notes them "for videos" yet its own update example sets both on a
 * TWEET_GIF, and GIF reads carry them, so they are accepted for both and
 * refused for images, which never render them.
 */
function readLabels(p: Params, mediaType: MediaType): Partial<Pick<LibraryEntity, 'name' | 'file_name' | 'title' | 'description'>> {
  const out: Partial<Pick<LibraryEntity, 'name' | 'file_name' | 'title' | 'description'>> = {}
  const limits = { name: 100, file_name: 255, title: 70, description: 200 } as const
  for (const field of ['name', 'file_name', 'title', 'description'] as const) {
    if (!p.has(field)) continue
    if ((field === 'title' || field === 'description') && mediaType === 'IMAGE') {
      throw Ads.invalid(field, `${field} can only be used with videos and GIFs; media is ${mediaType}`)
    }
    out[field] = p.isEmpty(field) ? null : (p.string(field, { max: limits[field] }) ?? null)
  }
  return out
}

async function addToLibrary(ctx: ServiceContext, repos: CreativeRepos, account: Account, callerId: string, p: Params, actor: ReturnType<typeof actorOf>): Promise<LibraryEntity> {
  const key = p.string('media_key', { required: true }) as string
  const record = await requireUpload(ctx, account, callerId, key, 'media_key')
  if (await repos.library.get(account.id, key)) {
    throw new AdsError(409, { code: 'DUPLICATE', message: `Media ${key} is already in the media library`, parameter: 'media_key' })
  }
  const labels = readLabels(p, record.media_type)
  if (p.has('poster_media_key') && record.media_type !== 'VIDEO') throw Ads.invalid('poster_media_key', `poster_media_key can only be used with videos; media is ${record.media_type}`)
  const posterKey = p.string('poster_media_key')
  const poster = posterKey !== undefined ? await chosenPoster(ctx, account, callerId, posterKey) : await defaultPoster(ctx, record)
  const entity = await repos.library.create(account.id, {
    id: key,
    media_key: key,
    media_type: record.media_type,
    media_category: record.media_category,
    media_status: 'TRANSCODE_COMPLETED',
    name: labels.name ?? null,
    file_name: labels.file_name ?? null,
    title: labels.title ?? null,
    description: labels.description ?? null,
    ...poster,
    duration: record.duration_ms,
    aspect_ratio: record.aspect_ratio,
    tweeted: false,
    width: record.width,
    height: record.height,
    file: record.file,
    owner_user_id: record.owner_user_id
  }, actor)
  // A promoted video is available as PREROLL account media from now on.
  if (record.media_category === 'PROMO_VIDEO') {
    await repos.accountMedia.create(account.id, { video_id: key, media_url: null, creative_type: 'PREROLL', media_key: key }, actor)
  }
  return entity
}

async function updateLibrary(ctx: ServiceContext, repos: CreativeRepos, account: Account, callerId: string, key: string, p: Params, actor: ReturnType<typeof actorOf>): Promise<LibraryEntity> {
  const entity = await repos.library.require(account.id, key, { notFoundCode: 'MEDIA_NOT_FOUND' })
  const patch: Partial<LibraryEntity> = readLabels(p, entity.media_type)
  if (p.has('poster_media_key')) {
    if (entity.media_type !== 'VIDEO') throw Ads.invalid('poster_media_key', `poster_media_key can only be used with videos; media is ${entity.media_type}`)
    if (p.isEmpty('poster_media_key')) {
      // Unsetting the poster goes back to the first frame.
      const record = await getMedia(ctx, (MEDIA_KEY_PATTERN.exec(key) as RegExpExecArray)[2] as string)
      Object.assign(patch, record ? await defaultPoster(ctx, record) : { poster_media_key: null, poster_file: null })
    } else {
      Object.assign(patch, await chosenPoster(ctx, account, callerId, p.string('poster_media_key') as string))
    }
  }
  return repos.library.update(account.id, key, patch, actor, { notFoundCode: 'MEDIA_NOT_FOUND' })
}

async function deleteFromLibrary(repos: CreativeRepos, accountId: string, key: string, actor: ReturnType<typeof actorOf>): Promise<LibraryEntity> {
  const deleted = await repos.library.hardDelete(accountId, key, actor, { notFoundCode: 'MEDIA_NOT_FOUND' })
  // The PREROLL account media that came with a promoted video goes with it.
  for (const m of await repos.accountMedia.list(accountId)) {
    if (m.media_key === key && !m.deleted) await repos.accountMedia.softDelete(accountId, m.id, actor)
  }
  return deleted
}

/**
 * What a whole-object library PUT (the Python SDK's MediaLibrary.update(),
 * which sends every loaded property) may repeat: the media itself is fixed
 * (its key, type, category, status, size and length); its URLs are the
 * server's, spelled with the host the client called, so they are dropped
 * whatever their value.
 */
const LIBRARY_WHOLE_OBJECT: WholeObjectRules = {
  readOnly: ['media_key', 'media_type', 'media_category', 'media_status', 'aspect_ratio', 'duration', 'tweeted'],
  computed: ['media_url', 'poster_media_url']
}

/** The words of a text as `q` matches them: lowercase runs of letters and digits. */
function words(s: string | null): string[] {
  return (s ?? '').toLowerCase().split(/[^\p{L}\p{N}]+/u).filter(Boolean)
}

/** Case-insensitive term match: every term of `q` is a word of name, title, file_name or description. */
export function matchesTerms(e: Pick<LibraryEntity, 'name' | 'title' | 'file_name' | 'description'>, q: string): boolean {
  const terms = words(q)
  if (terms.length === 0) return false
  const have = new Set([...words(e.name), ...words(e.title), ...words(e.file_name), ...words(e.description)])
  return terms.every((t) => have.has(t))
}

export function registerLibraryRoutes(app: FastifyInstance, ctx: ServiceContext, repos: CreativeRepos): void {
  type AccountParams = { Params: { account_id: string } }
  type KeyParams = { Params: { account_id: string; media_key: string } }

  app.get<AccountParams>('/12/accounts/:account_id/media_library', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const p = Params.query(request)
    const opts = listOptions(p, { countDefault: 20, countMax: 50, sortable: ['created_at', 'updated_at', 'name'], deletable: false })
    const mediaType = p.enumOf('media_type', MEDIA_TYPES)
    if (p.raw('q') === '') throw Ads.invalid('q', 'q must be 1 to 255 characters')
    const q = p.string('q', { min: 1, max: 255 })
    // A q of blanks or punctuation has no term to match: refused rather than answered with an empty page.
    if (q !== undefined && words(q).length === 0) throw Ads.invalid('q', 'q must contain at least one term (letters or digits) to match')
    let items = await repos.library.list(account.id)
    if (mediaType) items = items.filter((e) => e.media_type === mediaType)
    if (q !== undefined) items = items.filter((e) => matchesTerms(e, q))
    const page = paginate(items, opts)
    const base = mediaBase(ctx, request)
    return sendData(request, reply, page.data.map((e) => renderLibrary(e, base)), 'media_library', {
      next_cursor: page.next_cursor,
      ...(page.total_count !== undefined ? { total_count: page.total_count } : {})
    })
  })

  app.get<KeyParams>('/12/accounts/:account_id/media_library/:media_key', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const entity = await repos.library.require(account.id, request.params.media_key, { notFoundCode: 'MEDIA_NOT_FOUND' })
    return sendData(request, reply, renderLibrary(entity, mediaBase(ctx, request)), 'media_library')
  })

  app.post<AccountParams>('/12/accounts/:account_id/media_library', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const entity = await addToLibrary(ctx, repos, account, userIdOf(request), Params.query(request), actorOf(request))
    return sendData(request, reply, renderLibrary(entity, mediaBase(ctx, request)), 'media_library')
  })

  app.put<KeyParams>('/12/accounts/:account_id/media_library/:media_key', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const callerId = userIdOf(request)
    // An unknown media key is 404 before any parameter is looked at; then only real changes are read.
    const stored = await repos.library.require(account.id, request.params.media_key, { notFoundCode: 'MEDIA_NOT_FOUND' })
    keepChangesOnly(request, renderLibrary(stored, mediaBase(ctx, request)), LIBRARY_WHOLE_OBJECT)
    const entity = await updateLibrary(ctx, repos, account, callerId, request.params.media_key, Params.query(request), actorOf(request))
    return sendData(request, reply, renderLibrary(entity, mediaBase(ctx, request)), 'media_library')
  })

  app.delete<KeyParams>('/12/accounts/:account_id/media_library/:media_key', { config: { auth: ADS_AUTH } }, async (request, reply) => {
    const account = await requireAccount(ctx, request, request.params.account_id)
    const entity = await deleteFromLibrary(repos, account.id, request.params.media_key, actorOf(request))
    return sendData(request, reply, renderLibrary(entity, mediaBase(ctx, request)), 'media_library')
  })
}
