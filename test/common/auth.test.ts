import net from 'node:net'
import t from 'tap'
import { uniqueParams } from '../../services/common/auth/authenticate'
import { baseStringUri, formPairs, normalizeParams, parseOAuthHeader, percentEncode, safeEqual, sign, signatureBaseString } from '../../services/common/auth/oauth1'
import { createApp, revokeAccessToken } from '../../services/gateway/identity'
import { ClassicError } from '../../services/common/errors'
import { BACKENDS, FORM, startBackend } from '../support/fixtures/oauth'
import { oauthHeader, oauthParams, send } from '../support/http'
import { classic } from '../support/problems'
import { createIdentity } from '../support/runtime'

// The public platform's "creating a signature" example (docs/conformance.md), with host api.x.com.
const EXAMPLE = {
  consumerSecret: 'kAcSOqF21Fu85e7zjz7ZN2U4ZRhfV3WpwPAoE3Z7kBw',
  tokenSecret: 'LswwdoUaIvS8ltyTt5jkRh4J50vUPVVHtR2YPi5kE',
  url: 'https://api.x.com/1.1/statuses/update.json',
  query: 'include_entities=true',
  body: 'status=Hello%20Ladies%20%2b%20Gentlemen%2c%20a%20signed%20OAuth%20request%21',
  header:
    'OAuth oauth_consumer_key="xvz1evFS4wEEPTGEFPHBog", oauth_nonce="kYjzVBB8Y0ZFabxSWbWovY3uYSQ2pTgmZeNu2VS4cg", oauth_signature="Ls93hJiZbQ3akF3HF3x1Bz8%2FzU4%3D", oauth_signature_method="HMAC-SHA1", oauth_timestamp="1318622958", oauth_token="370773112-GmHxMAgYyLbNEtIKZeRNFsMKPR9EyMZeS9weJAEb", oauth_version="1.0"'
}

t.test('the public signature example is reproduced from the raw request parts', async (t) => {
  const pairs = [...formPairs(EXAMPLE.query), ...formPairs(EXAMPLE.body), ...(parseOAuthHeader(EXAMPLE.header) ?? [])]
  const base = signatureBaseString('POST', `${EXAMPLE.url}?${EXAMPLE.query}`, pairs)
  t.equal(
    base,
    'POST&https%3A%2F%2Fapi.x.com%2F1.1%2Fstatuses%2Fupdate.json&include_entities%3Dtrue%26oauth_consumer_key%3Dxvz1evFS4wEEPTGEFPHBog%26oauth_nonce%3DkYjzVBB8Y0ZFabxSWbWovY3uYSQ2pTgmZeNu2VS4cg%26oauth_signature_method%3DHMAC-SHA1%26oauth_timestamp%3D1318622958%26oauth_token%3D370773112-GmHxMAgYyLbNEtIKZeRNFsMKPR9EyMZeS9weJAEb%26oauth_version%3D1.0%26status%3DHello%2520Ladies%2520%252B%2520Gentlemen%252C%2520a%2520signed%2520OAuth%2520request%2521',
    'the signature base string of the public page'
  )
  const signature = sign('POST', EXAMPLE.url, pairs, EXAMPLE.consumerSecret, EXAMPLE.tokenSecret)
  t.equal(signature, 'Ls93hJiZbQ3akF3HF3x1Bz8/zU4=')
  t.equal(pairs.find(([k]) => k === 'oauth_signature')?.[1], signature, 'equals the signature the example header carries')
  t.not(sign('POST', EXAMPLE.url.replace('api.x.com', 'api.twitter.com'), pairs, EXAMPLE.consumerSecret, EXAMPLE.tokenSecret), signature, 'the host is signed')
})

t.test('RFC 3986 percent-encoding and the RFC 5849 parameter normalization', async (t) => {
  t.equal(percentEncode('Ladies + Gentlemen'), 'Ladies%20%2B%20Gentlemen')
  t.equal(percentEncode('An encoded string!'), 'An%20encoded%20string%21')
  t.equal(percentEncode('Dogs, Cats & Mice'), 'Dogs%2C%20Cats%20%26%20Mice')
  t.equal(percentEncode('☃'), '%E2%98%83')
  t.equal(percentEncode("-._~*'()"), "-._~%2A%27%28%29")
  // RFC 5849 §3.4.1.3.2 example (duplicates sort by value).
  const pairs = [...formPairs('b5=%3D%253D&a3=a&c%40=&a2=r%20b'), ...formPairs('c2&a3=2+q'), ...(parseOAuthHeader('OAuth realm="Example", oauth_consumer_key="9djdj82h48djs9d2", oauth_token="kkk9d7dh3k39sjv7", oauth_signature_method="HMAC-SHA1", oauth_timestamp="137131201", oauth_nonce="7d8f3e4a", oauth_signature="djosJKDKJSD8743243%2Fjdk33klY%3D"') ?? [])]
  t.equal(normalizeParams(pairs), 'a2=r%20b&a3=2%20q&a3=a&b5=%3D%253D&c%40=&c2=&oauth_consumer_key=9djdj82h48djs9d2&oauth_nonce=7d8f3e4a&oauth_signature_method=HMAC-SHA1&oauth_timestamp=137131201&oauth_token=kkk9d7dh3k39sjv7')
  t.equal(baseStringUri('HTTP://Example.COM:80/r%20v/X?id=123'), 'http://example.com/r%20v/X')
  t.equal(baseStringUri('https://www.example.net:8080/?q=1'), 'https://www.example.net:8080/')
  t.throws(() => parseOAuthHeader('OAuth oauth_nonce="a", garbage'), 'a malformed header is refused')
  t.ok(safeEqual('abc', 'abc'))
  t.notOk(safeEqual('abc', 'abd'))
  t.notOk(safeEqual('abc', 'abcd'))
})

t.test('duplicate parameters: protocol ones refused, except one repeated with the same value; request parameters kept', async (t) => {
  t.same(uniqueParams([['oauth_token', 'x'], ['a', '1'], ['oauth_token', 'x']]).collapsed, true)
  const refused = (pairs: Array<[string, string]>): unknown => {
    try {
      uniqueParams(pairs)
      return undefined
    } catch (err) {
      return err
    }
  }
  const different = refused([['oauth_token', 'x'], ['oauth_token', 'y']])
  t.ok(different instanceof ClassicError && different.items[0]?.code === 215, 'a protocol parameter with two values')
  // Request parameters may repeat (the Python ads SDK sends list properties as repeated keys): every copy is signed.
  t.same(uniqueParams([['a', '1'], ['a', '2'], ['a', '1']]).pairs, [['a', '1'], ['a', '2'], ['a', '1']], 'ordinary parameters may repeat, each copy kept')
})

for (const backend of BACKENDS) {
  t.test(`request authentication (${backend} store)`, async (t) => {
    const rt = await startBackend(t, backend)
    const store = rt.ctx.store
    const id = await createIdentity(store, { access: 'read-write' })
    const base = rt.baseUrl

    t.test('user context: header, query and form-body parameters all verify', async (t) => {
      const url = `${base}/1.1/account/verify_credentials.json`
      const viaHeader = await send('GET', url, { authorization: oauthHeader('GET', url, id) })
      t.equal(viaHeader.status, 200, viaHeader.text)
      t.match(viaHeader.json(), { id_str: id.user.id, screen_name: id.user.screen_name })
      t.match(viaHeader.text, new RegExp(`"id":${id.user.id},`), 'id is the JSON number, all 19 digits intact')
      t.ok(viaHeader.headers.get('x-rate-limit-remaining'), 'the route is rate limited')

      const withQuery = `${base}/2/probe/whoami?expansions=a%2Cb&name=J%C3%BCrgen+Smith`
      const q = await send('GET', withQuery, { authorization: oauthHeader('GET', withQuery, id) })
      t.equal(q.status, 200, `signed query parameters: ${q.text}`)
      t.match(q.json(), { data: { scheme: 'oauth1-user', user_id: id.user.id, app_id: id.app.id } })

      // All protocol parameters in the query string instead of a header (RFC 5849 §3.5.3).
      const plain = `${base}/2/probe/whoami?x=1`
      const params = oauthParams('GET', plain, id)
      const inQuery = `${plain}&${new URLSearchParams(Object.entries(params).filter(([k]) => k.startsWith('oauth_')).map(([k, v]) => [k, String(v)] as [string, string])).toString()}`
      const r = await send('GET', inQuery)
      t.equal(r.status, 200, `protocol parameters in the query: ${r.text}`)

      // A client may send the absolute form of the target (RFC 9112 §3.2.2); the signed URL is still the path's.
      const absolute = await rawRequest(base, `GET ${url} HTTP/1.1\r\nHost: ${new URL(base).host}\r\nAuthorization: ${oauthHeader('GET', url, id)}\r\nConnection: close\r\n\r\n`)
      t.match(absolute, /^HTTP\/1\.1 200 /, `an absolute-form target verifies: ${absolute.slice(0, 300)}`)

      const form = { status: 'Hello Ladies + Gentlemen, a signed OAuth request!', tags: '☃ & *' }
      const echoUrl = `${base}/2/probe/echo`
      const body = new URLSearchParams(form).toString()
      const f = await send('POST', echoUrl, { ...FORM, authorization: oauthHeader('POST', echoUrl, id, { data: form }) }, body)
      t.equal(f.status, 200, `form body parameters are signed: ${f.text}`)
      t.same(f.json<{ data: { body: unknown } }>().data.body, form)

      // Protocol parameters in the form body (RFC 5849 §3.5.2).
      const inBody = oauthParams('POST', echoUrl, id, { data: { note: 'x' } })
      const bodyWithOAuth = new URLSearchParams([['note', 'x'], ...Object.entries(inBody).filter(([k]) => k.startsWith('oauth_')).map(([k, v]) => [k, String(v)] as [string, string])]).toString()
      const b = await send('POST', echoUrl, FORM, bodyWithOAuth)
      t.equal(b.status, 200, `protocol parameters in the body: ${b.text}`)

      // A form body that was not signed is detected.
      const tampered = await send('POST', echoUrl, { ...FORM, authorization: oauthHeader('POST', echoUrl, id, { data: form }) }, new URLSearchParams({ ...form, status: 'changed' }).toString())
      t.equal(tampered.status, 401)
      t.equal(classic(tampered).code, 32)
    })

    t.test('twitter-api-v2 style: oauth_token repeated in header and body with the same value', async (t) => {
      const echoUrl = `${base}/2/probe/echo`
      const header = oauthHeader('POST', echoUrl, id, { data: { oauth_token: id.token.token, x: '1' } })
      const r = await send('POST', echoUrl, { ...FORM, authorization: header }, new URLSearchParams({ oauth_token: id.token.token, x: '1' }).toString())
      t.equal(r.status, 200, r.text)
    })

    t.test('code 32: wrong consumer secret, unknown consumer key, tampered URL', async (t) => {
      const url = `${base}/2/probe/whoami`
      const badSecret = await send('GET', url, { authorization: oauthHeader('GET', url, id, { consumerSecret: 'not-the-secret' }) })
      t.equal(badSecret.status, 401)
      t.same(badSecret.json(), { errors: [{ code: 32, message: 'Could not authenticate you.' }] })

      const stranger = { ...id.app, consumer_key: 'unknown-consumer-key' }
      const unknown = await send('GET', url, { authorization: oauthHeader('GET', url, { app: stranger, token: id.token }) })
      t.equal(unknown.status, 401)
      t.equal(classic(unknown).code, 32)

      const otherPath = await send('GET', `${base}/2/probe/whoami?extra=1`, { authorization: oauthHeader('GET', url, id) })
      t.equal(otherPath.status, 401, 'a query parameter that was not signed')
      t.equal(classic(otherPath).code, 32)
    })

    t.test('code 32: a replayed nonce', async (t) => {
      const url = `${base}/2/probe/whoami`
      const header = oauthHeader('GET', url, id)
      t.equal((await send('GET', url, { authorization: header })).status, 200)
      const replay = await send('GET', url, { authorization: header })
      t.equal(replay.status, 401)
      t.same(classic(replay), { code: 32, message: 'Could not authenticate you. The oauth_nonce was already used.' })
      // A forged request (bad signature) does not burn a nonce the client may still use.
      const nonce = `fresh-nonce-${Date.now()}`
      t.equal((await send('GET', url, { authorization: oauthHeader('GET', url, id, { nonce, consumerSecret: 'wrong' }) })).status, 401)
      t.equal((await send('GET', url, { authorization: oauthHeader('GET', url, id, { nonce }) })).status, 200)
    })

    t.test('code 135: timestamps outside the window', async (t) => {
      const url = `${base}/2/probe/whoami`
      const now = Math.floor(Date.now() / 1000)
      for (const timestamp of [now - 301, now + 400, 1318622958]) {
        const r = await send('GET', url, { authorization: oauthHeader('GET', url, id, { timestamp }) })
        t.equal(r.status, 401)
        t.same(r.json(), { errors: [{ code: 135, message: 'Timestamp out of bounds.' }] })
      }
      t.equal((await send('GET', url, { authorization: oauthHeader('GET', url, id, { timestamp: now - 200 }) })).status, 200, 'within 300 s is fine')
    })

    t.test('code 89: unknown and revoked tokens', async (t) => {
      const url = `${base}/2/probe/whoami`
      const unknown = await send('GET', url, { authorization: oauthHeader('GET', url, { app: id.app, token: { token: 'nope-token', secret: 'x' } }) })
      t.equal(unknown.status, 401)
      t.same(unknown.json(), { errors: [{ code: 89, message: 'Invalid or expired token.' }] })
      const other = await createIdentity(store)
      const foreign = await send('GET', url, { authorization: oauthHeader('GET', url, { app: id.app, token: other.token }) })
      t.equal(classic(foreign).code, 89, "another app's token")
      await revokeAccessToken(store, other.token.token)
      const revoked = await send('GET', url, { authorization: oauthHeader('GET', url, other) })
      t.equal(revoked.status, 401)
      t.equal(classic(revoked).code, 89)
    })

    t.test('code 215: missing parameters, duplicates, malformed values', async (t) => {
      const url = `${base}/2/probe/whoami`
      const header = oauthHeader('GET', url, id)
      const noNonce = header.replace(/oauth_nonce="[^"]*",\s*/, '')
      const r1 = await send('GET', url, { authorization: noNonce })
      t.equal(r1.status, 400)
      t.same(classic(r1), { code: 215, message: 'Bad Authentication data. Missing oauth_nonce.' })

      // A request parameter may repeat (the Python ads SDK sends lists as repeated keys); a protocol one may not.
      const dupUrl = `${base}/2/probe/whoami?a=2&a=1`
      const r2 = await send('GET', dupUrl, { authorization: oauthHeader('GET', dupUrl, id) })
      t.equal(r2.status, 200, r2.text)

      const twice = await send('GET', url, { authorization: `${header}, oauth_nonce="another"` })
      t.equal(classic(twice).code, 215, 'a protocol parameter given twice with different values')

      const nonAscii = await send('GET', url, { authorization: oauthHeader('GET', url, id, { nonce: 'nonce-é' }) })
      t.equal(nonAscii.status, 400)
      t.match(classic(nonAscii), { code: 215, message: /ASCII/ })

      const malformed = await send('GET', url, { authorization: 'OAuth oauth_consumer_key="%ZZ"' })
      t.equal(classic(malformed).code, 215)

      const tokenless = await send('GET', url, { authorization: oauthHeader('GET', url, id, { noToken: true }) })
      t.match(classic(tokenless), { code: 215, message: /user context/ })

      const none = await send('GET', `${base}/1.1/account/verify_credentials.json`)
      t.equal(none.status, 400, 'no credentials on the 1.1 interface')
      t.same(none.json(), { errors: [{ code: 215, message: 'Bad Authentication data.' }] })
      const noneV2 = await send('GET', url)
      t.equal(noneV2.status, 401, 'no credentials on v2')
      t.match(noneV2.json(), { status: 401, detail: 'Unauthorized' })
    })

    t.test('access levels: read-only tokens cannot write (220), dm needs the dm level (93)', async (t) => {
      const reader = await createIdentity(store, { access: 'read' })
      const echoUrl = `${base}/2/probe/echo`
      const write = await send('POST', echoUrl, { authorization: oauthHeader('POST', echoUrl, reader) })
      t.equal(write.status, 403)
      t.equal(classic(write).code, 220)
      const dmUrl = `${base}/2/probe/dm`
      const dm = await send('POST', dmUrl, { authorization: oauthHeader('POST', dmUrl, id) })
      t.equal(dm.status, 403)
      t.equal(classic(dm).code, 93, 'read-write is not enough for direct messages')
      const dmUser = await createIdentity(store, { access: 'read-write-dm' })
      t.equal((await send('POST', dmUrl, { authorization: oauthHeader('POST', dmUrl, dmUser) })).status, 200)
      // Downgrading the app downgrades its existing tokens.
      const app = await createApp(store, { name: 'downgraded', access_level: 'read-write' })
      const user = await createIdentity(store, { app })
      await store.setJson(`auth:app:${app.id}`, { ...app, access_level: 'read' })
      const after = await send('POST', echoUrl, { authorization: oauthHeader('POST', echoUrl, { app, token: user.token }) })
      t.equal(classic(after).code, 220)
    })

    t.test('bearer tokens: app-only routes accept them, user-context routes answer unsupported-authentication', async (t) => {
      const ok = await send('GET', `${base}/2/probe/whoami`, { authorization: `Bearer ${id.bearer}` })
      t.equal(ok.status, 200)
      t.match(ok.json(), { data: { scheme: 'bearer-app', app_id: id.app.id, user_id: null } })
      const wrongKind = await send('POST', `${base}/2/probe/echo`, { authorization: `Bearer ${id.bearer}` })
      t.equal(wrongKind.status, 403)
      t.same(wrongKind.json(), {
        title: 'Unsupported Authentication',
        detail: 'Authenticating with OAuth 2.0 Application-Only is forbidden for this endpoint.  Supported authentication types are [OAuth 1.0a User Context].',
        type: 'https://api.twitter.com/2/problems/unsupported-authentication',
        status: 403
      })
      const bad = await send('GET', `${base}/2/probe/whoami`, { authorization: 'Bearer AAAAnot-a-token' })
      t.equal(bad.status, 401)
      t.equal(classic(bad).code, 89)
    })

    t.test('ads interface: authentication failures in the ads envelope', async (t) => {
      const url = `${base}/12/probe/accounts`
      const r = await send('GET', url, { authorization: oauthHeader('GET', url, id, { consumerSecret: 'wrong' }) })
      t.equal(r.status, 401)
      t.match(r.json(), { errors: [{ code: 'UNAUTHORIZED_ACCESS' }], request: { params: {} } })
    })
  })
}

t.test('signatures are checked against PUBLIC_URL behind a proxy', async (t) => {
  const rt = await startBackend(t, 'memory', { PUBLIC_URL: 'https://api.example.test' })
  const id = await createIdentity(rt.ctx.store)
  const publicUrl = 'https://api.example.test/2/probe/whoami'
  const r = await send('GET', `${rt.baseUrl}/2/probe/whoami`, { authorization: oauthHeader('GET', publicUrl, id) })
  t.equal(r.status, 200, 'signed against the public URL, received on the internal one')
  const direct = `${rt.baseUrl}/2/probe/whoami`
  const wrong = await send('GET', direct, { authorization: oauthHeader('GET', direct, id) })
  t.equal(wrong.status, 401, 'signed against the internal address: not what clients see')
  t.equal(classic(wrong).code, 32)
})

/** Writes a request byte for byte (no HTTP client sends the absolute form to an origin server) and reads the answer to its close. */
function rawRequest(baseUrl: string, request: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(new URL(baseUrl).port), '127.0.0.1')
    let answer = ''
    socket.setEncoding('utf8')
    socket.setTimeout(10_000, () => socket.destroy(new Error('no answer within 10 s')))
    socket.on('data', (chunk: string) => (answer += chunk))
    socket.on('end', () => resolve(answer))
    socket.on('error', reject)
    socket.write(request)
  })
}
