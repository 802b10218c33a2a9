import t from 'tap'
import { activityService } from '../../services/activity/service'
import { gatewayService } from '../../services/gateway/service'
import { bearerRequest, oauth1Request } from '../support/http'
import { createIdentity, startTestRuntime } from '../support/runtime'
import { nextUserId, OPERATOR_TOKEN, openApiErrors, problemErrors } from '../support/fixtures/activity'

const services = [gatewayService, activityService]

interface Sub {
  subscription_id: string
  event_type: string
  filter: Record<string, string>
  tag?: string
  webhook_id?: string
  created_at: string
  updated_at: string
}

t.test('create, read, update and delete a subscription with the documented shapes', async (t) => {
  const rt = await startTestRuntime(t, { services, env: { OPERATOR_TOKEN } })
  const id = await createIdentity(rt.ctx.store)
  const url = `${rt.baseUrl}/2/activity/subscriptions`
  const userId = nextUserId()

  const created = await bearerRequest('POST', url, id.bearer, { json: { event_type: 'profile.update.bio', filter: { user_id: userId }, tag: 'bio updates' } })
  t.equal(created.status, 200, created.text)
  const body = created.json<{ data: { subscription: Sub; total_subscriptions_for_instance_id: number }; meta: { total_subscriptions: number } }>()
  t.equal(openApiErrors('ActivitySubscriptionCreateResponse', body), undefined, 'create response matches the OpenAPI')
  t.match(body.data.subscription, { event_type: 'profile.update.bio', filter: { user_id: userId }, tag: 'bio updates' })
  t.match(body.data.subscription.subscription_id, /^[0-9]{1,19}$/)
  t.match(body.data.subscription.created_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
  t.equal(body.data.subscription.created_at, body.data.subscription.updated_at)
  t.equal(body.meta.total_subscriptions, 1)
  t.equal(body.data.total_subscriptions_for_instance_id, 1)
  t.notOk('app_id' in body.data.subscription, 'the owning app is not shown')
  const subId = body.data.subscription.subscription_id

  const list = await bearerRequest('GET', url, id.bearer)
  t.equal(list.status, 200)
  const listed = list.json<{ data: Sub[]; meta: { result_count: number; next_token?: string } }>()
  t.equal(openApiErrors('ActivitySubscriptionGetResponse', listed), undefined)
  t.same(listed.data, [body.data.subscription])
  t.same(listed.meta, { result_count: 1 })

  await new Promise((r) => setTimeout(r, 5))
  const updated = await bearerRequest('PUT', `${url}/${subId}`, id.bearer, { json: { tag: 'renamed' } })
  t.equal(updated.status, 200, updated.text)
  const ub = updated.json<{ data: { subscription: Sub; total_subscriptions: number } }>()
  t.equal(openApiErrors('ActivitySubscriptionUpdateResponse', ub), undefined)
  t.equal(ub.data.subscription.tag, 'renamed')
  t.equal(ub.data.subscription.created_at, body.data.subscription.created_at)
  t.ok(ub.data.subscription.updated_at > body.data.subscription.updated_at, 'updated_at moves')
  t.equal(ub.data.total_subscriptions, 1)

  const deleted = await bearerRequest('DELETE', `${url}/${subId}`, id.bearer)
  t.equal(deleted.status, 200)
  t.same(deleted.json(), { data: { deleted: true }, meta: { total_subscriptions: 0 } })
  t.equal(openApiErrors('ActivitySubscriptionDeleteResponse', deleted.json()), undefined)

  const again = await bearerRequest('DELETE', `${url}/${subId}`, id.bearer)
  t.equal(again.status, 404)
  t.equal(again.headers.get('content-type'), 'application/problem+json; charset=utf-8')
  t.match(again.json(), { type: 'https://api.twitter.com/2/problems/resource-not-found', status: 404, parameter: 'subscription_id', resource_id: subId, resource_type: 'subscription', value: subId })
  t.equal(problemErrors(again.json()), undefined, 'an unknown subscription is a spec-valid Problem')

  const emptyList = await bearerRequest('GET', url, id.bearer)
  t.same(emptyList.json(), { data: [], meta: { result_count: 0 } })
})

t.test('PascalCase event types are stored dotted; direction spellings are normalised', async (t) => {
  const rt = await startTestRuntime(t, { services, env: { OPERATOR_TOKEN } })
  const id = await createIdentity(rt.ctx.store)
  const url = `${rt.baseUrl}/2/activity/subscriptions`
  const aliases: Record<string, string> = {
    ProfileBioUpdate: 'profile.update.bio',
    ProfilePictureUpdate: 'profile.update.profile_picture',
    ProfileBannerUpdate: 'profile.update.banner_picture',
    ProfileGeoUpdate: 'profile.update.geo',
    ProfileUrlUpdate: 'profile.update.url'
  }
  for (const [alias, dotted] of Object.entries(aliases)) {
    const res = await bearerRequest('POST', url, id.bearer, { json: { event_type: alias, filter: { user_id: '2244994945' } } })
    t.equal(res.status, 200, res.text)
    t.equal(res.json<{ data: { subscription: Sub } }>().data.subscription.event_type, dotted, `${alias} -> ${dotted}`)
  }
  // Direct-message activity is private: the filtered user subscribes in user context.
  const subject = await createIdentity(rt.ctx.store, { app: id.app })
  for (const [given, stored] of [['outbound', 'sent'], ['inbound', 'received'], ['sent', 'sent'], ['received', 'received']]) {
    const res = await oauth1Request('POST', url, subject, { json: { event_type: 'dm.received', filter: { user_id: subject.user.id, direction: given } } })
    t.equal(res.status, 200, res.text)
    t.equal(res.json<{ data: { subscription: Sub } }>().data.subscription.filter.direction, stored, `${given} is stored as ${stored}`)
  }
  const byBearer = await bearerRequest('POST', url, id.bearer, { json: { event_type: 'dm.received', filter: { user_id: subject.user.id } } })
  t.equal(byBearer.status, 403, 'an app-only token cannot subscribe to private dm activity')
  const list = await bearerRequest('GET', url, id.bearer)
  t.equal(list.json<{ data: Sub[] }>().data.length, 9)
  t.ok(list.json<{ data: Sub[] }>().data.every((s) => /^[a-z_.]+$/.test(s.event_type)), 'every listed type is dotted')
})

t.test('invalid subscriptions get invalid-request Problems naming the parameter', async (t) => {
  const rt = await startTestRuntime(t, { services, env: { OPERATOR_TOKEN } })
  const id = await createIdentity(rt.ctx.store)
  const url = `${rt.baseUrl}/2/activity/subscriptions`
  const cases: Array<[string, unknown, RegExp, string]> = [
    ['unknown event type', { event_type: 'post.like', filter: { user_id: '1' } }, /event_type.*post\.create.*ProfileBioUpdate/, 'event_type'],
    ['dotted typo', { event_type: 'Profile.Update.Bio', filter: { user_id: '1' } }, /event_type/, 'event_type'],
    ['missing filter', { event_type: 'post.create' }, /filter/, 'filter'],
    ['missing user_id', { event_type: 'post.create', filter: {} }, /user_id/, 'filter.user_id'],
    ['user_id not numeric', { event_type: 'post.create', filter: { user_id: 'abc' } }, /user_id/, 'filter.user_id'],
    ['user_id too long', { event_type: 'post.create', filter: { user_id: '12345678901234567890' } }, /user_id/, 'filter.user_id'],
    ['empty keyword', { event_type: 'post.create', filter: { user_id: '1', keyword: '' } }, /keyword/, 'filter.keyword'],
    ['keyword of 151 chars', { event_type: 'post.create', filter: { user_id: '1', keyword: 'k'.repeat(151) } }, /keyword/, 'filter.keyword'],
    ['blank keyword', { event_type: 'post.create', filter: { user_id: '1', keyword: '   ' } }, /keyword/, 'filter.keyword'],
    ['keyword on post.delete (no text)', { event_type: 'post.delete', filter: { user_id: '1', keyword: 'oops' } }, /keyword.*text.*post\.delete/, 'filter.keyword'],
    ['keyword on dm.read (no text)', { event_type: 'dm.read', filter: { user_id: '1', keyword: 'seen' } }, /keyword.*dm\.read/, 'filter.keyword'],
    ['keyword on dm.indicate_typing (no text)', { event_type: 'dm.indicate_typing', filter: { user_id: '1', keyword: 'typing' } }, /keyword.*dm\.indicate_typing/, 'filter.keyword'],
    ['direction on a post event', { event_type: 'post.create', filter: { user_id: '1', direction: 'sent' } }, /direction.*direct-message/, 'filter.direction'],
    ['direction on a profile event', { event_type: 'ProfileBioUpdate', filter: { user_id: '1', direction: 'inbound' } }, /direction/, 'filter.direction'],
    ['unknown direction', { event_type: 'dm.sent', filter: { user_id: '1', direction: 'sideways' } }, /direction.*sent, received/, 'filter.direction'],
    ['empty tag', { event_type: 'post.create', filter: { user_id: '1' }, tag: '' }, /tag/, 'tag'],
    ['tag of 201 chars', { event_type: 'post.create', filter: { user_id: '1' }, tag: 't'.repeat(201) }, /tag/, 'tag'],
    ['extra property', { event_type: 'post.create', filter: { user_id: '1' }, colour: 'red' }, /colour/, 'colour'],
    ['extra filter property', { event_type: 'post.create', filter: { user_id: '1', lang: 'en' } }, /lang/, 'lang'],
    ['malformed webhook id', { event_type: 'post.create', filter: { user_id: '1' }, webhook_id: 'x1' }, /webhook_id/, 'webhook_id'],
    ['unknown webhook', { event_type: 'post.create', filter: { user_id: '1' }, webhook_id: '1234567890' }, /WebhookIdInvalid/, 'webhook_id']
  ]
  for (const [name, body, message, parameter] of cases) {
    const res = await bearerRequest('POST', url, id.bearer, { json: body })
    t.equal(res.status, 400, `${name}: ${res.text}`)
    t.equal(res.headers.get('content-type'), 'application/problem+json; charset=utf-8', name)
    const problem = res.json<{ type: string; errors: Array<{ message: string; parameters: Record<string, string[]> }> }>()
    t.equal(problem.type, 'https://api.twitter.com/2/problems/invalid-request', name)
    t.equal(problemErrors(problem), undefined, name)
    t.ok(problem.errors.some((e) => message.test(e.message)), `${name}: message ${JSON.stringify(problem.errors)}`)
    t.ok(problem.errors.some((e) => parameter in e.parameters), `${name}: names ${parameter}`)
  }
  const res = await bearerRequest('POST', url, id.bearer, { headers: { 'content-type': 'application/json' } })
  t.equal(res.status, 400, 'no body at all is a 400, not a 500')
  const none = await bearerRequest('GET', url, id.bearer)
  t.same(none.json<{ data: unknown[] }>().data, [], 'nothing was created by the refused requests')
})

t.test('webhook_id must name a webhook of the same application', async (t) => {
  const rt = await startTestRuntime(t, { services, env: { OPERATOR_TOKEN } })
  const mine = await createIdentity(rt.ctx.store)
  const theirs = await createIdentity(rt.ctx.store)
  // The shared key the webhooks service writes for every registered webhook.
  await rt.ctx.store.hset('webhooks:config:1111111111111111111', { id: '1111111111111111111', app_id: mine.app.id, url: 'https://example.com/hook' })
  await rt.ctx.store.hset('webhooks:config:2222222222222222222', { id: '2222222222222222222', app_id: theirs.app.id, url: 'https://example.com/hook' })
  const url = `${rt.baseUrl}/2/activity/subscriptions`
  const ok = await bearerRequest('POST', url, mine.bearer, { json: { event_type: 'post.create', filter: { user_id: '7' }, webhook_id: '1111111111111111111' } })
  t.equal(ok.status, 200, ok.text)
  t.equal(ok.json<{ data: { subscription: Sub } }>().data.subscription.webhook_id, '1111111111111111111')
  const foreign = await bearerRequest('POST', url, mine.bearer, { json: { event_type: 'post.create', filter: { user_id: '7' }, webhook_id: '2222222222222222222' } })
  t.equal(foreign.status, 400)
  t.match(foreign.text, /WebhookIdInvalid/)
  const subId = ok.json<{ data: { subscription: Sub } }>().data.subscription.subscription_id
  const put = await bearerRequest('PUT', `${url}/${subId}`, mine.bearer, { json: { webhook_id: '2222222222222222222' } })
  t.equal(put.status, 400, 'PUT checks the webhook too')
  const put2 = await bearerRequest('PUT', `${url}/${subId}`, mine.bearer, { json: { tag: 'x', webhook_id: '1111111111111111111' } })
  t.equal(put2.status, 200)
})

t.test('PUT accepts only tag and webhook_id; other apps cannot see or touch a subscription', async (t) => {
  const rt = await startTestRuntime(t, { services, env: { OPERATOR_TOKEN } })
  const owner = await createIdentity(rt.ctx.store)
  const other = await createIdentity(rt.ctx.store)
  const url = `${rt.baseUrl}/2/activity/subscriptions`
  const subId = (await bearerRequest('POST', url, owner.bearer, { json: { event_type: 'post.create', filter: { user_id: '5' } } })).json<{ data: { subscription: Sub } }>().data.subscription.subscription_id

  const filterChange = await bearerRequest('PUT', `${url}/${subId}`, owner.bearer, { json: { filter: { user_id: '6' } } })
  t.equal(filterChange.status, 400)
  t.match(filterChange.text, /filter/)
  const typeChange = await bearerRequest('PUT', `${url}/${subId}`, owner.bearer, { json: { event_type: 'post.delete' } })
  t.equal(typeChange.status, 400)
  const empty = await bearerRequest('PUT', `${url}/${subId}`, owner.bearer, { json: {} })
  t.equal(empty.status, 400)
  t.match(empty.text, /Nothing to update/)

  // Another application's subscription is indistinguishable from none at all.
  for (const [method, res] of [
    ['PUT', await bearerRequest('PUT', `${url}/${subId}`, other.bearer, { json: { tag: 'mine now' } })],
    ['DELETE', await bearerRequest('DELETE', `${url}/${subId}`, other.bearer)],
    ['PUT unknown', await bearerRequest('PUT', `${url}/999`, owner.bearer, { json: { tag: 'x' } })]
  ] as const) {
    t.equal(res.status, 404, method)
    t.match(res.json(), { type: 'https://api.twitter.com/2/problems/resource-not-found', parameter: 'subscription_id', resource_id: /^\d+$/, resource_type: 'subscription' }, method)
    t.equal(problemErrors(res.json()), undefined, method)
  }
  t.same((await bearerRequest('GET', url, other.bearer)).json<{ data: unknown[] }>().data, [])
  for (const method of ['PUT', 'DELETE'] as const) {
    const bad = await bearerRequest(method, `${url}/not-a-number`, owner.bearer, method === 'PUT' ? { json: { tag: 'x' } } : {})
    t.equal(bad.status, 400, `${method} with a malformed id`)
    t.match(bad.json(), { type: 'https://api.twitter.com/2/problems/invalid-request', errors: [{ message: /`subscription_id` path parameter/, parameters: { subscription_id: ['not-a-number'] } }] })
    t.notMatch(bad.text, /query parameter/, 'the id is a path parameter, not a query parameter')
    t.equal(problemErrors(bad.json()), undefined)
  }
  const still = (await bearerRequest('GET', url, owner.bearer)).json<{ data: Sub[] }>().data
  t.equal(still.length, 1)
  t.notOk(still[0]?.tag, 'nothing changed')
})

t.test('authentication: bearer or user context to create and list, bearer to update and delete', async (t) => {
  const rt = await startTestRuntime(t, { services, env: { OPERATOR_TOKEN } })
  const id = await createIdentity(rt.ctx.store)
  const url = `${rt.baseUrl}/2/activity/subscriptions`
  const viaUser = await oauth1Request('POST', url, id, { json: { event_type: 'post.create', filter: { user_id: id.user.id } } })
  t.equal(viaUser.status, 200, viaUser.text)
  const subId = viaUser.json<{ data: { subscription: Sub } }>().data.subscription.subscription_id
  const listViaUser = await oauth1Request('GET', url, id)
  t.equal(listViaUser.status, 200)
  t.equal(listViaUser.json<{ data: Sub[] }>().data.length, 1, 'user context sees the app\'s subscriptions')
  const delViaUser = await oauth1Request('DELETE', `${url}/${subId}`, id)
  t.equal(delViaUser.status, 403)
  t.match(delViaUser.json(), { type: 'https://api.twitter.com/2/problems/unsupported-authentication' })
  t.equal((await bearerRequest('GET', url, 'not-a-token')).status, 401)
  const anonymous = await fetch(url)
  t.equal(anonymous.status, 401)
  t.equal((await bearerRequest('DELETE', `${url}/${subId}`, id.bearer)).status, 200)
})

t.test('the per-app limit, listing pages and bulk delete', async (t) => {
  const rt = await startTestRuntime(t, { services, env: { OPERATOR_TOKEN, SUBSCRIPTION_LIMIT_PER_APP: '7' } })
  const id = await createIdentity(rt.ctx.store)
  const other = await createIdentity(rt.ctx.store)
  const url = `${rt.baseUrl}/2/activity/subscriptions`
  const created = await Promise.all(
    Array.from({ length: 9 }, (_, i) => bearerRequest('POST', url, id.bearer, { json: { event_type: 'post.create', filter: { user_id: String(100 + i) } } }))
  )
  t.equal(created.filter((r) => r.status === 200).length, 7, 'concurrent creates never pass the limit')
  const refused = created.filter((r) => r.status !== 200)
  t.equal(refused.length, 2)
  for (const r of refused) {
    t.equal(r.status, 400)
    t.match(r.json(), { type: 'https://api.twitter.com/2/problems/rule-cap', title: 'Rule Cap', detail: /SubscriptionLimitExceeded.*7/ })
    t.equal(problemErrors(r.json()), undefined, 'the limit is a spec-valid rule-cap Problem')
  }
  t.equal((await bearerRequest('POST', url, other.bearer, { json: { event_type: 'post.create', filter: { user_id: '1' } } })).status, 200, 'the limit is per application')

  const seen: Sub[] = []
  let token: string | undefined
  let pages = 0
  do {
    const res = await bearerRequest('GET', url, id.bearer, { query: { max_results: '3', ...(token ? { pagination_token: token } : {}) } })
    t.equal(res.status, 200, res.text)
    const page = res.json<{ data: Sub[]; meta: { result_count: number; next_token?: string } }>()
    t.equal(openApiErrors('ActivitySubscriptionGetResponse', page), undefined)
    t.equal(page.meta.result_count, page.data.length)
    if (page.meta.next_token) t.ok(page.meta.next_token.length >= 16, 'tokens are PaginationToken32')
    seen.push(...page.data)
    token = page.meta.next_token
    pages++
  } while (token && pages < 10)
  t.equal(pages, 3)
  t.equal(seen.length, 7)
  t.equal(new Set(seen.map((s) => s.subscription_id)).size, 7, 'no subscription repeats across pages')

  const badQueries: Array<Record<string, string>> = [{ max_results: '0' }, { max_results: '1001' }, { max_results: 'many' }, { pagination_token: 'short' }, { pagination_token: 'aaaaaaaaaaaaaaaaaaaa' }]
  for (const bad of badQueries) {
    const res = await bearerRequest('GET', url, id.bearer, { query: bad })
    t.equal(res.status, 400, JSON.stringify(bad))
    t.match(res.json(), { type: 'https://api.twitter.com/2/problems/invalid-request' })
  }

  const ids = seen.map((s) => s.subscription_id)
  const partial = await bearerRequest('DELETE', url, id.bearer, { query: { ids: `${ids[0]},${ids[1]},1` } })
  t.equal(partial.status, 200, partial.text)
  const pb = partial.json<{ data: { deleted: boolean }; meta: { total_subscriptions: number }; errors: Array<Record<string, unknown>> }>()
  t.same(pb.data, { deleted: true })
  t.equal(pb.meta.total_subscriptions, 5)
  t.match(pb.errors, [{ type: 'https://api.twitter.com/2/problems/resource-not-found', parameter: 'ids', resource_id: '1', resource_type: 'subscription', value: '1' }])
  t.equal(openApiErrors('ActivitySubscriptionDeleteResponse', pb), undefined)
  for (const problem of pb.errors) t.equal(problemErrors(problem), undefined, 'each partial-failure Problem is spec-valid')
  t.equal((await bearerRequest('POST', url, id.bearer, { json: { event_type: 'post.create', filter: { user_id: '1' } } })).status, 200, 'deleting frees places')

  t.equal((await bearerRequest('DELETE', url, id.bearer, { query: { ids: Array.from({ length: 101 }, (_, i) => String(i + 1)).join(',') } })).status, 400, 'at most 100 ids')
  t.equal((await bearerRequest('DELETE', url, id.bearer, { query: { ids: 'a,b' } })).status, 400)
  t.equal((await bearerRequest('DELETE', url, id.bearer)).status, 400, 'ids is required')
  const noneFound = await bearerRequest('DELETE', url, id.bearer, { query: { ids: '1,2' } })
  t.equal(noneFound.status, 404, 'none found')
  t.match(noneFound.json(), { type: 'https://api.twitter.com/2/problems/resource-not-found', parameter: 'ids', resource_id: '1', resource_type: 'subscription', value: '1', detail: /\[1,2\]/ })
  t.equal(problemErrors(noneFound.json()), undefined)
  const rest = await bearerRequest('DELETE', url, id.bearer, { query: { ids: ids.slice(2).join(',') } })
  t.equal(rest.status, 200)
  t.equal(rest.json<{ meta: { total_subscriptions: number } }>().meta.total_subscriptions, 1)
})
