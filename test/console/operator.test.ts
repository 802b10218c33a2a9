import t from 'tap'
import { accountFeatures } from '../../services/common/ads/accounts'
import type { DeliveryRecord } from '../../services/webhooks/delivery-log'
import { WebhookKeys } from '../../services/webhooks/keys'
import { createIdentity, startTestRuntime } from '../helper'
import { deliveryMessage, eventually, publishDeliveries, registerWebhook } from '../webhooks/support'
import { Browsers, CONSOLE_ENV, consoleLink, OPERATOR_TOKEN, screenshot, signInAsOperator, signInWithLink } from './support'

/**
 * The operator's console in chromium: signs in with the operator token,
 * sees every app with its webhooks and delivery health, re-drives a dead
 * letter, reads consumer lag and each service's readiness, grants and
 * revokes an ads account's feature and reads its history; signs out. An app
 * developer is refused the operator pages.
 */

const FILE = 'operator'

t.test('an operator watches and repairs the system from the console', async (t) => {
  const browsers = new Browsers(t)
  const rt = await startTestRuntime(t, { env: CONSOLE_ENV })
  const a = await registerWebhook(t, rt)

  // A dead letter: the receiver refuses until the retries run out.
  a.receiver.onPost = () => ({ status: 503 })
  const dead = deliveryMessage({ appId: a.id.app.id, webhookId: a.webhookId, text: 'dead letter' })
  const deadId = String(dead.delivery_id)
  await publishDeliveries(rt, [dead])
  await eventually(async () => (await rt.ctx.store.getJson<DeliveryRecord>(WebhookKeys.delivery(deadId)))?.status === 'failed', 10_000)

  const { page } = await browsers.person(t)
  const pageErrors: string[] = []
  page.on('pageerror', (e) => pageErrors.push(e.message))
  await signInAsOperator(page, rt)
  const appRow = page.locator(`#apps tr[data-app="${a.id.app.id}"]`)
  t.match(await appRow.innerText(), /valid[\s\S]*\b1\b/, 'the app with its valid webhook and one failed delivery')
  await screenshot(page, FILE, 'apps')

  // Dead letters: re-drive it once the receiver is back.
  await page.getByRole('link', { name: 'Dead letters' }).click()
  const row = page.locator(`tr[data-delivery="${deadId}"]`)
  t.match(await row.innerText(), /post\.create[\s\S]*503/, 'the dead letter with its last answer')
  await screenshot(page, FILE, 'dead-letters')
  a.receiver.onPost = () => ({ status: 200 })
  await row.getByRole('button', { name: 'Re-drive' }).click()
  await page.locator(`#status-${deadId} [data-status="pending"]`).waitFor()
  await eventually(async () => (await rt.ctx.store.getJson<DeliveryRecord>(WebhookKeys.delivery(deadId)))?.status === 'delivered', 10_000)
  t.ok(a.receiver.accepted.some((p) => p.body.includes('dead letter')), 'the re-driven delivery reached the receiver')

  // Consumer lag: the groups of the running system, as `make lag` shows them.
  await page.getByRole('link', { name: 'Lag' }).click()
  await page.locator('#lag-chart[data-ready="true"]').waitFor()
  const lagJson = (await (await page.request.get(`${rt.baseUrl}/console/ops/lag.json`)).json()) as { groups: Array<{ group: string; total: number }> }
  const adminLag = (await (await fetch(`${rt.baseUrl}/admin/bus/lag`, { headers: { authorization: `Bearer ${OPERATOR_TOKEN}` } })).json()) as { groups: Array<{ group: string }> }
  t.same(lagJson.groups.map((g) => g.group).sort(), [...new Set(adminLag.groups.map((g) => g.group))].sort(), 'the same groups as the operator API behind make lag')
  t.ok(await page.locator('[data-group="webhooks-delivery"]').count(), 'the webhooks delivery group is shown')
  await screenshot(page, FILE, 'lag')

  // Health: every service ready (the embedded process serves them all).
  await page.getByRole('link', { name: 'Health' }).click()
  for (const service of ['gateway', 'webhooks', 'activity', 'stream', 'account-history']) {
    t.equal(await page.locator(`[data-service="${service}"] [data-ready]`).getAttribute('data-ready'), '1', `${service} ready`)
  }
  await screenshot(page, FILE, 'health')

  // Ads accounts: grant and revoke a feature; the history is read-only.
  const owner = await createIdentity(rt.ctx.store)
  const opened = await fetch(`${rt.baseUrl}/admin/ads/accounts`, {
    method: 'POST',
    headers: { authorization: `Bearer ${OPERATOR_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ user_id: owner.user.id, name: 'Console test account' })
  })
  const accountId = ((await opened.json()) as { data: { account: { id: string } } }).data.account.id
  await page.getByRole('link', { name: 'Ads accounts' }).click()
  await page.locator(`#accounts tr[data-account="${accountId}"]`).getByRole('link', { name: accountId }).click()
  const feature = page.locator('tr[data-feature="ACCOUNT_HISTORY_ACCESS"]')
  await feature.getByRole('button', { name: 'Grant' }).click()
  await page.locator('tr[data-feature="ACCOUNT_HISTORY_ACCESS"][data-granted="true"]').waitFor()
  t.ok((await accountFeatures(rt.ctx, accountId)).has('ACCOUNT_HISTORY_ACCESS'), 'the feature is granted')
  await screenshot(page, FILE, 'account')
  await page.locator('tr[data-feature="ACCOUNT_HISTORY_ACCESS"]').getByRole('button', { name: 'Revoke' }).click()
  await page.locator('tr[data-feature="ACCOUNT_HISTORY_ACCESS"][data-granted="false"]').waitFor()
  t.notOk((await accountFeatures(rt.ctx, accountId)).has('ACCOUNT_HISTORY_ACCESS'), 'and revoked')
  await page.getByRole('link', { name: /Account history/ }).click()
  await page.locator('#history').waitFor()
  t.equal(await page.locator('#history button, #history form').count(), 0, 'the history page has no action')
  await screenshot(page, FILE, 'history')
  t.same(pageErrors, [], 'no script error on any page')

  // A developer is refused the operator pages; sign-out ends the operator session.
  const dev = await browsers.person(t)
  await signInWithLink(dev.page, await consoleLink(rt, a.id.app.id))
  t.equal((await dev.page.goto(`${rt.baseUrl}/console/ops/lag`))?.status(), 403, 'a developer cannot see lag')
  t.equal((await dev.page.goto(`${rt.baseUrl}/console/webhooks/dead-letters`))?.status(), 403, 'nor dead letters')
  await page.getByRole('button', { name: 'Sign out' }).click()
  await page.waitForURL(/\/console\/login$/)
  await page.goto(`${rt.baseUrl}/console/ops/health`)
  t.match(page.url(), /\/console\/login$/, 'after sign-out the console asks to sign in again')
})
