import t from 'tap'
import { TOPICS } from '../../services/common/bus/types'
import { newNumericId } from '../../services/common/ids'
import type { Runtime } from '../../services/common/runtime'
import { caller, gatewayWithWorkers } from '../support/fixtures/audiences'
import { adsErrorOf } from '../support/problems'
import { startTestRuntime } from '../support/runtime'
import { eventually } from '../support/util'
import { ingestActivities } from '../../services/gateway/ads/audiences/insights'
import { createAdsIdentity } from '../support/fixtures/ads'

/**
 * Keyword insights over a corpus of posts published on `activity.events`
 * with known texts, times and countries: the volumes and related keywords
 * asserted below are counted by hand from that corpus.
 */

const HOUR = 3_600_000
const DAY = 24 * HOUR
const base = Math.floor(Date.now() / HOUR) * HOUR - 3 * DAY
const iso = (ms: number): string => new Date(ms).toISOString().replace(/\.000Z$/, 'Z')

interface Post {
  key: string
  at: number
  text: string
  country?: string
  viaPlace?: boolean
}

const corpus: Post[] = [
  { key: 'p1', at: base + 10 * 60_000, text: 'Developers love #javascript and the cloud https://t.co/abc @someone', country: 'US', viaPlace: true },
  { key: 'p2', at: base + 70 * 60_000, text: 'developers, developers, developers! cloud native', country: 'US' },
  { key: 'p3', at: base + 130 * 60_000, text: 'Our developers ship apps to the cloud', country: 'GB' },
  { key: 'p4', at: base + 5 * HOUR, text: 'Cooking pasta tonight', country: 'US' },
  { key: 'p5', at: base + DAY + 5 * 60_000, text: 'Dev tools for developers: #JavaScript rocks', country: 'US' },
  { key: 'p6', at: base + DAY + 65 * 60_000, text: 'Big data pipelines for developers' },
  { key: 'p7', at: base + DAY + 2 * HOUR, text: 'big data is big', country: 'US' },
  { key: 'p8', at: base + 2 * DAY + HOUR, text: 'I love pasta', country: 'FR' }
]

async function publishPost(rt: Runtime, post: Post, id: string): Promise<void> {
  const userId = '1234567890'
  const payload: Record<string, unknown> = { id, text: post.text, author_id: userId, created_at: new Date(post.at).toISOString() }
  const includes: Record<string, unknown[]> = {}
  if (post.country && post.viaPlace) {
    payload.geo = { place_id: 'place1' }
    includes.places = [{ id: 'place1', full_name: 'Somewhere', country_code: post.country }]
  } else if (post.country) {
    payload.geo = { country_code: post.country }
  }
  await rt.ctx.bus.publish(TOPICS.activityEvents, userId, {
    event_uuid: newNumericId(),
    event_type: 'post.create',
    user_id: userId,
    created_at: new Date(post.at).toISOString(),
    payload,
    ...(includes.places ? { includes } : {})
  })
}

t.test('keyword insights over ingested posts', async (t) => {
  const rt = await startTestRuntime(t, { services: [gatewayWithWorkers] })
  const { id } = await createAdsIdentity(rt.ctx)
  const call = caller(rt, id)
  const ids = new Map<string, string>()
  for (const post of corpus) {
    const postId = newNumericId()
    ids.set(post.key, postId)
    await publishPost(rt, post, postId)
  }
  const search = async (query: Record<string, string>): Promise<{ related_keywords: string[]; tweet_volume: number[] }> => {
    const res = await call('GET', '12/insights/keywords/search', { query })
    if (res.status !== 200) throw new Error(res.text)
    return res.json<{ data: { related_keywords: string[]; tweet_volume: number[] } }>().data
  }
  const days = { granularity: 'DAY', start_time: iso(base), end_time: iso(base + 3 * DAY) }

  // The ingest consumer runs in the background: wait until the whole corpus is in.
  await eventually(async () => (await search({ ...days, keywords: 'pasta,developers' })).tweet_volume.join() === '4,2,1', 5000)
  t.pass('pasta OR developers: 4, 2, 1 per day')

  const dev = await search({ ...days, keywords: 'developers' })
  t.same(dev.tweet_volume, [3, 2, 0])
  t.same(dev.related_keywords, ['cloud', '#javascript', 'apps', 'big', 'data', 'dev', 'love', 'native', 'pipelines', 'rocks', 'ship', 'tools'], 'by co-occurrence, ties by name; stop words, URLs and mentions left out')

  // keywords is a list parameter: echoed as an array even with one item; a time is echoed normalized.
  const res = await call('GET', '12/insights/keywords/search', { query: { ...days, start_time: days.start_time.replace(/Z$/, '+00:00'), keywords: 'developers' } })
  t.same(res.json<{ request: { params: Record<string, unknown> } }>().request.params, { ...days, keywords: ['developers'] })
  const failed = await call('GET', '12/insights/keywords/search', { query: { ...days, keywords: 'a,b', negative_keywords: 'c', granularity: 'WEEK' } })
  t.equal(failed.status, 400)
  t.same(failed.json<{ request: { params: Record<string, unknown> } }>().request.params, { ...days, granularity: 'WEEK', keywords: ['a', 'b'], negative_keywords: ['c'] }, 'declared lists are arrays even when the request fails before they are read')

  t.same((await search({ ...days, keywords: 'developers', negative_keywords: 'cloud' })).tweet_volume, [0, 2, 0], 'negative keywords exclude posts')
  t.same((await search({ ...days, keywords: 'developers', location: 'US' })).tweet_volume, [2, 1, 0], 'one country (from geo or the tagged place)')
  t.same((await search({ ...days, keywords: 'developers', location: 'gb' })).tweet_volume, [1, 0, 0])
  t.same((await search({ ...days, keywords: 'big data' })).tweet_volume, [0, 2, 0], 'phrases')
  t.same((await search({ ...days, keywords: '#javascript' })).tweet_volume, [1, 1, 0], 'hashtags')
  t.same((await search({ ...days, keywords: 'JavaScript' })).tweet_volume, [1, 1, 0], 'a word also finds its hashtag, case-insensitively')
  t.same((await search({ granularity: 'HOUR', start_time: iso(base), end_time: iso(base + 3 * HOUR), keywords: 'developers' })).tweet_volume, [1, 1, 1])
  t.equal((await search({ granularity: 'HOUR', start_time: iso(base), end_time: iso(base + 7 * DAY), keywords: 'developers' })).tweet_volume.length, 168, 'a bucket per hour over 7 days')

  const empty = await search({ ...days, keywords: 'zeppelins' })
  t.same(empty, { related_keywords: [], tweet_volume: [0, 0, 0] }, 'nothing matching: zeros, no invented numbers')

  // post.delete removes a post from the corpus.
  await rt.ctx.bus.publish(TOPICS.activityEvents, '1234567890', {
    event_uuid: newNumericId(),
    event_type: 'post.delete',
    user_id: '1234567890',
    created_at: new Date().toISOString(),
    payload: { id: ids.get('p2'), author_id: '1234567890' }
  })
  await eventually(async () => (await search({ ...days, keywords: 'developers' })).tweet_volume[0] === 2)
  t.pass('the deleted post no longer counts')

  // At most 30 related keywords.
  const words = Array.from({ length: 40 }, (_, i) => `term${String.fromCharCode(97 + (i % 26))}${String.fromCharCode(97 + Math.floor(i / 26))}`)
  await publishPost(rt, { key: 'wide', at: base + 2 * DAY + 3 * HOUR, text: `quantum ${words.join(' ')}` }, newNumericId())
  const wide = await eventually(async () => {
    const d = await search({ ...days, keywords: 'quantum' })
    return d.tweet_volume[2] === 1 ? d : undefined
  })
  t.equal(wide.related_keywords.length, 30)
})

t.test('keyword insights: parameter rules', async (t) => {
  const rt = await startTestRuntime(t, { services: [gatewayWithWorkers] })
  const { id } = await createAdsIdentity(rt.ctx)
  const call = caller(rt, id)
  const start = iso(Date.now() - DAY)
  const cases: Array<[Record<string, string>, string, string]> = [
    [{ keywords: 'a', start_time: start }, 'granularity', 'MISSING_PARAMETER'],
    [{ granularity: 'WEEK', keywords: 'a', start_time: start }, 'granularity', 'INVALID_PARAMETER'],
    [{ granularity: 'DAY', start_time: start }, 'keywords', 'MISSING_PARAMETER'],
    [{ granularity: 'DAY', keywords: 'a' }, 'start_time', 'MISSING_PARAMETER'],
    [{ granularity: 'DAY', keywords: 'a', start_time: 'yesterday' }, 'start_time', 'INVALID_PARAMETER'],
    [{ granularity: 'DAY', keywords: 'a', start_time: start, end_time: start }, 'end_time', 'INVALID_PARAMETER'],
    [{ granularity: 'DAY', keywords: 'a', start_time: iso(Date.now() - 8 * DAY), end_time: iso(Date.now()) }, 'end_time', 'INVALID_PARAMETER'],
    [{ granularity: 'DAY', keywords: 'a', start_time: iso(Date.now() - 8 * DAY) }, 'start_time', 'INVALID_PARAMETER'],
    [{ granularity: 'DAY', keywords: 'a,b,c,d,e,f,g,h,i,j,k', start_time: start }, 'keywords', 'INVALID_PARAMETER'],
    [{ granularity: 'DAY', keywords: 'a,b,c,d,e,f', negative_keywords: 'g,h,i,j,k', start_time: start }, 'negative_keywords', 'INVALID_PARAMETER'],
    [{ granularity: 'DAY', keywords: '!!!', start_time: start }, 'keywords', 'INVALID_PARAMETER'],
    [{ granularity: 'DAY', keywords: 'a', start_time: start, location: 'US,GB' }, 'location', 'INVALID_PARAMETER'],
    [{ granularity: 'DAY', keywords: 'a', start_time: start, location: 'Atlantis' }, 'location', 'INVALID_PARAMETER'],
    [{ granularity: 'DAY', keywords: 'a', start_time: start, location: 'ZZ' }, 'location', 'INVALID_PARAMETER']
  ]
  for (const [query, parameter, code] of cases) {
    const res = await call('GET', '12/insights/keywords/search', { query })
    t.equal(res.status, 400, JSON.stringify(query))
    t.match(adsErrorOf(res), { code, parameter }, JSON.stringify(query))
  }
  const ok = await call('GET', '12/insights/keywords/search', { query: { granularity: 'DAY', keywords: 'a,b,c,d,e', negative_keywords: 'f,g,h,i,j', start_time: iso(Date.now() - 7 * DAY + 60_000) } })
  t.equal(ok.status, 200, '10 keywords over (almost) 7 days, end_time defaulting to now')
  t.equal(ok.json<{ data: { tweet_volume: number[] } }>().data.tweet_volume.length, 7)
  const unauthenticated = await fetch(`${rt.baseUrl}/12/insights/keywords/search?granularity=DAY&keywords=a&start_time=${start}`)
  t.equal(unauthenticated.status, 401)
})

t.test('location as a targeting location id: posts tagged with that place or a place within it; ISO codes still', async (t) => {
  const rt = await startTestRuntime(t, { services: [gatewayWithWorkers] })
  const { id } = await createAdsIdentity(rt.ctx)
  const call = caller(rt, id)
  // Country-level targeting location ids (the LOCATION targeting values targeting.test.ts stores in criteria).
  const US = '96683cc9126741d1'
  const GB = '6416b8512febefc9'
  const places: Array<[string, Record<string, unknown> | undefined]> = [
    // Tagged with the country itself, then with a city within it (its contained_within names the country).
    ['rust compilers everywhere', { id: US, place_type: 'country', full_name: 'United States', country_code: 'US' }],
    ['rust in the city', { id: '5a110d312052166f', place_type: 'city', full_name: 'San Francisco, CA', country_code: 'US', contained_within: [US] }],
    ['rust in london', { id: '457b4814b4240d87', place_type: 'city', full_name: 'London, England', country_code: 'GB', contained_within: [GB] }],
    ['rust without a place', undefined]
  ]
  for (const [text, place] of places) {
    const postId = newNumericId()
    const at = base + HOUR
    await rt.ctx.bus.publish(TOPICS.activityEvents, '1234567890', {
      event_uuid: newNumericId(),
      event_type: 'post.create',
      user_id: '1234567890',
      created_at: new Date(at).toISOString(),
      payload: { id: postId, text, author_id: '1234567890', created_at: new Date(at).toISOString(), ...(place ? { geo: { place_id: place.id } } : {}) },
      ...(place ? { includes: { places: [place] } } : {})
    })
  }
  const volume = async (location?: string): Promise<number[]> => {
    const query = { granularity: 'DAY', start_time: iso(base), end_time: iso(base + DAY), keywords: 'rust', ...(location !== undefined ? { location } : {}) }
    const res = await call('GET', '12/insights/keywords/search', { query })
    t.equal(res.status, 200, `location ${location ?? 'none'}: 200${res.status === 200 ? '' : ` (${res.text.slice(0, 300)})`}`)
    return res.json<{ data: { tweet_volume: number[] } }>().data.tweet_volume
  }
  await eventually(async () => (await volume()).join() === '4', 5000)
  t.same(await volume(US), [2], 'the US location id: the post tagged with the country and the one in a city within it')
  t.same(await volume(US.toUpperCase()), [2], 'hex digits in any case')
  t.same(await volume(GB), [1], 'the GB location id')
  t.same(await volume('00000000000000aa'), [0], 'a location no post is in')
  t.same(await volume('US'), [2], 'the ISO code still')
})

t.test('keyword insights ingest: a batch of events is one read and one store batch, in order (a post created and deleted in one batch is gone)', async (t) => {
  const rt = await startTestRuntime(t, { services: [] })
  const store = rt.ctx.store
  const calls: string[] = []
  const counted = new Proxy(store, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver) as unknown
      if (typeof value !== 'function') return value
      return (...args: unknown[]) => {
        calls.push(String(prop))
        return (value as (...a: unknown[]) => unknown).apply(target, args)
      }
    }
  })
  const ctx = { ...rt.ctx, store: counted } as typeof rt.ctx
  const at = Date.now() - HOUR
  const event = (type: string, id: string, text = ''): Parameters<typeof ingestActivities>[1][number] => ({
    event_type: type,
    user_id: '1234567890',
    created_at: new Date(at).toISOString(),
    payload: { id, text, created_at: new Date(at).toISOString() }
  })
  const [kept, gone, earlier] = [newNumericId(), newNumericId(), newNumericId()]
  await ingestActivities(ctx, [event('post.create', earlier, 'filed before')])
  calls.length = 0
  await ingestActivities(ctx, [
    event('post.create', kept, 'kept post'),
    event('post.create', gone, 'short lived'),
    event('post.delete', gone),
    event('post.delete', earlier),
    event('profile.update', kept),
    event('post.delete', newNumericId())
  ])
  t.same(calls, ['mget', 'batch'], 'one read of the deleted posts, one store batch')
  const hour = Math.floor(at / HOUR)
  const filed = await store.hgetall(`ads:insights:hour:${hour}`)
  t.same(Object.keys(filed).sort(), [kept], 'the kept post is filed; the posts deleted in the batch (one created in it) are not')
  t.equal(await store.get(`ads:insights:post:${gone}`), undefined)
  t.equal(await store.get(`ads:insights:post:${earlier}`), undefined)
})

t.test('keyword insights ingest: the hour hash gets one expiry per batch, not one per post', async (t) => {
  const rt = await startTestRuntime(t, { services: [] })
  const store = rt.ctx.store
  const batches: Array<Array<{ op: string; key: string }>> = []
  const counted = new Proxy(store, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver) as unknown
      if (typeof value !== 'function') return value
      return (...args: unknown[]) => {
        if (prop === 'batch') batches.push(args[0] as Array<{ op: string; key: string }>)
        return (value as (...a: unknown[]) => unknown).apply(target, args)
      }
    }
  })
  const ctx = { ...rt.ctx, store: counted } as typeof rt.ctx
  const hourStart = Math.floor(Date.now() / HOUR) * HOUR - HOUR
  const events = Array.from({ length: 50 }, (_, i) => ({
    event_type: 'post.create',
    user_id: '1234567890',
    created_at: new Date(hourStart + i * 1000).toISOString(),
    payload: { id: newNumericId(), text: `post ${i} about keywords`, created_at: new Date(hourStart + i * 1000).toISOString() }
  }))
  await ingestActivities(ctx, events)
  t.equal(batches.length, 1, 'one store batch')
  const ops = batches[0] ?? []
  const hourKey = `ads:insights:hour:${Math.floor(hourStart / HOUR)}`
  t.equal(ops.filter((o) => o.op === 'hset').length, 50, 'every post filed')
  t.same(ops.filter((o) => o.op === 'pexpire').map((o) => o.key), [hourKey], 'one expiry, for the one hour')
  t.equal(ops[ops.length - 1]?.op, 'pexpire', 'after the posts (an expiry before the hash exists would be lost)')
  t.equal(Object.keys(await store.hgetall(hourKey)).length, 50, 'the hour holds the 50 posts')
})
