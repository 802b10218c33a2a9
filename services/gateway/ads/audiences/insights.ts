import type { FastifyInstance } from 'fastify'
import type { BusMessage, Consumer } from '../../../common/bus/types'
import { TOPICS } from '../../../common/bus/types'
import type { ServiceContext } from '../../../common/context'
import { Ads } from '../../../common/errors'
import type { Worker } from '../../../common/service'
import type { StoreOp } from '../../../common/store/types'
import { ADS_AUTH, Params, sendData } from '../conventions'
import { isCandidateTerm, type Keyword, matchesKeyword, parseKeyword, postTerms, type PostTerms } from './text'

/**
 * Keyword insights (`GET /12/insights/keywords/search`) computed from the
 * posts this system has seen: the `post.create` events on `activity.events`,
 * consumed by group `gateway-keyword-insights`. Nothing is estimated: with no
 * matching post the volumes are zeros and there are no related keywords.
 *
 * Corpus keys (each expires ADS_INSIGHTS_RETENTION after its hour ends):
 *
 *   ads:insights:hour:{hour}   hash post id -> {p: plain text, t: terms, c: country|null, l?: place ids, at: ms}
 *   ads:insights:post:{id}     the hour the post is filed under (for post.delete)
 */

export const INSIGHTS_GROUP = 'gateway-keyword-insights'
export const MAX_KEYWORDS = 10
export const MAX_RANGE_MS = 7 * 24 * 3_600_000
export const RELATED_KEYWORDS = 30
const HOUR_MS = 3_600_000
const DAY_MS = 24 * HOUR_MS

interface CorpusPost {
  p: string
  t: string[]
  c: string | null
  /** Ids of the place the post is tagged with and of the places containing it (absent: none). */
  l?: string[]
  at: number
}

const hourKey = (hour: number): string => `ads:insights:hour:${hour}`
const postKey = (id: string): string => `ads:insights:post:${id}`

interface ActivityEvent {
  event_type: string
  user_id: string
  created_at: string
  payload: Record<string, unknown>
  includes?: { places?: Array<Record<string, unknown>> }
}

/** The place a post is tagged with: its geo's place_id among the included places, or the only one. */
function placeOf(event: ActivityEvent): Record<string, unknown> | undefined {
  const geo = event.payload.geo as Record<string, unknown> | undefined
  const places = event.includes?.places ?? []
  return places.find((p) => p.id === geo?.place_id) ?? (places.length === 1 ? places[0] : undefined)
}

/** The post's country: its geo's country code, or that of the place it is tagged with. */
export function countryOf(event: ActivityEvent): string | null {
  const geo = event.payload.geo as Record<string, unknown> | undefined
  const direct = geo?.country_code
  if (typeof direct === 'string' && /^[A-Za-z]{2}$/.test(direct)) return direct.toUpperCase()
  const code = placeOf(event)?.country_code
  return typeof code === 'string' && /^[A-Za-z]{2}$/.test(code) ? code.toUpperCase() : null
}

const PLACE_ID = /^[0-9A-Za-z_-]{1,64}$/
const MAX_PLACE_IDS = 10

/** Ids of the post's place and of the places it lies within (the v2 place's contained_within), lowercased. */
export function placeIdsOf(event: ActivityEvent): string[] {
  const place = placeOf(event)
  if (!place) return []
  const within = Array.isArray(place.contained_within) ? (place.contained_within as unknown[]) : []
  const ids = [place.id, ...within].filter((id): id is string => typeof id === 'string' && PLACE_ID.test(id)).map((id) => id.toLowerCase())
  return [...new Set(ids)].slice(0, MAX_PLACE_IDS)
}

/**
 * A post.create's corpus writes, or undefined when the event files nothing (bad id or time, past
 * the retention). The hour's expiry (`ttl`) is the caller's to set, once per hour of a batch.
 */
function corpusWrites(event: ActivityEvent, retention: number, now: number): { id: string; hour: number; ttl: number; ops: StoreOp[] } | undefined {
  const id = String(event.payload.id ?? '')
  if (!/^[0-9]{1,19}$/.test(id)) return undefined
  const createdRaw = typeof event.payload.created_at === 'string' ? event.payload.created_at : event.created_at
  const at = Date.parse(createdRaw)
  if (Number.isNaN(at)) return undefined
  const hour = Math.floor(at / HOUR_MS)
  const ttl = (hour + 1) * HOUR_MS + retention - now
  if (ttl <= 0) return undefined
  const note = (event.payload.note_tweet as { text?: unknown } | undefined)?.text
  const text = typeof note === 'string' && note.length > 0 ? note : String(event.payload.text ?? '')
  const terms = postTerms(text)
  const places = placeIdsOf(event)
  const post: CorpusPost = { p: terms.plain, t: terms.terms, c: countryOf(event), ...(places.length > 0 ? { l: places } : {}), at }
  return {
    id,
    hour,
    ttl,
    ops: [
      { op: 'hset', key: hourKey(hour), fields: { [id]: JSON.stringify(post) } },
      { op: 'set', key: postKey(id), value: String(hour), ttlMs: ttl }
    ]
  }
}

/**
 * Files a batch of events in the corpus, in order: post.create files the
 * post, post.delete drops it (also one created earlier in the same batch);
 * other events are ignored. One read of the deleted posts' hours and one
 * store batch for the whole batch: never a round trip per event.
 */
export async function ingestActivities(ctx: ServiceContext, events: ActivityEvent[], now = Date.now()): Promise<void> {
  const retention = ctx.config.insightsRetentionMs
  const deletedIds = [...new Set(events.filter((e) => e.event_type === 'post.delete').map((e) => String(e.payload.id ?? '')))]
  const storedHours = deletedIds.length > 0 ? await ctx.store.mget(deletedIds.map(postKey)) : []
  const hourOf = new Map<string, number | undefined>(deletedIds.map((id, i) => [id, storedHours[i] === undefined ? undefined : Number(storedHours[i])]))
  const ops: StoreOp[] = []
  /** Each hour filed into, with its expiry: one pexpire per hour per batch, not one per post. */
  const hourTtl = new Map<number, number>()
  for (const event of events) {
    if (event.event_type === 'post.delete') {
      const id = String(event.payload.id ?? '')
      const hour = hourOf.get(id)
      if (hour === undefined) continue
      ops.push({ op: 'hdel', key: hourKey(hour), fields: [id] }, { op: 'del', key: postKey(id) })
      hourOf.set(id, undefined)
    } else if (event.event_type === 'post.create') {
      const filed = corpusWrites(event, retention, now)
      if (!filed) continue
      ops.push(...filed.ops)
      hourOf.set(filed.id, filed.hour)
      hourTtl.set(filed.hour, filed.ttl)
    }
  }
  // After the hsets (an expiry on a hash not created yet would be lost), in the same batch.
  for (const [hour, ttl] of hourTtl) ops.push({ op: 'pexpire', key: hourKey(hour), ttlMs: ttl })
  // Trusted: the corpus's keys have fixed types (a hash per hour, a string per post), so the store
  // checks none of them first, and the hour's fields go in one HSET.
  if (ops.length > 0) await ctx.store.batch(ops, { trusted: true })
}

/** Files one event (ingestActivities of a batch of one). */
export async function ingestActivity(ctx: ServiceContext, event: ActivityEvent, now = Date.now()): Promise<void> {
  await ingestActivities(ctx, [event], now)
}

export async function startInsightsIngest(ctx: ServiceContext): Promise<Worker> {
  const consumer: Consumer = await ctx.bus.subscribe({
    groupId: INSIGHTS_GROUP,
    topics: [TOPICS.activityEvents],
    fromBeginning: true,
    background: true,
    batchHandler: async (messages: BusMessage[]) => {
      const events = messages
        .map((m) => m.value as ActivityEvent)
        .filter((event) => event && typeof event === 'object' && typeof event.event_type === 'string' && event.payload && typeof event.payload === 'object')
      if (events.length > 0) await ingestActivities(ctx, events)
    }
  })
  return { name: 'keyword-insights-ingest', close: () => consumer.close() }
}

// ------------------------------------------------------------------ query

export interface InsightsQuery {
  granularity: 'DAY' | 'HOUR'
  keywords: Keyword[]
  negative: Keyword[]
  start: number
  end: number
  /** Scope by an ISO 3166-1 alpha-2 code: posts of that country (geo or tagged place). */
  country: string | null
  /** Scope by a targeting location id: posts tagged with that place or a place within it. */
  locationId: string | null
}

export interface InsightsResult {
  related_keywords: string[]
  tweet_volume: number[]
}

export async function computeInsights(ctx: ServiceContext, q: InsightsQuery): Promise<InsightsResult> {
  const step = q.granularity === 'DAY' ? DAY_MS : HOUR_MS
  const buckets = Math.max(1, Math.ceil((q.end - q.start) / step))
  const volume = new Array<number>(buckets).fill(0)
  const termCounts = new Map<string, number>()
  const excluded = new Set(q.keywords.flatMap((k) => k.forms))
  const firstHour = Math.floor(q.start / HOUR_MS)
  const lastHour = Math.floor((q.end - 1) / HOUR_MS)
  for (let hour = firstHour; hour <= lastHour; hour++) {
    const posts = await ctx.store.hgetall(hourKey(hour))
    for (const raw of Object.values(posts)) {
      const post = JSON.parse(raw) as CorpusPost
      if (post.at < q.start || post.at >= q.end) continue
      if (q.country !== null && post.c !== q.country) continue
      if (q.locationId !== null && !(post.l ?? []).includes(q.locationId)) continue
      const terms: PostTerms = { plain: post.p, terms: post.t }
      if (!q.keywords.some((k) => matchesKeyword(terms, k))) continue
      if (q.negative.some((k) => matchesKeyword(terms, k))) continue
      const bucket = Math.floor((post.at - q.start) / step)
      volume[bucket] = (volume[bucket] ?? 0) + 1
      for (const term of post.t) {
        if (excluded.has(term) || !isCandidateTerm(term)) continue
        termCounts.set(term, (termCounts.get(term) ?? 0) + 1)
      }
    }
  }
  const related = [...termCounts.entries()]
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
    .slice(0, RELATED_KEYWORDS)
    .map(([term]) => term)
  return { related_keywords: related, tweet_volume: volume }
}

const regionNames = new Intl.DisplayNames(['en'], { type: 'region' })

function isCountryCode(code: string): boolean {
  if (!/^[A-Z]{2}$/.test(code)) return false
  const name = regionNames.of(code)
  return name !== undefined && name !== code && name !== 'Unknown Region'
}

function readKeywords(p: Params, name: string, required: boolean): Keyword[] {
  const list = p.list(name, { required }) ?? []
  return list.map((raw) => {
    if ([...raw].length > 100) throw Ads.invalid(name, `Each keyword of ${name} must be at most 100 characters`)
    const k = parseKeyword(raw)
    if (!k) throw Ads.invalid(name, `"${raw.slice(0, 100)}" in ${name} holds no word to search for`)
    return k
  })
}

export function readInsightsQuery(p: Params, now = Date.now()): InsightsQuery {
  const granularity = p.enumOf('granularity', ['DAY', 'HOUR'] as const, { required: true }) as 'DAY' | 'HOUR'
  const keywords = readKeywords(p, 'keywords', true)
  const negative = readKeywords(p, 'negative_keywords', false)
  if (keywords.length + negative.length > MAX_KEYWORDS) {
    throw Ads.invalid(negative.length > 0 ? 'negative_keywords' : 'keywords', `At most ${MAX_KEYWORDS} keywords may be used, keywords and negative_keywords together; got ${keywords.length + negative.length}`)
  }
  const start = Date.parse(p.time('start_time', { required: true }) as string)
  const endRaw = p.time('end_time')
  const end = endRaw === undefined ? now : Date.parse(endRaw)
  if (end <= start) throw Ads.invalid(endRaw === undefined ? 'start_time' : 'end_time', 'end_time must be later than start_time')
  if (end - start > MAX_RANGE_MS) throw Ads.invalid(endRaw === undefined ? 'start_time' : 'end_time', 'The time range (end_time minus start_time) must be at most 7 days')
  return { granularity, keywords, negative, start, end, ...readLocation(p) }
}

/** A targeting location id, as the LOCATION targeting values of the platform's location catalog are spelled (96683cc9126741d1: the United States). */
const LOCATION_ID = /^[0-9a-f]{16}$/i

/**
 * `location`: one country-level targeting value, either the targeting
 * location id LOCATION criteria take or an ISO 3166-1 alpha-2 code.
 */
function readLocation(p: Params): { country: string | null; locationId: string | null } {
  const location = p.string('location', { max: 100 })
  if (location === undefined) return { country: null, locationId: null }
  const parts = location.split(',').map((s) => s.trim()).filter((s) => s !== '')
  if (parts.length !== 1) throw Ads.invalid('location', 'Keyword insights are scoped by a single country: give one location')
  const value = parts[0] as string
  if (LOCATION_ID.test(value)) return { country: null, locationId: value.toLowerCase() }
  const code = value.toUpperCase()
  if (!isCountryCode(code)) {
    throw Ads.invalid('location', `Expected a country-level location: a targeting location id (16 hex digits such as 96683cc9126741d1) or an ISO 3166-1 alpha-2 code such as US; got "${location.slice(0, 40)}"`)
  }
  return { country: code, locationId: null }
}

export async function registerInsightsRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  app.get('/12/insights/keywords/search', { config: { auth: ADS_AUTH, adsListParams: ['keywords', 'negative_keywords'] } }, async (request, reply) => {
    const query = readInsightsQuery(Params.query(request))
    const result = await computeInsights(ctx, query)
    return sendData(request, reply, result, 'keyword_insights')
  })
}
