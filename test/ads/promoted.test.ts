import t from 'tap'
import { type AdsFixture, adsFixture, createCampaign, createLineItem, expectError, OPERATOR_TOKEN } from '../support/fixtures/campaigns'
import { bearerRequest, oauth1Request, type TestResponse } from '../support/http'
import { createIdentity } from '../support/runtime'
import { eventually } from '../support/util'
import { createAdsIdentity } from '../support/fixtures/ads'

/**
 * Promoted posts (`promoted_tweets`) over HTTP against the embedded
 * runtime: posts made with POST accounts/:id/tweet promoted by line items,
 * every validation rule, the list parameters, delete, ownership, the
 * no-cascade rule of a line item delete (docs/ads.md States and
 * transitions) and the PROMOTED_TWEET entries of account history.
 */

type Json = Record<string, unknown>
const data = <T = Json>(res: TestResponse): T => res.json<{ data: T }>().data

async function newPost(f: AdsFixture, text: string): Promise<string> {
  const res = await f.call('POST', '/tweet', { query: { as_user_id: f.id.user.id, text } })
  if (res.status !== 200) throw new Error(`post failed: ${res.status} ${res.text}`)
  return res.json<{ data: { id_str: string } }>().data.id_str
}

function hours(): { start_time: string; end_time: string } {
  const hour = 3_600_000
  const start = Math.floor(Date.now() / hour) * hour - hour
  return { start_time: new Date(start).toISOString(), end_time: new Date(start + 3 * hour).toISOString() }
}

t.test('promoted posts: create, read, list, delete, every rule, ownership', async (t) => {
  const f = await adsFixture(t)
  const campaign = (await createCampaign(f)).id as string
  const li = (await createLineItem(f, campaign)).id as string
  const li2 = (await createLineItem(f, campaign)).id as string
  const posts: string[] = []
  for (let i = 0; i < 5; i++) posts.push(await newPost(f, `Promoted post number ${i}`))
  const promote = (query: Record<string, string>): Promise<TestResponse> => f.call('POST', '/promoted_tweets', { query })

  // Several posts at once (a repeated id counts once), in the public platform's shape.
  let res = await promote({ line_item_id: li, tweet_ids: `${posts[0]},${posts[1]},${posts[0]}` })
  t.equal(res.status, 200, res.text.slice(0, 300))
  const created = res.json<{ data: Json[]; data_type: string; total_count: number; request: { params: Json } }>()
  t.equal(created.data_type, 'promoted_tweet')
  t.equal(created.total_count, 2)
  t.same(created.request.params, { account_id: f.account.id, line_item_id: li, tweet_ids: [posts[0], posts[1], posts[0]] })
  t.match(created.data, [
    { id: /^[0-9a-z]+$/, line_item_id: li, tweet_id: posts[0], entity_status: 'ACTIVE', approval_status: 'ACCEPTED', deleted: false, created_at: /Z$/, updated_at: /Z$/ },
    { line_item_id: li, tweet_id: posts[1] }
  ])
  const [p0, p1] = created.data as [Json, Json]
  // Promoting a post the line item already promotes returns the existing promoted post.
  res = await promote({ line_item_id: li, tweet_ids: `${posts[1]},${posts[2]}` })
  t.equal(res.status, 200)
  const again = data<Json[]>(res)
  t.equal(again[0]?.id, p1.id, 'no second promotion of the same post')
  const p2 = again[1] as Json
  const p3 = data<Json[]>(await promote({ line_item_id: li2, tweet_ids: posts[0] as string }))[0] as Json
  t.not(p3.id, p0.id, 'another line item promotes the same post separately')

  // Rules, each naming its parameter.
  const stranger = await createAdsIdentity(f.rt.ctx)
  const strangersPost = await oauth1Request('POST', `${f.rt.baseUrl}/12/accounts/${stranger.account.id}/tweet`, stranger.id, { query: { as_user_id: stranger.id.user.id, text: 'not yours' } })
  const foreign = strangersPost.json<{ data: { id_str: string } }>().data.id_str
  const websiteCampaign = (await createCampaign(f, { name: 'Website' })).id as string
  const website = (await createLineItem(f, websiteCampaign, { objective: 'WEBSITE_CLICKS' })).id as string
  const appCampaign = (await createCampaign(f, { name: 'App' })).id as string
  const app = (await createLineItem(f, appCampaign, { objective: 'APP_INSTALLS', ios_app_store_identifier: '333903271' })).id as string
  const videoCampaign = (await createCampaign(f, { name: 'Video' })).id as string
  const video = (await createLineItem(f, videoCampaign, { objective: 'VIDEO_VIEWS' })).id as string
  const mediaCampaign = (await createCampaign(f, { name: 'Preroll' })).id as string
  const media = (await createLineItem(f, mediaCampaign, { objective: 'PREROLL_VIEWS', product_type: 'MEDIA', categories: 'IAB7' })).id as string
  const deletedLi = (await createLineItem(f, campaign)).id as string
  t.equal((await f.call('DELETE', `/line_items/${deletedLi}`)).status, 200)
  const cases: Array<[string, Record<string, string>, string, string]> = [
    ['no line_item_id', { tweet_ids: posts[3] as string }, 'MISSING_PARAMETER', 'line_item_id'],
    ['no tweet_ids', { line_item_id: li }, 'MISSING_PARAMETER', 'tweet_ids'],
    ['tweet ids are numbers', { line_item_id: li, tweet_ids: 'abc' }, 'INVALID_PARAMETER', 'tweet_ids'],
    ['at most 50 ids', { line_item_id: li, tweet_ids: Array.from({ length: 51 }, (_, i) => String(1000 + i)).join(',') }, 'INVALID_PARAMETER', 'tweet_ids'],
    ['unknown post', { line_item_id: li, tweet_ids: '1234567890123456789' }, 'INVALID_PARAMETER', 'tweet_ids'],
    ["another account's post", { line_item_id: li, tweet_ids: foreign }, 'INVALID_PARAMETER', 'tweet_ids'],
    ['one bad post fails them all', { line_item_id: li, tweet_ids: `${posts[3]},1234567890123456789` }, 'INVALID_PARAMETER', 'tweet_ids'],
    ['unknown line item', { line_item_id: 'nosuch', tweet_ids: posts[3] as string }, 'INVALID_PARAMETER', 'line_item_id'],
    ['deleted line item', { line_item_id: deletedLi, tweet_ids: posts[3] as string }, 'INVALID_PARAMETER', 'line_item_id'],
    ['MEDIA line items serve media creatives', { line_item_id: media, tweet_ids: posts[3] as string }, 'INVALID_PARAMETER', 'line_item_id'],
    ['website clicks need a link or website card', { line_item_id: website, tweet_ids: posts[3] as string }, 'INVALID_PARAMETER', 'tweet_ids'],
    ['app installs need an app card', { line_item_id: app, tweet_ids: posts[3] as string }, 'INVALID_PARAMETER', 'tweet_ids'],
    ['video views need a video', { line_item_id: video, tweet_ids: posts[3] as string }, 'INVALID_PARAMETER', 'tweet_ids']
  ]
  for (const [name, query, code, parameter] of cases) {
    await t.test(name, async (t) => expectError(t, await promote(query), 400, code, parameter))
  }
  const linkPost = await newPost(f, 'Read more at https://example.com/launch')
  t.match(data<Json[]>(await promote({ line_item_id: website, tweet_ids: linkPost })), [{ line_item_id: website, tweet_id: linkPost }], 'a post with a link suits website clicks')
  const all = data<Json[]>(await f.call('GET', '/promoted_tweets', { query: { line_item_ids: li } }))
  t.same(all.map((p) => p.tweet_id).sort(), [posts[0], posts[1], posts[2]].sort(), 'the failed requests promoted nothing (posts[3] appears nowhere)')

  // Read.
  res = await f.call('GET', `/promoted_tweets/${p0.id}`)
  t.same(data(res), p0)
  t.same(res.json<{ request: { params: Json } }>().request.params, { account_id: f.account.id, promoted_tweet_id: p0.id })
  expectError(t, await f.call('GET', '/promoted_tweets/nosuch'), 404, 'PROMOTED_TWEET_NOT_FOUND', undefined)
  expectError(t, await f.call('GET', `/promoted_tweets/${p0.id}`, { query: { with_deleted: 'yes' } }), 400, 'INVALID_PARAMETER', 'with_deleted')

  // List parameters.
  const list = (query: Record<string, string> = {}): Promise<TestResponse> => f.call('GET', '/promoted_tweets', { query })
  const ids = (r: TestResponse): string[] => data<Json[]>(r).map((p) => p.id as string)
  res = await list()
  t.equal(ids(res).length, 5, 'every promoted post of the account')
  t.same(ids(await list({ line_item_ids: li2 })), [p3.id])
  t.same(ids(await list({ promoted_tweet_ids: `${p0.id},${p2.id}` })).sort(), [p0.id, p2.id].sort())
  t.same(ids(await list({ tweet_ids: posts[0] as string })).sort(), [p0.id, p3.id].sort())
  t.same(ids(await list({ tweet_ids: posts[0] as string, line_item_ids: li })), [p0.id])
  t.equal(res.json<{ next_cursor: unknown }>().next_cursor, null)
  const sorted = data<Json[]>(await list({ sort_by: 'tweet_id-desc' })).map((p) => p.tweet_id as string)
  t.same(sorted, [...sorted].sort().reverse(), 'sort_by tweet_id-desc')
  for (const count of ['0', '1001', 'x']) expectError(t, await list({ count }), 400, 'INVALID_PARAMETER', 'count')
  expectError(t, await list({ with_total_count: 'true', cursor: 'abc' }), 400, 'EXCLUSIVE_PARAMETERS', 'with_total_count')
  expectError(t, await list({ sort_by: 'approval_status-asc' }), 400, 'INVALID_PARAMETER', 'sort_by')
  expectError(t, await list({ line_item_ids: Array.from({ length: 201 }, (_, i) => `l${i}`).join(',') }), 400, 'INVALID_PARAMETER', 'line_item_ids')
  expectError(t, await list({ promoted_tweet_ids: 'A B' }), 400, 'INVALID_PARAMETER', 'promoted_tweet_ids')
  expectError(t, await list({ tweet_ids: 'abc' }), 400, 'INVALID_PARAMETER', 'tweet_ids')
  t.equal((await list({ with_total_count: 'true', count: '2' })).json<{ total_count: number }>().total_count, 5)
  const walked: string[] = []
  const sizes: number[] = []
  let cursor: string | null = null
  for (let i = 0; i < 10; i++) {
    const page = await list({ count: '2', ...(cursor ? { cursor } : {}) })
    walked.push(...ids(page))
    sizes.push(ids(page).length)
    cursor = page.json<{ next_cursor: string | null }>().next_cursor
    if (!cursor) break
  }
  t.same(sizes, [2, 2, 1])
  t.same(walked, ids(res), 'pages of 2 walk the list once, in order')

  // Delete: soft, 404 afterwards unless with_deleted; a second delete is 404.
  res = await f.call('DELETE', `/promoted_tweets/${p2.id}`)
  t.match(data(res), { id: p2.id, deleted: true, tweet_id: posts[2] })
  expectError(t, await f.call('GET', `/promoted_tweets/${p2.id}`), 404, 'PROMOTED_TWEET_NOT_FOUND', undefined)
  t.match(data(await f.call('GET', `/promoted_tweets/${p2.id}`, { query: { with_deleted: 'true' } })), { deleted: true })
  expectError(t, await f.call('DELETE', `/promoted_tweets/${p2.id}`), 404, 'PROMOTED_TWEET_NOT_FOUND', undefined)
  t.notOk(ids(await list()).includes(p2.id as string))
  t.ok(ids(await list({ with_deleted: 'true' })).includes(p2.id as string))
  // The post can be promoted again once its promotion was deleted.
  const renewed = data<Json[]>(await promote({ line_item_id: li, tweet_ids: posts[2] as string }))[0] as Json
  t.not(renewed.id, p2.id)

  // Another user's account is refused on every operation.
  const outsider = await createIdentity(f.rt.ctx.store)
  const as = (method: string, path: string, query?: Record<string, string>): Promise<TestResponse> =>
    oauth1Request(method, `${f.rt.baseUrl}/12/accounts/${f.account.id}${path}`, outsider, query ? { query } : {})
  expectError(t, await as('GET', '/promoted_tweets'), 403, 'ACCOUNT_NOT_FOUND', 'account_id')
  expectError(t, await as('GET', `/promoted_tweets/${p0.id}`), 403, 'ACCOUNT_NOT_FOUND', 'account_id')
  expectError(t, await as('POST', '/promoted_tweets', { line_item_id: li, tweet_ids: posts[4] as string }), 403, 'ACCOUNT_NOT_FOUND', 'account_id')
  expectError(t, await as('DELETE', `/promoted_tweets/${p0.id}`), 403, 'ACCOUNT_NOT_FOUND', 'account_id')
})

t.test('a line item delete leaves its promoted posts, listed only with with_deleted; account history', async (t) => {
  const f = await adsFixture(t)
  const campaign = (await createCampaign(f)).id as string
  const doomed = (await createLineItem(f, campaign)).id as string
  const kept = (await createLineItem(f, campaign)).id as string
  const [a, b, c] = [await newPost(f, 'first'), await newPost(f, 'second'), await newPost(f, 'third')]
  const promoted = data<Json[]>(await f.call('POST', '/promoted_tweets', { query: { line_item_id: doomed, tweet_ids: `${a},${b}` } }))
  const survivor = data<Json[]>(await f.call('POST', '/promoted_tweets', { query: { line_item_id: kept, tweet_ids: c as string } }))[0] as Json
  const [pa] = promoted as [Json, Json]

  t.equal((await f.call('DELETE', `/line_items/${doomed}`)).status, 200)
  const list = async (query: Record<string, string> = {}): Promise<Json[]> => data<Json[]>(await f.call('GET', '/promoted_tweets', { query }))
  t.same((await list()).map((p) => p.id), [survivor.id], 'without with_deleted only the live line item\'s promoted post')
  t.same(await list({ line_item_ids: doomed }), [], 'filtering by the deleted line item finds nothing either')
  const withDeleted = await list({ with_deleted: 'true', line_item_ids: doomed })
  t.equal(withDeleted.length, 2)
  t.ok(withDeleted.every((p) => p.deleted === false && p.line_item_id === doomed), 'they were not deleted themselves (no cascade)')
  expectError(t, await f.call('GET', `/promoted_tweets/${pa.id}`), 404, 'PROMOTED_TWEET_NOT_FOUND', undefined)
  t.match(data(await f.call('GET', `/promoted_tweets/${pa.id}`, { query: { with_deleted: 'true' } })), { id: pa.id, deleted: false })
  t.equal((await list({ with_total_count: 'true' })).length, 1)

  // Account history: the promoted post's creation and deletion, after the operator allowlists the account.
  const del = await f.call('DELETE', `/promoted_tweets/${survivor.id}`)
  t.equal(del.status, 200)
  const granted = await bearerRequest('POST', `${f.rt.baseUrl}/admin/ads/accounts/${f.account.id}/features`, OPERATOR_TOKEN, { json: { feature_keys: ['ACCOUNT_HISTORY_ACCESS'] } })
  t.equal(granted.status, 200, granted.text)
  const entries = await eventually(async () => {
    const r = await f.call('GET', '/account_history', { query: { entity_type: 'PROMOTED_TWEET', entity_id: survivor.id as string, ...hours() } })
    const got = r.status === 200 ? data<Json[]>(r) : []
    return got.length >= 2 ? got : undefined
  }, 10_000)
  t.same(entries.map((e) => e.change_type), ['CREATE', 'DELETE'])
  t.match(entries[0], { entity: 'PROMOTED_TWEET', entity_id: survivor.id, change_by: { user_id: f.id.user.id }, entity_data: { line_item_id: kept, tweet_id: c, deleted: false } })
  t.same(entries[0]?.changes, { line_item_id: { old: null, new: kept }, tweet_id: { old: null, new: c }, entity_status: { old: null, new: 'ACTIVE' }, approval_status: { old: null, new: 'ACCEPTED' }, id: { old: null, new: survivor.id }, created_at: { old: null, new: survivor.created_at }, deleted: { old: null, new: false } })
  t.same(entries[1]?.changes, { deleted: { old: false, new: true } })
})
