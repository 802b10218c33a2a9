import t from 'tap'
import { Webhook as StandardVerifier } from 'standardwebhooks'
import { deliveryMessage, publishDeliveries, registerWebhook } from '../support/fixtures/webhooks'
import { bearerRequest } from '../support/http'
import { type ReceivedPost, startReceiver } from '../support/receivers'
import { createIdentity, startTestRuntime } from '../support/runtime'
import { eventually } from '../support/util'
import { Browsers, CONSOLE_ENV, consoleLink, csrfOf, screenshot, sidewaysOverflow, signInWithLink } from '../support/fixtures/console'

/**
 * Standard Webhooks signing from the webhook page in chromium: a developer
 * turns it on and copies the secret shown once, which verifies the next
 * delivery with the `standardwebhooks` library; a reload no longer shows
 * it; a rotation shows the new one, and during its overlap deliveries
 * verify with both; turned off, deliveries carry no webhook-* header. A
 * webhook added with the form's Standard Webhooks box signs from the start.
 */

const FILE = 'standard-webhooks'

function verifies(secret: string, p: ReceivedPost): boolean {
  const headers: Record<string, string> = {}
  for (const name of ['webhook-id', 'webhook-timestamp', 'webhook-signature']) {
    const v = p.headers[name]
    if (typeof v === 'string') headers[name] = v
  }
  try {
    new StandardVerifier(secret).verify(p.body, headers)
    return true
  } catch {
    return false
  }
}

t.test('a developer turns Standard Webhooks on, copies the secret, rotates it and turns it off', async (t) => {
  const browsers = new Browsers(t)
  const rt = await startTestRuntime(t, { env: CONSOLE_ENV })
  const a = await registerWebhook(t, rt)
  const b = await registerWebhook(t, rt)
  const base = `${rt.baseUrl}/console/webhooks/apps/${a.id.app.id}`
  let sent = 0
  const deliver = async (): Promise<ReceivedPost> => {
    const before = a.receiver.posts.length
    await publishDeliveries(rt, [deliveryMessage({ appId: a.id.app.id, webhookId: a.webhookId, text: `console ${++sent}` })])
    await eventually(() => a.receiver.posts.length === before + 1, 10_000)
    return a.receiver.posts[before] as ReceivedPost
  }

  const { page } = await browsers.person(t)
  const pageErrors: string[] = []
  page.on('pageerror', (e) => pageErrors.push(e.message))
  page.on('dialog', (d) => void d.accept())
  await signInWithLink(page, await consoleLink(rt, a.id.app.id))
  const card = page.locator(`[data-webhook="${a.webhookId}"]`)
  const signing = card.locator('[data-standard-webhooks]')
  t.equal(await signing.getAttribute('data-standard-webhooks'), 'off', 'off until turned on')

  await card.getByRole('button', { name: 'Turn on' }).click()
  await card.locator('[data-standard-webhooks="on"] [data-secret]').waitFor()
  const s1 = (await card.locator('[data-secret]').innerText()).trim()
  t.match(s1, /^whsec_[A-Za-z0-9+/]{43}=$/, 'the secret is shown')
  await screenshot(t, page, FILE, 'secret-shown')
  const first = await deliver()
  t.ok(verifies(s1, first), 'the next delivery verifies with the copied secret')
  t.ok(first.signatureValid, "and with the platform's header")
  const listed = await bearerRequest('GET', `${rt.baseUrl}/2/webhooks`, a.id.bearer)
  t.match(listed.json(), { data: [{ id: a.webhookId, standard_webhooks: { enabled: true } }] }, 'the API sees it on')

  await page.goto(`${base}/deliveries/${String(first.headers['webhook-id'])}`)
  t.match(await page.locator('#request-headers').innerText(), new RegExp(`webhook-id\\s+${String(first.headers['webhook-id'])}[\\s\\S]*webhook-signature\\s+v1,`), 'the delivery page lists the Standard Webhooks headers')
  t.notOk((await page.content()).includes(s1.slice(6)), 'without the secret')

  await page.goto(`${base}/`)
  t.equal(await signing.getAttribute('data-standard-webhooks'), 'on', 'still on when the page is opened again')
  t.equal(await card.locator('[data-secret]').count(), 0, 'the secret is not shown again')
  t.notOk((await page.content()).includes(s1.slice(6)), 'nor anywhere in the page')

  await card.getByRole('button', { name: 'Rotate secret' }).click()
  await card.locator('[data-overlap]').waitFor()
  const s2 = (await card.locator('[data-secret]').innerText()).trim()
  t.ok(s2.startsWith('whsec_') && s2 !== s1, 'rotating shows a new secret')
  t.match(await card.locator('[data-overlap]').innerText(), /previous secret is also signed with until \d{4}-/, 'and until when the previous one is still signed with')
  const during = await deliver()
  t.ok(verifies(s2, during) && verifies(s1, during), 'during the overlap a delivery verifies with either secret')

  await card.getByRole('button', { name: 'Turn off' }).click()
  await card.locator('[data-standard-webhooks="off"]').waitFor()
  const plain = await deliver()
  t.same(Object.keys(plain.headers).filter((h) => h.startsWith('webhook-')), [], 'turned off: no webhook-* header')
  t.same(pageErrors, [], 'no script error')

  // Phone-sized: the secret wraps instead of widening the page.
  const phone = await browsers.person(t, { mobile: true })
  await signInWithLink(phone.page, await consoleLink(rt, a.id.app.id))
  await phone.page.locator(`[data-webhook="${a.webhookId}"]`).getByRole('button', { name: 'Turn on' }).click()
  await phone.page.locator('[data-secret]').waitFor()
  const { overflow, culprits } = await sidewaysOverflow(phone.page)
  t.ok(overflow <= 1, `phone: no sideways scrolling with the secret shown (${overflow}px ${culprits.join(', ')})`)
  await screenshot(t, phone.page, FILE, 'phone-secret-shown')

  // Added from the console with the box checked: registered signing, the secret shown once, the first delivery verifies.
  const c = await createIdentity(rt.ctx.store)
  const cReceiver = await startReceiver(t, c.app.consumer_secret, '/signed-from-the-start')
  const adder = await browsers.person(t)
  await signInWithLink(adder.page, await consoleLink(rt, c.app.id))
  const form = adder.page.locator('#new-webhook')
  await form.getByLabel('URL (https)').fill(cReceiver.url)
  await form.getByLabel('also sign with Standard Webhooks').check()
  await form.getByRole('button', { name: 'Add webhook' }).click()
  await adder.page.locator('[data-standard-webhooks="on"] [data-secret]').waitFor()
  const s3 = (await adder.page.locator('[data-secret]').innerText()).trim()
  t.match(s3, /^whsec_[A-Za-z0-9+/]{43}=$/, 'added with the box checked: the secret is shown')
  const cListed = (await bearerRequest('GET', `${rt.baseUrl}/2/webhooks`, c.bearer)).json<{ data: Array<{ id: string; standard_webhooks?: { enabled: boolean } }> }>().data
  t.match(cListed, [{ standard_webhooks: { enabled: true } }], 'the API sees it signing')
  const cId = cListed[0]?.id ?? ''
  await publishDeliveries(rt, [deliveryMessage({ appId: c.app.id, webhookId: cId, text: 'signed from the start' })])
  await eventually(() => cReceiver.posts.length === 1, 10_000)
  t.ok(verifies(s3, cReceiver.posts[0] as ReceivedPost), 'its first delivery verifies with the secret shown')
  await adder.page.reload()
  t.equal(await adder.page.locator('[data-secret]').count(), 0, 'the secret is not shown after a reload')

  // Another app's developer cannot act on it.
  const other = await browsers.person(t)
  await signInWithLink(other.page, await consoleLink(rt, b.id.app.id))
  const csrf = await csrfOf(other.page)
  for (const action of ['enable', 'rotate', 'disable']) {
    const res = await other.page.request.post(`${base}/webhooks/${a.webhookId}/standard-webhooks/${action}`, { headers: { 'x-csrf-token': csrf } })
    t.equal(res.status(), 404, `${action} on another app's webhook is refused`)
  }
})
