import t from 'tap'
import { adsFixture, createCampaign, createLineItem, expectError } from '../support/fixtures/campaigns'
import { libraryMedia, png } from '../support/fixtures/media'

/**
 * Parameters as real ads clients spell them: booleans in any case
 * and as 1/0, and whole-object updates (every loaded property sent back by
 * an SDK's save()) where repeating a stored value is no change and a real
 * change to a read-only field is a clear error.
 */

t.test('booleans in any case, and 1/0', async (t) => {
  const f = await adsFixture(t)
  const live = await createCampaign(f, { name: 'live' })
  const gone = await createCampaign(f, { name: 'gone' })
  t.equal((await f.call('DELETE', `/campaigns/${gone.id}`)).status, 200)
  for (const [yes, no] of [['true', 'false'], ['True', 'False'], ['TRUE', 'FALSE'], ['tRuE', 'fAlSe'], ['1', '0']] as const) {
    const all = await f.call('GET', '/campaigns', { query: { with_deleted: yes, with_total_count: yes } })
    t.equal(all.status, 200, `${yes}: ${all.text.slice(0, 200)}`)
    const body = all.json<{ data: Array<{ id: string }>; total_count: number; request: { params: Record<string, unknown> } }>()
    t.same(body.data.map((c) => c.id).sort(), [live.id, gone.id].sort(), `with_deleted=${yes} lists the deleted campaign`)
    t.equal(body.total_count, 2, `with_total_count=${yes} counts`)
    t.equal(body.request.params.with_deleted, yes, 'the echo keeps the spelling sent')
    const liveOnly = await f.call('GET', '/campaigns', { query: { with_deleted: no, with_total_count: no } })
    const lb = liveOnly.json<{ data: Array<{ id: string }>; total_count?: number }>()
    t.same(lb.data.map((c) => c.id), [live.id], `with_deleted=${no} leaves it out`)
    t.equal(lb.total_count, undefined, `with_total_count=${no}: no total`)
  }
  const pacing = await f.call('PUT', `/campaigns/${live.id}`, { query: { standard_delivery: 'False' } })
  t.equal(pacing.status, 200, pacing.text)
  t.equal(pacing.json<{ data: { standard_delivery: boolean } }>().data.standard_delivery, false, 'a capitalized False sets false')
  for (const bad of ['yes', 'T', '2', 'truee', '']) {
    const res = await f.call('GET', '/campaigns', { query: { with_deleted: bad, with_total_count: 'true' } })
    if (bad === '') {
      t.equal(res.status, 200, 'an empty boolean is the default')
      continue
    }
    expectError(t, res, 400, 'INVALID_PARAMETER', 'with_deleted')
  }
})

/** The query an SDK's save() sends for a loaded entity: every non-null property, as text. */
function wholeObject(entity: Record<string, unknown>, changes: Record<string, string> = {}): Record<string, string> {
  const out: Record<string, string> = {}
  for (const [k, v] of Object.entries(entity)) {
    if (v === null) continue
    out[k] = Array.isArray(v) ? v.join(',') : String(v)
  }
  return { ...out, ...changes }
}

t.test('whole-object updates: repeated read-only and computed fields are no change', async (t) => {
  const f = await adsFixture(t)
  const campaign = await createCampaign(f, { name: 'Spring', daily_budget_amount_local_micro: '5000000', entity_status: 'PAUSED' })
  // Times without milliseconds and booleans capitalized, as SDKs re-serialize them; stale computed values.
  const sent = wholeObject(campaign, {
    name: 'Spring sale',
    created_at: String(campaign.created_at).replace(/\.\d+Z$/, 'Z'),
    deleted: 'False',
    servable: 'true',
    effective_status: 'RUNNING',
    updated_at: '2001-01-01T00:00:00Z'
  })
  const saved = await f.call('PUT', `/campaigns/${campaign.id}`, { query: sent })
  t.equal(saved.status, 200, saved.text)
  const data = saved.json<{ data: Record<string, unknown> }>().data
  t.equal(data.name, 'Spring sale', 'the one real change is applied')
  t.equal(data.daily_budget_amount_local_micro, 5_000_000)
  t.equal(data.entity_status, 'PAUSED')
  t.equal(data.created_at, campaign.created_at, 'created_at unchanged')
  t.equal(data.servable, false, 'computed fields are the server\'s')
  t.not(data.updated_at, '2001-01-01T00:00:00Z')

  // Line items: create-only fields and the objective's defaults (pay_by ENGAGEMENT is not a value an update may set) repeated.
  const li = await createLineItem(f, campaign.id as string)
  const liSaved = await f.call('PUT', `/line_items/${li.id}`, { query: wholeObject(li, { name: 'Renamed item', bid_strategy: 'AUTO' }) })
  t.equal(liSaved.status, 200, liSaved.text)
  t.match(liSaved.json(), { data: { id: li.id, name: 'Renamed item', campaign_id: campaign.id, pay_by: li.pay_by, placements: li.placements } })
  const reread = await f.call('GET', `/line_items/${li.id}`)
  t.match(reread.json(), { data: { name: 'Renamed item', pay_by: li.pay_by } })
})

t.test('whole-object updates: a real change to a read-only field is a clear error', async (t) => {
  const f = await adsFixture(t)
  const campaign = await createCampaign(f)
  for (const [field, value] of [['id', 'abc123'], ['created_at', '2020-01-01T00:00:00Z'], ['currency', 'EUR'], ['funding_instrument_id', 'zzzzz'], ['deleted', 'true']] as const) {
    const res = await f.call('PUT', `/campaigns/${campaign.id}`, { query: wholeObject(campaign, { [field]: value, name: 'changed' }) })
    expectError(t, res, 400, 'INVALID_PARAMETER', field)
    t.match(res.json(), { errors: [{ message: new RegExp(`^${field} is read-only`) }], request: { params: { [field]: value } } })
  }
  const after = await f.call('GET', `/campaigns/${campaign.id}`)
  t.equal(after.json<{ data: { name: string } }>().data.name, campaign.name, 'nothing was applied')

  const li = await createLineItem(f, campaign.id as string)
  const other = await createCampaign(f, { name: 'other' })
  const moved = await f.call('PUT', `/line_items/${li.id}`, { query: wholeObject(li, { campaign_id: other.id as string }) })
  expectError(t, moved, 400, 'INVALID_PARAMETER', 'campaign_id')
  const creative = await f.call('PUT', `/line_items/${li.id}`, { query: { creative_source: 'DYNAMIC' } })
  expectError(t, creative, 400, 'INVALID_PARAMETER', 'creative_source')
})

t.test('whole-object updates of a media library object (MediaLibrary.update() sends every loaded property)', async (t) => {
  const f = await adsFixture(t)
  const key = await libraryMedia(f.rt.baseUrl, f.id, f.account, png(64, 48))
  const loaded = (await f.call('GET', `/media_library/${key}`)).json<{ data: Record<string, unknown> }>().data
  // Every loaded property back, the name changed, the URL spelled for another host (it is the server's) and updated_at stale.
  const query: Record<string, string> = {}
  for (const [k, v] of Object.entries(loaded)) if (v !== null && v !== false) query[k] = String(v)
  Object.assign(query, { name: 'renamed', media_url: 'https://elsewhere.example/media/x.png', updated_at: '2000-01-01T00:00:00Z' })
  const put = await f.call('PUT', `/media_library/${key}`, { query })
  t.equal(put.status, 200, put.text.slice(0, 300))
  t.match(put.json<{ data: Record<string, unknown> }>().data, { name: 'renamed', media_key: key, media_type: 'IMAGE', media_url: loaded.media_url }, 'repeated and server fields are no change; the name is')
  // A real change to a read-only field is refused, naming it, and nothing is applied.
  for (const [field, value] of [['media_type', 'VIDEO'], ['media_key', '3_1234567890'], ['media_status', 'PROCESSING'], ['tweeted', 'true']] as const) {
    const res = await f.call('PUT', `/media_library/${key}`, { query: { ...query, name: 'not applied', [field]: value } })
    expectError(t, res, 400, 'INVALID_PARAMETER', field)
  }
  t.equal((await f.call('GET', `/media_library/${key}`)).json<{ data: { name: string } }>().data.name, 'renamed', 'a refused update applied nothing')
  const unknown = await f.call('PUT', '/media_library/3_1234567890123', { query: { media_type: 'VIDEO' } })
  expectError(t, unknown, 404, 'MEDIA_NOT_FOUND', undefined)
})
