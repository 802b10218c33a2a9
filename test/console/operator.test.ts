import t from 'tap'
import { accountFeatures } from '../../services/common/ads/accounts'
import { TOPICS, type GroupOffsets } from '../../services/common/bus/types'
import type { DeliveryRecord } from '../../services/webhooks/delivery-log'
import { WebhookKeys } from '../../services/webhooks/keys'
import { deliveryMessage, publishDeliveries, registerWebhook } from '../support/fixtures/webhooks'
import { createIdentity, startTestRuntime } from '../support/runtime'
import { eventually } from '../support/util'
import { Browsers, CONSOLE_ENV, consoleLink, OPERATOR_TOKEN, screenshot, signInAsOperator, signInWithLink } from '../support/fixtures/console'

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

  // A consumer group with a known lag: it joins webhook.dead-letter and leaves before anything is
  // published there, so every dead letter below is one message behind on its partition.
  const probe = await rt.ctx.bus.subscribe({ groupId: 'console-lag-probe', topics: [TOPICS.webhookDeadLetter], handler: async () => undefined })
  await probe.close()

  // Three dead letters: the receiver refuses until the retries run out.
  a.receiver.onPost = () => ({ status: 503 })
  const deadLetters = ['dead letter', 'dead letter two', 'dead letter three'].map((text) => deliveryMessage({ appId: a.id.app.id, webhookId: a.webhookId, text }))
  const [deadId, ...restIds] = deadLetters.map((m) => String(m.delivery_id)) as [string, ...string[]]
  const statusOf = async (id: string): Promise<string | undefined> => (await rt.ctx.store.getJson<DeliveryRecord>(WebhookKeys.delivery(id)))?.status
  await publishDeliveries(rt, deadLetters)
  await eventually(async () => (await Promise.all([deadId, ...restIds].map(statusOf))).every((s) => s === 'failed'), 10_000)

  const { page } = await browsers.person(t)
  const pageErrors: string[] = []
  page.on('pageerror', (e) => pageErrors.push(e.message))
  await signInAsOperator(page, rt)
  const appRow = page.locator(`#apps tr[data-app="${a.id.app.id}"]`)
  t.match(await appRow.innerText(), /valid[\s\S]*\b3\b/, 'the app with its valid webhook and three failed deliveries')
  t.equal(await appRow.locator('td').nth(5).innerText(), '3', 'in the failed column')
  await screenshot(t, page, FILE, 'apps')

  // Dead letters: re-drive it once the receiver is back.
  await page.getByRole('link', { name: 'Dead letters' }).click()
  const row = page.locator(`tr[data-delivery="${deadId}"]`)
  t.match(await row.innerText(), /post\.create[\s\S]*503/, 'the dead letter with its last answer')
  t.match(await page.locator('#bus-dead-letters').innerText(), /bus\.dead-letter[\s\S]*not|Not listed[\s\S]*bus\.dead-letter/, 'the page says the bus\'s own dead letters are not listed, and where they are')
  await screenshot(t, page, FILE, 'dead-letters')
  a.receiver.onPost = () => ({ status: 200 })
  await row.getByRole('button', { name: 'Re-drive' }).click()
  await page.locator(`#status-${deadId} [data-status="pending"]`).waitFor()
  await eventually(async () => (await statusOf(deadId)) === 'delivered', 10_000)
  t.ok(a.receiver.accepted.some((p) => p.body.includes('"dead letter"')), 'the re-driven delivery reached the receiver')
  t.same(await Promise.all(restIds.map(statusOf)), ['failed', 'failed'], 'the other two are still dead letters')

  // Re-drive all: the webhook's remaining dead letters, at once.
  const accepted = a.receiver.accepted.length
  const section = page.locator(`section[data-webhook="${a.webhookId}"]`)
  await section.getByRole('button', { name: 'Re-drive all' }).click()
  await section.locator('.result [data-resent="2"]').waitFor()
  t.pass('"Re-drive all" answers that both were scheduled again')
  await eventually(async () => (await Promise.all(restIds.map(statusOf))).every((s) => s === 'delivered'), 10_000)
  const bodies = a.receiver.accepted.slice(accepted).map((p) => p.body)
  t.ok(['dead letter two', 'dead letter three'].every((text) => bodies.some((b) => b.includes(`"${text}"`))), 'both reached the receiver, which now answers 200')
  await page.reload()
  t.equal(await page.locator(`section[data-webhook="${a.webhookId}"]`).count(), 0, 'the webhook has no dead letter left')
  t.match(await page.locator('main').innerText(), /No dead letters/, 'the page says so')

  // Consumer lag: the groups of the running system, as `make lag` shows them.
  await page.getByRole('link', { name: 'Lag' }).click()
  await page.locator('#lag-chart[data-ready="true"]').waitFor()
  const lagJson = (await (await page.request.get(`${rt.baseUrl}/console/ops/lag.json`)).json()) as { groups: Array<{ group: string; total: number; rows: GroupOffsets[] }> }
  const adminLag = (await (await fetch(`${rt.baseUrl}/admin/bus/lag`, { headers: { authorization: `Bearer ${OPERATOR_TOKEN}` } })).json()) as { groups: Array<{ group: string }> }
  t.same(lagJson.groups.map((g) => g.group).sort(), [...new Set(adminLag.groups.map((g) => g.group))].sort(), 'the same groups as the operator API behind make lag')
  t.ok(await page.locator('[data-group="webhooks-delivery"]').count(), 'the webhooks delivery group is shown')
  // The figures of a group with a known lag: committed, end and lag per partition, as the operator API reports them.
  const probeCard = page.locator('[data-group="console-lag-probe"]')
  t.equal(await probeCard.locator('[data-total-lag]').getAttribute('data-total-lag'), '3', 'the probe group is 3 messages behind: the three dead letters')
  const shownRows = (await probeCard.locator('tbody tr').allInnerTexts()).map((line) => line.split('\t').map((cell) => cell.trim()))
  const probeLag = (await (await fetch(`${rt.baseUrl}/admin/bus/lag?group=console-lag-probe`, { headers: { authorization: `Bearer ${OPERATOR_TOKEN}` } })).json()) as { groups: GroupOffsets[] }
  t.ok(probeLag.groups.length > 0, 'the operator API reports the probe group')
  t.equal(probeLag.groups.reduce((n, g) => n + g.lag, 0), 3, 'with a lag of 3 in all')
  t.same(shownRows, probeLag.groups.map((g) => [g.topic, String(g.partition), g.committed < 0 ? '-' : String(g.committed), String(g.end), String(g.lag)]),
    'every partition row (topic, partition, committed, end, lag) is the operator API\'s')
  const probeJson = lagJson.groups.find((g) => g.group === 'console-lag-probe') as { total: number; rows: GroupOffsets[] } | undefined
  t.same(probeJson?.rows, probeLag.groups, 'and so are the console\'s lag.json figures')
  await screenshot(t, page, FILE, 'lag')

  // Health: every service ready (the embedded process serves them all).
  await page.getByRole('link', { name: 'Health' }).click()
  for (const service of ['gateway', 'webhooks', 'activity', 'stream', 'account-history']) {
    t.equal(await page.locator(`[data-service="${service}"] [data-ready]`).getAttribute('data-ready'), '1', `${service} ready`)
  }
  await screenshot(t, page, FILE, 'health')

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
  await screenshot(t, page, FILE, 'account')
  await page.locator('tr[data-feature="ACCOUNT_HISTORY_ACCESS"]').getByRole('button', { name: 'Revoke' }).click()
  await page.locator('tr[data-feature="ACCOUNT_HISTORY_ACCESS"][data-granted="false"]').waitFor()
  t.notOk((await accountFeatures(rt.ctx, accountId)).has('ACCOUNT_HISTORY_ACCESS'), 'and revoked')
  await page.getByRole('link', { name: /Account history/ }).click()
  await page.locator('#history').waitFor()
  t.equal(await page.locator('#history button, #history form').count(), 0, 'the history page has no action')
  await screenshot(t, page, FILE, 'history')
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
