import * as oauth from 'oauth4webapi'
import { PNG } from 'pngjs'
import t from 'tap'
import { AuthKeys, type BearerRecord } from '../../services/common/auth/records'
import { loadConfig } from '../../services/common/config'
import { issueAccessToken } from '../../services/gateway/identity'
import { claimCode, codeWasUsed, createGrant, newGrantId } from '../../services/gateway/oauth2/grants'
import { OAuth2Keys } from '../../services/gateway/oauth2/keys'
import { authorizationServer, authorizationUrl, authorize, callbackOf, exchange, INSECURE, newClient, newUser, REDIRECT_URI, rejection, startServer, submitConsent, withToken } from '../support/fixtures/oauth2'
import { oauth1Request, CookieJar, send } from '../support/http'
import { eventually } from '../support/util'

/**
 * The token side of OAuth 2.0 user context, with the `oauth4webapi` client
 * library as the application: code exchange with PKCE, refresh with
 * rotation, revocation, expiry, and every RFC 6749 error. The consent form is
 * submitted over plain HTTP here; oauth2-browser.test.ts drives it in chromium.
 */

const FORM = { 'content-type': 'application/x-www-form-urlencoded' }

/** The scopes GET /2/activity/subscriptions needs (the platform's OpenAPI: like.read, tweet.read), the protected route of these tests. */
const READ = 'tweet.read like.read'

// One server for every test that needs no special setting (each starts its own clients and users).
let shared: ReturnType<typeof startServer> | undefined
function server(): ReturnType<typeof startServer> {
  shared ??= startServer(t)
  return shared
}

function tinyPng(): string {
  const png = new PNG({ width: 64, height: 64 })
  png.data.fill(200)
  return PNG.sync.write(png).toString('base64')
}

t.test('code exchange: token response shape, hashed storage, refresh only with offline.access', async (t) => {
  const rt = await server()
  const base = rt.baseUrl
  const client = await newClient(rt)
  const user = await newUser(rt)
  const jar = new CookieJar()

  const first = await authorize(base, client, 'tweet.read users.read offline.access', jar, user)
  const tokens = await exchange(base, client, first.params, first.verifier)
  t.equal(tokens.token_type, 'bearer')
  t.equal(tokens.expires_in, 7200, 'two hours by default')
  t.equal(tokens.scope, 'tweet.read users.read offline.access')
  t.type(tokens.access_token, 'string')
  t.type(tokens.refresh_token, 'string', 'offline.access brings a refresh token')

  const record = await rt.ctx.store.getJson<BearerRecord>(AuthKeys.bearer(tokens.access_token))
  t.match(record, { kind: 'user', app_id: client.app.id, user_id: user.id, scopes: ['tweet.read', 'users.read', 'offline.access'] })
  if (record?.kind === 'user') t.ok(Math.abs(Date.parse(record.expires_at) - Date.parse(record.created_at) - 7_200_000) < 1000, 'expires_at two hours after created_at')
  // Only hashes are stored: no key or value holds a raw token.
  for await (const key of rt.ctx.store.scanPrefix('auth:')) {
    const value = (await rt.ctx.store.get(key).catch(() => undefined)) ?? ''
    for (const raw of [tokens.access_token, tokens.refresh_token as string, first.params.get('code') as string]) {
      if (key.includes(raw) || value.includes(raw)) t.fail(`raw credential stored under ${key}`)
    }
  }

  // The second authorization reuses the browser's sign-in session: no password.
  const second = await authorize(base, client, 'tweet.read', jar)
  const plain = await exchange(base, client, second.params, second.verifier)
  t.equal(plain.scope, 'tweet.read')
  t.equal(plain.refresh_token, undefined, 'no refresh token without offline.access')
  const as = authorizationServer(base)
  const err = await rejection(t, async () => oauth.processRefreshTokenResponse(as, client.client, await oauth.refreshTokenGrantRequest(as, client.client, client.auth, plain.access_token, INSECURE)), oauth.ResponseBodyError)
  t.equal(err.status, 400)
  t.equal(err.error, 'invalid_grant', 'an access token is not a refresh token')
})

t.test('follow.read (the contract spelling) is granted as follows.read', async (t) => {
  const rt = await server()
  const client = await newClient(rt)
  const user = await newUser(rt)
  const { params, verifier } = await authorize(rt.baseUrl, client, 'follow.read users.read follow.read', new CookieJar(), user)
  const tokens = await exchange(rt.baseUrl, client, params, verifier)
  t.equal(tokens.scope, 'follows.read users.read')
})

t.test('refresh: rotation, narrowing, replay revokes the authorization', async (t) => {
  const rt = await server()
  const base = rt.baseUrl
  const as = authorizationServer(base)
  const client = await newClient(rt)
  const user = await newUser(rt)
  const { params, verifier } = await authorize(base, client, `${READ} media.write offline.access`, new CookieJar(), user)
  const first = await exchange(base, client, params, verifier)
  const refresh = async (token: string, scope?: string): Promise<oauth.TokenEndpointResponse> =>
    oauth.processRefreshTokenResponse(as, client.client, await oauth.refreshTokenGrantRequest(as, client.client, client.auth, token, { ...INSECURE, ...(scope ? { additionalParameters: { scope } } : {}) }))

  const second = await refresh(first.refresh_token as string)
  t.not(second.access_token, first.access_token)
  t.not(second.refresh_token, first.refresh_token, 'a new refresh token every time')
  t.equal(second.scope, `${READ} media.write offline.access`)
  t.equal(second.expires_in, 7200)

  const widened = await rejection(t, () => refresh(second.refresh_token as string, `${READ} dm.read offline.access`), oauth.ResponseBodyError)
  t.equal(widened.error, 'invalid_scope', 'a refresh cannot add scopes')
  const narrowed = await refresh(second.refresh_token as string, `${READ} offline.access`)
  t.equal(narrowed.scope, `${READ} offline.access`)
  t.equal((await withToken('GET', `${base}/2/activity/subscriptions`, narrowed.access_token)).status, 200, 'the narrowed token works where its scopes are enough')

  // The refresh token rotated away is refused, and presenting it revokes everything issued since.
  const replay = await rejection(t, () => refresh(first.refresh_token as string), oauth.ResponseBodyError)
  t.equal(replay.status, 400)
  t.equal(replay.error, 'invalid_grant')
  t.match(replay.error_description, /already used/)
  const after = await withToken('GET', `${base}/2/activity/subscriptions`, narrowed.access_token)
  t.equal(after.status, 401, 'the latest access token of the replayed authorization is revoked')
  t.same(after.json(), { errors: [{ code: 89, message: 'Invalid or expired token.' }] })
  const latest = await rejection(t, () => refresh(narrowed.refresh_token as string), oauth.ResponseBodyError)
  t.equal(latest.error, 'invalid_grant', 'and so is its latest refresh token')
})

t.test('revocation (RFC 7009)', async (t) => {
  const rt = await server()
  const base = rt.baseUrl
  const as = authorizationServer(base)
  const client = await newClient(rt)
  const other = await newClient(rt, { confidential: false })
  const user = await newUser(rt)
  const jar = new CookieJar()
  const route = `${base}/2/activity/subscriptions`
  const revoke = async (c: typeof client, token: string, hint?: string): Promise<void> =>
    oauth.processRevocationResponse(await oauth.revocationRequest(as, c.client, c.auth, token, { ...INSECURE, ...(hint ? { additionalParameters: { token_type_hint: hint } } : {}) }))

  const a = await authorize(base, client, `${READ} offline.access`, jar, user)
  const tokens = await exchange(base, client, a.params, a.verifier)
  t.equal((await withToken('GET', route, tokens.access_token)).status, 200)

  await revoke(other, tokens.access_token)
  t.equal((await withToken('GET', route, tokens.access_token)).status, 200, 'another client cannot revoke the token (and is not told)')
  await revoke(client, 'no-such-token')
  t.pass('an unknown token is answered 200')

  await revoke(client, tokens.access_token, 'access_token')
  const refused = await withToken('GET', route, tokens.access_token)
  t.equal(refused.status, 401)
  t.same(refused.json(), { errors: [{ code: 89, message: 'Invalid or expired token.' }] })
  await revoke(client, tokens.access_token)
  t.pass('revoking twice is still 200')

  // Revoking the refresh token (hint wrong on purpose) ends the whole authorization.
  const refreshed = await oauth.processRefreshTokenResponse(as, client.client, await oauth.refreshTokenGrantRequest(as, client.client, client.auth, tokens.refresh_token as string, INSECURE))
  t.equal((await withToken('GET', route, refreshed.access_token)).status, 200)
  await revoke(client, refreshed.refresh_token as string, 'access_token')
  t.equal((await withToken('GET', route, refreshed.access_token)).status, 401, 'the access token of a revoked refresh token stops working')
  const err = await rejection(t, async () => oauth.processRefreshTokenResponse(as, client.client, await oauth.refreshTokenGrantRequest(as, client.client, client.auth, refreshed.refresh_token as string, INSECURE)), oauth.ResponseBodyError)
  t.equal(err.error, 'invalid_grant')

  const raw = await send('POST', `${base}/2/oauth2/revoke`, FORM, new URLSearchParams({ token: 'x', client_id: other.client.client_id }).toString())
  t.equal(raw.status, 200)
  t.same(JSON.parse(raw.text), { revoked: true })
  t.equal(raw.headers.get('cache-control'), 'no-store')
  const missing = await send('POST', `${base}/2/oauth2/revoke`, FORM, new URLSearchParams({ client_id: other.client.client_id }).toString())
  t.equal(missing.status, 400)
  t.equal(JSON.parse(missing.text).error, 'invalid_request')
})

t.test('expiry of access tokens and codes (short lifetimes configured)', async (t) => {
  // Long enough for a scrypt sign-in and an exchange on a busy machine; the test then waits for each expiry.
  const rt = await startServer(t, { OAUTH2_ACCESS_TOKEN_TTL: '4s', OAUTH2_CODE_TTL: '4s' })
  const base = rt.baseUrl
  const client = await newClient(rt)
  const user = await newUser(rt)
  const jar = new CookieJar()
  const a = await authorize(base, client, READ, jar, user)
  const tokens = await exchange(base, client, a.params, a.verifier)
  t.equal(tokens.expires_in, 4, 'expires_in follows OAUTH2_ACCESS_TOKEN_TTL')
  const route = `${base}/2/activity/subscriptions`
  t.equal((await withToken('GET', route, tokens.access_token)).status, 200)

  const late = await authorize(base, client, READ, jar)
  const code = late.params.get('code') as string
  t.ok((await rt.ctx.store.pttl(OAuth2Keys.code(code))) > 0, 'the code is stored with its lifetime')
  await eventually(async () => (await withToken('GET', route, tokens.access_token)).status === 401, 15_000, 200)
  const expired = await withToken('GET', route, tokens.access_token)
  t.equal(expired.status, 401, 'the access token expired')
  t.same(expired.json(), { errors: [{ code: 89, message: 'Invalid or expired token.' }] })
  await eventually(async () => !(await rt.ctx.store.exists(OAuth2Keys.code(code))), 15_000, 100)
  const err = await rejection(t, () => exchange(base, client, late.params, late.verifier), oauth.ResponseBodyError)
  t.equal(err.error, 'invalid_grant', 'a code is refused after its lifetime')
  t.match(err.error_description, /invalid or expired/)
})

t.test('authorization codes live 30 s by default', async (t) => {
  t.equal(loadConfig({}).oauth2CodeTtlMs, 30_000, 'OAUTH2_CODE_TTL defaults to 30 s')
  const rt = await server()
  const client = await newClient(rt)
  const user = await newUser(rt)
  const a = await authorize(rt.baseUrl, client, 'tweet.read', new CookieJar(), user)
  const ttl = await rt.ctx.store.pttl(OAuth2Keys.code(a.params.get('code') as string))
  t.ok(ttl > 20_000 && ttl <= 30_000, `the server stores a code for 30 s (${ttl} ms left)`)
})

t.test('two concurrent exchanges of one code: one succeeds, and its tokens are revoked', async (t) => {
  const rt = await server()
  const route = `${rt.baseUrl}/2/activity/subscriptions`
  const client = await newClient(rt)
  const user = await newUser(rt)
  const jar = new CookieJar()
  for (let round = 0; round < 5; round++) {
    const a = await authorize(rt.baseUrl, client, 'tweet.read offline.access', jar, round === 0 ? user : undefined)
    const results = await Promise.allSettled([exchange(rt.baseUrl, client, a.params, a.verifier), exchange(rt.baseUrl, client, a.params, a.verifier)])
    const won = results.filter((r): r is PromiseFulfilledResult<oauth.TokenEndpointResponse> => r.status === 'fulfilled')
    t.equal(won.length, 1, `round ${round}: exactly one exchange succeeds`)
    const lost = results.find((r): r is PromiseRejectedResult => r.status === 'rejected')
    t.match(lost?.reason, { error: 'invalid_grant' }, 'the other is invalid_grant')
    const tokens = won[0]?.value as oauth.TokenEndpointResponse
    t.equal((await withToken('GET', route, tokens.access_token)).status, 401, 'the winner’s access token is revoked (RFC 6749 §4.1.2)')
    t.notOk(await rt.ctx.store.exists(OAuth2Keys.refresh(tokens.refresh_token as string)), 'and its refresh token')
  }
})

t.test('a replay between the claim of a code and the issue of its tokens still revokes them', async (t) => {
  const rt = await server()
  const { store, config } = rt.ctx
  const client = await newClient(rt)
  const user = await newUser(rt)
  const a = await authorize(rt.baseUrl, client, 'tweet.read', new CookieJar(), user)
  const code = a.params.get('code') as string
  const grantId = newGrantId()
  t.same(await claimCode(store, config, code, grantId), { ok: true }, 'the first exchange claims the code')
  t.ok(await codeWasUsed(store, code), 'a replay lands before the first exchange has issued anything')
  const issued = await createGrant(store, config, { grant_id: grantId, app_id: client.app.id, client_id: client.client.client_id, user_id: user.id, scopes: ['tweet.read'] })
  t.notOk(await store.exists(AuthKeys.bearer(issued.access_token)), 'the tokens issued afterwards are revoked at once')
  t.equal((await withToken('GET', `${rt.baseUrl}/2/activity/subscriptions`, issued.access_token)).status, 401)
})

t.test('the consent form: a malformed post gets the notice page, not JSON', async (t) => {
  const rt = await server()
  for (const path of ['/i/oauth2/authorize', '/2/oauth2/authorize']) {
    const malformed = await send('POST', `${rt.baseUrl}${path}`, FORM, 'request_id=%zz&decision=allow')
    t.equal(malformed.status, 400, path)
    t.match(malformed.headers.get('content-type'), /^text\/html/)
    t.match(malformed.text, /<h1>Unexpected request<\/h1>/)
  }
})

t.test('token endpoint errors', async (t) => {
  const rt = await server()
  const base = rt.baseUrl
  const as = authorizationServer(base)
  const client = await newClient(rt)
  const user = await newUser(rt)
  const jar = new CookieJar()

  t.test('wrong code_verifier', async (t) => {
    const a = await authorize(base, client, 'tweet.read', jar, user)
    const err = await rejection(t, () => exchange(base, client, a.params, oauth.generateRandomCodeVerifier()), oauth.ResponseBodyError)
    t.equal(err.status, 400)
    t.equal(err.error, 'invalid_grant')
    t.match(err.error_description, /code_verifier/)
    t.equal(err.response.headers.get('cache-control'), 'no-store')
    const ok = await exchange(base, client, a.params, a.verifier)
    t.type(ok.access_token, 'string', 'a failed verifier does not burn the code for its owner')
  })

  t.test('missing code_verifier', async (t) => {
    const a = await authorize(base, client, 'tweet.read', jar)
    const response = await oauth.authorizationCodeGrantRequest(as, client.client, client.auth, a.params, REDIRECT_URI, oauth.nopkce, INSECURE)
    const err = await rejection(t, () => oauth.processAuthorizationCodeResponse(as, client.client, response), oauth.ResponseBodyError)
    t.equal(err.error, 'invalid_request')
  })

  t.test('reused code revokes what it issued', async (t) => {
    const a = await authorize(base, client, 'tweet.read offline.access', jar)
    const tokens = await exchange(base, client, a.params, a.verifier)
    const err = await rejection(t, () => exchange(base, client, a.params, a.verifier), oauth.ResponseBodyError)
    t.equal(err.error, 'invalid_grant')
    t.match(err.error_description, /already used/)
    t.equal((await withToken('GET', `${base}/2/activity/subscriptions`, tokens.access_token)).status, 401, 'the first exchange\'s access token is revoked')
    const refresh = await rejection(t, async () => oauth.processRefreshTokenResponse(as, client.client, await oauth.refreshTokenGrantRequest(as, client.client, client.auth, tokens.refresh_token as string, INSECURE)), oauth.ResponseBodyError)
    t.equal(refresh.error, 'invalid_grant', 'and its refresh token')
  })

  t.test('redirect_uri must match the authorization request', async (t) => {
    const other = 'http://127.0.0.1:9/other'
    const twoUris = await newClient(rt, { redirectUris: [REDIRECT_URI, other] })
    const a = await authorize(base, twoUris, 'tweet.read', jar)
    const response = await oauth.authorizationCodeGrantRequest(as, twoUris.client, twoUris.auth, a.params, other, a.verifier, INSECURE)
    const err = await rejection(t, () => oauth.processAuthorizationCodeResponse(as, twoUris.client, response), oauth.ResponseBodyError)
    t.equal(err.error, 'invalid_grant')
    t.match(err.error_description, /redirect_uri/)
  })

  t.test('a code issued to another client', async (t) => {
    const thief = await newClient(rt)
    const a = await authorize(base, client, 'tweet.read', jar)
    const err = await rejection(t, () => exchange(base, thief, a.params, a.verifier), oauth.ResponseBodyError)
    t.equal(err.error, 'invalid_grant')
  })

  t.test('bad client secret: 401 invalid_client with a Basic challenge', async (t) => {
    const a = await authorize(base, client, 'tweet.read', jar)
    const wrong = { ...client, auth: oauth.ClientSecretBasic('not-the-secret') }
    const err = await rejection(t, () => exchange(base, wrong, a.params, a.verifier), oauth.WWWAuthenticateChallengeError)
    t.equal(err.status, 401)
    t.equal(err.cause[0]?.scheme, 'basic')
    t.same(await err.response.json(), { error: 'invalid_client', error_description: 'Client authentication failed.' })
    const ok = await exchange(base, client, a.params, a.verifier)
    t.type(ok.access_token, 'string', 'the code survives a failed client authentication')
  })

  t.test('a confidential client without Basic, an unknown client, a secret in the body', async (t) => {
    const a = await authorize(base, client, 'tweet.read', jar)
    const noAuth = await rejection(t, () => exchange(base, { ...client, auth: oauth.None() }, a.params, a.verifier), oauth.WWWAuthenticateChallengeError)
    t.equal(noAuth.status, 401)
    const unknown = await rejection(t, () => exchange(base, { ...client, client: { client_id: 'bm9wZToxOmNp' }, auth: oauth.None() }, a.params, a.verifier), oauth.WWWAuthenticateChallengeError)
    t.equal(unknown.status, 401)
    t.equal(((await unknown.response.json()) as { error: string }).error, 'invalid_client')
    const post = await rejection(t, () => exchange(base, { ...client, auth: oauth.ClientSecretPost(client.secret as string) }, a.params, a.verifier), oauth.WWWAuthenticateChallengeError)
    t.match(await post.response.json(), { error: 'invalid_client', error_description: /HTTP Basic/ })
  })

  t.test('unsupported grant types', async (t) => {
    for (const grant of ['client_credentials', 'password', 'urn:ietf:params:oauth:grant-type:device_code']) {
      const response = await oauth.genericTokenEndpointRequest(as, client.client, client.auth, grant, { username: 'x', password: 'y', device_code: 'z' }, INSECURE)
      const err = await rejection(t, () => oauth.processGenericTokenEndpointResponse(as, client.client, response), oauth.ResponseBodyError)
      t.equal(err.status, 400, grant)
      t.equal(err.error, 'unsupported_grant_type', grant)
    }
  })

  t.test('malformed requests are invalid_request', async (t) => {
    const token = `${base}/2/oauth2/token`
    const basic = { authorization: `Basic ${Buffer.from(`${client.client.client_id}:${client.secret}`).toString('base64')}` }
    const cases: Array<[string, Record<string, string>, string]> = [
      ['json body', { ...basic, 'content-type': 'application/json' }, JSON.stringify({ grant_type: 'authorization_code' })],
      ['repeated parameter', { ...basic, ...FORM }, 'grant_type=refresh_token&refresh_token=a&refresh_token=b'],
      ['no grant_type', { ...basic, ...FORM }, 'code=abc'],
      ['no body', basic, ''],
      ['text body', { ...basic, 'content-type': 'text/plain' }, 'grant_type=authorization_code']
    ]
    for (const [name, headers, body] of cases) {
      const reply = await send('POST', token, headers, body)
      t.equal(reply.status, 400, name)
      t.equal(JSON.parse(reply.text).error, 'invalid_request', name)
      t.match(reply.headers.get('content-type'), /^application\/json/, name)
    }
    const garbage = await send('POST', token, { authorization: 'Basic %%%', ...FORM }, 'grant_type=authorization_code')
    t.equal(garbage.status, 401)
    t.equal(JSON.parse(garbage.text).error, 'invalid_client')
  })
})

t.test('public clients: PKCE only, no secret', async (t) => {
  const rt = await server()
  const base = rt.baseUrl
  const client = await newClient(rt, { confidential: false })
  t.equal(client.app.oauth2?.client_secret, undefined)
  const user = await newUser(rt)
  const a = await authorize(base, client, 'tweet.read offline.access', new CookieJar(), user)
  const tokens = await exchange(base, client, a.params, a.verifier)
  t.type(tokens.refresh_token, 'string')
  const as = authorizationServer(base)
  const refreshed = await oauth.processRefreshTokenResponse(as, client.client, await oauth.refreshTokenGrantRequest(as, client.client, client.auth, tokens.refresh_token as string, INSECURE))
  t.type(refreshed.access_token, 'string')
  const withSecret = await rejection(t, async () => oauth.processRefreshTokenResponse(as, client.client, await oauth.refreshTokenGrantRequest(as, client.client, oauth.ClientSecretBasic('made-up'), refreshed.refresh_token as string, INSECURE)), oauth.WWWAuthenticateChallengeError)
  t.equal(withSecret.status, 401, 'a public client has no secret to present')
})

t.test('plain PKCE is refused unless configured', async (t) => {
  const rt = await server()
  const client = await newClient(rt)
  const user = await newUser(rt)
  const as = authorizationServer(rt.baseUrl)
  for (const method of ['plain', null]) {
    const request = await authorizationUrl(rt.baseUrl, client, 'tweet.read', { code_challenge: 'a'.repeat(50), code_challenge_method: method })
    const answer = await send('GET', request.url)
    t.equal(answer.status, 303, `${method ?? 'no method'}: sent back to the client`)
    const err = t.throws(() => oauth.validateAuthResponse(as, client.client, callbackOf(answer), request.state)) as oauth.AuthorizationResponseError
    t.equal(err.error, 'invalid_request')
    t.match(err.error_description, /S256/)
  }

  const lenient = await startServer(t, { OAUTH2_ALLOW_PLAIN_PKCE: 'true' })
  const c2 = await newClient(lenient)
  const u2 = await newUser(lenient)
  const verifier = oauth.generateRandomCodeVerifier()
  const request = await authorizationUrl(lenient.baseUrl, c2, 'tweet.read', { code_challenge: verifier, code_challenge_method: 'plain' })
  const answer = await submitConsent(request.url, { jar: new CookieJar(), user: u2 })
  const params = oauth.validateAuthResponse(authorizationServer(lenient.baseUrl), c2.client, callbackOf(answer), request.state)
  const tokens = await exchange(lenient.baseUrl, c2, params, verifier)
  t.type(tokens.access_token, 'string', 'OAUTH2_ALLOW_PLAIN_PKCE=true accepts the plain method')
  void user
})

t.test('scopes on a product route (media upload); OAuth 1.0a permissions override scopes', async (t) => {
  const rt = await server()
  const base = rt.baseUrl
  const client = await newClient(rt)
  const user = await newUser(rt)
  const jar = new CookieJar()
  const upload = `${base}/2/media/upload`
  const body = { media: tinyPng() }

  const a = await authorize(base, client, 'tweet.read users.read', jar, user)
  const without = await exchange(base, client, a.params, a.verifier)
  const refused = await withToken('POST', upload, without.access_token, body)
  t.equal(refused.status, 403)
  t.match(refused.headers.get('content-type'), /application\/problem\+json/)
  t.match(refused.json(), { type: 'about:blank', status: 403, detail: /Missing OAuth 2.0 scopes: media\.write/, missing_scopes: ['media.write'] })
  t.equal(refused.headers.get('www-authenticate'), 'Bearer error="insufficient_scope", scope="media.write"')

  const b = await authorize(base, client, 'tweet.read media.write', jar)
  const granted = await exchange(base, client, b.params, b.verifier)
  const uploaded = await withToken('POST', upload, granted.access_token, body)
  t.equal(uploaded.status, 200, uploaded.text)
  t.match(uploaded.json(), { data: { id: /^\d+$/ } })

  // The same user through OAuth 1.0a: no scopes involved, the access level decides.
  const token = await issueAccessToken(rt.ctx.store, client.app, user, 'read-write')
  const signed = await oauth1Request('POST', upload, { app: client.app, token }, { json: body })
  t.equal(signed.status, 200, 'an OAuth 1.0a read-write token uploads without any scope')

  const bearer = await withToken('POST', upload, 'AAAAAAAAAAAAAAAAAAAAAnot-a-token', body)
  t.equal(bearer.status, 401)
})

t.test('the token lifecycle on a Redis store', async (t) => {
  // The default (2 h) lifetime: a 401 below can only come from revocation, never from expiry.
  const rt = await startServer(t, {}, { redis: true })
  t.equal(rt.ctx.store.kind, 'redis')
  const base = rt.baseUrl
  const as = authorizationServer(base)
  const client = await newClient(rt)
  const user = await newUser(rt)
  const jar = new CookieJar()
  const route = `${base}/2/activity/subscriptions`
  const refresh = async (token: string): Promise<oauth.TokenEndpointResponse> =>
    oauth.processRefreshTokenResponse(as, client.client, await oauth.refreshTokenGrantRequest(as, client.client, client.auth, token, INSECURE))

  const a = await authorize(base, client, `${READ} offline.access`, jar, user)
  const first = await exchange(base, client, a.params, a.verifier)
  t.equal(first.expires_in, 7200)
  t.ok((await rt.ctx.store.pttl(AuthKeys.bearer(first.access_token))) > 0, 'the access token key expires in Redis too')
  t.equal((await withToken('GET', route, first.access_token)).status, 200, 'valid before the replay')
  const reused = await rejection(t, () => exchange(base, client, a.params, a.verifier), oauth.ResponseBodyError)
  t.equal(reused.error, 'invalid_grant')
  t.equal((await withToken('GET', route, first.access_token)).status, 401, 'code replay revoked the first tokens')

  const b = await authorize(base, client, `${READ} offline.access`, jar)
  const second = await exchange(base, client, b.params, b.verifier)
  const rotated = await refresh(second.refresh_token as string)
  t.equal((await withToken('GET', route, rotated.access_token)).status, 200)
  const replay = await rejection(t, () => refresh(second.refresh_token as string), oauth.ResponseBodyError)
  t.equal(replay.error, 'invalid_grant')
  t.equal((await withToken('GET', route, rotated.access_token)).status, 401, 'refresh replay revoked the authorization')

  const c = await authorize(base, client, READ, jar)
  const third = await exchange(base, client, c.params, c.verifier)
  t.equal((await withToken('GET', route, third.access_token)).status, 200, 'valid before the revocation')
  await oauth.processRevocationResponse(await oauth.revocationRequest(as, client.client, client.auth, third.access_token, INSECURE))
  t.equal((await withToken('GET', route, third.access_token)).status, 401, 'revoked')
})

t.test('access tokens expire on a Redis store', async (t) => {
  const rt = await startServer(t, { OAUTH2_ACCESS_TOKEN_TTL: '4s' }, { redis: true })
  const client = await newClient(rt)
  const user = await newUser(rt)
  const route = `${rt.baseUrl}/2/activity/subscriptions`
  const a = await authorize(rt.baseUrl, client, READ, new CookieJar(), user)
  const tokens = await exchange(rt.baseUrl, client, a.params, a.verifier)
  t.equal(tokens.expires_in, 4)
  t.equal((await withToken('GET', route, tokens.access_token)).status, 200)
  await eventually(async () => (await withToken('GET', route, tokens.access_token)).status === 401, 15_000, 200)
  // The service refuses from the record's expiry on; Redis's own TTL was set a moment after it was computed.
  const dropped = await eventually(async () => !(await rt.ctx.store.exists(AuthKeys.bearer(tokens.access_token))), 3000, 50).catch(() => false)
  t.ok(dropped, 'expired: Redis dropped the key')
})

t.test('the token endpoints are rate limited per client address', async (t) => {
  const rt = await startServer(t, { RATE_LIMITS: 'oauth2-token=2/15m' })
  const client = await newClient(rt, { confidential: false })
  const body = new URLSearchParams({ grant_type: 'refresh_token', refresh_token: 'nope', client_id: client.client.client_id }).toString()
  for (let i = 0; i < 2; i++) {
    const reply = await send('POST', `${rt.baseUrl}/2/oauth2/token`, FORM, body)
    t.equal(reply.status, 400)
    t.equal(reply.headers.get('x-rate-limit-limit'), '2')
  }
  const limited = await send('POST', `${rt.baseUrl}/2/oauth2/revoke`, FORM, new URLSearchParams({ token: 'x', client_id: client.client.client_id }).toString())
  t.equal(limited.status, 429)
  t.equal(limited.headers.get('x-rate-limit-remaining'), '0')
  t.match(JSON.parse(limited.text), { error: 'invalid_request', error_description: /Rate limit exceeded/ })
})
