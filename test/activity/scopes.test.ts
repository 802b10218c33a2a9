import t from 'tap'
import type { User } from '../../services/common/auth/records'
import type { Runtime } from '../../services/common/runtime'
import { issueAccessToken, issueBearer } from '../../services/gateway/identity'
import { authorize, exchange, newClient, newUser, startServer, withToken, type Client } from '../support/fixtures/oauth2'
import { oauth1Request, CookieJar } from '../support/http'
import { openWsStream, problemErrors } from '../support/fixtures/activity'
import type { Problem } from '../support/problems'

/**
 * Authentication of every activity route as the OpenAPI's `security` gives it:
 *   POST   /2/activity/subscriptions        BearerToken | OAuth2UserToken [dm.read like.read tweet.read] | UserToken
 *   GET    /2/activity/subscriptions        BearerToken | OAuth2UserToken [like.read tweet.read] | UserToken
 *   PUT    /2/activity/subscriptions/{id}   BearerToken
 *   DELETE /2/activity/subscriptions/{id}   BearerToken
 *   DELETE /2/activity/subscriptions?ids=   BearerToken
 *   GET    /2/activity/stream               BearerToken
 * OAuth 2.0 user tokens come from the real authorization-code flow; OAuth
 * 1.0a access levels override scopes.
 */


const CREATE_SCOPES = 'dm.read like.read tweet.read'
const LIST_SCOPES = 'like.read tweet.read'

async function userToken(rt: Runtime, client: Client, user: User, scope: string): Promise<string> {
  const { params, verifier } = await authorize(rt.baseUrl, client, scope, new CookieJar(), user)
  return (await exchange(rt.baseUrl, client, params, verifier)).access_token
}

t.test('create and list need the OpenAPI scopes of an OAuth 2.0 user token', async (t) => {
  const rt = await startServer(t)
  const url = `${rt.baseUrl}/2/activity/subscriptions`
  const client = await newClient(rt)
  const user = await newUser(rt)
  const publicEvent = { event_type: 'post.create', filter: { user_id: '2244994945' } }

  const createCases: Array<[string, string]> = [
    ['tweet.read', 'dm.read, like.read'],
    ['dm.read tweet.read', 'like.read'],
    ['like.read tweet.read', 'dm.read'],
    ['dm.read like.read', 'tweet.read']
  ]
  for (const [scope, missing] of createCases) {
    const res = await withToken('POST', url, await userToken(rt, client, user, scope), publicEvent)
    t.equal(res.status, 403, `POST with ${scope}`)
    t.match(res.json<Problem>(), { type: 'about:blank', status: 403, detail: new RegExp(`Missing OAuth 2\\.0 scopes: ${missing.replace(/\./g, '\\.')}`) }, `POST with ${scope} misses ${missing}`)
    t.equal(problemErrors(res.json()), undefined)
    t.equal(res.headers.get('www-authenticate'), `Bearer error="insufficient_scope", scope="${CREATE_SCOPES}"`)
  }
  const created = await withToken('POST', url, await userToken(rt, client, user, CREATE_SCOPES), publicEvent)
  t.equal(created.status, 200, created.text)

  const listCases: Array<[string, string]> = [
    ['tweet.read', 'like.read'],
    ['like.read', 'tweet.read'],
    ['dm.read users.read', 'like.read, tweet.read']
  ]
  for (const [scope, missing] of listCases) {
    const res = await withToken('GET', url, await userToken(rt, client, user, scope))
    t.equal(res.status, 403, `GET with ${scope}`)
    t.match(res.json<Problem>(), { type: 'about:blank', detail: new RegExp(`Missing OAuth 2\\.0 scopes: ${missing.replace(/\./g, '\\.')}`) })
    t.equal(problemErrors(res.json()), undefined)
  }
  const listed = await withToken('GET', url, await userToken(rt, client, user, LIST_SCOPES))
  t.equal(listed.status, 200, listed.text)
  t.equal(listed.json<{ meta: { result_count: number } }>().meta.result_count, 1)

  // OAuth 1.0a: the access level decides, scopes do not apply.
  const signed = { app: client.app, token: await issueAccessToken(rt.ctx.store, client.app, user, 'read-write') }
  t.equal((await oauth1Request('POST', url, signed, { json: publicEvent })).status, 200, 'an OAuth 1.0a token creates without scopes')
  t.equal((await oauth1Request('GET', url, signed)).status, 200, 'and lists')
  const { token: bearer } = await issueBearer(rt.ctx.store, client.app)
  t.equal((await withToken('GET', url, bearer)).status, 200, 'the app-only bearer lists')
})

t.test('update, delete, bulk delete and the stream take the app-only bearer only', async (t) => {
  const rt = await startServer(t)
  const url = `${rt.baseUrl}/2/activity/subscriptions`
  const client = await newClient(rt)
  const user = await newUser(rt)
  const { token: bearer } = await issueBearer(rt.ctx.store, client.app)
  const created = await withToken('POST', url, bearer, { event_type: 'post.create', filter: { user_id: '2244994945' } })
  t.equal(created.status, 200, created.text)
  const id = created.json<{ data: { subscription: { subscription_id: string } } }>().data.subscription.subscription_id
  // Every scope a client could hold does not make a user token acceptable where the OpenAPI lists BearerToken only.
  const everything = await userToken(rt, client, user, 'dm.read like.read tweet.read users.read offline.access')
  const signed = { app: client.app, token: await issueAccessToken(rt.ctx.store, client.app, user, 'read-write-dm') }
  const routes: Array<[string, string, unknown]> = [
    ['PUT', `${url}/${id}`, { tag: 'x' }],
    ['DELETE', `${url}/${id}`, undefined],
    ['DELETE', `${url}?ids=${id}`, undefined],
    ['GET', `${rt.baseUrl}/2/activity/stream`, undefined]
  ]
  for (const [method, route, body] of routes) {
    const viaOAuth2 = await withToken(method, route, everything, body)
    t.equal(viaOAuth2.status, 403, `${method} ${route} with an OAuth 2.0 user token`)
    t.match(viaOAuth2.json<Problem>(), { type: 'https://api.twitter.com/2/problems/unsupported-authentication', detail: /OAuth 2\.0 User Context is forbidden/ })
    t.equal(problemErrors(viaOAuth2.json()), undefined)
    const viaOAuth1 = await oauth1Request(method, route, signed, body === undefined ? {} : { json: body })
    t.equal(viaOAuth1.status, 403, `${method} ${route} with an OAuth 1.0a user token`)
    t.match(viaOAuth1.json<Problem>(), { type: 'https://api.twitter.com/2/problems/unsupported-authentication', detail: /OAuth 1\.0a User Context is forbidden/ })
  }
  const ws = await openWsStream(rt.baseUrl, everything).catch((e: { status: number; body: string }) => e)
  t.match(ws, { status: 403, body: /unsupported-authentication/ }, 'the WebSocket stream refuses a user token too')
  // The bearer still works everywhere, and nothing was changed by the refused calls.
  const list = await withToken('GET', url, bearer)
  t.same(list.json<{ data: Array<{ tag?: string }> }>().data.map((s) => s.tag), [undefined], 'the refused PUT changed nothing')
  t.equal((await withToken('DELETE', `${url}/${id}`, bearer)).status, 200)
})
