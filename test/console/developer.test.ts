import t from 'tap'
import { AttemptLog } from '../../services/webhooks/delivery/attempt-log'
import type { DeliveryRecord } from '../../services/webhooks/delivery-log'
import { WebhookKeys } from '../../services/webhooks/keys'
import { deliveryMessage, publishDeliveries, registerWebhook } from '../support/fixtures/webhooks'
import { startTestRuntime } from '../support/runtime'
import { eventually } from '../support/util'
import { attributes, Browsers, chartData, CONSOLE_ENV, consoleLink, csrfOf, screenshot, sidewaysOverflow, signInWithLink } from '../support/fixtures/console'

/**
 * An app developer's console in chromium: signs in with the portal link,
 * sees the webhook and its CRC history, validates it, watches a delivery
 * arrive in the live tail, finds a failed delivery in the log, reads its
 * attempts and re-sends it, and sees the charts. A second app's developer
 * can neither see nor act on the first app's data.
 */

const FILE = 'developer'

t.test('an app developer works with their webhook in the console', async (t) => {
  const browsers = new Browsers(t)
  const rt = await startTestRuntime(t, { env: CONSOLE_ENV })
  const a = await registerWebhook(t, rt)
  const b = await registerWebhook(t, rt)
  const base = `${rt.baseUrl}/console/webhooks/apps/${a.id.app.id}`

  const { page } = await browsers.person(t)
  const pageErrors: string[] = []
  page.on('pageerror', (e) => pageErrors.push(e.message))
  // "Resend all failed" and "Delete" ask first: the person says yes.
  page.on('dialog', (d) => void d.accept())
  await signInWithLink(page, await consoleLink(rt, a.id.app.id))
  t.match(page.url(), `/console/webhooks/apps/${a.id.app.id}/`, 'the portal link lands on the app')
  const card = page.locator(`[data-webhook="${a.webhookId}"]`)
  t.equal(await card.locator('[data-valid]').getAttribute('data-valid'), 'true', 'the webhook is shown valid')

  // Validate now: a CRC with its time, result, status code and latency in the history.
  const before = a.receiver.crcCount
  await card.getByRole('button', { name: 'Validate now' }).click()
  const row = page.locator(`[data-webhook="${a.webhookId}"] table.crc-history tbody tr`).first()
  await row.locator('td.pass').waitFor()
  t.equal(a.receiver.crcCount, before + 1, 'the receiver got one more challenge')
  t.match(await row.innerText(), /console\s+pass\s+200\s+\d+ ms/, 'history row: trigger, result, status code, latency')
  await screenshot(t, page, FILE, 'webhooks')

  // Live tail: a delivery appears as it is delivered.
  await page.getByRole('link', { name: 'Live tail' }).click()
  await page.locator('[data-tail-state]', { hasText: 'connected' }).waitFor()
  // Events of a few minutes ago: a replay window ends at a whole minute, before now.
  const earlier = new Date(Date.now() - 5 * 60_000).toISOString()
  const live = deliveryMessage({ appId: a.id.app.id, webhookId: a.webhookId, text: 'seen live', createdAt: earlier })
  await publishDeliveries(rt, [live])
  await page.locator(`#tail tr[data-delivery="${String(live.delivery_id)}"]`).waitFor()
  t.match(await page.locator(`#tail tr[data-delivery="${String(live.delivery_id)}"]`).innerText(), /post\.create\s+delivered\s+200/, 'the tail shows the delivered event')
  await screenshot(t, page, FILE, 'live-tail')

  // A delivery the receiver refuses until the retries run out: failed, in the log with its attempts.
  a.receiver.onPost = () => ({ status: 500, body: 'receiver is down' })
  const failing = deliveryMessage({ appId: a.id.app.id, webhookId: a.webhookId, text: 'will fail', createdAt: earlier })
  const failingId = String(failing.delivery_id)
  await publishDeliveries(rt, [failing])
  await eventually(async () => (await rt.ctx.store.getJson<DeliveryRecord>(WebhookKeys.delivery(failingId)))?.status === 'failed', 10_000)
  await page.goto(`${base}/deliveries?status=failed`)
  const failedRow = page.locator(`#deliveries tr[data-delivery="${failingId}"]`)
  t.equal(await failedRow.count(), 1, 'the status filter finds the failed delivery')
  t.equal(await page.locator(`#deliveries tr[data-delivery="${String(live.delivery_id)}"]`).count(), 0, 'and not the delivered one')
  await page.goto(`${base}/deliveries?event_type=dm.sent`)
  t.equal(await page.locator('#deliveries tr[data-delivery]').count(), 0, 'the event type filter leaves out post.create')

  await page.goto(`${base}/deliveries/${failingId}`)
  const attempts = page.locator('#attempts tbody tr')
  t.equal(await attempts.count(), 3, 'three attempts (the retry schedule)')
  t.match(await attempts.first().innerText(), /500[\s\S]*receiver is down/, 'each with its response code and body')
  t.match(await page.locator('#request-headers').innerText(), /x-twitter-webhooks-signature\s+sha256=/, 'the signature header as sent')
  t.match(await page.locator('#body').innerText(), /will fail/, 'the body as sent')
  await screenshot(t, page, FILE, 'delivery')

  // Resend: the receiver is back, the delivery is delivered.
  a.receiver.onPost = () => ({ status: 200 })
  await page.goto(`${base}/deliveries?status=failed`)
  await page.locator(`button[data-resend="${failingId}"]`).click()
  await page.locator(`#status-${failingId} [data-status="pending"]`).waitFor()
  await eventually(async () => (await rt.ctx.store.getJson<DeliveryRecord>(WebhookKeys.delivery(failingId)))?.status === 'delivered', 10_000)
  t.ok(a.receiver.accepted.some((p) => p.body.includes('will fail')), 'the re-sent delivery reached the receiver')
  await screenshot(t, page, FILE, 'deliveries')

  // Replay a window of the last 24 hours; an older window is refused with the reason.
  const minute = (ms: number): string => new Date(ms).toISOString().slice(0, 16)
  const replayForm = page.locator(`form[hx-post$="/webhooks/${a.webhookId}/replay"]`)
  await replayForm.getByLabel('from (UTC)').fill(minute(Date.now() - 2 * 3_600_000))
  await replayForm.getByLabel('to (UTC)').fill(minute(Date.now()))
  await replayForm.getByRole('button', { name: 'Replay' }).click()
  await page.locator('.replay[data-state="Complete"]').waitFor()
  t.match(await page.locator('.replay').innerText(), /Complete[\s\S]*2\/2 delivered/, 'the replay job re-delivered the window and completed')
  await replayForm.getByLabel('from (UTC)').fill(minute(Date.now() - 2 * 24 * 3_600_000))
  await replayForm.getByLabel('to (UTC)').fill(minute(Date.now() - 24 * 3_600_000 - 3_600_000))
  await replayForm.getByRole('button', { name: 'Replay' }).click()
  await page.locator('#flash:not([hidden])', { hasText: 'older than 24 hours' }).waitFor()
  t.pass('a window older than 24 hours is refused with the reason')

  // Resend all failed: two deliveries fail while the receiver is down; once it answers 200 again, one click sends both.
  a.receiver.onPost = () => ({ status: 500, body: 'down again' })
  const bulk = ['bulk one', 'bulk two'].map((text) => deliveryMessage({ appId: a.id.app.id, webhookId: a.webhookId, text, createdAt: earlier }))
  const bulkIds = bulk.map((m) => String(m.delivery_id))
  const statuses = async (): Promise<Array<string | undefined>> => Promise.all(bulkIds.map(async (id) => (await rt.ctx.store.getJson<DeliveryRecord>(WebhookKeys.delivery(id)))?.status))
  await publishDeliveries(rt, bulk)
  await eventually(async () => (await statuses()).every((s) => s === 'failed'), 10_000)
  a.receiver.onPost = () => ({ status: 200 })
  await page.goto(`${base}/deliveries?status=failed`)
  t.same((await attributes(page, '#deliveries tr[data-delivery]', 'data-delivery')).sort(), [...bulkIds].sort(), 'the log lists both failed deliveries')
  const acceptedBefore = a.receiver.accepted.length
  const webhookCard = page.locator('section.card', { hasText: `Webhook ${a.webhookId}` })
  await webhookCard.getByRole('button', { name: 'Resend all failed' }).click()
  await webhookCard.locator('.result [data-resent="2"]').waitFor()
  t.pass('"Resend all failed" answers that it scheduled both again')
  await eventually(async () => (await statuses()).every((s) => s === 'delivered'), 10_000)
  const resentBodies = a.receiver.accepted.slice(acceptedBefore).map((p) => p.body)
  t.ok(['bulk one', 'bulk two'].every((text) => resentBodies.some((b) => b.includes(text))), 'both failed deliveries reached the receiver again and were accepted')
  for (const id of bulkIds) await page.locator(`#status-${id} [data-status="delivered"]`).waitFor()
  t.pass('the rows on the page turn delivered without a reload')
  await page.goto(`${base}/deliveries?status=failed`)
  t.equal(await page.locator('#deliveries tr[data-delivery]').count(), 0, 'no failed delivery is left in the log')

  // Activity subscriptions: create one, see it, delete it.
  await page.getByRole('link', { name: 'Subscriptions' }).click()
  const form = page.locator('#new-subscription')
  await form.getByLabel('event type').selectOption('post.create')
  await form.getByLabel('user id').fill('783214')
  await form.getByLabel('keyword').fill('launch')
  // The webhook is picked from the app's list, not typed.
  await form.locator('select[name="webhook_id"][data-ready="true"]').waitFor()
  await form.getByLabel('webhook').selectOption(a.webhookId)
  await form.getByRole('button', { name: 'Create' }).click()
  const created = page.locator('#subscription-table tr[data-subscription]', { hasText: 'launch' })
  await created.waitFor()
  const subId = (await created.getAttribute('data-subscription')) ?? ''
  const listed = (await (await fetch(`${rt.baseUrl}/2/activity/subscriptions`, { headers: { authorization: `Bearer ${a.id.bearer}` } })).json()) as { data: Array<{ subscription_id: string; filter: { keyword?: string }; webhook_id?: string }> }
  t.ok(listed.data.some((x) => x.subscription_id === subId && x.filter.keyword === 'launch' && x.webhook_id === a.webhookId), 'the public API lists the subscription created in the console')
  await screenshot(t, page, FILE, 'subscriptions')
  await created.getByRole('button', { name: 'Delete' }).click()
  await page.locator(`#subscription-table tr[data-subscription="${subId}"]`).waitFor({ state: 'detached' })
  const after = (await (await fetch(`${rt.baseUrl}/2/activity/subscriptions`, { headers: { authorization: `Bearer ${a.id.bearer}` } })).json()) as { data?: Array<{ subscription_id: string }> }
  t.notOk((after.data ?? []).some((x) => x.subscription_id === subId), 'and deleting it there removes it')

  // Charts: the attempts are counted.
  await page.goto(`${base}/charts`)
  await page.locator('#charts[data-ready="true"]').waitFor()
  t.ok(Number(await page.locator('#charts').getAttribute('data-total')) >= 5, 'the charts count every attempt of the last hour')
  await screenshot(t, page, FILE, 'charts')
  await page.goto(`${base}/deliveries`)
  await screenshot(t, page, FILE, 'overview')

  t.same(pageErrors, [], 'no script error on any page')

  // The second app's developer: nothing of app A, by page or by call.
  const other = await browsers.person(t)
  await signInWithLink(other.page, await consoleLink(rt, b.id.app.id))
  const seen = await other.page.goto(`${base}/deliveries`)
  t.equal(seen?.status(), 404, "another app's delivery log is not found")
  t.equal((await other.page.goto(`${base}/deliveries/${failingId}`))?.status(), 404, "another app's delivery is not found")
  await other.page.goto(`${rt.baseUrl}/console/webhooks/apps/${b.id.app.id}/`)
  const csrf = await csrfOf(other.page)
  const resend = await other.page.request.post(`${base}/deliveries/${failingId}/resend`, { headers: { 'x-csrf-token': csrf } })
  t.equal(resend.status(), 404, "resending another app's delivery is refused")
  const validate = await other.page.request.post(`${base}/webhooks/${a.webhookId}/validate`, { headers: { 'x-csrf-token': csrf } })
  t.equal(validate.status(), 404, "validating another app's webhook is refused")
  t.equal((await other.page.request.get(`${base}/stats?range=hour`)).status(), 404, "another app's charts are refused")

  // CSRF: the developer's own action without the token is refused.
  const noToken = await page.request.post(`${base}/deliveries/${failingId}/resend`)
  t.equal(noToken.status(), 403, 'a state-changing call without the CSRF token is refused')
  t.match(await noToken.text(), /CSRF/, 'and says why')

  // Phone-sized (390x844): every developer page fits the screen, nothing to scroll sideways.
  const phone = await browsers.person(t, { mobile: true })
  await signInWithLink(phone.page, await consoleLink(rt, a.id.app.id))
  t.same(phone.page.viewportSize(), { width: 390, height: 844 }, 'a 390x844 phone screen')
  const phonePages: Array<[string, string, string?]> = [
    ['webhooks', `${base}/`],
    ['deliveries', `${base}/deliveries`],
    ['delivery', `${base}/deliveries/${failingId}`],
    ['tail', `${base}/tail`, '[data-tail-state]'],
    ['subscriptions', `${rt.baseUrl}/console/activity/apps/${a.id.app.id}/subscriptions`, '#subscription-table'],
    ['charts', `${base}/charts`, '#charts[data-ready="true"]']
  ]
  for (const [name, url, ready] of phonePages) {
    t.equal((await phone.page.goto(url))?.status(), 200, `phone: the ${name} page`)
    if (ready !== undefined) await phone.page.locator(ready).first().waitFor()
    const { overflow, culprits } = await sidewaysOverflow(phone.page)
    t.ok(overflow <= 1, `phone: no sideways scrolling on the ${name} page (${overflow}px${culprits.length > 0 ? `: ${culprits.join(', ')}` : ''})`)
    await screenshot(t, phone.page, FILE, `phone-${name}`)
  }
})

t.test('the delivery log by time range and page; the charts of the last hour and the last day', async (t) => {
  const browsers = new Browsers(t)
  const rt = await startTestRuntime(t, { env: CONSOLE_ENV })
  const c = await registerWebhook(t, rt)
  const base = `${rt.baseUrl}/console/webhooks/apps/${c.id.app.id}`

  // 30 deliveries, one a minute: ids[i] happened i minutes before `newest` (newest first, as the log lists them).
  const newest = Math.floor(Date.now() / 60_000) * 60_000 - 10 * 60_000
  const at = (i: number): number => newest - i * 60_000
  const messages = Array.from({ length: 30 }, (_, i) => deliveryMessage({ appId: c.id.app.id, webhookId: c.webhookId, text: `paged ${i}`, createdAt: new Date(at(i)).toISOString() }))
  const ids = messages.map((m) => String(m.delivery_id))
  await publishDeliveries(rt, messages)
  await eventually(async () => c.receiver.accepted.length >= 30, 20_000)

  const { page } = await browsers.person(t)
  const pageErrors: string[] = []
  page.on('pageerror', (e) => pageErrors.push(e.message))
  await signInWithLink(page, await consoleLink(rt, c.id.app.id))
  const shown = async (): Promise<string[]> => attributes(page, '#deliveries tr[data-delivery]', 'data-delivery')
  const pager = async (): Promise<{ prev: number; next: number }> => ({ prev: await page.locator('.pager a[rel="prev"]').count(), next: await page.locator('.pager a[rel="next"]').count() })
  const follow = async (rel: 'prev' | 'next', pageNo: number): Promise<void> => {
    await Promise.all([page.waitForURL(new RegExp(`[?&]page=${pageNo}(&|$)`)), page.locator(`.pager a[rel="${rel}"]`).click()])
  }

  // Paging: 25 a page, newest first; "older" and "newer" links.
  await page.goto(`${base}/deliveries`)
  t.same(await shown(), ids.slice(0, 25), 'page 1: the 25 newest deliveries, newest first')
  t.same(await pager(), { prev: 0, next: 1 }, 'page 1 links to an older page only')
  await follow('next', 2)
  t.same(await shown(), ids.slice(25), 'page 2: the 5 oldest')
  t.same(await pager(), { prev: 1, next: 0 }, 'page 2 links back to the newer page only')
  await screenshot(t, page, 'developer', 'deliveries-page-2')
  await follow('prev', 1)
  t.same(await shown(), ids.slice(0, 25), 'and back on page 1')

  // Time range: from and to (UTC, whole minutes, both included) in the filter form.
  const minute = (ms: number): string => new Date(ms).toISOString().slice(0, 16)
  const filters = page.locator('#filters')
  const filter = async (since: string, until: string): Promise<void> => {
    await filters.getByLabel('from (UTC)').fill(since)
    await filters.getByLabel('to (UTC)').fill(until)
    await Promise.all([page.waitForURL(/[?&]since=/), filters.getByRole('button', { name: 'Filter' }).click()])
  }
  await filter(minute(at(20)), minute(at(10)))
  t.same(await shown(), ids.slice(10, 21), 'from 20 to 10 minutes before: the 11 deliveries of those minutes')
  t.same(await attributes(page, '#deliveries tr[data-delivery] td:first-child time', 'datetime'), ids.slice(10, 21).map((_, i) => new Date(at(10 + i)).toISOString()), 'each at its event time')
  t.match(await page.locator('#deliveries tr[data-delivery] td:first-child').first().innerText(), /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/, 'shown in UTC with the zone')
  t.same(await pager(), { prev: 0, next: 0 }, 'one page')
  await filter(minute(at(27)), '')
  t.same(await shown(), ids.slice(0, 25), 'from only: 28 deliveries, the newest 25 on page 1')
  await follow('next', 2)
  t.match(page.url(), `since=${encodeURIComponent(minute(at(27)))}`, 'the older page keeps the time range')
  t.same(await shown(), ids.slice(25, 28), 'page 2 of the range: the 3 oldest in it, none before it')
  await filter('', minute(at(28)))
  t.same(await shown(), ids.slice(28), 'to only: the 2 deliveries up to that minute')
  await filter(minute(at(-1)), minute(at(-2)))
  t.same(await shown(), [], 'a range with no delivery in it: none')
  t.match(await page.locator('#deliveries').innerText(), /No delivery matches/, 'and says so')

  // Charts: attempts recorded at known times (as the delivery worker records them) for an app of their own.
  const d = await registerWebhook(t, rt)
  const log = new AttemptLog(rt.ctx.store, 3_600_000)
  const record = { delivery_id: 'chart', webhook_id: d.webhookId, app_id: d.id.app.id, source: 'activity', body: '{}', event_time: Date.now(), created_at: new Date().toISOString(), status: 'pending', attempts: 0, next_attempt_at: 0 } satisfies DeliveryRecord
  const now = Date.now()
  // Three hours ago: two 200s in 20 ms and a 500 in 300 ms. Two minutes ago: two 200s in 7 ms.
  for (const [status, ms] of [[200, 20], [200, 20], [500, 300]] as const) await log.record(record, { kind: 'response', status, headers: {}, body: '', ms }, now - 3 * 3_600_000)
  for (let i = 0; i < 2; i++) await log.record(record, { kind: 'response', status: 200, headers: {}, body: '', ms: 7 }, now - 2 * 60_000)

  const charts = await browsers.person(t)
  charts.page.on('pageerror', (e) => pageErrors.push(e.message))
  await signInWithLink(charts.page, await consoleLink(rt, d.id.app.id))
  const drawn = async (): Promise<Record<string, unknown>> => {
    await charts.page.locator('#charts[data-ready="true"]').waitFor()
    const sets: Record<string, Array<number | null>> = {}
    let labels = 0
    for (const name of ['rate', 'success', 'latency']) {
      const data = await chartData(charts.page, `[data-chart="${name}"]`)
      labels = data.labels.length
      for (const ds of data.datasets) sets[ds.label] = ds.data.filter((v) => v !== null && v !== 0)
    }
    return { ...sets, labels, total: Number(await charts.page.locator('#charts').getAttribute('data-total')) }
  }
  await charts.page.goto(`${base.replace(c.id.app.id, d.id.app.id)}/charts`)
  t.same(await drawn(), { labels: 60, total: 2, 'deliveries / min': [2], 'success rate %': [100], 'p50 ms': [8], 'p99 ms': [10] },
    'last hour: 60 minutes; the minute of two attempts shows 2 per minute, 100 %, p50 8 ms, p99 10 ms; nothing from three hours ago')
  await Promise.all([charts.page.waitForURL(/[?&]range=day$/), charts.page.getByRole('link', { name: 'last day' }).click()])
  t.match(await charts.page.locator('h1').innerText(), /last day/, 'the day range is switched on')
  t.same(await drawn(), { labels: 144, total: 5, 'deliveries / min': [0.3, 0.2], 'success rate %': [66.7, 100], 'p50 ms': [21, 8], 'p99 ms': [492, 10] },
    'last day: 144 ten-minute points; three hours ago 0.3 per minute, 66.7 %, p50 21 ms, p99 492 ms; the last ten minutes 0.2 per minute, 100 %')
  await screenshot(t, charts.page, 'developer', 'charts-day')
  t.same(pageErrors, [], 'no script error on any page')
})
