import fs from 'node:fs'
import t, { type Test } from 'tap'
import { Agent, fetch as undiciFetch } from 'undici'
import { AuthKeys } from '../../services/common/auth/records'
import { loadConfig } from '../../services/common/config'
import { createApp, createUser, rotateSecret } from '../../services/gateway/identity'
import { BACKENDS, FORM, oauthClient, OAuthClientError, startBackend, submitSignIn, verifierOf } from '../support/fixtures/oauth'
import { CookieJar, hiddenField, oauthHeader, send } from '../support/http'
import { classic } from '../support/problems'
import { createIdentity } from '../support/runtime'
import { eventually, selfSignedCert, tempDir } from '../support/util'

/**
 * Every OAuth endpoint's failure answers, each by sending the offending
 * request: request_token (215, 32, 415, 417), access_token (verifier and
 * request-token errors), the sign-in form (expiry, CSRF, attempts),
 * oauth2/token and oauth2/invalidate_token (99, 38, 348, 89), and HTTPS.
 */

const PASSWORD = 'correct horse battery'

function basic(key: string, secret: string): string {
  return `Basic ${Buffer.from(`${encodeURIComponent(key)}:${encodeURIComponent(secret)}`).toString('base64')}`
}

async function rejection(p: Promise<unknown>): Promise<OAuthClientError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e
  )
  if (!(err instanceof OAuthClientError)) throw new Error(`expected an HTTP error, got ${String(err)}`)
  return err
}

for (const backend of BACKENDS) {
  t.test(`OAuth 1.0a endpoints refuse what they must (${backend} store)`, async (t) => {
    const rt = await startBackend(t, backend)
    const base = rt.baseUrl
    const store = rt.ctx.store
    const callback = 'https://client.example/cb'
    const app = await createApp(store, { name: 'Web Client', callback_urls: [callback], access_level: 'read-write' })
    const user = await createUser(store, `u${Date.now() % 1e9}${backend[0]}`, PASSWORD)

    t.test('request_token: a form-encoded answer with the callback confirmed', async (t: Test) => {
      const url = `${base}/oauth/request_token`
      const header = oauthHeader('POST', url, { app }, { data: { oauth_callback: callback } }).replace('OAuth ', `OAuth oauth_callback="${encodeURIComponent(callback)}", `)
      const r = await send('POST', url, { authorization: header })
      t.equal(r.status, 200, r.text)
      t.match(r.headers.get('content-type'), /^application\/x-www-form-urlencoded/)
      t.equal(r.headers.get('cache-control'), 'no-store')
      const fields = new URLSearchParams(r.text)
      t.same([...fields.keys()], ['oauth_token', 'oauth_token_secret', 'oauth_callback_confirmed'])
      t.equal(fields.get('oauth_callback_confirmed'), 'true')
      t.ok(await store.exists(AuthKeys.requestToken(fields.get('oauth_token') as string)), 'the request token is stored')
      const ttl = await store.pttl(AuthKeys.requestToken(fields.get('oauth_token') as string))
      t.ok(ttl > 0 && ttl <= 15 * 60_000, `and expires within 15 minutes (${ttl} ms left)`)
    })

    t.test('request_token: callback rules (415, 417, 215)', async (t: Test) => {
      const unapproved = await rejection(oauthClient(base, app, 'https://evil.example/cb').requestToken())
      t.equal(unapproved.statusCode, 403)
      t.match(JSON.parse(unapproved.data), { errors: [{ code: 415, message: /Callback URL not approved/ }] })

      const fragment = await rejection(oauthClient(base, app, `${callback}#x`).requestToken())
      t.equal(fragment.statusCode, 403, 'a fragment is not the registered URL')

      const withState = await oauthClient(base, app, `${callback}?state=abc`).requestToken()
      t.ok(withState.token, 'the registered URL plus a query of the app’s own is accepted')

      const desktop = await createApp(store, { name: 'Desktop' })
      const notOob = await rejection(oauthClient(base, desktop, 'http://127.0.0.1/cb').requestToken())
      t.equal(notOob.statusCode, 401)
      t.match(JSON.parse(notOob.data), { errors: [{ code: 417 }] })
      t.ok((await oauthClient(base, desktop, 'oob').requestToken()).token, 'oob works for an app with no callback URL')

      const missing = await rejection(oauthClient(base, app, undefined).requestToken())
      t.equal(missing.statusCode, 400)
      t.match(JSON.parse(missing.data), { errors: [{ code: 215, message: /oauth_callback is required/ }] })

      const level = await rejection(oauthClient(base, app, 'oob').requestToken({ x_auth_access_type: 'admin' }))
      t.equal(level.statusCode, 400)
      t.match(JSON.parse(level.data), { errors: [{ code: 215, message: /x_auth_access_type/ }] })

      const wrongSecret = await rejection(oauthClient(base, { ...app, consumer_secret: 'wrong' }, 'oob').requestToken())
      t.equal(wrongSecret.statusCode, 401)
      t.match(JSON.parse(wrongSecret.data), { errors: [{ code: 32 }] })

      const svc = await oauthClient(base, app, 'oob').requestToken({ svc_auth_access_type: 'read' })
      const stored = await store.getJson<{ access_level: string }>(AuthKeys.requestToken(svc.token))
      t.equal(stored?.access_level, 'read', 'svc_auth_access_type lowers the level too')
    })

    t.test('access_token: the verifier is strictly enforced and the request token used once', async (t: Test) => {
      const client = oauthClient(base, app, callback)
      const step = await client.requestToken()
      const early = await rejection(client.accessToken(step.token, step.secret, 'guess'))
      t.equal(early.statusCode, 401, 'before approval there is no verifier to match')
      t.equal(early.data, 'Error processing your OAuth request: Invalid oauth_verifier parameter')

      const verifier = verifierOf(await submitSignIn(base, step.token, { screenName: user.screen_name, password: PASSWORD }))
      const bad = await rejection(client.accessToken(step.token, step.secret, `${verifier}x`))
      t.equal(bad.statusCode, 401)
      t.equal(bad.data, 'Error processing your OAuth request: Invalid oauth_verifier parameter', 'the public platform’s text error')
      const burned = await rejection(client.accessToken(step.token, step.secret, verifier))
      t.equal(burned.statusCode, 401, 'a wrong verifier burns the request token (no guessing PINs)')
      t.equal(burned.data, 'Error processing your OAuth request: Invalid request token')

      const step2 = await client.requestToken()
      const v2 = verifierOf(await submitSignIn(base, step2.token, { screenName: user.screen_name, password: PASSWORD }))
      const wrongSecret = await rejection(client.accessToken(step2.token, 'not-the-token-secret', v2))
      t.equal(wrongSecret.statusCode, 401)
      t.match(JSON.parse(wrongSecret.data), { errors: [{ code: 32 }] }, 'signed with the wrong request-token secret')
      const ok = await client.accessToken(step2.token, step2.secret, v2)
      t.equal(ok.results.user_id, user.id, 'the signature failure did not consume the token')
      const again = await rejection(client.accessToken(step2.token, step2.secret, v2))
      t.equal(again.data, 'Error processing your OAuth request: Invalid request token')

      const url = `${base}/oauth/access_token`
      const noVerifier = await send('POST', url, { authorization: oauthHeader('POST', url, { app, token: { token: step2.token, secret: step2.secret } }) })
      t.equal(noVerifier.status, 401)

      const other = await createApp(store, { name: 'Other', callback_urls: [callback] })
      const step3 = await client.requestToken()
      const foreign = await rejection(oauthClient(base, other, callback).accessToken(step3.token, step3.secret, 'x'))
      t.equal(foreign.data, 'Error processing your OAuth request: Invalid request token', "another app's request token")
      const unknown = await rejection(client.accessToken('no-such-token', 'x', 'y'))
      t.equal(unknown.statusCode, 401)
    })

    t.test('the sign-in form: missing or expired tokens, CSRF, answered twice, escaping', async (t: Test) => {
      const noToken = await send('GET', `${base}/oauth/authorize`)
      t.equal(noToken.status, 400)
      t.match(noToken.text, /Missing request token/)
      t.match(noToken.headers.get('content-type'), /^text\/html/)
      const unknown = await send('GET', `${base}/oauth/authenticate?oauth_token=nope`)
      t.equal(unknown.status, 400)
      t.match(unknown.text, /no longer valid/)

      const client = oauthClient(base, app, callback)
      const step = await client.requestToken()
      const jar = new CookieJar()
      const page = await send('GET', `${base}/oauth/authorize?oauth_token=${step.token}`)
      jar.take(page.headers)
      const csrf = hiddenField(page.text, 'csrf_token') as string
      const form = new URLSearchParams({ oauth_token: step.token, csrf_token: csrf, decision: 'allow', screen_name: user.screen_name, password: PASSWORD }).toString()
      const noCookie = await send('POST', `${base}/oauth/authorize`, FORM, form)
      t.equal(noCookie.status, 403, 'a post without the CSRF cookie is refused')
      t.match(noCookie.text, /This form has expired/)
      const forged = await send('POST', `${base}/oauth/authorize`, { ...FORM, cookie: jar.header() }, form.replace(csrf, `${csrf.slice(0, -2)}xx`))
      t.equal(forged.status, 403, 'a CSRF field that does not match the cookie')
      const crossSite = await send('POST', `${base}/oauth/authorize`, { ...FORM, cookie: jar.header(), origin: 'https://evil.example' }, form)
      t.equal(crossSite.status, 403, 'a post from another origin')
      const ok = await send('POST', `${base}/oauth/authorize`, { ...FORM, cookie: jar.header(), origin: new URL(base).origin }, form)
      t.equal(ok.status, 303)
      t.match(ok.headers.get('location'), /^https:\/\/client\.example\/cb\?oauth_token=.+&oauth_verifier=.+$/)
      t.ok(ok.headers.getSetCookie().some((c) => /^gw_session=.+HttpOnly; SameSite=Lax/.test(c)), 'a session cookie is set')
      const twice = await send('POST', `${base}/oauth/authorize`, { ...FORM, cookie: jar.header() }, form)
      t.equal(twice.status, 400, 'the request was already decided')
      for (const mode of ['authorize', 'authenticate']) {
        const malformed = await send('POST', `${base}/oauth/${mode}`, { ...FORM, cookie: jar.header() }, `oauth_token=${step.token}&csrf_token=%zz`)
        t.equal(malformed.status, 400, `a malformed form posted to oauth/${mode}`)
        t.match(malformed.headers.get('content-type'), /^text\/html/, 'gets the notice page, not JSON')
        t.match(malformed.text, /<h1>Unexpected request<\/h1>/)
        t.match(malformed.headers.get('content-security-policy'), /default-src 'none'/, 'with the pages’ security headers')
      }

      const evil = await createApp(store, { name: '<script>alert(1)</script>', callback_urls: [callback] })
      const step2 = await oauthClient(base, evil, callback).requestToken()
      const escaped = await send('GET', `${base}/oauth/authorize?oauth_token=${step2.token}`)
      t.notMatch(escaped.text, /<script>alert/, 'the app name is escaped')
      t.match(escaped.text, /&lt;script&gt;alert\(1\)&lt;\/script&gt;/)

      const denied = await submitSignIn(base, step2.token, { decision: 'deny' })
      t.equal(denied.status, 303)
      t.equal(new URL(denied.headers.get('location') as string).searchParams.get('denied'), step2.token)
      t.notOk(await store.exists(AuthKeys.requestToken(step2.token)), 'a denied request token is gone')
    })

    t.test('invalidate_token refuses bearer tokens and unknown tokens', async (t: Test) => {
      const id = await createIdentity(store)
      const url = `${base}/1.1/oauth/invalidate_token`
      const bearer = await send('POST', url, { authorization: `Bearer ${id.bearer}` })
      t.equal(bearer.status, 403, 'user context only')
      t.match(bearer.headers.get('content-type'), /^application\/json/, 'a classic error, not a v2 Problem')
      t.same(bearer.json(), { errors: [{ code: 220, message: 'Your credentials do not allow access to this resource.' }] })
      const verify = `${base}/1.1/account/verify_credentials.json`
      const verifyBearer = await send('GET', verify, { authorization: `Bearer ${id.bearer}` })
      t.equal(verifyBearer.status, 403)
      t.same(verifyBearer.json(), { errors: [{ code: 220, message: 'Your credentials do not allow access to this resource.' }] }, 'every 1.1 path answers in the classic shape')
      const ok = await send('POST', url, { authorization: oauthHeader('POST', url, id) })
      t.same(ok.json(), { access_token: id.token.token })
      const again = await send('POST', url, { authorization: oauthHeader('POST', url, id) })
      t.equal(again.status, 401)
      t.equal(classic(again).code, 89)
    })
  })

  t.test(`OAuth 2.0 app-only bearer tokens (${backend} store)`, async (t) => {
    const rt = await startBackend(t, backend)
    const base = rt.baseUrl
    const store = rt.ctx.store
    const app = await createApp(store, { name: 'Bearer App' })
    const token = `${base}/oauth2/token`
    const grant = 'grant_type=client_credentials'

    const first = await send('POST', token, { ...FORM, authorization: basic(app.consumer_key, app.consumer_secret) }, grant)
    t.equal(first.status, 200, first.text)
    t.match(first.headers.get('content-type'), /^application\/json/)
    const { token_type, access_token } = first.json<{ token_type: string; access_token: string }>()
    t.equal(token_type, 'bearer')
    t.ok(access_token.length > 40)
    t.notOk(await store.exists(`auth:bearer:${access_token}`), 'the token itself is not a key: only its hash is stored')
    t.ok(await store.exists(AuthKeys.bearer(access_token)))

    const second = await send('POST', token, { ...FORM, authorization: basic(app.consumer_key, app.consumer_secret) }, grant)
    t.equal(second.json<{ access_token: string }>().access_token, access_token, 'the same token while it is outstanding')
    const viaForm = await send('POST', token, FORM, `${grant}&client_id=${app.consumer_key}&client_secret=${app.consumer_secret}`)
    t.equal(viaForm.json<{ access_token: string }>().access_token, access_token, 'client_id/client_secret form fields work too')

    const use = await send('GET', `${base}/2/probe/whoami`, { authorization: `Bearer ${access_token}` })
    t.equal(use.status, 200)

    const unableToVerify = { errors: [{ code: 99, message: 'Unable to verify your credentials', label: 'authenticity_token_error' }] }
    for (const [why, headers, body] of [
      ['wrong secret', { authorization: basic(app.consumer_key, 'wrong') }, grant],
      ['unknown key', { authorization: basic('unknown', app.consumer_secret) }, grant],
      ['no credentials', {}, grant],
      ['wrong grant', { authorization: basic(app.consumer_key, app.consumer_secret) }, 'grant_type=password'],
      ['no grant', { authorization: basic(app.consumer_key, app.consumer_secret) }, ''],
      ['two credential methods', { authorization: basic(app.consumer_key, app.consumer_secret) }, `${grant}&client_id=${app.consumer_key}&client_secret=${app.consumer_secret}`],
      ['malformed Basic', { authorization: 'Basic !!!' }, grant]
    ] as Array<[string, Record<string, string>, string]>) {
      const r = await send('POST', token, { ...FORM, ...headers }, body)
      t.equal(r.status, 403, why)
      t.same(r.json(), unableToVerify, why)
    }

    const invalidate = `${base}/oauth2/invalidate_token`
    const creds = { ...FORM, authorization: basic(app.consumer_key, app.consumer_secret) }
    const missing = await send('POST', invalidate, creds, '')
    t.equal(missing.status, 400)
    t.equal(classic(missing).code, 38)
    const notOurs = await send('POST', invalidate, creds, 'access_token=AAAAAAAAAAAAAAAAAAAAAnope')
    t.equal(notOurs.status, 403)
    t.equal(classic(notOurs).code, 348)
    const badCreds = await send('POST', invalidate, { ...FORM, authorization: basic(app.consumer_key, 'wrong') }, `access_token=${access_token}`)
    t.equal(classic(badCreds).code, 99)

    const revoked = await send('POST', invalidate, creds, `access_token=${encodeURIComponent(access_token)}`)
    t.equal(revoked.status, 200)
    t.same(revoked.json(), { access_token })
    const stale = await send('GET', `${base}/2/probe/whoami`, { authorization: `Bearer ${access_token}` })
    t.equal(stale.status, 401, 'the invalidated bearer token is refused')
    t.equal(classic(stale).code, 89)
    const fresh = (await send('POST', token, creds, grant)).json<{ access_token: string }>().access_token
    t.not(fresh, access_token, 'a new token after invalidation')

    // The newer public documentation invalidates with an OAuth 1.0a signed request.
    const id = await createIdentity(store, { app })
    const signed = await send('POST', `${invalidate}?access_token=${fresh}`, { authorization: oauthHeader('POST', `${invalidate}?access_token=${fresh}`, id) })
    t.equal(signed.status, 200, signed.text)
    t.equal((await send('GET', `${base}/2/probe/whoami`, { authorization: `Bearer ${fresh}` })).status, 401)

    const third = (await send('POST', token, creds, grant)).json<{ access_token: string }>().access_token
    await rotateSecret(store, app.id)
    t.equal((await send('GET', `${base}/2/probe/whoami`, { authorization: `Bearer ${third}` })).status, 401, 'rotating the secret invalidates the bearer token')
  })
}

t.test('bearer requests too close together get 403 code 99', async (t) => {
  const rt = await startBackend(t, 'memory', { OAUTH2_TOKEN_MIN_INTERVAL: '10s' })
  const app = await createApp(rt.ctx.store, { name: 'Eager' })
  const req = (): ReturnType<typeof send> => send('POST', `${rt.baseUrl}/oauth2/token`, { ...FORM, authorization: basic(app.consumer_key, app.consumer_secret) }, 'grant_type=client_credentials')
  t.equal((await req()).status, 200)
  const tooSoon = await req()
  t.equal(tooSoon.status, 403)
  t.same(tooSoon.json(), { errors: [{ code: 99, message: 'Unable to verify your credentials', label: 'authenticity_token_error' }] })
  t.ok(tooSoon.headers.get('x-rate-limit-limit'), 'the OAuth endpoints carry rate-limit headers')
})

t.test('a burst of oauth2/token calls gets 403 code 99 by default, with the rate-limit headers', async (t) => {
  t.equal(loadConfig({}).bearerMinIntervalMs, 0, 'no OAUTH2_TOKEN_MIN_INTERVAL by default: the window alone decides')
  const rt = await startBackend(t, 'memory', { RATE_LIMITS: 'oauth2-app-token=3' })
  const app = await createApp(rt.ctx.store, { name: 'Bursty' })
  const req = (): ReturnType<typeof send> => send('POST', `${rt.baseUrl}/oauth2/token`, { ...FORM, authorization: basic(app.consumer_key, app.consumer_secret) }, 'grant_type=client_credentials')
  for (let i = 0; i < 3; i++) {
    const ok = await req()
    t.equal(ok.status, 200)
    t.same([ok.headers.get('x-rate-limit-limit'), ok.headers.get('x-rate-limit-remaining')], ['3', String(2 - i)])
  }
  const burst = await req()
  t.equal(burst.status, 403, 'too frequent: 403, not 429')
  t.same(burst.json(), { errors: [{ code: 99, message: 'Unable to verify your credentials', label: 'authenticity_token_error' }] })
  t.equal(burst.headers.get('x-rate-limit-remaining'), '0')
  t.match(burst.headers.get('x-rate-limit-reset'), /^\d{10}$/)
})

t.test('request tokens expire (OAUTH_REQUEST_TOKEN_TTL)', async (t) => {
  // Long enough for the page to load on a busy machine; the test then waits for the expiry itself.
  const rt = await startBackend(t, 'memory', { OAUTH_REQUEST_TOKEN_TTL: '4s' })
  const app = await createApp(rt.ctx.store, { name: 'Slow', callback_urls: ['https://slow.example/cb'] })
  const user = await createUser(rt.ctx.store, 'slow_user', PASSWORD)
  const client = oauthClient(rt.baseUrl, app, 'https://slow.example/cb')
  const step = await client.requestToken()
  const page = await send('GET', `${rt.baseUrl}/oauth/authorize?oauth_token=${step.token}`)
  t.equal(page.status, 200)
  await eventually(async () => !(await rt.ctx.store.exists(AuthKeys.requestToken(step.token))), 15_000, 100)
  const late = await submitSignIn(rt.baseUrl, step.token, { screenName: user.screen_name, password: PASSWORD })
  t.equal(late.status, 400)
  t.match(late.text, /no longer valid/)
  const exchange = await rejection(client.accessToken(step.token, step.secret, 'x'))
  t.equal(exchange.data, 'Error processing your OAuth request: Invalid request token')
})

t.test('sign-in attempts are limited per client address', async (t) => {
  const rt = await startBackend(t, 'memory', { RATE_LIMITS: 'oauth-login=2' })
  const app = await createApp(rt.ctx.store, { name: 'Target', callback_urls: ['https://t.example/cb'] })
  const user = await createUser(rt.ctx.store, 'victim', PASSWORD)
  const client = oauthClient(rt.baseUrl, app, 'https://t.example/cb')
  const step = await client.requestToken()
  for (let i = 0; i < 2; i++) {
    const wrong = await submitSignIn(rt.baseUrl, step.token, { screenName: user.screen_name, password: `guess number ${i}` })
    t.equal(wrong.status, 401)
    t.match(wrong.text, /did not match our records/)
  }
  const blocked = await submitSignIn(rt.baseUrl, step.token, { screenName: user.screen_name, password: PASSWORD })
  t.equal(blocked.status, 429, 'even the right password waits once the limit is reached')
  t.match(blocked.text, /Too many sign-in attempts\. Try again in \d+ minutes?\./)
  t.match(blocked.text, /role="alert"/)
})

t.test('HTTPS: served directly with TLS_CERT and TLS_KEY', async (t) => {
  const dir = tempDir(t, 'gw-tls-')
  const { cert, key } = selfSignedCert(dir, 'localhost', 'IP:127.0.0.1,DNS:localhost')
  const rt = await startBackend(t, 'memory', { TLS_CERT: cert, TLS_KEY: key })
  t.match(rt.baseUrl, /^https:\/\/127\.0\.0\.1:\d+$/)
  const agent = new Agent({ connect: { ca: fs.readFileSync(cert) } })
  t.teardown(() => agent.close())
  const id = await createIdentity(rt.ctx.store)
  const url = `${rt.baseUrl}/1.1/account/verify_credentials.json`
  const res = await undiciFetch(url, { headers: { authorization: oauthHeader('GET', url, id) }, dispatcher: agent })
  t.equal(res.status, 200, 'a signed request over HTTPS verifies against the https:// base URL')
  t.match(await res.json(), { id_str: id.user.id })
  const bearer = await undiciFetch(`${rt.baseUrl}/oauth2/token`, {
    method: 'POST',
    headers: { ...FORM, authorization: basic(id.app.consumer_key, id.app.consumer_secret) },
    body: 'grant_type=client_credentials',
    dispatcher: agent
  })
  t.equal(bearer.status, 200)
  const plain = await fetch(url.replace('https:', 'http:'), { signal: AbortSignal.timeout(5000) }).then(
    (r) => r.status,
    () => 'refused'
  )
  t.not(plain, 200, 'plain HTTP is not served on the TLS port')
  const untrusted = await undiciFetch(url, { headers: { authorization: oauthHeader('GET', url, id) } }).then(
    () => 'accepted',
    () => 'refused'
  )
  t.equal(untrusted, 'refused', 'a client that does not trust the certificate refuses it')
})
