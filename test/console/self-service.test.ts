import t from 'tap'
import type { DeliveryRecord } from '../../services/webhooks/delivery-log'
import { WebhookKeys } from '../../services/webhooks/keys'
import { deliveryMessage, publishDeliveries, registerWebhook } from '../support/fixtures/webhooks'
import { bearerRequest } from '../support/http'
import { startReceiver } from '../support/receivers'
import { createIdentity, startTestRuntime } from '../support/runtime'
import { eventually } from '../support/util'
import { attributes, Browsers, ClickCounter, CONSOLE_ENV, consoleLink, screenshot, signInWithLink } from '../support/fixtures/console'

/**
 * An app developer's tasks in chromium, each counted in clicks: a CRC
 * result coloured by its outcome; a delivery being retried after failures
 * shown as failing (with its next attempt and "retry now") and found by the
 * failures filter; a disabled webhook refusing a re-send with the reason;
 * adding, re-pointing and deleting a webhook and sending it a test event
 * (the rules of /2/webhooks); picking the webhook in the subscription form;
 * finding deliveries by id, event uuid, payload text, response code and
 * event type; an attempt's response headers; a replay job's progress and its
 * sends in the attempts, tail and charts.
 */

const FILE = 'self-service'
// A retry schedule slow enough to see a delivery between its attempts; two webhooks per app; ten calls of the /2/webhooks family per window.
const ENV = { ...CONSOLE_ENV, WEBHOOK_RETRY_SCHEDULE: '0,30s,60s', WEBHOOK_LIMIT_PER_APP: '2', RATE_LIMITS: 'webhooks=10' }

t.test('an app developer serves themself and finds every delivery', async (t) => {
  const browsers = new Browsers(t)
  const rt = await startTestRuntime(t, { env: ENV })
  const clicks = new ClickCounter()
  const a = await registerWebhook(t, rt)
  const base = `${rt.baseUrl}/console/webhooks/apps/${a.id.app.id}`
  const record = async (id: string): Promise<DeliveryRecord | undefined> => rt.ctx.store.getJson<DeliveryRecord>(WebhookKeys.delivery(id))
  const earlier = new Date(Date.now() - 5 * 60_000).toISOString()

  const { page } = await browsers.person(t)
  const pageErrors: string[] = []
  page.on('pageerror', (e) => pageErrors.push(e.message))
  page.on('dialog', (d) => void d.accept())
  await signInWithLink(page, await consoleLink(rt, a.id.app.id))
  const flash = page.locator('#flash:not([hidden])')
  const card = page.locator(`[data-webhook="${a.webhookId}"]`)

  await t.test('1. a status cannot be misread', async (t) => {
    // Validate now: a wrong token is red, a receiver answering 500 is amber (transient), a pass is green.
    const outcomes: Array<[typeof a.receiver.crcMode, string, RegExp]> = [['wrong', 'invalid', /CRC invalid/], ['error', 'transient', /transient/], ['correct', 'pass', /CRC passed/]]
    const colours: Record<string, string> = {}
    for (const [mode, kind, text] of outcomes) {
      a.receiver.crcMode = mode
      clicks.start()
      await clicks.click(card.getByRole('button', { name: 'Validate now' }))
      await page.locator(`#flash[data-kind="${kind}"]:not([hidden])`).waitFor()
      t.match(await flash.innerText(), text, `validate against a ${mode} answer: the banner says ${kind}`)
      colours[kind] = (await page.evaluate('getComputedStyle(document.getElementById("flash")).backgroundColor')) as string
      clicks.done(t, `validate a webhook (${kind})`)
    }
    t.equal(new Set(Object.values(colours)).size, 3, `three outcomes, three banner colours (${JSON.stringify(colours)})`)

    // A delivery the receiver refuses: failing (retried later), not pending.
    a.receiver.onPost = () => ({ status: 500, body: 'receiver is down' })
    const failing = deliveryMessage({ appId: a.id.app.id, webhookId: a.webhookId, text: 'will be retried', createdAt: earlier })
    const failingId = String(failing.delivery_id)
    await publishDeliveries(rt, [failing])
    await eventually(async () => ((await record(failingId))?.attempts ?? 0) >= 1, 10_000)
    await page.goto(`${base}/`)
    t.equal(await card.locator('[data-error-pct]').getAttribute('data-error-pct'), '100', 'the health line: every delivery of the last hour is failing')
    t.match(await card.locator('[data-health]').innerText(), /last success: none yet[\s\S]*1 failing/, 'no success yet, one failing delivery linked')

    clicks.start()
    await clicks.click(page.getByRole('link', { name: 'Deliveries' }))
    await page.getByLabel('status').selectOption('failed')
    clicks.count()
    await Promise.all([page.waitForURL(/status=failed/), clicks.click(page.getByRole('button', { name: 'Filter' }))])
    const cell = page.locator(`#status-${failingId}`)
    t.equal(await cell.locator('[data-status]').getAttribute('data-status'), 'failing', 'the failures filter finds the delivery being retried, shown as failing')
    t.match(await cell.locator('.next-attempt').innerText(), /next attempt \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC/, 'with its next attempt in UTC')
    await screenshot(t, page, FILE, 'failing')
    a.receiver.onPost = () => ({ status: 200, headers: { 'x-receiver-trace': 'trace-42' } })
    await clicks.click(cell.getByRole('button', { name: 'Retry now' }))
    await page.locator(`#status-${failingId} [data-status="delivered"]`).waitFor()
    t.pass('"Retry now" sends it at once; the status turns delivered without a reload')
    clicks.done(t, 'find a failing delivery and retry it now')

    // A webhook disabled by a 410: its dead letter is not "scheduled again" — the console says to validate first.
    const gone = await startReceiver(t, a.id.app.consumer_secret, '/gone')
    const created = await bearerRequest('POST', `${rt.baseUrl}/2/webhooks`, a.id.bearer, { json: { url: gone.url } })
    const goneId = created.json<{ data: { id: string } }>().data.id
    gone.onPost = () => ({ status: 410 })
    const dead = deliveryMessage({ appId: a.id.app.id, webhookId: goneId, text: 'sent to a gone receiver', createdAt: earlier })
    const deadId = String(dead.delivery_id)
    await publishDeliveries(rt, [dead])
    await eventually(async () => (await record(deadId))?.status === 'failed', 10_000)
    await page.goto(`${base}/deliveries?status=failed`)
    await page.locator(`button[data-resend="${deadId}"]`).click()
    await flash.filter({ hasText: 'Validate now' }).waitFor()
    t.match(await flash.innerText(), /disabled[\s\S]*410/, 'Resend on a disabled webhook is refused with the reason and what to do')
    t.equal((await record(deadId))?.status, 'failed', 'and nothing was re-scheduled')
    t.ok(await page.locator(`[data-webhook-actions="${goneId}"] [data-blocked]`).count(), 'the webhook\'s actions say it is disabled')

    // After validating it, a resend is delivered; the attempts count both sends' attempts, as many as listed.
    gone.onPost = () => ({ status: 200 })
    await page.goto(`${base}/`)
    await page.locator(`[data-webhook="${goneId}"]`).getByRole('button', { name: 'Validate now' }).click()
    await page.locator('#flash[data-kind="pass"]:not([hidden])').waitFor()
    await page.goto(`${base}/deliveries/${deadId}`)
    await page.locator(`button[data-resend="${deadId}"]`).click()
    await page.locator(`#status-${deadId} [data-status="delivered"]`).waitFor()
    await page.reload()
    t.equal(await page.locator('[data-attempts]').getAttribute('data-attempts'), '2', 'attempts: 2 after a resend')
    t.equal(await page.locator('#attempts tbody tr').count(), 2, 'beside two attempt rows')
    await bearerRequest('DELETE', `${rt.baseUrl}/2/webhooks/${goneId}`, a.id.bearer)
  })

  await t.test('2. self-service: add, re-point, test, subscribe, delete', async (t) => {
    const s = await createIdentity(rt.ctx.store)
    const good = await startReceiver(t, s.app.consumer_secret, '/one')
    const wrong = await startReceiver(t, s.app.consumer_secret, '/wrong')
    wrong.crcMode = 'wrong'
    const dev = await browsers.person(t)
    dev.page.on('dialog', (d) => void d.accept())
    await signInWithLink(dev.page, await consoleLink(rt, s.app.id))
    const p = dev.page
    const sFlash = p.locator('#flash:not([hidden])')
    const form = p.locator('#new-webhook')
    const listed = async (): Promise<Array<{ id: string; url: string }>> => (await bearerRequest('GET', `${rt.baseUrl}/2/webhooks`, s.bearer)).json<{ data: Array<{ id: string; url: string }> }>().data

    clicks.start()
    await form.getByLabel('URL (https)').fill(good.url)
    await clicks.click(form.getByRole('button', { name: 'Add webhook' }))
    await p.locator('#flash[data-kind="pass"]:not([hidden])').waitFor()
    const [added] = await listed()
    t.equal(added?.url, good.url, 'the webhook is registered, as the public API lists it')
    const sCard = p.locator(`[data-webhook="${added?.id}"]`)
    t.match(await sCard.locator('table.crc-history tbody tr').first().innerText(), /registration\s+pass\s+200\s+\d+ ms/, 'its registration CRC is in the history')
    clicks.done(t, 'add a webhook')

    await form.getByLabel('URL (https)').fill(wrong.url)
    await form.getByRole('button', { name: 'Add webhook' }).click()
    await sFlash.filter({ hasText: 'CrcValidationFailed' }).waitFor()
    t.equal((await listed()).length, 1, 'a URL failing the CRC is refused with the reason, as the API refuses it')

    clicks.start()
    await clicks.click(sCard.getByText('Change URL or delete'))
    await sCard.getByLabel('new URL').fill(good.urlFor('/two'))
    await clicks.click(sCard.getByRole('button', { name: 'Save URL' }))
    await p.locator('#flash[data-kind="pass"]:not([hidden])', { hasText: 'new URL' }).waitFor()
    t.same((await listed()).map((w) => w.url), [good.urlFor('/two')], 'the webhook points at the new URL')
    t.match(await sCard.locator('table.crc-history tbody tr').first().innerText(), /edit\s+pass/, 'the new URL\'s CRC is in the history')
    clicks.done(t, 'change a webhook\'s URL')

    clicks.start()
    await clicks.click(sCard.getByRole('button', { name: 'Send test event' }))
    const sent = sCard.locator('[data-test-delivery]')
    await sent.waitFor()
    await eventually(async () => good.accepted.some((x) => x.body.includes('console.test') && x.signatureValid), 10_000)
    await Promise.all([p.waitForURL(/\/deliveries\//), clicks.click(sent.getByRole('link'))])
    t.match(await p.locator('#attempts tbody tr').first().innerText(), /^1\s[\s\S]*200/, 'the test event\'s attempt: answered 200')
    clicks.done(t, 'send a test event and see its attempt')

    clicks.start()
    await clicks.click(p.getByRole('link', { name: 'Subscriptions' }))
    const sub = p.locator('#new-subscription')
    await sub.getByLabel('event type').selectOption('post.create')
    clicks.count()
    await sub.getByLabel('user id').fill('783214')
    await sub.locator('select[name="webhook_id"][data-ready="true"]').waitFor()
    await sub.getByLabel('webhook').selectOption(added?.id ?? '')
    clicks.count()
    await clicks.click(sub.getByRole('button', { name: 'Create' }))
    await p.locator('#subscription-table tr[data-subscription]').first().waitFor()
    t.match(await p.locator('#subscription-table tr[data-subscription]').first().innerText(), new RegExp(added?.id ?? 'x'), 'the subscription sends to the webhook picked from the list')
    clicks.done(t, 'subscribe with the webhook picked from a list')

    // The app's limit (2 here) as the API applies it.
    await p.getByRole('link', { name: 'Webhooks' }).click()
    await form.getByLabel('URL (https)').fill(good.urlFor('/three'))
    await form.getByRole('button', { name: 'Add webhook' }).click()
    await p.locator('#flash[data-kind="pass"]:not([hidden])').waitFor()
    await form.getByLabel('URL (https)').fill(good.urlFor('/four'))
    await form.getByRole('button', { name: 'Add webhook' }).click()
    await sFlash.filter({ hasText: 'WebhookLimitExceeded' }).waitFor()
    t.pass('a third webhook is refused: the limit of the API')
    await screenshot(t, p, FILE, 'webhooks')

    clicks.start()
    await clicks.click(sCard.getByText('Change URL or delete'))
    await clicks.click(sCard.getByRole('button', { name: 'Delete webhook' }))
    clicks.count() // the confirmation
    await sCard.waitFor({ state: 'detached' })
    t.same((await listed()).map((w) => w.url), [good.urlFor('/three')], 'deleted: the API lists only the other one')
    clicks.done(t, 'delete a webhook')

    // Ten calls so far in the app's window of the /2/webhooks family (six changes here, four API reads): the next is refused, from the console as from the API.
    await form.getByLabel('URL (https)').fill(good.urlFor('/five'))
    await form.getByRole('button', { name: 'Add webhook' }).click()
    await sFlash.filter({ hasText: 'Too many webhook changes' }).waitFor()
    t.equal((await bearerRequest('POST', `${rt.baseUrl}/2/webhooks`, s.bearer, { json: { url: good.urlFor('/five') } })).status, 429, 'the rate limit of /2/webhooks counts the console\'s changes')

    // Another app's webhook cannot be re-pointed, deleted or test-sent from this session.
    const csrf = (await p.locator('body').getAttribute('data-csrf')) ?? ''
    const other = `${base}/webhooks/${a.webhookId}`
    for (const [method, url] of [['post', `${other}/url`], ['delete', other], ['post', `${other}/test-event`]] as const) {
      const res = await p.request.fetch(url, { method, headers: { 'x-csrf-token': csrf }, form: { url: good.urlFor('/x') } })
      t.equal(res.status(), 404, `${method} ${url.slice(url.indexOf('/webhooks/'))} of another app: 404`)
    }
  })

  await t.test('3. every delivery findable', async (t) => {
    a.receiver.onPost = () => ({ status: 200, headers: { 'x-receiver-trace': 'trace-42' } })
    const needle = deliveryMessage({ appId: a.id.app.id, webhookId: a.webhookId, text: 'a Needle in the payload', createdAt: earlier, eventUuid: '1234567890123' })
    const others = [1, 2].map((i) => deliveryMessage({ appId: a.id.app.id, webhookId: a.webhookId, text: `haystack ${i}`, createdAt: earlier }))
    const needleId = String(needle.delivery_id)
    await publishDeliveries(rt, [needle, ...others])
    await eventually(async () => (await record(needleId))?.status === 'delivered', 10_000)
    const shown = async (): Promise<string[]> => attributes(page, '#deliveries tr[data-delivery]', 'data-delivery')
    const filters = page.locator('#filters')
    const search = async (field: string, value: string): Promise<string[]> => {
      await page.goto(`${base}/deliveries`)
      await filters.getByLabel(field).fill(value)
      await Promise.all([page.waitForURL(/\?/), filters.getByRole('button', { name: 'Filter' }).click()])
      return shown()
    }

    await page.goto(`${base}/`)
    clicks.start()
    await clicks.click(page.getByRole('link', { name: 'Deliveries' }))
    await filters.getByLabel('search').fill('needle')
    await Promise.all([page.waitForURL(/q=needle/), clicks.click(filters.getByRole('button', { name: 'Filter' }))])
    t.same(await shown(), [needleId], 'search by payload text (any case): the one delivery')
    clicks.done(t, 'find a delivery by payload text')
    t.same(await search('search', '1234567890123'), [needleId], 'search by event uuid')
    t.same(await search('search', needleId), [needleId], 'search by delivery id')
    t.equal((await search('event type', 'POST.CREATE')).includes(needleId), true, 'event type in any case')
    t.same(await search('response code', '5xx'), [], 'no delivery whose last answer is a 5xx now')
    t.equal((await search('response code', '200')).includes(needleId), true, 'response code 200 finds it')

    // The attempt's response headers.
    clicks.start()
    await page.goto(`${base}/deliveries?q=needle`)
    await Promise.all([page.waitForURL(/\/deliveries\/[^?]/), clicks.click(page.locator(`#deliveries tr[data-delivery="${needleId}"] a`))])
    await clicks.click(page.locator('#attempts .response-headers summary').first())
    t.match(await page.locator('#attempts .response-headers').first().innerText(), /x-receiver-trace\s+trace-42/, 'the answer\'s headers, per attempt')
    clicks.done(t, 'read an attempt\'s response headers')

    // Replay: the job is listed with its progress, and its sends show as replays.
    const statsBefore = ((await (await page.request.get(`${base}/stats?range=hour`)).json()) as { total: number }).total
    clicks.start()
    await page.goto(`${base}/deliveries`)
    const minute = (ms: number): string => new Date(ms).toISOString().slice(0, 16)
    const replayForm = page.locator(`form[hx-post$="/webhooks/${a.webhookId}/replay"]`)
    await replayForm.getByLabel('from (UTC)').fill(minute(Date.now() - 3_600_000))
    await replayForm.getByLabel('to (UTC)').fill(minute(Date.now()))
    await clicks.click(replayForm.getByRole('button', { name: 'Replay' }))
    await page.locator('.replay-job .replay[data-state="Complete"]').waitFor()
    clicks.done(t, 'replay a window')
    await page.reload()
    const job = page.locator(`[data-webhook-actions="${a.webhookId}"] .replay-jobs .replay`).first()
    t.equal(await job.getAttribute('data-state'), 'Complete', 'after a reload the replay job is still listed')
    const progress = (await job.locator('[data-progress]').getAttribute('data-progress')) ?? ''
    t.match(progress, /^([1-9]\d*)\/\1$/, `with its progress: every event of the window sent (${progress})`)
    await page.goto(`${base}/deliveries/${needleId}`)
    t.equal(await page.locator('#attempts tr[data-replay]').count(), 1, 'the delivery\'s attempts list the replayed send, marked')
    await screenshot(t, page, FILE, 'delivery-replayed')
    await page.goto(`${base}/tail`)
    await page.locator(`#tail tr[data-replay][data-delivery="${needleId}"]`).waitFor()
    t.match(await page.locator(`#tail tr[data-replay][data-delivery="${needleId}"]`).innerText(), /\(replay\)/, 'the tail shows the replayed send as a replay')
    const statsAfter = ((await (await page.request.get(`${base}/stats?range=hour`)).json()) as { total: number }).total
    t.ok(statsAfter >= statsBefore + 3, `the charts count the replayed sends (${statsBefore} → ${statsAfter})`)
  })

  t.same(pageErrors, [], 'no script error on any page')
  t.comment(`click counts: ${JSON.stringify(clicks.counts)}`)
})
