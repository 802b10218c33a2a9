import { randomUUID } from 'node:crypto'
import t, { type Test } from 'tap'
import { MemoryBus } from '../../services/common/bus/memory'
import { TOPICS } from '../../services/common/bus/types'
import { createLogger } from '../../services/common/logger'
import type { Runtime } from '../../services/common/runtime'
import { queryEntries } from '../../services/account-history/history'
import { adsError } from '../support/fixtures/campaigns'
import { libraryMedia, png } from '../support/fixtures/media'
import { oauth1Request } from '../support/http'
import { startTestRuntime } from '../support/runtime'
import { redisStore, startRedis } from '../support/infra'
import { createAdsIdentity } from '../support/fixtures/ads'
import { type Advertiser, advertiser, type HistoryEntryBody, historyOf, sharedBus, startGateway, startHistory, window } from '../support/fixtures/account-history'

/**
 * The order of an entity's history is the order its changes were made (the
 * topic position), whatever the clocks of the gateways that made them say;
 * cursors are keyset cursors, so entries recorded while a client pages do
 * not shift or repeat its pages; concurrent updates chain their diffs; and
 * snapshots are the public rendering of the entity.
 */

/** A change as a gateway whose clock is `behindMs` late would publish it. */
function skewedChange(a: Advertiser, campaignId: string, base: HistoryEntryBody, name: string, previous: string, behindMs: number): Record<string, unknown> {
  return {
    change_id: randomUUID(),
    account_id: a.account.id,
    entity_type: 'CAMPAIGN',
    entity_id: campaignId,
    change_type: 'UPDATE',
    changed_at: new Date(Date.now() - behindMs).toISOString(),
    changed_by: { user_id: a.id.user.id, platform: 'API' },
    changes: { name: { old: previous, new: name } },
    entity_data: { ...base.entity_data, name }
  }
}

async function page(t: Test, a: Advertiser, rt: Runtime, query: Record<string, string>): Promise<{ names: unknown[]; next: string | null }> {
  const res = await a.historyRaw(rt, query)
  t.equal(res.status, 200, res.text.slice(0, 200))
  const body = res.json<{ data: HistoryEntryBody[]; next_cursor: string | null }>()
  return { names: body.data.map((e) => e.entity_data.name), next: body.next_cursor }
}

t.test('clock skew between gateways does not reorder an entity history; cursors are keyset cursors', async (t) => {
  const rt = await startTestRuntime(t)
  const a = await advertiser(rt)
  const campaign = await a.ads('POST', '/campaigns', { funding_instrument_id: a.fi.id, name: 's0' })
  const cid = campaign.id as string
  const [first] = (await historyOf(a, rt, 'CAMPAIGN', cid, 1)) as [HistoryEntryBody]
  // Each later change comes from a gateway further behind: its change time goes backwards.
  for (let i = 1; i <= 3; i++) await rt.ctx.bus.publish(TOPICS.adsEntityChanges, a.account.id, skewedChange(a, cid, first, `s${i}`, `s${i - 1}`, i * 5 * 60_000))
  const entries = await historyOf(a, rt, 'CAMPAIGN', cid, 4)
  t.same(entries.map((e) => e.entity_data.name), ['s0', 's1', 's2', 's3'], 'the order they were made in')
  const [, t1, t2, t3] = entries.map((e) => Date.parse(e.change_time)) as [number, number, number, number]
  t.ok(t1 > t2 && t2 > t3, 'while the displayed change times (the gateways\' clocks) go backwards')

  const base = { entity_type: 'CAMPAIGN', entity_id: cid, ...window(), count: '2' }
  const page1 = await page(t, a, rt, base)
  t.same(page1.names, ['s0', 's1'])
  t.ok(page1.next, 'a cursor to the next page')
  // A change recorded while the client pages, stamped earlier than every other one.
  await rt.ctx.bus.publish(TOPICS.adsEntityChanges, a.account.id, skewedChange(a, cid, first, 's4', 's3', 30 * 60_000))
  await historyOf(a, rt, 'CAMPAIGN', cid, 5)
  const page2 = await page(t, a, rt, { ...base, cursor: page1.next as string })
  t.same(page2.names, ['s2', 's3'], 'the next page continues where the first ended: nothing repeated, nothing skipped')
  const page3 = await page(t, a, rt, { ...base, cursor: page2.next as string })
  t.same(page3.names, ['s4'], 'the late change comes last')
  t.equal(page3.next, null)

  const forged = Buffer.from(JSON.stringify({ v: 1, p: -1, o: '1' })).toString('base64url')
  t.match(adsError(await a.historyRaw(rt, { ...base, cursor: forged })), { status: 400, code: 'INVALID_PARAMETER', parameter: 'cursor' })
  const notAnOffset = Buffer.from(JSON.stringify({ v: 1, p: 0, o: 'x' })).toString('base64url')
  t.match(adsError(await a.historyRaw(rt, { ...base, cursor: notAnOffset })), { status: 400, code: 'INVALID_PARAMETER', parameter: 'cursor' })
})

for (const mode of ['memory', 'redis'] as const) {
  t.test(`${mode}: concurrent PUTs of one campaign: none lost, every diff starts from the previous snapshot`, async (t) => {
    let gateway: Runtime
    let history: Runtime
    if (mode === 'memory') {
      gateway = history = await startTestRuntime(t)
    } else {
      const bus = new MemoryBus(6, createLogger('silent', 'bus'))
      t.teardown(() => bus.close())
      const store = await redisStore(t, await startRedis(t))
      gateway = await startGateway(t, sharedBus(bus), store)
      history = await startHistory(t, sharedBus(bus), store)
    }
    const a = await advertiser(gateway)
    const campaign = await a.ads('POST', '/campaigns', { funding_instrument_id: a.fi.id, name: 'p0' })
    const cid = campaign.id as string
    const n = 12
    await Promise.all(Array.from({ length: n }, (_, i) => a.ads('PUT', `/campaigns/${cid}`, { name: `p${i + 1}` })))
    const entries = await historyOf(a, history, 'CAMPAIGN', cid, n + 1)
    t.equal(entries.length, n + 1, 'one entry per PUT')
    for (let i = 1; i < entries.length; i++) {
      const e = entries[i] as HistoryEntryBody
      t.same(e.changes.name, { old: (entries[i - 1] as HistoryEntryBody).entity_data.name, new: e.entity_data.name }, `change ${i} starts from change ${i - 1}`)
    }
    t.same(new Set(entries.slice(1).map((e) => e.entity_data.name)), new Set(Array.from({ length: n }, (_, i) => `p${i + 1}`)), 'every PUT is there')
    const read = await a.ads('GET', `/campaigns/${cid}`)
    t.equal(read.name, entries[n]?.entity_data.name, 'the last change is the stored state')
  })
}

const INTERNAL = ['file', 'poster_file', 'owner_user_id', 'width', 'height']

t.test('history snapshots are the public rendering of the entity, without internal fields', async (t) => {
  const rt = await startTestRuntime(t)
  const { id, account } = await createAdsIdentity(rt.ctx)
  const ads = `${rt.baseUrl}/12/accounts/${account.id}`
  const key = await libraryMedia(rt.baseUrl, id, account, png(800, 418))
  t.equal((await oauth1Request('PUT', `${ads}/media_library/${key}`, id, { query: { name: 'renamed' } })).status, 200)
  const made = await oauth1Request('POST', `${ads}/cards`, id, {
    json: { name: 'snapshot card', components: [{ type: 'MEDIA', media_key: key }, { type: 'DETAILS', title: 'Visit', destination: { type: 'WEBSITE', url: 'https://example.com/' } }] }
  })
  t.equal(made.status, 200, made.text.slice(0, 200))
  const cardId = made.json<{ data: { id: string } }>().data.id

  const entriesOf = async (entityType: string, entityId: string, n: number) => {
    for (let i = 0; i < 200; i++) {
      const found = await queryEntries(rt.ctx.store, { accountId: account.id, entityType, entityId, fromMs: 0, toMs: Date.now() + 3_600_000 })
      if (found.length >= n) return found
      await new Promise((r) => setTimeout(r, 25))
    }
    throw new Error(`${entityType} ${entityId}: fewer than ${n} history entries`)
  }

  const library = await entriesOf('MEDIA_LIBRARY', key, 2)
  const libraryRead = (await oauth1Request('GET', `${ads}/media_library/${key}`, id)).json<{ data: Record<string, unknown> }>().data
  for (const e of library) {
    for (const field of INTERNAL) {
      t.notOk(field in e.entity_data, `${e.change_type}: no ${field} in the snapshot`)
      t.notOk(field in e.changes, `${e.change_type}: no ${field} in the diff`)
    }
  }
  const last = library[library.length - 1]?.entity_data ?? {}
  const withoutUrls = (o: Record<string, unknown>) => Object.fromEntries(Object.entries(o).filter(([k]) => !k.endsWith('_url')))
  t.same(withoutUrls(last), withoutUrls(libraryRead), 'the snapshot is what the read returns')
  t.equal(new URL(String(last.media_url)).pathname, new URL(String(libraryRead.media_url)).pathname, 'the media URL names the same file')
  t.same(library[library.length - 1]?.changes, { name: { old: null, new: 'renamed' } })

  const [card] = await entriesOf('CARD', cardId, 1)
  const cardRead = (await oauth1Request('GET', `${ads}/cards/${cardId}`, id)).json<{ data: Array<Record<string, unknown>> }>().data
  t.same(card?.entity_data, cardRead[0], 'the card snapshot is what the read returns')
})
