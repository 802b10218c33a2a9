import t from 'tap'
import type { Runtime } from '../../services/common/runtime'
import type { User } from '../../services/common/auth/records'
import { issueAccessToken, issueBearer } from '../../services/gateway/identity'
import { authorize, exchange, newClient, newUser, startServer, withToken, type Client } from '../support/fixtures/oauth2'
import { oauth1Request, CookieJar } from '../support/http'
import type { Problem } from '../support/problems'

/**
 * Scope enforcement where the contract puts OAuth 2.0 user context: activity
 * subscriptions (direct-message events need a token of the filtered user
 * with dm.read; OAuth 1.0a access levels override scopes) and the Account
 * Activity subscription routes.
 */


let shared: Promise<Runtime> | undefined
function server(): Promise<Runtime> {
  shared ??= startServer(t)
  return shared
}

async function userToken(rt: Runtime, client: Client, user: User, scope: string): Promise<string> {
  const { params, verifier } = await authorize(rt.baseUrl, client, scope, new CookieJar(), user)
  return (await exchange(rt.baseUrl, client, params, verifier)).access_token
}

t.test('activity subscriptions to direct-message events', async (t) => {
  const rt = await server()
  const url = `${rt.baseUrl}/2/activity/subscriptions`
  const client = await newClient(rt)
  const alice = await newUser(rt)
  const bob = await newUser(rt)
  const dm = (userId: string): unknown => ({ event_type: 'dm.received', filter: { user_id: userId } })

  // createActivitySubscription takes dm.read, like.read and tweet.read (the platform's OpenAPI).
  const withDm = await userToken(rt, client, alice, 'tweet.read like.read dm.read')
  const created = await withToken('POST', url, withDm, dm(alice.id))
  t.equal(created.status, 200, created.text)
  t.match(created.json(), { data: { subscription: { event_type: 'dm.received', filter: { user_id: alice.id } } } })

  const other = await withToken('POST', url, withDm, dm(bob.id))
  t.equal(other.status, 403, 'a token of alice cannot subscribe to bob\'s direct messages')
  t.match(other.json<Problem>(), { type: 'https://api.twitter.com/2/problems/not-authorized-for-resource', parameter: 'filter.user_id', resource_id: bob.id })

  const noDm = await userToken(rt, client, alice, 'tweet.read like.read users.read')
  const missing = await withToken('POST', url, noDm, dm(alice.id))
  t.equal(missing.status, 403, 'dm.read is required')
  t.match(missing.json<Problem>(), { type: 'about:blank', detail: /Missing OAuth 2\.0 scopes: dm\.read\./ })
  t.match(missing.headers.get('www-authenticate'), /^Bearer error="insufficient_scope", scope="[^"]*\bdm\.read\b[^"]*"$/)

  const { token: bearer } = await issueBearer(rt.ctx.store, client.app)
  const appOnly = await withToken('POST', url, bearer, dm(alice.id))
  t.equal(appOnly.status, 403, 'an app-only token cannot subscribe to private events')
  t.match(appOnly.json<Problem>(), { type: 'https://api.twitter.com/2/problems/unsupported-authentication', detail: /OAuth 2\.0 Application-Only/ })
  const publicEvent = await withToken('POST', url, bearer, { event_type: 'profile.update.bio', filter: { user_id: bob.id } })
  t.equal(publicEvent.status, 200, 'public events stay open to app-only tokens')

  // OAuth 1.0a: the access level decides, whatever the scopes.
  const dmLevel = await issueAccessToken(rt.ctx.store, client.app, alice, 'read-write-dm')
  const signed = await oauth1Request('POST', url, { app: client.app, token: dmLevel }, { json: { event_type: 'dm.sent', filter: { user_id: alice.id } } })
  t.equal(signed.status, 200, signed.text)
  const rwLevel = await issueAccessToken(rt.ctx.store, client.app, alice, 'read-write')
  const refused = await oauth1Request('POST', url, { app: client.app, token: rwLevel }, { json: { event_type: 'dm.sent', filter: { user_id: alice.id } } })
  t.equal(refused.status, 403)
  t.equal(refused.json<{ errors: Array<{ code: number }> }>().errors[0]?.code, 93, 'without the direct-message level: code 93')
})

t.test('activity subscriptions need their scopes from OAuth 2.0 user tokens', async (t) => {
  const rt = await server()
  const url = `${rt.baseUrl}/2/activity/subscriptions`
  const client = await newClient(rt)
  const carol = await newUser(rt)
  const usersOnly = await userToken(rt, client, carol, 'users.read')
  const create = await withToken('POST', url, usersOnly, { event_type: 'post.create', filter: { user_id: carol.id } })
  t.equal(create.status, 403)
  t.match(create.json<Problem>(), { detail: /tweet\.read/ })
  t.equal((await withToken('GET', url, usersOnly)).status, 403)

  const tweetRead = await userToken(rt, client, carol, 'tweet.read')
  t.match((await withToken('GET', url, tweetRead)).json<Problem>(), { detail: /Missing OAuth 2\.0 scopes: like\.read\./ }, 'listing also takes like.read')
  const reader = await userToken(rt, client, carol, 'tweet.read like.read dm.read')
  const ok = await withToken('POST', url, reader, { event_type: 'post.create', filter: { user_id: '2244994945' } })
  t.equal(ok.status, 200, 'public events of any user')
  const list = await withToken('GET', url, reader)
  t.equal(list.status, 200)
  t.equal(list.json<{ meta: { result_count: number } }>().meta.result_count, 1)
})

t.test('Account Activity subscription routes take OAuth 2.0 user tokens with their scopes', async (t) => {
  const rt = await server()
  const client = await newClient(rt)
  const dave = await newUser(rt)
  const url = `${rt.baseUrl}/2/account_activity/webhooks/1234567890/subscriptions/all`
  const partial = await userToken(rt, client, dave, 'dm.read tweet.read users.read')
  const refused = await withToken('POST', url, partial)
  t.equal(refused.status, 403)
  t.match(refused.json<Problem>(), { detail: /Missing OAuth 2\.0 scopes: dm\.write/ })

  const full = await userToken(rt, client, dave, 'dm.read dm.write tweet.read users.read')
  const passed = await withToken('POST', url, full)
  t.not(passed.status, 403, 'authentication passes; the unknown webhook is what is reported')
  t.not(passed.status, 401)
  t.match(passed.text, /1234567890/)
  const check = await withToken('GET', url, full)
  t.not(check.status, 403)
})
