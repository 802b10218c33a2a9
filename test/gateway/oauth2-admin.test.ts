import * as oauth from 'oauth4webapi'
import t from 'tap'
import { run } from '../../services/cli/oauth2'
import { createApp } from '../../services/gateway/identity'
import { authorizationServer, authorize, exchange, INSECURE, newUser, REDIRECT_URI, rejection, startServer, withToken, type Client } from '../support/fixtures/oauth2'
import { CookieJar, send } from '../support/http'

/**
 * OAuth 2.0 client management: the operator routes (/admin/apps/:id/oauth2)
 * and the `cli oauth2` commands that drive them, against a running server.
 */

const OPERATOR = 'operator-token-for-tests'

interface View {
  app_id: string
  enabled: boolean
  client_id?: string
  client_type?: string
  client_secret?: string
  redirect_uris?: string[]
}

t.test('operator routes', async (t) => {
  const rt = await startServer(t)
  const base = rt.baseUrl
  const app = await createApp(rt.ctx.store, { name: 'admin test app' })
  const url = `${base}/admin/apps/${app.id}/oauth2`
  const admin = async (method: string, path: string, body?: unknown): Promise<{ status: number; json: () => { data: View } & Record<string, unknown> }> => {
    const headers: Record<string, string> = { authorization: `Bearer ${OPERATOR}` }
    if (body !== undefined) headers['content-type'] = 'application/json'
    const reply = await send(method, path, headers, body === undefined ? undefined : JSON.stringify(body))
    return { status: reply.status, json: () => JSON.parse(reply.text) }
  }

  t.equal((await send('PUT', url, { 'content-type': 'application/json' }, '{}')).status, 401, 'the operator token is required')
  t.equal((await send('GET', url, { authorization: 'Bearer wrong' })).status, 401)

  const off = await admin('GET', url)
  t.equal(off.status, 200)
  t.same(off.json().data, { app_id: app.id, name: 'admin test app', enabled: false })

  const bad = await admin('PUT', url, { redirect_uris: ['https://example.com/cb#fragment'] })
  t.equal(bad.status, 400)
  t.match(bad.json(), { title: 'Invalid Request', errors: [{ message: /fragment/ }] })
  t.equal((await admin('PUT', url, { client_type: 'secret' })).status, 400, 'client_type is confidential or public')
  t.equal((await admin('PUT', `${base}/admin/apps/1234567/oauth2`, {})).status, 404)

  const on = await admin('PUT', url, { redirect_uris: [REDIRECT_URI] })
  t.equal(on.status, 200)
  const view = on.json().data
  t.match(view, { enabled: true, client_type: 'confidential', redirect_uris: [REDIRECT_URI], client_id: /^[A-Za-z0-9_-]{20,}$/, client_secret: /^[A-Za-z0-9_-]{40,}$/ })
  t.match(Buffer.from(view.client_id as string, 'base64url').toString(), /:1:ci$/, 'client ids have the platform\'s form')
  t.same((await admin('GET', url)).json().data, view, 'GET shows the same client')

  // A token issued now, to see what rotation and removal do to it.
  const user = await newUser(rt)
  const client: Client = { app, client: { client_id: view.client_id as string }, auth: oauth.ClientSecretBasic(view.client_secret as string) }
  const a = await authorize(base, client, 'tweet.read offline.access', new CookieJar(), user)
  const tokens = await exchange(base, client, a.params, a.verifier)

  const rotated = (await admin('POST', `${url}/rotate-secret`)).json().data
  t.equal(rotated.client_id, view.client_id, 'the client id stays')
  t.not(rotated.client_secret, view.client_secret, 'the secret changes')
  const as = authorizationServer(base)
  const old = await rejection(t, async () => oauth.processRefreshTokenResponse(as, client.client, await oauth.refreshTokenGrantRequest(as, client.client, client.auth, tokens.refresh_token as string, INSECURE)), oauth.WWWAuthenticateChallengeError)
  t.equal(old.status, 401, 'the old secret stops working at once')
  const fresh = { ...client, auth: oauth.ClientSecretBasic(rotated.client_secret as string) }
  const refreshed = await oauth.processRefreshTokenResponse(as, client.client, await oauth.refreshTokenGrantRequest(as, client.client, fresh.auth, tokens.refresh_token as string, INSECURE))
  t.type(refreshed.access_token, 'string', 'tokens survive a secret rotation')

  const pub = (await admin('PUT', url, { client_type: 'public' })).json().data
  t.equal(pub.client_type, 'public')
  t.equal(pub.client_secret, undefined, 'a public client has no secret')
  t.same(pub.redirect_uris, [REDIRECT_URI], 'settings not given are kept')
  const conflict = await admin('POST', `${url}/rotate-secret`)
  t.equal(conflict.status, 409, 'a public client has no secret to rotate')

  const removed = await admin('DELETE', url)
  t.equal(removed.status, 200)
  t.equal(removed.json().data.enabled, false)
  const dead = await withToken('GET', `${base}/2/activity/subscriptions`, refreshed.access_token)
  t.equal(dead.status, 401, 'turning OAuth 2.0 off revokes every token issued')
  const page = await send('GET', `${base}/i/oauth2/authorize?response_type=code&client_id=${view.client_id}&redirect_uri=${encodeURIComponent(REDIRECT_URI)}`)
  t.equal(page.status, 400, 'the client id is unknown now')
})

t.test('cli oauth2', async (t) => {
  const rt = await startServer(t)
  const app = await createApp(rt.ctx.store, { name: 'cli test app' })
  const env = { GATEWAY_URL: rt.baseUrl, OPERATOR_TOKEN: OPERATOR, DATA_DIR: rt.ctx.config.dataDir }
  const cli = async (...argv: string[]): Promise<{ code: number; out: string; err: string }> => {
    let out = ''
    let err = ''
    const code = await run(argv, env, (s) => (out += s), (s) => (err += s))
    return { code, out, err }
  }

  const enabled = await cli('enable', '--app', app.id, '--redirect-uris', 'https://example.com/a,https://example.com/b', '--json')
  t.equal(enabled.code, 0, enabled.err)
  const view = JSON.parse(enabled.out) as View
  t.match(view, { app_id: app.id, enabled: true, client_type: 'confidential', redirect_uris: ['https://example.com/a', 'https://example.com/b'] })

  const shown = await cli('show', '--app', app.id)
  t.equal(shown.code, 0)
  t.match(shown.out, new RegExp(`client id: +${view.client_id}`))
  t.match(shown.out, new RegExp(`client secret: +${view.client_secret}`))
  t.match(shown.out, /redirect URIs: +https:\/\/example\.com\/a, https:\/\/example\.com\/b/)

  const rotated = await cli('rotate-secret', '--app', app.id, '--json')
  t.not((JSON.parse(rotated.out) as View).client_secret, view.client_secret)

  const set = await cli('set', '--app', app.id, '--public', '--json')
  t.match(JSON.parse(set.out), { client_type: 'public', redirect_uris: ['https://example.com/a', 'https://example.com/b'] })
  t.notMatch(set.out, /client_secret/)

  const refused = await cli('rotate-secret', '--app', app.id)
  t.equal(refused.code, 1)
  t.match(refused.err, /error \(409\): .*public client/)

  const usage = await cli('enable', '--app', app.id)
  t.equal(usage.code, 2, 'enable needs redirect URIs')
  t.match(usage.err, /--redirect-uris/)
  t.equal((await cli('show')).code, 2, '--app is required')
  t.equal((await cli('frobnicate', '--app', app.id)).code, 2)
  t.equal((await cli('set', '--app', app.id, '--public', '--confidential')).code, 2)
  const badUri = await cli('set', '--app', app.id, '--redirect-uris', 'not a url')
  t.equal(badUri.code, 1)
  t.match(badUri.err, /not an absolute URL/)

  const disabled = await cli('disable', '--app', app.id)
  t.equal(disabled.code, 0)
  t.match(disabled.out, /OAuth 2\.0 is off/)
  const missing = await cli('show', '--app', '999999999')
  t.equal(missing.code, 1)
  t.match(missing.err, /404/)
})
