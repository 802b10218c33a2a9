import http from 'node:http'
import net from 'node:net'
import t from 'tap'
import { ApiResponseError, TwitterApi } from 'twitter-api-v2'
import { submitSignIn, verifierOf } from '../support/fixtures/oauth'
import { callbackOf, newClient, newUser, PASSWORD, REDIRECT_URI, submitConsent } from '../support/fixtures/oauth2'
import { CookieJar } from '../support/http'
import { startReceiver } from '../support/receivers'
import { createIdentity, startTestRuntime } from '../support/runtime'
import { OPERATOR_TOKEN } from '../support/fixtures/activity'
import { OpenApiAudit } from '../support/fixtures/conformance/openapi-audit'
import { Recorder } from '../support/fixtures/conformance/recorder'
import { clientVersion, reportCalls } from '../support/fixtures/conformance/clients'

/**
 * The community client `twitter-api-v2`, unmodified. Its hosts are
 * constants (https://api.x.com/...), and it reads answers by them (form
 * encoded under https://api.x.com/oauth/), so its URLs stay as they are: the
 * one change is its `httpAgent` setting, an agent that opens every connection
 * to the recorder in front of the product on loopback (plain HTTP, as a TLS
 * terminating proxy would hand it on). The product runs with
 * PUBLIC_URL=https://api.x.com, the origin the library signs for, as it would
 * behind that proxy.
 */

const PUBLIC_URL = 'https://api.x.com'

/** Every connection to the recorder's port, whatever the URL's host; requests keep their https://api.x.com URLs. */
class LoopbackAgent extends http.Agent {
  constructor(private readonly port: number) {
    super({ keepAlive: true })
    // https.request accepts an agent only for its own protocol; the socket under it is plain TCP.
    ;(this as unknown as { protocol: string }).protocol = 'https:'
  }

  override createConnection(): net.Socket {
    return net.connect(this.port, '127.0.0.1')
  }
}

/** What the user's browser does with a link the library generated: the same path and query on the product. */
function onProduct(link: string, base: string): URL {
  const url = new URL(link)
  return new URL(`${url.pathname}${url.search}`, base)
}

t.test('twitter-api-v2: app-only, OAuth 1.0a three-legged, OAuth 2.0 PKCE with refresh and revoke, v2 calls, errors', async (t) => {
  const rt = await startTestRuntime(t, { env: { OPERATOR_TOKEN, PUBLIC_URL } })
  const id = await createIdentity(rt.ctx.store)
  const recorder = await Recorder.start(t, rt.baseUrl)
  const agent = new LoopbackAgent(Number(new URL(recorder.url).port))
  t.teardown(() => agent.destroy())
  const settings = { httpAgent: agent }
  const receiver = await startReceiver(t, id.app.consumer_secret)

  // ------------------------------------------------------------ app-only
  const consumer = new TwitterApi({ appKey: id.app.consumer_key, appSecret: id.app.consumer_secret }, settings)
  const app = await consumer.appLogin()
  t.ok(app instanceof TwitterApi, 'appLogin: POST /oauth2/token gave the library a bearer client')

  const created = await app.v2.post<{ data: { id: string; url: string; valid: boolean } }>('webhooks', { url: receiver.url })
  t.match(created.data, { url: receiver.url, valid: true }, 'v2 POST /2/webhooks')
  const webhookId = created.data.id
  const listed = await app.v2.get<{ data: Array<{ id: string }>; meta: { result_count: number } }>('webhooks')
  t.same(listed.data.map((w) => w.id), [webhookId])
  t.equal(listed.meta.result_count, 1)
  const validated = await app.v2.put<{ data: { attempted: boolean } }>(`webhooks/${webhookId}`)
  t.same(validated, { data: { attempted: true } }, 'v2 PUT (the library\'s bodiless PUT)')
  t.equal(receiver.crcCount, 2)

  // ------------------------------------------------------------ OAuth 1.0a three-legged, with the sign-in page
  const link = await consumer.generateAuthLink('http://127.0.0.1/callback', { linkMode: 'authorize' })
  t.match(link, { oauth_token: /.+/, oauth_token_secret: /.+/, oauth_callback_confirmed: 'true' }, 'request token')
  const page = onProduct(link.url, rt.baseUrl)
  t.equal(page.pathname, '/oauth/authorize')
  // The person signs in on the product's page (a real form post, CSRF token and cookie included).
  const answer = await submitSignIn(rt.baseUrl, link.oauth_token, { mode: 'authorize', screenName: id.user.screen_name, password: id.password })
  const verifier = verifierOf(answer)
  const requestClient = new TwitterApi({ appKey: id.app.consumer_key, appSecret: id.app.consumer_secret, accessToken: link.oauth_token, accessSecret: link.oauth_token_secret }, settings)
  const login = await requestClient.login(verifier)
  t.equal(login.userId, id.user.id, 'access token: the library reads user_id')
  t.equal(login.screenName, id.user.screen_name)
  const user = login.client
  const subscribed = await user.v2.post<{ data: { subscribed: boolean } }>(`account_activity/webhooks/${webhookId}/subscriptions/all`)
  t.same(subscribed, { data: { subscribed: true } }, 'a user-context v2 call signed by the library with the new token')
  const status = await user.v2.get<{ data: { subscribed: boolean } }>(`account_activity/webhooks/${webhookId}/subscriptions/all`)
  t.same(status, { data: { subscribed: true } })

  // ------------------------------------------------------------ activity subscriptions (v2, app-only)
  const sub = await app.v2.post<{ data: { subscription: { subscription_id: string; event_type: string } } }>('activity/subscriptions', {
    event_type: 'profile.update.bio',
    filter: { user_id: id.user.id },
    webhook_id: webhookId
  })
  t.equal(sub.data.subscription.event_type, 'profile.update.bio')
  const subs = await app.v2.get<{ data: Array<{ subscription_id: string }>; meta: { result_count: number } }>('activity/subscriptions', { max_results: 10 })
  t.same(subs.data.map((s) => s.subscription_id), [sub.data.subscription.subscription_id])
  const deleted = await app.v2.delete<{ data: { deleted: boolean } }>(`activity/subscriptions/${sub.data.subscription.subscription_id}`)
  t.same(deleted.data, { deleted: true })

  // ------------------------------------------------------------ usage (the library's own call: GET /2/usage/tweets)
  const usage = await app.v2.usage({ days: 3, 'usage.fields': ['daily_project_usage', 'project_id', 'project_usage'] })
  t.match(usage.data, { project_id: /^[0-9]{1,19}$/, daily_project_usage: { usage: Array } }, 'v2.usage(): the project\'s usage')
  t.ok('project_usage' in usage.data, 'the library reads project_usage')

  // ------------------------------------------------------------ error objects
  const unsupported = await user.v2.get('webhooks').catch((err: unknown) => err)
  t.type(unsupported, ApiResponseError)
  const u = unsupported as ApiResponseError
  t.equal(u.code, 403, 'user context on an app-only route')
  t.match(u.data, { type: 'https://api.twitter.com/2/problems/unsupported-authentication', title: 'Unsupported Authentication' }, 'the library keeps the Problem as data')
  const badToken = new TwitterApi('not-a-bearer-token', settings)
  const invalid = (await badToken.v2.get('webhooks').catch((err: unknown) => err)) as ApiResponseError
  t.type(invalid, ApiResponseError)
  t.equal(invalid.code, 401)
  t.equal(invalid.isAuthError, true, 'the library recognises the authentication failure')
  t.same(invalid.errors, [{ code: 89, message: 'Invalid or expired token.' }], 'errors[] as the library reads them')
  const missing = (await app.v2.delete(`webhooks/1${webhookId.slice(1)}`).catch((err: unknown) => err)) as ApiResponseError
  t.equal(missing.code, 404)
  t.match(missing.data, { type: 'https://api.twitter.com/2/problems/resource-not-found', resource_type: 'webhook' })
  const badLogin = await consumer.login('not-a-verifier').catch((err: unknown) => err)
  t.type(badLogin, Error, 'a bad verifier fails the library\'s login')

  // ------------------------------------------------------------ OAuth 2.0 with PKCE, refresh, revoke
  const o2 = await newClient(rt)
  const o2User = await newUser(rt)
  const o2Consumer = new TwitterApi({ clientId: o2.client.client_id, clientSecret: o2.secret as string }, settings)
  const authLink = o2Consumer.generateOAuth2AuthLink(REDIRECT_URI, { scope: ['tweet.read', 'users.read', 'like.read', 'offline.access'] })
  t.match(authLink.url, /^https:\/\/x\.com\/i\/oauth2\/authorize\?/, 'the library builds the platform\'s authorize link')
  const consent = await submitConsent(onProduct(authLink.url, rt.baseUrl), { jar: new CookieJar(), user: o2User, password: PASSWORD })
  const callback = callbackOf(consent)
  t.equal(callback.searchParams.get('state'), authLink.state, 'state comes back')
  const o2Login = await o2Consumer.loginWithOAuth2({ code: callback.searchParams.get('code') as string, codeVerifier: authLink.codeVerifier, redirectUri: REDIRECT_URI })
  t.same(o2Login.scope.sort(), ['like.read', 'offline.access', 'tweet.read', 'users.read'], 'scopes as granted')
  t.ok(o2Login.refreshToken, 'offline.access gives a refresh token')
  t.ok(o2Login.expiresIn > 0)
  const list = await o2Login.client.v2.get<{ meta: { result_count: number } }>('activity/subscriptions')
  t.equal(list.meta.result_count, 0, 'a v2 call with the OAuth 2.0 user token')

  const refreshed = await o2Consumer.refreshOAuth2Token(o2Login.refreshToken as string)
  t.not(refreshed.accessToken, o2Login.accessToken, 'refresh: a new access token')
  t.ok(refreshed.refreshToken)
  t.equal((await refreshed.client.v2.get<{ meta: { result_count: number } }>('activity/subscriptions')).meta.result_count, 0)
  const revoked = await o2Consumer.revokeOAuth2Token(refreshed.accessToken, 'access_token')
  t.match(revoked, { revoked: true }, 'revoke')
  const afterRevoke = (await refreshed.client.v2.get('activity/subscriptions').catch((err: unknown) => err)) as ApiResponseError
  t.type(afterRevoke, ApiResponseError)
  t.equal(afterRevoke.code, 401, 'a revoked token is refused')

  new OpenApiAudit().check(t, recorder.exchanges, 'twitter-api-v2')
  reportCalls(t, 'twitter-api-v2', clientVersion('twitter-api-v2'), recorder)
})
