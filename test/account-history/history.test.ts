import path from 'node:path'
import t from 'tap'
import { MemoryBus } from '../../services/common/bus/memory'
import { TOPICS } from '../../services/common/bus/types'
import { createLogger } from '../../services/common/logger'
import { MemoryStore } from '../../services/common/store/memory'
import { grantAccountAccess } from '../../services/gateway/ads/accounts'
import { HISTORY_GROUP } from '../../services/account-history/history-consumer'
import { adsError } from '../support/fixtures/campaigns'
import { oauth1Request } from '../support/http'
import { createIdentity, startTestRuntime } from '../support/runtime'
import { eventually, tempDir } from '../support/util'
import {
  type HistoryEntryBody,
  advertiser,
  campaignAndLineItemLifecycle,
  checkLifecycleHistory,
  historyOf,
  sharedBus,
  sharedStore,
  startGateway,
  startHistory,
  window
} from '../support/fixtures/account-history'

/**
 * Account history in embedded mode: the whole runtime (every service, one
 * process), then gateway and history as separate runtimes on one memory
 * bus and store so the history service can restart mid-stream.
 */

t.test('embedded runtime: changes to a campaign and a line item appear with diff and snapshot', async (t) => {
  const rt = await startTestRuntime(t)
  const a = await advertiser(rt)
  const ids = await campaignAndLineItemLifecycle(a)
  await checkLifecycleHistory(t, a, rt, ids)
})

t.test('reads are validated, paginated, filtered and allowlisted', async (t) => {
  const rt = await startTestRuntime(t)
  const a = await advertiser(rt)
  const campaign = await a.ads('POST', '/campaigns', { funding_instrument_id: a.fi.id, name: 'c0' })
  const cid = campaign.id as string
  for (let i = 1; i <= 4; i++) await a.ads('PUT', `/campaigns/${cid}`, { name: `c${i}` })
  // A second user with access to the account makes one change.
  const helper = await createIdentity(rt.ctx.store)
  await grantAccountAccess(rt.ctx, a.account.id, helper.user.id)
  const byHelper = await oauth1Request('PUT', `${rt.baseUrl}/12/accounts/${a.account.id}/campaigns/${cid}`, helper, { query: { name: 'by helper' } })
  t.equal(byHelper.status, 200)
  const all = await historyOf(a, rt, 'CAMPAIGN', cid, 6)
  t.same(all.map((e) => e.entity_data.name), ['c0', 'c1', 'c2', 'c3', 'c4', 'by helper'])

  // count + cursor walk every entry once, in order.
  const base = { entity_type: 'CAMPAIGN', entity_id: cid, ...window() }
  const seen: string[] = []
  let cursor: string | undefined
  for (let i = 0; i < 10; i++) {
    const res = await a.historyRaw(rt, { ...base, count: '4', ...(cursor ? { cursor } : {}) })
    t.equal(res.status, 200)
    const body = res.json<{ data: Array<{ entity_data: { name: string } }>; next_cursor: string | null; data_type: string }>()
    t.equal(body.data_type, 'account_history')
    seen.push(...body.data.map((e) => e.entity_data.name))
    if (!body.next_cursor) break
    cursor = body.next_cursor
  }
  t.same(seen, ['c0', 'c1', 'c2', 'c3', 'c4', 'by helper'])

  const mine = await a.history(rt, 'CAMPAIGN', cid, { user_id: a.id.user.id })
  t.equal(mine.length, 5)
  const theirs = await a.history(rt, 'CAMPAIGN', cid, { user_id: helper.user.id })
  t.same(theirs.map((e) => e.change_by.user_id), [helper.user.id])
  t.same(await a.history(rt, 'CAMPAIGN', cid, { start_time: '2020-01-01T00:00:00Z', end_time: '2020-01-02T00:00:00Z' }), [], 'nothing outside the window')
  t.same(await a.history(rt, 'LINE_ITEM', cid), [], 'entity type is part of the key')
  t.same(await a.history(rt, 'CAMPAIGN', 'other'), [])

  const bad = async (query: Record<string, string>, code: string, parameter: string) => {
    const e = adsError(await a.historyRaw(rt, query))
    t.match(e, { status: 400, code, parameter }, `${parameter}: ${e.message}`)
  }
  await bad({ entity_id: cid, ...window() }, 'MISSING_PARAMETER', 'entity_type')
  await bad({ ...base, entity_type: 'CARD' }, 'INVALID_PARAMETER', 'entity_type')
  await bad({ entity_type: 'CAMPAIGN', ...window() }, 'MISSING_PARAMETER', 'entity_id')
  await bad({ ...base, start_time: '' }, 'MISSING_PARAMETER', 'start_time')
  await bad({ ...base, end_time: '' }, 'MISSING_PARAMETER', 'end_time')
  await bad({ ...base, start_time: '2026-01-01T10:30:00Z' }, 'INVALID_PARAMETER', 'start_time')
  await bad({ ...base, end_time: '2026-01-01T10:00:01Z' }, 'INVALID_PARAMETER', 'end_time')
  await bad({ ...base, start_time: 'yesterday' }, 'INVALID_PARAMETER', 'start_time')
  await bad({ ...base, start_time: base.end_time }, 'INVALID_PARAMETER', 'end_time')
  await bad({ ...base, count: '0' }, 'INVALID_PARAMETER', 'count')
  await bad({ ...base, count: '1001' }, 'INVALID_PARAMETER', 'count')
  await bad({ ...base, user_id: 'me' }, 'INVALID_PARAMETER', 'user_id')
  await bad({ ...base, cursor: 'garbage' }, 'INVALID_PARAMETER', 'cursor')
  t.equal((await a.historyRaw(rt, { ...base, count: '1000' })).status, 200)
  const onSandbox = await oauth1Request('GET', `${rt.sandboxUrl as string}/12/accounts/${a.account.id}/account_history`, a.id, { query: base })
  // The sandbox is a world of its own: a production account's history is not there (test/ads/sandbox.test.ts).
  t.match(adsError(onSandbox), { status: 404, code: 'NOT_FOUND', parameter: 'account_id' }, 'the sandbox host does not serve a production account')

  // Beta: an account without the allowlist feature is refused; so is another user.
  const plain = await advertiser(rt, { allowlisted: false })
  const refused = adsError(await plain.historyRaw(rt, base))
  t.match(refused, { status: 403, code: 'FEATURE_NOT_ENABLED' })
  const stranger = await createIdentity(rt.ctx.store)
  const denied = await oauth1Request('GET', `${rt.baseUrl}/12/accounts/${a.account.id}/account_history`, stranger, { query: base })
  t.match(adsError(denied), { status: 403, code: 'ACCOUNT_NOT_FOUND', parameter: 'account_id' })
  const anonymous = await fetch(`${rt.baseUrl}/12/accounts/${a.account.id}/account_history`)
  t.equal(anonymous.status, 401)
})

t.test('restarting the history service mid-stream loses and duplicates nothing', async (t) => {
  const dir = tempDir(t, 'gw-history-')
  const bus = new MemoryBus(6, createLogger('silent', 'bus'))
  const store = await MemoryStore.open(path.join(dir, 'state'))
  t.teardown(async () => {
    await bus.close()
    await store.close()
  })
  const gateway = await startGateway(t, sharedBus(bus), sharedStore(store))
  let history = await startHistory(t, sharedBus(bus), sharedStore(store))
  const a = await advertiser(gateway)
  const campaign = await a.ads('POST', '/campaigns', { funding_instrument_id: a.fi.id, name: 'n0' })
  const cid = campaign.id as string
  await historyOf(a, history, 'CAMPAIGN', cid, 1)

  // Updates keep flowing while the history service stops and a new one starts.
  const total = 40
  const writer = (async () => {
    for (let i = 1; i <= total; i++) await a.ads('PUT', `/campaigns/${cid}`, { name: `n${i}` })
  })()
  await eventually(async () => (await a.history(history, 'CAMPAIGN', cid)).length >= 5, 10_000, 10)
  await history.close()
  history = await startHistory(t, sharedBus(bus), sharedStore(store))
  await writer

  const entries = await historyOf(a, history, 'CAMPAIGN', cid, total + 1)
  t.equal(entries.length, total + 1, 'one entry per change')
  t.same(entries.map((e) => e.entity_data.name), Array.from({ length: total + 1 }, (_, i) => `n${i}`), 'in the order they were made')
  for (let i = 1; i < entries.length; i++) {
    t.same(entries[i]?.changes, { name: { old: `n${i - 1}`, new: `n${i}` } })
  }
  await eventually(() => bus.lag(HISTORY_GROUP) === 0, 5000)
  const recorded = await history.ctx.metrics.getSingleMetric('account_history_entries_recorded_total')?.get()
  const afterRestart = (recorded?.values ?? []).reduce((n, v) => n + v.value, 0)
  t.ok(afterRestart > 0 && afterRestart <= total + 1 - 5, `the new instance resumed from the committed position (${afterRestart} recorded after the restart)`)

  // A change delivered twice (a producer retry, a redelivery) is recorded once.
  const last = entries[entries.length - 1] as HistoryEntryBody
  const change = {
    change_id: '00000000-0000-4000-8000-000000000001',
    account_id: a.account.id,
    entity_type: 'CAMPAIGN',
    entity_id: cid,
    change_type: 'UPDATE',
    changed_at: new Date().toISOString(),
    changed_by: last.change_by,
    changes: { purchase_order_number: { old: null, new: 'PO-9' } },
    entity_data: { ...last.entity_data, purchase_order_number: 'PO-9' }
  }
  await bus.publish(TOPICS.adsEntityChanges, a.account.id, change)
  await bus.publish(TOPICS.adsEntityChanges, a.account.id, change)
  await eventually(() => bus.lag(HISTORY_GROUP) === 0, 5000)
  const final = await a.history(history, 'CAMPAIGN', cid)
  t.equal(final.length, total + 2, 'the duplicate is stored once')
  t.same(final[final.length - 1]?.changes, change.changes)
})
