import t from 'tap'
import { ConsoleKeys, type ConsoleSession } from '../../services/common/console/session'
import type { Runtime } from '../../services/common/runtime'
import { run as consoleCli } from '../../services/cli/console'
import { deliveryMessage, publishDeliveries, registerWebhook } from '../support/fixtures/webhooks'
import { startTestRuntime } from '../support/runtime'
import { eventually } from '../support/util'
import { CONSOLE_ENV, consoleLink, OPERATOR_TOKEN } from '../support/fixtures/console'

/**
 * The console's routes over plain HTTP, without a browser: every route
 * checks the session on the server (no cookie: sign-in page or 401), the
 * role (operator pages: 403 for a developer), the app (another app's data:
 * 404 for every route, read or write), and the CSRF token on every
 * state-changing call. The list below must cover every /console route the
 * runtime registers, so a new route cannot skip these checks unnoticed.
 */

interface Browser {
  cookies: Map<string, string>
  csrf: string
}

function cookieHeader(b: Browser): string {
  return [...b.cookies].map(([k, v]) => `${k}=${v}`).join('; ')
}

function keep(b: Browser, res: Response): void {
  for (const c of res.headers.getSetCookie()) {
    const [pair] = c.split(';')
    const i = (pair ?? '').indexOf('=')
    b.cookies.set((pair ?? '').slice(0, i), (pair ?? '').slice(i + 1))
  }
}

async function call(rt: Runtime, b: Browser | undefined, method: string, path: string, options: { csrf?: string | null; form?: Record<string, string>; headers?: Record<string, string> } = {}): Promise<Response> {
  const headers: Record<string, string> = { ...(options.headers ?? {}) }
  if (b) headers.cookie = cookieHeader(b)
  const csrf = options.csrf === undefined ? b?.csrf : options.csrf
  if (csrf !== null && csrf !== undefined && method !== 'GET') headers['x-csrf-token'] = csrf
  let body: string | undefined
  if (options.form) {
    headers['content-type'] = 'application/x-www-form-urlencoded'
    body = new URLSearchParams(options.form).toString()
  }
  const res = await fetch(`${rt.baseUrl}${path}`, { method, headers, body, redirect: 'manual' })
  if (b) keep(b, res)
  return res
}

/** Signs in through a link as a browser would: GET the link page (login CSRF cookie), POST its form. */
async function signIn(rt: Runtime, url: string): Promise<{ browser: Browser; res: Response; pageStatus: number }> {
  const b: Browser = { cookies: new Map(), csrf: '' }
  const page = await fetch(url)
  keep(b, page)
  const html = await page.text()
  const field = /name="_csrf" value="([^"]+)"/.exec(html)?.[1] ?? ''
  const token = url.split('/').pop() ?? ''
  const res = await call(rt, b, 'POST', '/console/link', { csrf: null, form: { _csrf: field, token } })
  const home = await call(rt, b, 'GET', (res.headers.get('location') ?? '/console/'))
  const landing = await call(rt, b, 'GET', home.headers.get('location') ?? '/console/')
  b.csrf = /data-csrf="([^"]+)"/.exec(await landing.text())?.[1] ?? ''
  return { browser: b, res, pageStatus: page.status }
}

t.test('every console route enforces session, role, app and CSRF on the server', async (t) => {
  const rt = await startTestRuntime(t, { env: CONSOLE_ENV })
  const a = await registerWebhook(t, rt)
  const b = await registerWebhook(t, rt)
  const failing = deliveryMessage({ appId: a.id.app.id, webhookId: a.webhookId })
  a.receiver.onPost = () => ({ status: 500 })
  await publishDeliveries(rt, [failing])
  await eventually(async () => (await fetch(`${rt.baseUrl}/admin/webhooks/${a.webhookId}/deliveries?status=failed`, { headers: { authorization: `Bearer ${OPERATOR_TOKEN}` } }).then((r) => r.json() as Promise<{ data: unknown[] }>)).data.length === 1, 10_000)
  const sub = await fetch(`${rt.baseUrl}/2/activity/subscriptions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${a.id.bearer}`, 'content-type': 'application/json' },
    body: JSON.stringify({ event_type: 'post.create', filter: { user_id: '2244994945' } })
  }).then((r) => r.json() as Promise<{ data: { subscription: { subscription_id: string } } }>)

  const A = a.id.app.id
  const W = a.webhookId
  const D = String(failing.delivery_id)
  const S = sub.data.subscription.subscription_id
  const appRoutes: Array<[string, string, Record<string, string>?]> = [
    ['GET', `/console/webhooks/apps/${A}/`],
    ['POST', `/console/webhooks/apps/${A}/webhooks/${W}/validate`],
    ['POST', `/console/webhooks/apps/${A}/webhooks/${W}/standard-webhooks/enable`],
    ['POST', `/console/webhooks/apps/${A}/webhooks/${W}/standard-webhooks/rotate`],
    ['POST', `/console/webhooks/apps/${A}/webhooks/${W}/standard-webhooks/disable`],
    ['GET', `/console/webhooks/apps/${A}/webhooks.json`],
    ['POST', `/console/webhooks/apps/${A}/webhooks`, { url: 'http://127.0.0.1:9/another' }],
    ['POST', `/console/webhooks/apps/${A}/webhooks/${W}/url`, { url: 'http://127.0.0.1:9/moved' }],
    ['POST', `/console/webhooks/apps/${A}/webhooks/${W}/test-event`],
    ['DELETE', `/console/webhooks/apps/${A}/webhooks/${W}`],
    ['GET', `/console/webhooks/apps/${A}/deliveries`],
    ['GET', `/console/webhooks/apps/${A}/deliveries/${D}`],
    ['GET', `/console/webhooks/apps/${A}/deliveries/${D}/status`],
    ['POST', `/console/webhooks/apps/${A}/deliveries/${D}/resend`],
    ['POST', `/console/webhooks/apps/${A}/deliveries/${D}/retry-now`],
    ['POST', `/console/webhooks/apps/${A}/webhooks/${W}/resend-failed`],
    ['POST', `/console/webhooks/apps/${A}/webhooks/${W}/replay`, { from: new Date(Date.now() - 600_000).toISOString().slice(0, 16), to: new Date(Date.now() - 60_000).toISOString().slice(0, 16) }],
    ['GET', `/console/webhooks/apps/${A}/replay-jobs/1`],
    ['GET', `/console/webhooks/apps/${A}/tail`],
    ['GET', `/console/webhooks/apps/${A}/tail/events`],
    ['GET', `/console/webhooks/apps/${A}/charts`],
    ['GET', `/console/webhooks/apps/${A}/stats?range=hour`],
    ['GET', `/console/activity/apps/${A}/subscriptions`],
    ['POST', `/console/activity/apps/${A}/subscriptions`, { event_type: 'post.create', user_id: '783214' }],
    ['DELETE', `/console/activity/apps/${A}/subscriptions/${S}`]
  ]
  const operatorRoutes: Array<[string, string, Record<string, string>?]> = [
    ['GET', '/console/webhooks/apps'],
    ['GET', '/console/webhooks/dead-letters'],
    ['GET', '/console/ops/lag'],
    ['GET', '/console/ops/lag.json'],
    ['GET', '/console/ops/health'],
    ['GET', '/console/ops/accounts'],
    ['GET', '/console/ops/accounts/1'],
    ['POST', '/console/ops/accounts/1/features', { feature: 'ACCOUNT_HISTORY_ACCESS', action: 'grant' }],
    ['GET', '/console/history/accounts/1']
  ]
  const open = new Set(['GET /console', 'GET /console/', 'GET /console/login', 'POST /console/login', 'GET /console/link/:token', 'POST /console/link', 'POST /console/logout', 'GET /console/assets/*', 'HEAD /console/assets/*',
    // Each console prefix's catch-all: an HTML "not found" page, no data.
    'GET /console/*', 'GET /console/webhooks/*', 'GET /console/activity/*', 'GET /console/history/*'])
  const shape = (url: string): string => url.split('?')[0]?.replace(/\/[0-9a-f-]{6,}(?=\/|$)|\/1(?=\/|$)/g, '/:') ?? url
  const covered = new Set([...appRoutes, ...operatorRoutes].map(([m, u]) => `${m} ${shape(u)}`))
  for (const r of rt.app.routeTable.filter((r) => r.url.startsWith('/console'))) {
    const key = `${r.method} ${r.url}`
    if (open.has(key)) continue
    t.ok(covered.has(`${r.method} ${r.url.replace(/:[a-z_]+/g, ':')}`), `${key} is checked below`)
  }

  // No session: pages send the browser to sign in, calls are 401.
  for (const [method, path, form] of [...appRoutes, ...operatorRoutes]) {
    const res = await call(rt, undefined, method, path, form ? { form } : {})
    if (method === 'GET' && !path.includes('/tail/events') && !path.includes('/stats') && !path.includes('lag.json') && !path.includes('replay-jobs') && !path.includes('.json') && !path.endsWith('/status')) {
      t.equal(res.status, 303, `${method} ${path} without a session: to the sign-in page`)
      t.equal(res.headers.get('location'), '/console/login')
    } else {
      t.equal(res.status, 401, `${method} ${path} without a session: 401`)
    }
  }

  const devA = (await signIn(rt, await consoleLink(rt, A))).browser
  const devB = (await signIn(rt, await consoleLink(rt, b.id.app.id))).browser
  t.ok(devB.csrf.length > 20, "the second developer's page carries a CSRF token")

  const sessionCookie = (await signIn(rt, await consoleLink(rt, A))).res.headers.getSetCookie().find((c) => c.startsWith('console_session=')) ?? ''
  t.match(sessionCookie, /HttpOnly/, 'the session cookie is HttpOnly')
  t.match(sessionCookie, /SameSite=Strict/, 'and SameSite=Strict')
  t.notMatch(sessionCookie, /Secure/, 'and not Secure over plain http')

  // Another app's developer: every route of app A is 404, reads and writes alike.
  for (const [method, path, form] of appRoutes) {
    const res = await call(rt, devB, method, path, form ? { form } : {})
    t.equal(res.status, 404, `${method} ${path} as another app's developer: 404`)
    if (path.includes('/tail/events')) await res.body?.cancel()
  }
  t.equal((await fetch(`${rt.baseUrl}/admin/webhooks/${W}/deliveries/${D}`, { headers: { authorization: `Bearer ${OPERATOR_TOKEN}` } }).then((r) => r.json() as Promise<{ data: { status: string } }>)).data.status, 'failed', 'nothing of app A changed')

  // A developer on operator pages: 403.
  for (const [method, path, form] of operatorRoutes) {
    const res = await call(rt, devA, method, path, form ? { form } : {})
    t.equal(res.status, 403, `${method} ${path} as a developer: 403`)
  }

  // CSRF: every state-changing call of the app's own developer needs the token.
  for (const [method, path, form] of appRoutes.filter(([m]) => m !== 'GET')) {
    for (const csrf of [null, 'x'.repeat(43)]) {
      const res = await call(rt, devA, method, path, { csrf, ...(form ? { form } : {}) })
      t.equal(res.status, 403, `${method} ${path} ${csrf === null ? 'without' : 'with a wrong'} CSRF token: 403`)
    }
  }
  const withField = await call(rt, devA, 'POST', `/console/webhooks/apps/${A}/deliveries/${D}/resend`, { csrf: null, form: { _csrf: devA.csrf } })
  t.equal(withField.status, 200, 'the token in the form field is accepted too')

  // Sign-in: the operator token, with the login form's CSRF token.
  const anon: Browser = { cookies: new Map(), csrf: '' }
  const loginPage = await call(rt, anon, 'GET', '/console/login')
  const loginCsrf = /name="_csrf" value="([^"]+)"/.exec(await loginPage.text())?.[1] ?? ''
  t.equal((await call(rt, anon, 'POST', '/console/login', { csrf: null, form: { _csrf: loginCsrf, token: 'not the token' } })).status, 401, 'a wrong operator token is refused')
  t.equal((await call(rt, anon, 'POST', '/console/login', { csrf: null, form: { token: OPERATOR_TOKEN } })).status, 403, 'a login without the form token is refused (login CSRF)')
  t.equal((await call(rt, anon, 'POST', '/console/login', { csrf: null, form: { _csrf: loginCsrf, token: OPERATOR_TOKEN } })).status, 303, 'the operator token signs in')
  t.equal((await call(rt, anon, 'GET', '/console/ops/health')).status, 200, 'the operator sees operator pages')
  t.equal((await call(rt, anon, 'GET', `/console/webhooks/apps/${b.id.app.id}/`)).status, 200, 'and every app')

  // Portal links are single use.
  const link = await consoleLink(rt, A)
  t.equal((await signIn(rt, link)).res.status, 303, 'a portal link signs in once')
  const again = await signIn(rt, link)
  t.equal(again.pageStatus, 404, 'a used link shows no sign-in button')
  t.equal(again.res.status, 403, 'and posting it anyway is refused')
  t.notOk(again.browser.cookies.has('console_session'), 'no session')
  const replay = await call(rt, again.browser, 'POST', '/console/link', { csrf: null, form: { _csrf: again.browser.cookies.get('console_login') ?? '', token: link.split('/').pop() ?? '' } })
  t.equal(replay.status, 404, 'even with a valid form token the used link is unknown')
  t.equal((await fetch(`${rt.baseUrl}/admin/console/links`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' })).status, 401, 'links need the operator token')

  // Expiry and sign-out end a session.
  const expiring = (await signIn(rt, await consoleLink(rt, A))).browser
  const id = expiring.cookies.get('console_session') ?? ''
  const stored = await rt.ctx.store.getJson<ConsoleSession>(ConsoleKeys.session(id))
  await rt.ctx.store.setJson(ConsoleKeys.session(id), { ...stored, expires_at: new Date(Date.now() - 1000).toISOString() })
  t.equal((await call(rt, expiring, 'GET', `/console/webhooks/apps/${A}/stats`)).status, 401, 'an expired session is refused')
  t.equal((await call(rt, devA, 'POST', '/console/logout', { csrf: null, form: { _csrf: devA.csrf } })).status, 303, 'sign-out')
  t.equal((await call(rt, devA, 'GET', `/console/webhooks/apps/${A}/stats`)).status, 401, 'the signed-out session is gone')
})

t.test('over https (behind a TLS proxy) the session cookie is Secure and __Host- prefixed', async (t) => {
  const rt = await startTestRuntime(t, { env: { ...CONSOLE_ENV, TRUST_PROXY: 'true' } })
  const a = await registerWebhook(t, rt)
  const url = await consoleLink(rt, a.id.app.id)
  const page = await fetch(url, { headers: { 'x-forwarded-proto': 'https' } })
  const login = page.headers.getSetCookie()[0] ?? ''
  t.match(login, /^__Host-console_login=.*; Secure/, 'the login CSRF cookie')
  const field = /name="_csrf" value="([^"]+)"/.exec(await page.text())?.[1] ?? ''
  const res = await fetch(`${rt.baseUrl}/console/link`, {
    method: 'POST',
    redirect: 'manual',
    headers: { 'x-forwarded-proto': 'https', 'content-type': 'application/x-www-form-urlencoded', cookie: (login.split(';')[0] ?? '') },
    body: new URLSearchParams({ _csrf: field, token: url.split('/').pop() ?? '' }).toString()
  })
  t.equal(res.status, 303)
  t.match(res.headers.getSetCookie().find((c) => c.includes('console_session')) ?? '', /^__Host-console_session=[^;]+; Path=\/; Max-Age=\d+; HttpOnly; SameSite=Strict; Secure$/, 'the session cookie')
})

t.test('make console / make console-link: the CLI prints single-use sign-in links', async (t) => {
  const rt = await startTestRuntime(t, { env: CONSOLE_ENV })
  const a = await registerWebhook(t, rt)
  const out: string[] = []
  const err: string[] = []
  const io = { env: { GATEWAY_URL: rt.baseUrl, OPERATOR_TOKEN }, out: (s: string) => void out.push(s), err: (s: string) => void err.push(s) }
  t.equal(await consoleCli(['link', '--app', a.id.app.id], io), 0)
  const portal = /(http:\/\/\S+\/console\/link\/\S+)/.exec(out.join(''))?.[1] ?? ''
  t.match(out.join(''), `portal link for app ${a.id.app.id}`, 'a portal link for the app')
  t.equal((await signIn(rt, portal)).res.status, 303, 'which signs its developer in')
  out.length = 0
  t.equal(await consoleCli(['link', '--json'], io), 0)
  const view = JSON.parse(out.join('')) as { role: string; url: string }
  t.equal(view.role, 'operator', 'without --app: an operator link')
  const operator = await signIn(rt, view.url)
  t.equal((await call(rt, operator.browser, 'GET', '/console/ops/health')).status, 200, 'which signs the operator in')
  t.equal(await consoleCli(['link', '--app', 'nope'], io), 2, 'a malformed app id is a usage error')
  t.not(await consoleCli(['link', '--app', '99999999'], io), 0, 'an unknown app is refused by the gateway')
})
