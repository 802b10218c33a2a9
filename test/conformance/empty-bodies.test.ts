import t from 'tap'
import { bearerRequest, oauth1Request } from '../support/http'
import { startReceiver } from '../support/receivers'
import { startTestRuntime } from '../support/runtime'
import { createAdsIdentity } from '../support/fixtures/ads'
import { OpenApiAudit } from '../support/fixtures/conformance/openapi-audit'
import { Recorder } from '../support/fixtures/conformance/recorder'

/**
 * Official SDKs send `Content-Type: application/json` on every request, with
 * no body on the operations that take none. An empty body (or `{}`)
 * there must work like no body at all; on a route that needs a body it is
 * that route's own missing-body error, never a parser refusal.
 */

const JSON_TYPE = { 'content-type': 'application/json' }

t.test('an empty JSON body is no body on every route', async (t) => {
  const rt = await startTestRuntime(t)
  const routes = rt.app.routeTable.filter((r) => r.method !== 'GET' && !r.url.includes('*'))
  t.ok(routes.length > 50, `${routes.length} routes with a body method`)
  const mismatches: string[] = []
  for (const route of routes) {
    // Parameters filled with a plausible id: the route is found; authentication then refuses the anonymous call.
    const path = route.url.replace(/:[A-Za-z_]+/g, '1234567890')
    const bare = await fetch(`${rt.baseUrl}${path}`, { method: route.method, redirect: 'manual' })
    const empty = await fetch(`${rt.baseUrl}${path}`, { method: route.method, headers: JSON_TYPE, body: '', redirect: 'manual' })
    const bareText = await bare.text()
    const emptyText = await empty.text()
    if (empty.status !== bare.status || /cannot be empty/i.test(emptyText)) {
      mismatches.push(`${route.method} ${route.url}: ${empty.status} (no body: ${bare.status}) ${emptyText.slice(0, 160)} / ${bareText.slice(0, 80)}`)
    }
  }
  t.same(mismatches, [], 'every route answers an empty JSON body as it answers no body')
})

t.test('webhook validate and delete, subscription deletes: empty body and {} with a JSON content type', async (t) => {
  const started = await startTestRuntime(t)
  const recorder = await Recorder.start(t, started.baseUrl)
  // Every call below goes through the recorder, so each /2/ answer is audited against the OpenAPI document.
  const rt = { ctx: started.ctx, baseUrl: recorder.url }
  const { id } = await createAdsIdentity(rt.ctx)
  const receiver = await startReceiver(t, id.app.consumer_secret)
  const auth = { authorization: `Bearer ${id.bearer}` }
  const call = async (method: string, path: string, body: string): Promise<{ status: number; json: Record<string, unknown> }> => {
    const res = await fetch(`${rt.baseUrl}${path}`, { method, headers: { ...auth, ...JSON_TYPE }, body })
    return { status: res.status, json: (await res.json()) as Record<string, unknown> }
  }

  const created = await bearerRequest('POST', `${rt.baseUrl}/2/webhooks`, id.bearer, { json: { url: receiver.url } })
  t.equal(created.status, 200, created.text)
  const webhookId = created.json<{ data: { id: string } }>().data.id

  for (const body of ['', '{}', ' \r\n']) {
    const validated = await call('PUT', `/2/webhooks/${webhookId}`, body)
    t.same(validated, { status: 200, json: { data: { attempted: true } } }, `validate with body ${JSON.stringify(body)}`)
  }
  t.equal(receiver.crcCount, 4, 'one CRC for the create and one per validation')

  // Account activity: subscribe the user (OAuth 1.0a, empty JSON body), then the app deletes it.
  const subscribed = await oauth1Request('POST', `${rt.baseUrl}/2/account_activity/webhooks/${webhookId}/subscriptions/all`, id, { headers: JSON_TYPE })
  t.same(subscribed.json(), { data: { subscribed: true } }, subscribed.text)
  const unsubscribed = await call('DELETE', `/2/account_activity/webhooks/${webhookId}/subscriptions/${id.user.id}/all`, '')
  t.same(unsubscribed, { status: 200, json: { data: { subscribed: false } } })

  // Activity subscriptions: one deleted by id with an empty body, one in bulk with {}.
  const subIds: string[] = []
  for (const eventType of ['profile.update.bio', 'profile.update.profile_picture']) {
    const res = await bearerRequest('POST', `${rt.baseUrl}/2/activity/subscriptions`, id.bearer, { json: { event_type: eventType, filter: { user_id: id.user.id }, webhook_id: webhookId } })
    t.equal(res.status, 200, res.text)
    subIds.push(res.json<{ data: { subscription: { subscription_id: string } } }>().data.subscription.subscription_id)
  }
  const one = await call('DELETE', `/2/activity/subscriptions/${subIds[0]}`, '')
  t.same(one, { status: 200, json: { data: { deleted: true }, meta: { total_subscriptions: 1 } } })
  const bulk = await call('DELETE', `/2/activity/subscriptions?ids=${subIds[1]}`, '{}')
  t.same(bulk, { status: 200, json: { data: { deleted: true }, meta: { total_subscriptions: 0 } } })

  const deleted = await call('DELETE', `/2/webhooks/${webhookId}`, '')
  t.same(deleted, { status: 200, json: { data: { deleted: true } } })
  const listed = await bearerRequest('GET', `${rt.baseUrl}/2/webhooks`, id.bearer, { headers: JSON_TYPE })
  t.same(listed.json(), { data: [], meta: { result_count: 0 } })
  new OpenApiAudit().check(t, recorder.exchanges, 'empty bodies')
})

t.test('a route that needs a body reports it missing in its own shape', async (t) => {
  const rt = await startTestRuntime(t)
  const { id, account } = await createAdsIdentity(rt.ctx)
  const res = await fetch(`${rt.baseUrl}/2/webhooks`, { method: 'POST', headers: { authorization: `Bearer ${id.bearer}`, ...JSON_TYPE }, body: '' })
  t.equal(res.status, 400)
  const problem = (await res.json()) as { type: string; errors: Array<{ message: string }> }
  t.equal(problem.type, 'https://api.twitter.com/2/problems/invalid-request')
  t.match(problem.errors[0]?.message, /body must be a JSON object/)

  // Ads: an empty JSON body on a batch endpoint is the missing body, in the ads envelope.
  const batch = await oauth1Request('POST', `${rt.baseUrl}/12/batch/accounts/${account.id}/targeting_criteria`, id, { headers: JSON_TYPE })
  t.equal(batch.status, 400, batch.text)
  t.match(batch.json(), { errors: [{ code: /MISSING_PARAMETER|INVALID_PARAMETER/ }], request: { params: { account_id: account.id } } })

  // Not JSON at all is still refused as such.
  const bad = await fetch(`${rt.baseUrl}/2/webhooks`, { method: 'POST', headers: { authorization: `Bearer ${id.bearer}`, ...JSON_TYPE }, body: '{"url":' })
  t.equal(bad.status, 400)
  t.match(await bad.text(), /not valid JSON/)
})
