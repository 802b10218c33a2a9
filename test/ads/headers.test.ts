import type { Test } from 'tap'
import t from 'tap'
import { createAccount } from '../../services/gateway/ads/accounts'
import { adsFixture, OPERATOR_TOKEN } from '../support/fixtures/campaigns'
import { bearerRequest, oauth1Request, plainRequest, type TestResponse } from '../support/http'
import { createIdentity, startTestRuntime, type TestIdentity } from '../support/runtime'
import { createAdsIdentity } from '../support/fixtures/ads'

/**
 * The headers error answers carry (docs/ads.md, §7): every ads
 * response, errors included, carries `x-current-api-version`; a request
 * whose caller is known (its credential checked out, even when the route
 * then refuses that credential) is counted and answered with
 * `x-rate-limit-*`, and an ads GET on an account also with
 * `x-account-rate-limit-*`. Unauthenticated requests and unknown routes
 * have no caller window to report.
 */

const RATE = ['x-rate-limit-limit', 'x-rate-limit-remaining', 'x-rate-limit-reset']
const ACCOUNT_RATE = ['x-account-rate-limit-limit', 'x-account-rate-limit-remaining', 'x-account-rate-limit-reset']

interface Expect {
  status: number
  /** The ads error code, or the v2 Problem type suffix / classic code. */
  code?: string | number
  version?: boolean
  rate: boolean
  accountRate?: boolean
}

function check(t: Test, label: string, res: TestResponse, e: Expect): void {
  t.test(label, async (t) => {
    t.equal(res.status, e.status, `status (${res.text.slice(0, 160)})`)
    t.ok(res.status >= 400 && res.status < 500, 'a client error, never a 5xx')
    if (e.version) t.equal(res.headers.get('x-current-api-version'), '12', 'x-current-api-version')
    if (e.version) t.match(res.json(), { errors: [{ code: e.code ?? String, message: String }], request: { params: Object } }, 'the ads error shape')
    else if (typeof e.code === 'string') t.match(res.json(), { type: `https://api.twitter.com/2/problems/${e.code}` })
    else if (typeof e.code === 'number') t.match(res.json(), { errors: [{ code: e.code }] })
    for (const name of RATE) {
      if (e.rate) t.match(res.headers.get(name), /^\d+$/, name)
      else t.equal(res.headers.get(name), null, `no ${name}`)
    }
    if (e.rate) t.ok(Number(res.headers.get('x-rate-limit-reset')) > Date.now() / 1000, 'reset is a future epoch second')
    if (e.accountRate !== undefined) for (const name of ACCOUNT_RATE) t.equal(res.headers.get(name) !== null, e.accountRate, `${e.accountRate ? '' : 'no '}${name}`)
  })
}

t.test('ads error paths carry x-current-api-version and the rate-limit headers of a known caller', async (t) => {
  const f = await adsFixture(t, {})
  const prod = f.rt.baseUrl
  const sandbox = f.rt.sandboxUrl as string
  const acct = `${prod}/12/accounts/${f.account.id}`
  const readOnly = await createIdentity(f.rt.ctx.store, { access: 'read' })
  const readOnlyAccount = await createAccount(f.rt.ctx, readOnly.user.id, { name: 'read only' })
  const stranger = await createAdsIdentity(f.rt.ctx)
  const as = (who: TestIdentity, method: string, url: string, query?: Record<string, string>) => oauth1Request(method, url, who, query ? { query } : {})

  const cases: Array<[string, Promise<TestResponse>, Expect]> = [
    ['400 INVALID_PARAMETER', as(f.id, 'GET', `${acct}/campaigns`, { count: '0' }), { status: 400, code: 'INVALID_PARAMETER', version: true, rate: true, accountRate: true }],
    ['400 MISSING_PARAMETER (POST)', as(f.id, 'POST', `${acct}/campaigns`, { name: 'x' }), { status: 400, code: 'MISSING_PARAMETER', version: true, rate: true, accountRate: false }],
    ['401 UNAUTHORIZED_ACCESS', plainRequest('GET', `${acct}/campaigns`), { status: 401, code: 'UNAUTHORIZED_ACCESS', version: true, rate: false }],
    ['401 bad signature', oauth1Request('GET', `${acct}/campaigns`, { app: f.id.app, token: { ...f.id.token, secret: 'wrong' } }), { status: 401, code: 'UNAUTHORIZED_ACCESS', version: true, rate: false }],
    ['403 app-only bearer', bearerRequest('GET', `${acct}/campaigns`, f.id.bearer), { status: 403, code: 'UNAUTHORIZED_CLIENT_APPLICATION', version: true, rate: true, accountRate: true }],
    ['403 read-only token writing', as(readOnly, 'PUT', `${prod}/12/accounts/${readOnlyAccount.id}`, { name: 'renamed' }), { status: 403, version: true, code: 'UNAUTHORIZED_CLIENT_APPLICATION', rate: true }],
    ['403 ACCOUNT_NOT_FOUND', as(f.id, 'GET', `${prod}/12/accounts/${stranger.account.id}/campaigns`), { status: 403, code: 'ACCOUNT_NOT_FOUND', version: true, rate: true, accountRate: true }],
    [
      '403 FEATURE_NOT_ENABLED',
      as(f.id, 'POST', `${acct}/cards/poll`, { name: 'p', duration_in_minutes: '60', first_choice: 'a', second_choice: 'b', media_key: '3_1' }),
      { status: 403, code: 'FEATURE_NOT_ENABLED', version: true, rate: true }
    ],
    ['404 NOT_FOUND entity', as(f.id, 'GET', `${acct}/campaigns/zzzz`), { status: 404, version: true, rate: true, accountRate: true }],
    ['404 ROUTE_NOT_FOUND', as(f.id, 'GET', `${prod}/12/no/such/route`), { status: 404, code: 'ROUTE_NOT_FOUND', version: true, rate: false }],
    ['405 METHOD_NOT_ALLOWED', as(f.id, 'PATCH', acct), { status: 405, code: 'METHOD_NOT_ALLOWED', version: true, rate: false }],
    ['404 on v5', as(f.id, 'GET', `${prod}/5/accounts/${f.account.id}/tailored_audiences/zzzz/permissions`), { status: 404, version: true, rate: true, accountRate: true }],
    ['sandbox 404 for a production account', as(f.id, 'GET', `${sandbox}/12/accounts/${f.account.id}`), { status: 404, code: 'NOT_FOUND', version: true, rate: true, accountRate: true }],
    ['sandbox 403 app-only bearer', bearerRequest('POST', `${sandbox}/12/accounts`, f.id.bearer), { status: 403, code: 'UNAUTHORIZED_CLIENT_APPLICATION', version: true, rate: true }]
  ]
  for (const [label, res, e] of cases) check(t, label, await res, e)

  // A malformed JSON body is refused before anyone is authenticated: the version, no caller window.
  const malformed = await fetch(`${prod}/12/product_catalogs/1/products`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: '{"products": [' })
  const text = await malformed.text()
  check(t, '400 malformed JSON body', { status: malformed.status, headers: malformed.headers, text, json: <T>() => JSON.parse(text) as T }, { status: 400, code: 'INVALID_PARAMETER', version: true, rate: false })
})

t.test('ads 429 TOO_MANY_REQUESTS carries the version and the exhausted window', async (t) => {
  const limited = await adsFixture(t, { rt: await startTestRuntime(t, { env: { OPERATOR_TOKEN, RATE_LIMITS: 'get:12.accounts.account_apps=1' } }) })
  t.equal((await limited.call('GET', '/account_apps')).status, 200)
  const refused = await limited.call('GET', '/account_apps')
  check(t, '429', refused, { status: 429, code: 'TOO_MANY_REQUESTS', version: true, rate: true })
  t.equal(refused.headers.get('x-rate-limit-remaining'), '0')
  t.equal(refused.headers.get('x-rate-limit-limit'), '1')
})

t.test('v2 error paths: x-rate-limit-* on the 403s of a known caller and on every counted error', async (t) => {
  const f = await adsFixture(t, {})
  const base = f.rt.baseUrl
  const readOnly = await createIdentity(f.rt.ctx.store, { access: 'read' })
  const aaa = `${base}/2/account_activity/webhooks/123/subscriptions/all`
  const cases: Array<[string, Promise<TestResponse>, Expect]> = [
    ['403 OAuth 1.0a on an app-only route', oauth1Request('GET', `${base}/2/webhooks`, f.id), { status: 403, code: 'unsupported-authentication', rate: true }],
    ['403 app-only bearer on a user-context route', bearerRequest('POST', aaa, f.id.bearer), { status: 403, code: 'unsupported-authentication', rate: true }],
    ['403 code 93: a read-only token on a direct-message route', oauth1Request('POST', aaa, readOnly), { status: 403, code: 93, rate: true }],
    ['404 unknown webhook', bearerRequest('DELETE', `${base}/2/webhooks/12345`, f.id.bearer), { status: 404, rate: true }],
    ['400 invalid request', bearerRequest('POST', `${base}/2/webhooks`, f.id.bearer, { json: { nope: 1 } }), { status: 400, code: 'invalid-request', rate: true }],
    ['401 no credentials', plainRequest('GET', `${base}/2/webhooks`), { status: 401, rate: false }],
    ['401 unknown bearer', bearerRequest('GET', `${base}/2/webhooks`, 'AAAAnot-a-token'), { status: 401, code: 89, rate: false }],
    ['403 forged OAuth 1.0a on an app-only route', oauth1Request('GET', `${base}/2/webhooks`, { app: f.id.app, token: { ...f.id.token, secret: 'forged' } }), { status: 403, code: 'unsupported-authentication', rate: false }]
  ]
  for (const [label, res, e] of cases) check(t, label, await res, e)

  // The refused requests were counted in the caller's window: the next answer reports fewer left.
  const first = await bearerRequest('POST', aaa, f.id.bearer)
  const second = await bearerRequest('POST', aaa, f.id.bearer)
  t.equal(Number(second.headers.get('x-rate-limit-remaining')), Number(first.headers.get('x-rate-limit-remaining')) - 1, 'a refused request uses up one request of its window')
})
