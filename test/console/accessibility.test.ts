import t from 'tap'
import type { Page } from 'playwright-core'
import { AttemptLog } from '../../services/webhooks/delivery/attempt-log'
import type { DeliveryRecord } from '../../services/webhooks/delivery-log'
import { WebhookKeys } from '../../services/webhooks/keys'
import { deliveryMessage, publishDeliveries, registerWebhook } from '../support/fixtures/webhooks'
import { gate } from '../support/receivers'
import { createIdentity, startTestRuntime } from '../support/runtime'
import { eventually } from '../support/util'
import { axeProblems, Browsers, ClickCounter, CONSOLE_ENV, consoleLink, OPERATOR_TOKEN, screenshot, signInAsOperator, signInWithLink } from '../support/fixtures/console'

/**
 * The console for everyone, in chromium at 1280 and 390 px: axe-core finds
 * no serious or critical violation on any page; the narrow menu, the skip
 * link and the current page work from the keyboard; charts have a text
 * alternative; a busy button says so; the narrow layout keeps the CRC reason
 * and last answer; every time is UTC with the zone; a chart with one bucket
 * draws it; pages with nothing to show say so; a failed console URL is an
 * HTML page with the navigation for a browser and JSON for an API client.
 */

const FILE = 'accessibility'

interface Visit { name: string; url: string; ready?: string }

t.test('the console is usable by keyboard, screen reader and phone, on one clock', async (t) => {
  const browsers = new Browsers(t)
  const rt = await startTestRuntime(t, { env: CONSOLE_ENV })
  const clicks = new ClickCounter()
  const a = await registerWebhook(t, rt)
  const base = `${rt.baseUrl}/console/webhooks/apps/${a.id.app.id}`
  const status = async (id: string): Promise<string | undefined> => (await rt.ctx.store.getJson<DeliveryRecord>(WebhookKeys.delivery(id)))?.status
  const earlier = new Date(Date.now() - 5 * 60_000).toISOString()
  const sent = deliveryMessage({ appId: a.id.app.id, webhookId: a.webhookId, text: 'delivered', createdAt: earlier })
  const sentId = String(sent.delivery_id)
  // A second app whose webhook answered 410: a dead letter on a disabled webhook.
  const g = await registerWebhook(t, rt)
  g.receiver.onPost = () => ({ status: 410 })
  const dead = deliveryMessage({ appId: g.id.app.id, webhookId: g.webhookId, text: 'gone', createdAt: earlier })
  await publishDeliveries(rt, [sent, dead])
  await eventually(async () => (await status(sentId)) === 'delivered' && (await status(String(dead.delivery_id))) === 'failed', 10_000)
  // An app whose only attempts are one bucket three hours ago; an app with nothing at all.
  const d = await registerWebhook(t, rt)
  const record = { delivery_id: 'one-bucket', webhook_id: d.webhookId, app_id: d.id.app.id, source: 'activity', body: '{}', event_time: Date.now(), created_at: new Date().toISOString(), status: 'pending', attempts: 0, next_attempt_at: 0 } satisfies DeliveryRecord
  await new AttemptLog(rt.ctx.store, 3_600_000).record(record, { kind: 'response', status: 200, headers: {}, body: '', ms: 12 }, Date.now() - 3 * 3_600_000)
  const empty = await createIdentity(rt.ctx.store)
  // An ads account for the operator's account and history pages.
  const opened = await fetch(`${rt.baseUrl}/admin/ads/accounts`, {
    method: 'POST',
    headers: { authorization: `Bearer ${OPERATOR_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ user_id: empty.user.id, name: 'Accessibility test account' })
  })
  const accountId = ((await opened.json()) as { data: { account: { id: string } } }).data.account.id

  const developerPages = (appBase: string, appId: string): Visit[] => [
    { name: 'webhooks', url: `${appBase}/` },
    { name: 'deliveries', url: `${appBase}/deliveries` },
    { name: 'delivery', url: `${appBase}/deliveries/${sentId}` },
    { name: 'tail', url: `${appBase}/tail`, ready: '[data-tail-state]' },
    { name: 'charts', url: `${appBase}/charts`, ready: '#charts[data-ready="true"]' },
    { name: 'subscriptions', url: `${rt.baseUrl}/console/activity/apps/${appId}/subscriptions`, ready: 'select[name="webhook_id"][data-ready="true"]' },
    { name: 'error', url: `${appBase}/no/such/page` }
  ]
  const operatorPages: Visit[] = [
    { name: 'apps', url: `${rt.baseUrl}/console/webhooks/apps` },
    { name: 'dead-letters', url: `${rt.baseUrl}/console/webhooks/dead-letters` },
    { name: 'lag', url: `${rt.baseUrl}/console/ops/lag` },
    { name: 'health', url: `${rt.baseUrl}/console/ops/health` },
    { name: 'accounts', url: `${rt.baseUrl}/console/ops/accounts` },
    { name: 'account', url: `${rt.baseUrl}/console/ops/accounts/${accountId}` },
    { name: 'history', url: `${rt.baseUrl}/console/history/accounts/${accountId}` },
    { name: 'app-webhooks', url: `${rt.baseUrl}/console/webhooks/apps/${g.id.app.id}/` }
  ]
  const audit = async (t: Test, page: Page, who: string, visits: Visit[]): Promise<void> => {
    for (const v of visits) {
      await page.goto(v.url)
      if (v.ready !== undefined) await page.locator(v.ready).first().waitFor()
      const problems = await axeProblems(page)
      t.same(problems, [], `axe at ${page.viewportSize()?.width} px, ${who} ${v.name}: no serious or critical violation`)
    }
  }
  type Test = typeof t

  await t.test('5. accessibility: axe on every page at 1280 and 390 px; keyboard, busy state, narrow columns', async (t) => {
    const wide = await browsers.person(t)
    await signInWithLink(wide.page, await consoleLink(rt, a.id.app.id))
    await audit(t, wide.page, 'developer', developerPages(base, a.id.app.id))
    const phone = await browsers.person(t, { mobile: true })
    await signInWithLink(phone.page, await consoleLink(rt, a.id.app.id))
    await audit(t, phone.page, 'developer', developerPages(base, a.id.app.id))
    for (const mobile of [false, true]) {
      const op = await browsers.person(t, { mobile })
      await signInAsOperator(op.page, rt)
      await audit(t, op.page, 'operator', operatorPages)
      if (!mobile) await screenshot(t, op.page, FILE, 'operator-dead-letters-blocked')
    }
    for (const mobile of [false, true]) {
      const signedOut = await browsers.person(t, { mobile })
      await audit(t, signedOut.page, 'signed out', [{ name: 'login', url: `${rt.baseUrl}/console/login` }, { name: 'portal link', url: await consoleLink(rt, a.id.app.id) }])
    }

    // The narrow menu from the keyboard: skip link, menu button, a link, the page marked current.
    const p = phone.page
    await p.goto(`${base}/`)
    await p.keyboard.press('Tab')
    t.equal(await p.evaluate('document.activeElement.textContent'), 'Skip to content', 'the first Tab reaches the skip link')
    await p.keyboard.press('Enter')
    t.equal(await p.evaluate('document.activeElement.id'), 'main', 'which moves focus to the content')
    await p.goto(`${base}/`)
    t.equal(await p.locator('#nav').isVisible(), false, 'the narrow menu starts closed')
    for (let i = 0; i < 3; i++) await p.keyboard.press('Tab')
    t.equal(await p.evaluate('document.activeElement.className'), 'nav-button', 'three Tabs reach the menu button')
    await p.keyboard.press('Enter')
    t.equal(await p.locator('#nav').isVisible(), true, 'Enter opens the menu')
    t.equal(await p.locator('.nav-button').getAttribute('aria-expanded'), 'true', 'and the button says it is expanded')
    await p.keyboard.press('Tab')
    await p.keyboard.press('Tab')
    t.equal(await p.evaluate('document.activeElement.textContent'), 'Deliveries', 'Tab moves through the menu\'s links')
    await Promise.all([p.waitForURL(/\/deliveries$/), p.keyboard.press('Enter')])
    t.equal(await p.locator('nav a[aria-current="page"]').innerText(), 'Deliveries', 'the current page is marked aria-current')
    await p.locator('.nav-button').click()
    await screenshot(t, p, FILE, 'phone-menu-open')
    t.ok(await p.locator('#nav').getByRole('button', { name: 'Sign out' }).isVisible(), 'Sign out is reachable in the narrow menu')

    // The narrow layout keeps the last answer and the CRC reason.
    t.ok(await p.locator('#deliveries th', { hasText: 'last answer' }).isVisible(), 'phone: the deliveries keep their last answer column')
    await p.goto(`${base}/`)
    t.ok(await p.locator('table.crc-history th', { hasText: 'reason' }).first().isVisible(), 'phone: the CRC history keeps its reason column')

    // A busy button: the CRC is held at the receiver while the page waits.
    const held = gate()
    a.receiver.crcHold = () => held.promise
    const validate = wide.page.locator(`[data-webhook="${a.webhookId}"]`).getByRole('button', { name: 'Validate now' })
    await wide.page.goto(`${base}/`)
    await validate.click()
    await wide.page.locator(`[data-webhook="${a.webhookId}"] button[aria-busy="true"]`).waitFor()
    t.ok(await validate.isDisabled(), 'the button in flight is busy (aria-busy) and disabled')
    await screenshot(t, wide.page, FILE, 'busy-validate')
    held.open()
    a.receiver.crcHold = undefined
    await wide.page.locator('#flash[data-kind="pass"]:not([hidden])').waitFor()
    t.equal(await wide.page.locator('button[aria-busy="true"]').count(), 0, 'and idle again once answered')

    // Charts: a sentence per chart and a table of the figures.
    await wide.page.goto(`${base}/charts`)
    await wide.page.locator('#charts[data-ready="true"]').waitFor()
    t.match(await wide.page.locator('[data-chart="rate"]').getAttribute('aria-label'), /\d+ attempts from .* UTC/, 'the rate chart has a text alternative')
    t.ok(await wide.page.locator('#chart-table tbody tr').count() >= 1, 'and its figures are a table')
  })

  await t.test('4. one clock, single buckets, empty states', async (t) => {
    const { page } = await browsers.person(t)
    await signInWithLink(page, await consoleLink(rt, a.id.app.id))
    await page.goto(`${base}/tail`)
    const row = page.locator(`#tail tr[data-delivery="${sentId}"]`).first()
    await row.waitFor()
    t.match(await row.locator('td').first().innerText(), /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/, 'the live tail writes UTC, zone shown')
    await page.goto(`${base}/charts`)
    await page.locator('#charts[data-ready="true"]').waitFor()
    const axis = (await page.evaluate('(() => { const c = Chart.getChart(document.querySelector("[data-chart=rate]")); return { title: c.options.scales.x.title.text, first: c.data.labels[0] } })()')) as { title: string; first: string }
    const stats = (await (await page.request.get(`${base}/stats?range=hour`)).json()) as { points: Array<{ t: number }> }
    // The page and this request read the range separately: a minute may have turned between them.
    const first = stats.points[0]?.t ?? 0
    const inUtc = [first - 60_000, first, first + 60_000].map((ms) => new Date(ms).toISOString().slice(11, 16))
    t.equal(axis.title, 'time (UTC)', 'the chart axis says UTC')
    t.ok(inUtc.includes(axis.first), `and its labels are UTC times (${axis.first}; the range starts ${inUtc[1]} UTC)`)

    // One bucket in a day: drawn as a point, not a line of length zero.
    const dPage = await browsers.person(t)
    await signInWithLink(dPage.page, await consoleLink(rt, d.id.app.id))
    await dPage.page.goto(`${rt.baseUrl}/console/webhooks/apps/${d.id.app.id}/charts?range=day`)
    await dPage.page.locator('#charts[data-ready="true"]').waitFor()
    const drawn = (await dPage.page.evaluate('(() => { const c = Chart.getChart(document.querySelector("[data-chart=rate]")); const data = c.data.datasets[0].data; return c.getDatasetMeta(0).data.filter((_, i) => data[i] > 0).map((e) => e.options.radius) })()')) as number[]
    t.equal(drawn.length, 1, 'the day has one bucket with attempts')
    t.ok((drawn[0] ?? 0) > 0, `and it is drawn (a point of radius ${drawn[0]})`)
    await screenshot(t, dPage.page, FILE, 'charts-day-one-bucket')

    // An app with nothing yet: every page says so.
    const e = await browsers.person(t)
    await signInWithLink(e.page, await consoleLink(rt, empty.app.id))
    const eBase = `${rt.baseUrl}/console/webhooks/apps/${empty.app.id}`
    const emptyStates: Array<[string, string, string?]> = [
      ['webhooks', `${eBase}/`, '.empty'],
      ['deliveries', `${eBase}/deliveries`, '.empty'],
      ['tail', `${eBase}/tail`, 'tr.empty-row'],
      ['charts', `${eBase}/charts`, '[data-charts-empty]'],
      ['subscriptions', `${rt.baseUrl}/console/activity/apps/${empty.app.id}/subscriptions`, '.empty']
    ]
    for (const [name, url, selector] of emptyStates) {
      await e.page.goto(url)
      if (name === 'charts') await e.page.locator('#charts[data-ready="true"]').waitFor()
      t.ok(await e.page.locator(selector ?? '.empty').first().isVisible(), `empty ${name} page: says there is nothing yet and what brings something`)
    }
    await screenshot(t, e.page, FILE, 'charts-empty')
  })

  await t.test('6. HTML error pages for browsers, JSON for API clients', async (t) => {
    const { page } = await browsers.person(t)
    await signInWithLink(page, await consoleLink(rt, a.id.app.id))
    clicks.start()
    const cases: Array<[string, string, number, RegExp]> = [
      ['an unknown console URL', `${base}/no/such/page`, 404, /no console page/],
      ["another app's data", `${rt.baseUrl}/console/webhooks/apps/${g.id.app.id}/deliveries`, 404, /No app here/],
      ['a malformed query', `${base}/deliveries?page=abc`, 400, /page must be an integer/]
    ]
    for (const [what, url, code, reason] of cases) {
      const res = await page.goto(url)
      t.equal(res?.status(), code, `${what}: ${code}`)
      t.match(res?.headers()['content-type'] ?? '', /text\/html/, `${what}: an HTML page`)
      t.match(await page.locator('#error-page').innerText(), reason, `${what}: with the reason`)
      t.ok(await page.locator('nav').getByRole('link', { name: 'Deliveries' }).count(), `${what}: with the navigation`)
    }
    await page.goto(`${base}/no/such/page`)
    t.match(await page.title(), /Not found/, 'the page has a title')
    await screenshot(t, page, FILE, 'error-page')
    await Promise.all([page.waitForURL(/\/console\/webhooks\/apps\/\d+\/$/), clicks.click(page.getByRole('link', { name: 'Back to the console' }))])
    clicks.done(t, 'back from an error page')
    const api = await page.request.get(`${base}/deliveries?page=abc`, { headers: { accept: 'application/json' } })
    t.equal(api.status(), 400, 'an API client gets the same status')
    t.match(api.headers()['content-type'] ?? '', /json/, 'as JSON')
    const out = await browsers.person(t)
    const refused = await out.page.goto(`${base}/stats?range=hour`)
    t.equal(refused?.status(), 401, 'signed out: 401')
    t.ok(await out.page.getByRole('link', { name: 'Sign in' }).count(), 'with the way to sign in')
  })

  t.comment(`click counts: ${JSON.stringify(clicks.counts)}`)
})
