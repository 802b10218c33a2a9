import t from 'tap'
import type { DeliveryRecord } from '../../services/webhooks/delivery-log'
import { WebhookKeys } from '../../services/webhooks/keys'
import { startTestRuntime } from '../helper'
import { deliveryMessage, eventually, publishDeliveries, registerWebhook } from '../webhooks/support'
import { Browsers, CONSOLE_ENV, consoleLink, csrfOf, screenshot, signInWithLink } from './support'

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
  await screenshot(page, FILE, 'webhooks')

  // Live tail: a delivery appears as it is delivered.
  await page.getByRole('link', { name: 'Live tail' }).click()
  await page.locator('[data-tail-state]', { hasText: 'connected' }).waitFor()
  // Events of a few minutes ago: a replay window ends at a whole minute, before now.
  const earlier = new Date(Date.now() - 5 * 60_000).toISOString()
  const live = deliveryMessage({ appId: a.id.app.id, webhookId: a.webhookId, text: 'seen live', createdAt: earlier })
  await publishDeliveries(rt, [live])
  await page.locator(`#tail tr[data-delivery="${String(live.delivery_id)}"]`).waitFor()
  t.match(await page.locator(`#tail tr[data-delivery="${String(live.delivery_id)}"]`).innerText(), /post\.create\s+delivered\s+200/, 'the tail shows the delivered event')
  await screenshot(page, FILE, 'live-tail')

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
  await screenshot(page, FILE, 'delivery')

  // Resend: the receiver is back, the delivery is delivered.
  a.receiver.onPost = () => ({ status: 200 })
  await page.goto(`${base}/deliveries?status=failed`)
  await page.locator(`button[data-resend="${failingId}"]`).click()
  await page.locator(`#status-${failingId} [data-status="pending"]`).waitFor()
  await eventually(async () => (await rt.ctx.store.getJson<DeliveryRecord>(WebhookKeys.delivery(failingId)))?.status === 'delivered', 10_000)
  t.ok(a.receiver.accepted.some((p) => p.body.includes('will fail')), 'the re-sent delivery reached the receiver')
  await screenshot(page, FILE, 'deliveries')

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

  // Activity subscriptions: create one, see it, delete it.
  page.on('dialog', (d) => void d.accept())
  await page.getByRole('link', { name: 'Subscriptions' }).click()
  const form = page.locator('#new-subscription')
  await form.getByLabel('event type').selectOption('post.create')
  await form.getByLabel('user id').fill('783214')
  await form.getByLabel('keyword').fill('launch')
  await form.getByLabel('webhook id').fill(a.webhookId)
  await form.getByRole('button', { name: 'Create' }).click()
  const created = page.locator('#subscription-table tr[data-subscription]', { hasText: 'launch' })
  await created.waitFor()
  const subId = (await created.getAttribute('data-subscription')) ?? ''
  const listed = (await (await fetch(`${rt.baseUrl}/2/activity/subscriptions`, { headers: { authorization: `Bearer ${a.id.bearer}` } })).json()) as { data: Array<{ subscription_id: string; filter: { keyword?: string }; webhook_id?: string }> }
  t.ok(listed.data.some((x) => x.subscription_id === subId && x.filter.keyword === 'launch' && x.webhook_id === a.webhookId), 'the public API lists the subscription created in the console')
  await screenshot(page, FILE, 'subscriptions')
  await created.getByRole('button', { name: 'Delete' }).click()
  await page.locator(`#subscription-table tr[data-subscription="${subId}"]`).waitFor({ state: 'detached' })
  const after = (await (await fetch(`${rt.baseUrl}/2/activity/subscriptions`, { headers: { authorization: `Bearer ${a.id.bearer}` } })).json()) as { data?: Array<{ subscription_id: string }> }
  t.notOk((after.data ?? []).some((x) => x.subscription_id === subId), 'and deleting it there removes it')

  // Charts: the attempts are counted.
  await page.goto(`${base}/charts`)
  await page.locator('#charts[data-ready="true"]').waitFor()
  t.ok(Number(await page.locator('#charts').getAttribute('data-total')) >= 5, 'the charts count every attempt of the last hour')
  await screenshot(page, FILE, 'charts')
  await page.goto(`${base}/deliveries`)
  await screenshot(page, FILE, 'overview')

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

  // Phone-sized: the same pages fit a narrow screen.
  const phone = await browsers.person(t, { mobile: true })
  await signInWithLink(phone.page, await consoleLink(rt, a.id.app.id))
  await phone.page.goto(`${base}/deliveries`)
  const overflow = await phone.page.evaluate('document.documentElement.scrollWidth - window.innerWidth') as number
  t.ok(overflow <= 1, `no sideways scrolling on a phone (${overflow}px)`)
  await screenshot(phone.page, FILE, 'phone-deliveries')
})
