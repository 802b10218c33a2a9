import t, { type Test } from 'tap'
import { chromium, type Browser, type Page } from 'playwright-core'
import { AuthKeys, type AccessToken } from '../../services/common/auth/records'
import { newSecret } from '../../services/common/ids'
import { gatewayService } from '../../services/gateway/service'
import { createApp, createUser, updateApp } from '../../services/gateway/identity'
import { BACKENDS, oauthClient, OAuthClientError, startBackend, submitSignIn, verifierOf } from '../support/fixtures/oauth'
import { authorize, exchange, newClient } from '../support/fixtures/oauth2'
import { CookieJar, send } from '../support/http'
import { startCallbackReceiver } from '../support/receivers'

/**
 * The whole three-legged OAuth 1.0a flow with real clients: the npm `oauth`
 * package as the application, Debian's chromium (driven by playwright-core)
 * as the user's browser, and a loopback HTTP server as the app's callback.
 * SIGNIN_SCREENSHOT=/path.png saves a picture of the sign-in page.
 */

const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync']

let launched: Promise<Browser> | undefined
function browser(): Promise<Browser> {
  launched ??= chromium.launch({ executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium', args: CHROMIUM_ARGS, timeout: 30_000 })
  return launched
}
t.after(async () => {
  if (launched) await (await launched).close()
})

async function newPage(t: Test): Promise<Page> {
  const context = await (await browser()).newContext()
  t.teardown(() => context.close())
  const page = await context.newPage()
  page.setDefaultTimeout(15_000)
  return page
}

function screenName(prefix: string): string {
  return `${prefix}_${newSecret(6).replace(/[^A-Za-z0-9]/g, 'x')}`.slice(0, 15)
}

for (const backend of BACKENDS) {
  t.test(`three-legged flow with a callback URL in a browser (${backend} store)`, async (t) => {
    const rt = await startBackend(t, backend, {}, [gatewayService])
    const base = rt.baseUrl
    const store = rt.ctx.store
    const rx = await startCallbackReceiver(t)
    const app = await createApp(store, { name: 'Photo Printer', callback_urls: [rx.url], access_level: 'read-write' })
    const password = 'correct horse battery'
    const user = await createUser(store, screenName('alice'), password)
    const client = oauthClient(base, app, rx.url)
    const verify = `${base}/1.1/account/verify_credentials.json`

    const step1 = await client.requestToken()
    t.equal(step1.results.oauth_callback_confirmed, 'true', 'request token issued with the callback confirmed')

    const page = await newPage(t)
    const response = await page.goto(`${base}/oauth/authorize?oauth_token=${encodeURIComponent(step1.token)}`)
    t.equal(response?.status(), 200)
    const headers = response?.headers() ?? {}
    t.match(headers['content-security-policy'], /default-src 'none'/, 'a strict CSP')
    t.match(headers['content-security-policy'], new RegExp(`form-action 'self' ${rx.origin.replace(/[.]/g, '\\.')}`), 'the form may lead to the callback only')
    t.equal(headers['x-frame-options'], 'DENY')
    t.equal(await page.getAttribute('html', 'lang'), 'en')
    t.match(await page.textContent('h1'), /Authorize Photo Printer to access your account\?/)
    t.match(await page.textContent('ul.can'), /Create and delete posts/, 'shows the access requested')
    t.match(await page.textContent('ul.cannot'), /direct messages/, 'and what the app cannot do')
    t.ok(await page.getByLabel('Username').isVisible(), 'labelled username box')
    t.ok(await page.getByLabel('Password').isVisible(), 'labelled password box')
    if (backend === 'memory' && process.env.SIGNIN_SCREENSHOT) await page.screenshot({ path: process.env.SIGNIN_SCREENSHOT, fullPage: true })

    // Keyboard users see where they are.
    await page.getByLabel('Username').focus()
    await page.keyboard.press('Tab')
    await page.keyboard.press('Tab')
    t.equal(await page.evaluate('document.activeElement && document.activeElement.id'), 'allow', 'Tab reaches the Authorize button')
    t.equal(await page.evaluate('getComputedStyle(document.activeElement).outlineStyle'), 'solid', 'with a visible focus outline')

    await page.getByLabel('Username').fill(user.screen_name)
    await page.getByLabel('Password').fill('not the password')
    await page.getByRole('button', { name: 'Authorize app' }).click()
    await page.waitForSelector('[role=alert]')
    t.match(await page.textContent('[role=alert]'), /did not match our records/, 'a wrong password is explained')
    t.equal(await page.inputValue('#screen_name'), user.screen_name, 'the username is kept')

    await page.getByLabel('Password').fill(password)
    const back = rx.next()
    await page.getByRole('button', { name: 'Authorize app' }).click()
    const callback = (await back).searchParams
    t.equal(callback.get('oauth_token'), step1.token, 'the browser comes back with the request token')
    const verifier = callback.get('oauth_verifier') as string
    t.ok(verifier.length >= 20, 'and a verifier')

    const access = await client.accessToken(step1.token, step1.secret, verifier)
    t.equal(access.results.user_id, user.id)
    t.equal(access.results.screen_name, user.screen_name)
    const me = await client.get(verify, access.token, access.secret)
    t.equal(me.status, 200, 'a signed call with the new token succeeds')
    t.match(JSON.parse(me.body), { id_str: user.id, screen_name: user.screen_name })
    const reused = await client.accessToken(step1.token, step1.secret, verifier).catch((err: unknown) => err)
    t.ok(reused instanceof OAuthClientError && reused.statusCode === 401, 'a request token is used once')

    const revoked = await client.post(`${base}/1.1/oauth/invalidate_token.json`, access.token, access.secret)
    t.equal(revoked.status, 200)
    t.same(JSON.parse(revoked.body), { access_token: access.token })
    const after = await client.get(verify, access.token, access.secret)
    t.equal(after.status, 401, 'the invalidated token is refused')
    t.same(JSON.parse(after.body), { errors: [{ code: 89, message: 'Invalid or expired token.' }] })

    // Invalidating the token took the approval away: oauth/authenticate asks the signed-in user again.
    t.notOk(await store.exists(AuthKeys.grant(app.id, user.id)), 'the grant went with the invalidated token')
    const step2 = await client.requestToken()
    await page.goto(`${base}/oauth/authenticate?oauth_token=${encodeURIComponent(step2.token)}`)
    t.match(await page.textContent('h1'), /Authorize Photo Printer/, 'the user is asked again after invalidation')
    t.match(await page.textContent('.account'), `@${user.screen_name}`, 'as the signed-in account')
    const back2 = rx.next()
    await page.getByRole('button', { name: 'Authorize app' }).click()
    const callback2 = (await back2).searchParams
    t.equal(callback2.get('oauth_token'), step2.token)
    const access2 = await client.accessToken(step2.token, step2.secret, callback2.get('oauth_verifier') as string)
    t.not(access2.token, access.token, 'after invalidation a different token is issued')
    t.equal((await client.get(verify, access2.token, access2.secret)).status, 200)

    // oauth/authenticate: signed in and already granted, the browser goes straight back.
    const step3 = await client.requestToken()
    const back3 = rx.next()
    await page.goto(`${base}/oauth/authenticate?oauth_token=${encodeURIComponent(step3.token)}`)
    const callback3 = (await back3).searchParams
    t.equal(callback3.get('oauth_token'), step3.token, 'authenticate skips re-approval')
    const access3 = await client.accessToken(step3.token, step3.secret, callback3.get('oauth_verifier') as string)
    t.equal(access3.token, access2.token, 'authorizing again returns the outstanding token')

    // oauth/authorize always asks, showing the signed-in account; Cancel sends ?denied=.
    const step4 = await client.requestToken()
    await page.goto(`${base}/oauth/authorize?oauth_token=${encodeURIComponent(step4.token)}`)
    t.match(await page.textContent('.account'), `@${user.screen_name}`, 'signed in as')
    const back4 = rx.next()
    await page.getByRole('button', { name: 'Cancel' }).click()
    const denied = (await back4).searchParams
    t.equal(denied.get('denied'), step4.token, 'denial goes back with ?denied=')
    t.equal(denied.get('oauth_verifier'), null)
    const refused = await client.accessToken(step4.token, step4.secret, 'anything').catch((err: unknown) => err)
    t.ok(refused instanceof OAuthClientError && refused.statusCode === 401, 'a denied request token cannot be exchanged')

    // force_login asks for credentials again; screen_name prefills the box and the password gets focus.
    const step5 = await client.requestToken()
    await page.goto(`${base}/oauth/authenticate?oauth_token=${encodeURIComponent(step5.token)}&force_login=true&screen_name=${user.screen_name}`)
    t.equal(await page.inputValue('#screen_name'), user.screen_name, 'screen_name prefills the username')
    t.equal(await page.evaluate('document.activeElement && document.activeElement.id'), 'password')
    t.equal(await page.locator('.account').count(), 0, 'no signed-in shortcut with force_login')

    // With "sign in with" off, authenticate shows the consent page even to a granted user.
    await updateApp(store, { ...app, sign_in_with: false })
    const step6 = await client.requestToken()
    await page.goto(`${base}/oauth/authenticate?oauth_token=${encodeURIComponent(step6.token)}`)
    t.match(await page.textContent('h1'), /Authorize Photo Printer/, 'the page is shown')
    t.match(await page.textContent('.account'), `@${user.screen_name}`)
    const back6 = rx.next()
    await page.getByRole('button', { name: 'Authorize app' }).click()
    t.equal((await back6).searchParams.get('oauth_token'), step6.token, 'approving as the signed-in account needs no password')
  })

  t.test(`out-of-band flow: the PIN is read from the page (${backend} store)`, async (t) => {
    const rt = await startBackend(t, backend, {}, [gatewayService])
    const base = rt.baseUrl
    const store = rt.ctx.store
    const app = await createApp(store, { name: 'Desktop Client', access_level: 'read-write-dm' })
    const password = 'another good password'
    const user = await createUser(store, screenName('pinuser'), password)
    const client = oauthClient(base, app, 'oob')

    const step1 = await client.requestToken({ x_auth_access_type: 'read' })
    const page = await newPage(t)
    await page.goto(`${base}/oauth/authorize?oauth_token=${encodeURIComponent(step1.token)}`)
    t.notMatch(await page.textContent('ul.can'), /Create and delete posts/, 'x_auth_access_type=read asks for reading only')
    await page.getByLabel('Username').fill(user.screen_name)
    await page.getByLabel('Password').fill(password)
    await page.getByRole('button', { name: 'Authorize app' }).click()
    const pin = ((await page.textContent('#oauth_pin code')) ?? '').trim()
    t.match(pin, /^\d{7}$/, 'a 7-digit PIN is shown')
    t.match(await page.textContent('h1'), /You authorized Desktop Client/)

    const access = await client.accessToken(step1.token, step1.secret, pin)
    t.equal(access.results.user_id, user.id)
    const record = await store.getJson<AccessToken>(AuthKeys.token(access.token))
    t.equal(record?.access_level, 'read', 'the token carries the lowered level')
    const me = await client.get(`${base}/1.1/account/verify_credentials.json`, access.token, access.secret)
    t.equal(me.status, 200)
    const revoked = await client.post(`${base}/1.1/oauth/invalidate_token`, access.token, access.secret)
    t.equal(revoked.status, 200, 'a read-only token may revoke itself')
    const after = await client.get(`${base}/1.1/account/verify_credentials.json`, access.token, access.secret)
    t.equal(after.status, 401)
    t.equal((JSON.parse(after.body) as { errors: Array<{ code: number }> }).errors[0]?.code, 89)
  })
}

for (const backend of BACKENDS) {
  t.test(`the connected apps page: a user revokes apps in a browser (${backend} store)`, async (t) => {
    const rt = await startBackend(t, backend, {}, [gatewayService])
    const base = rt.baseUrl
    const store = rt.ctx.store
    const password = 'correct horse battery'
    const user = await createUser(store, screenName('carol'), password)
    const verify = `${base}/1.1/account/verify_credentials.json`

    // An OAuth 1.0a app and an OAuth 2.0 app, each authorized by the user through its flow.
    const printer = await createApp(store, { name: 'Photo Printer', callback_urls: ['https://printer.example/cb'], access_level: 'read-write' })
    const client = oauthClient(base, printer, 'https://printer.example/cb')
    const step = await client.requestToken()
    const answer = await submitSignIn(base, step.token, { screenName: user.screen_name, password })
    const access = await client.accessToken(step.token, step.secret, verifierOf(answer))
    t.equal((await client.get(verify, access.token, access.secret)).status, 200)
    const calendar = await newClient(rt)
    const code = await authorize(base, calendar, 'tweet.read offline.access', new CookieJar(), user)
    const tokens = await exchange(base, calendar, code.params, code.verifier)
    t.ok(await store.exists(AuthKeys.bearer(tokens.access_token)), 'the OAuth 2.0 access token is live')

    const page = await newPage(t)
    await page.goto(`${base}/oauth/apps`)
    t.match(await page.textContent('h1'), /Sign in to manage your connected apps/, 'not signed in: the page asks who you are')
    await page.getByLabel('Username').fill(user.screen_name)
    await page.getByLabel('Password').fill(password)
    await page.getByRole('button', { name: 'Sign in' }).click()
    await page.waitForSelector('ul.apps')
    t.match(await page.textContent('.account'), `@${user.screen_name}`)
    const listed = page.locator('ul.apps > li')
    t.same((await listed.locator('h2').allTextContents()).sort(), [calendar.app.name, 'Photo Printer'].sort(), 'both apps are listed')
    const printerItem = listed.filter({ has: page.getByRole('heading', { name: 'Photo Printer' }) })
    t.match(await printerItem.textContent(), /Create and delete posts/, 'with the access the user gave')

    await printerItem.getByRole('button', { name: 'Revoke access' }).click()
    await page.waitForLoadState()
    t.same(await page.locator('ul.apps > li h2').allTextContents(), [calendar.app.name], 'Photo Printer is gone from the list')
    const after = await client.get(verify, access.token, access.secret)
    t.equal(after.status, 401, 'its access token no longer works')
    t.equal((JSON.parse(after.body) as { errors: Array<{ code: number }> }).errors[0]?.code, 89)

    // The approval went too: authenticate asks again, and its page links back here.
    const again = await client.requestToken()
    await page.goto(`${base}/oauth/authenticate?oauth_token=${encodeURIComponent(again.token)}`)
    t.match(await page.textContent('h1'), /Authorize Photo Printer/, 'the app has to ask again')
    await page.getByRole('link', { name: 'your connected apps page' }).click()
    await page.waitForSelector('ul.apps')
    t.equal(new URL(page.url()).pathname, '/oauth/apps', 'the consent page links to the connected apps page')

    await page.getByRole('button', { name: 'Revoke access' }).click()
    await page.waitForSelector('#no-apps')
    t.notOk(await store.exists(AuthKeys.bearer(tokens.access_token)), 'the OAuth 2.0 access token is revoked')
    const refresh = await send('POST', `${base}/2/oauth2/token`, { 'content-type': 'application/x-www-form-urlencoded', authorization: `Basic ${Buffer.from(`${calendar.client.client_id}:${calendar.secret ?? ''}`).toString('base64')}` }, new URLSearchParams({ grant_type: 'refresh_token', refresh_token: tokens.refresh_token as string }).toString())
    t.equal(refresh.status, 400, 'and so is its refresh token')

    const forged = await send('POST', `${base}/oauth/apps`, { 'content-type': 'application/x-www-form-urlencoded' }, `app_id=${printer.id}&csrf_token=x`)
    t.equal(forged.status, 403, 'a post without the page’s CSRF cookie is refused')
    t.match(forged.headers.get('content-type'), /^text\/html/)
  })
}
