import * as oauth from 'oauth4webapi'
import { chromium, type Browser, type Page } from 'playwright-core'
import t, { type Test } from 'tap'
import { configureClient } from '../../services/gateway/oauth2/clients'
import { SCOPES } from '../../services/gateway/oauth2/scopes'
import { authorizationServer, INSECURE, newClient, newUser, PASSWORD, startServer, withToken, type Client } from '../support/fixtures/oauth2'
import { startCallbackReceiver } from '../support/receivers'

/**
 * The whole OAuth 2.0 authorization-code flow with PKCE as a user lives it:
 * `oauth4webapi` is the client application, Debian's chromium (driven by
 * playwright-core, fresh profile) is the user's browser on the sign-in and
 * consent page, and a loopback HTTP server is the app's redirect URI.
 */

const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync']

/**
 * One chromium for the file (playwright launches it with a fresh, temporary
 * user-data-dir), one isolated context per test. A test closes its context
 * before its server stops, so no keep-alive socket holds the server open.
 * SIGNIN_SCREENSHOT=/path.png keeps a picture of the consent page.
 */
let launched: Promise<Browser> | undefined
t.teardown(async () => {
  if (launched) await (await launched).close()
})

async function newPage(t: Test): Promise<{ page: Page; close: () => Promise<void> }> {
  launched ??= chromium.launch({ executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium', args: CHROMIUM_ARGS, headless: true, timeout: 30_000 })
  const context = await (await launched).newContext()
  const page = await context.newPage()
  page.setDefaultTimeout(15_000)
  const close = (): Promise<void> => context.close()
  t.teardown(close)
  return { page, close }
}

async function authorizationUrl(base: string, client: Client, redirectUri: string, scope: string): Promise<{ url: string; verifier: string; state: string }> {
  const verifier = oauth.generateRandomCodeVerifier()
  const state = oauth.generateRandomState()
  const url = new URL(`${base}/i/oauth2/authorize`)
  url.search = new URLSearchParams({
    response_type: 'code',
    client_id: client.client.client_id,
    redirect_uri: redirectUri,
    scope,
    state,
    code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
    code_challenge_method: 'S256'
  }).toString()
  return { url: url.toString(), verifier, state }
}

t.test('sign in, approve, exchange, use; then deny; in chromium', async (t) => {
  const rt = await startServer(t)
  const base = rt.baseUrl
  const as = authorizationServer(base)
  const rx = await startCallbackReceiver(t)
  const client = await newClient(rt)
  await configureClient(rt.ctx.store, client.app.id, { redirect_uris: [rx.url] })
  const user = await newUser(rt)
  const { page, close } = await newPage(t)

  // 1. The consent page names the app and lists the scopes in words.
  // Includes what GET /2/activity/subscriptions takes (like.read, tweet.read), used below.
  const scope = 'tweet.read like.read users.read dm.read offline.access'
  const first = await authorizationUrl(base, client, rx.url, scope)
  const shown = await page.goto(first.url)
  t.equal(shown?.status(), 200)
  t.equal(await page.locator('#app-name').textContent(), client.app.name)
  const items = await page.locator('ul.can li').allTextContents()
  t.same(items, scope.split(' ').map((s) => SCOPES[s]), 'every requested scope is described in words, in order')
  t.ok(shown?.headers()['content-security-policy']?.includes("frame-ancestors 'none'"), 'the page cannot be framed')
  if (process.env.SIGNIN_SCREENSHOT) await page.screenshot({ path: process.env.SIGNIN_SCREENSHOT, fullPage: true })

  // 2. A wrong password keeps the user on the page with an alert.
  await page.fill('#screen_name', user.screen_name)
  await page.fill('#password', 'not the password')
  await page.click('#allow')
  await page.waitForSelector('[role=alert]')
  t.match(await page.locator('[role=alert]').textContent(), /did not match/)

  // 3. The right password approves: the browser lands on the redirect URI with code and state.
  await page.fill('#password', PASSWORD)
  const [callback] = await Promise.all([rx.next(), page.click('#allow')])
  t.equal(callback.searchParams.get('state'), first.state)
  const params = oauth.validateAuthResponse(as, client.client, callback, first.state)
  const response = await oauth.authorizationCodeGrantRequest(as, client.client, client.auth, params, rx.url, first.verifier, INSECURE)
  const tokens = await oauth.processAuthorizationCodeResponse(as, client.client, response)
  t.match(tokens, { token_type: 'bearer', expires_in: 7200, scope, access_token: String, refresh_token: String })
  await page.waitForSelector('#back')

  const used = await withToken('GET', `${base}/2/activity/subscriptions`, tokens.access_token)
  t.equal(used.status, 200, 'the access token works on a v2 route')

  // 4. Signed in now: the next request shows the account and the user cancels.
  const second = await authorizationUrl(base, client, rx.url, 'tweet.read')
  await page.goto(second.url)
  t.match(await page.locator('.account').textContent(), new RegExp(`@${user.screen_name}`))
  t.equal(await page.locator('#password').count(), 0, 'no password asked of a signed-in browser')
  const [denied] = await Promise.all([rx.next(), page.click('#deny')])
  t.equal(denied.searchParams.get('error'), 'access_denied')
  t.equal(denied.searchParams.get('state'), second.state)
  t.equal(denied.searchParams.get('code'), null)
  const err = t.throws(() => oauth.validateAuthResponse(as, client.client, denied, second.state)) as oauth.AuthorizationResponseError
  t.equal(err.error, 'access_denied')
  await close()
})

t.test('requests that must not reach the client: unknown client, unregistered redirect_uri', async (t) => {
  const rt = await startServer(t)
  const rx = await startCallbackReceiver(t)
  const client = await newClient(rt)
  await configureClient(rt.ctx.store, client.app.id, { redirect_uris: [rx.url] })
  const { page, close } = await newPage(t)

  const unregistered = await authorizationUrl(rt.baseUrl, client, `${rx.url}/elsewhere`, 'tweet.read')
  const answer = await page.goto(unregistered.url)
  t.equal(answer?.status(), 400)
  t.match(await page.locator('h1').textContent(), /Invalid redirect address/)
  t.equal(new URL(page.url()).origin, new URL(rt.baseUrl).origin, 'the browser stays on the server: no open redirect')

  const unknown = await authorizationUrl(rt.baseUrl, { ...client, client: { client_id: 'dW5rbm93bjoxOmNp' } }, rx.url, 'tweet.read')
  const answer2 = await page.goto(unknown.url)
  t.equal(answer2?.status(), 400)
  t.match(await page.locator('h1').textContent(), /Unknown application/)

  // An unknown scope is reported to the client, with the state.
  const badScope = await authorizationUrl(rt.baseUrl, client, rx.url, 'tweet.read tweet.everything')
  const [back] = await Promise.all([rx.next(), page.goto(badScope.url)])
  t.equal(back.searchParams.get('error'), 'invalid_scope')
  t.equal(back.searchParams.get('state'), badScope.state)
  await close()
})
