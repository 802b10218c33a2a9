import { randomBytes } from 'node:crypto'
import t from 'tap'
import { oauthParams } from '../support/http'
import { startReceiver } from '../support/receivers'
import { createIdentity, startTestRuntime, type TestIdentity } from '../support/runtime'
import { OpenApiAudit } from '../support/fixtures/conformance/openapi-audit'
import { Recorder } from '../support/fixtures/conformance/recorder'

/**
 * `@xdevplatform/xurl` cannot run here: the npm package (1.3.4) is a
 * wrapper whose postinstall script (install.js) downloads the Go binary
 * from the project's GitHub releases, and this machine reaches no host but
 * the package registries. Its requests are replayed instead, as its source
 * builds them (xdevplatform/xurl 41259e8: api/client.go BuildRequest and
 * buildBaseRequest, auth/auth.go GetOAuth1Header, config/config.go):
 * API_BASE_URL (its host setting) + the path; a `-d` body only on POST, PUT
 * and PATCH, `Content-Type: application/json` when it parses as JSON;
 * `--auth app` a Bearer header, `--auth oauth1` an OAuth 1.0a header over the
 * query parameters (not the body), fields in xurl's order; `User-Agent:
 * xurl/<version>`; the answer printed as JSON.
 */

const XURL_VERSION = '1.3.4'

interface Run {
  status: number
  /** What xurl prints: the JSON answer. */
  printed: unknown
}

/** One `xurl [-X method] [-d data] --auth kind path` run, replayed. */
async function xurl(base: string, id: TestIdentity, options: { method?: string; data?: string; auth: 'app' | 'oauth1'; path: string }): Promise<Run> {
  const method = (options.method ?? (options.data !== undefined ? 'POST' : 'GET')).toUpperCase()
  const url = `${base}${options.path}`
  const headers: Record<string, string> = {}
  let body: string | undefined
  if (options.data !== undefined && ['POST', 'PUT', 'PATCH'].includes(method)) {
    body = options.data
    let json = true
    try {
      JSON.parse(options.data)
    } catch {
      json = false
    }
    headers['Content-Type'] = json ? 'application/json' : 'application/x-www-form-urlencoded'
  }
  if (options.auth === 'app') headers.Authorization = `Bearer ${id.bearer}`
  else {
    const nonce = randomBytes(16).toString('hex')
    const timestamp = Math.floor(Date.now() / 1000)
    const signed = oauthParams(method, url, id, { nonce, timestamp })
    const e = encodeURIComponent
    headers.Authorization = `OAuth oauth_consumer_key="${e(id.app.consumer_key)}",oauth_nonce="${e(nonce)}",oauth_signature="${e(signed.oauth_signature)}",oauth_signature_method="HMAC-SHA1",oauth_timestamp="${timestamp}",oauth_token="${e(id.token.token)}",oauth_version="1.0"`
  }
  headers['User-Agent'] = `xurl/${XURL_VERSION}`
  const res = await fetch(url, { method, headers, body })
  return { status: res.status, printed: JSON.parse(await res.text()) as unknown }
}

t.test('xurl (replayed): webhooks and account activity with --auth app and --auth oauth1', async (t) => {
  const rt = await startTestRuntime(t)
  const id = await createIdentity(rt.ctx.store)
  const recorder = await Recorder.start(t, rt.baseUrl)
  const receiver = await startReceiver(t, id.app.consumer_secret)
  const base = recorder.url

  const created = await xurl(base, id, { auth: 'app', data: JSON.stringify({ url: receiver.url }), path: '/2/webhooks' })
  t.match(created, { status: 200, printed: { data: { url: receiver.url, valid: true } } }, 'xurl --auth app -d {"url":...} /2/webhooks')
  const webhookId = (created.printed as { data: { id: string } }).data.id
  t.match(await xurl(base, id, { auth: 'app', path: '/2/webhooks' }), { status: 200, printed: { data: [{ id: webhookId }], meta: { result_count: 1 } } })
  t.same(await xurl(base, id, { auth: 'app', method: 'PUT', path: `/2/webhooks/${webhookId}` }), { status: 200, printed: { data: { attempted: true } } }, 'xurl -X PUT: no body, no content type')
  t.same(await xurl(base, id, { auth: 'oauth1', method: 'POST', path: `/2/account_activity/webhooks/${webhookId}/subscriptions/all` }), { status: 200, printed: { data: { subscribed: true } } }, 'xurl --auth oauth1 -X POST')
  t.same(await xurl(base, id, { auth: 'oauth1', path: `/2/account_activity/webhooks/${webhookId}/subscriptions/all` }), { status: 200, printed: { data: { subscribed: true } } })
  t.same(await xurl(base, id, { auth: 'app', method: 'DELETE', path: `/2/account_activity/webhooks/${webhookId}/subscriptions/${id.user.id}/all` }), { status: 200, printed: { data: { subscribed: false } } })
  t.same(await xurl(base, id, { auth: 'app', method: 'DELETE', path: `/2/webhooks/${webhookId}` }), { status: 200, printed: { data: { deleted: true } } })
  const again = await xurl(base, id, { auth: 'app', method: 'DELETE', path: `/2/webhooks/${webhookId}` })
  t.match(again, { status: 404, printed: { type: 'https://api.twitter.com/2/problems/resource-not-found' } }, 'the Problem xurl prints')

  new OpenApiAudit().check(t, recorder.exchanges, 'xurl')
  t.comment(`client @xdevplatform/xurl@${XURL_VERSION} (replayed: the package downloads its binary at install): ${recorder.exchanges.length} calls`)
})
