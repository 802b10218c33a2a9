import t from 'tap'
import type { ServiceDefinition } from '../../services/common/service'
import { TOPICS, type BusMessage } from '../../services/common/bus/types'
import { requireAccount } from '../../services/gateway/ads/accounts'
import { actorOf, ADS_AUTH, formatIsoTime, listOptions, paginate, Params, parseIsoTime, sendData } from '../../services/gateway/ads/conventions'
import { EntityRepo, type AdsEntity, type EntityChange } from '../../services/gateway/ads/entities'
import { oauth1Request } from '../support/http'
import { createIdentity, startTestRuntime } from '../support/runtime'
import { eventually } from '../support/util'
import { createAdsIdentity } from '../support/fixtures/ads'

/**
 * The shared ads conventions exercised through a small real route set built
 * only from them (a "widget" entity), so every ads area inherits tested
 * behaviour: envelope, parameter errors, lists, ownership, entity changes.
 */

interface Widget extends AdsEntity {
  name: string
  size: number
}

const widgetService: ServiceDefinition = {
  name: 'gateway',
  routes: async (app, ctx) => {
    const repo = new EntityRepo<Widget>(ctx, 'WIDGET', 'widget')
    app.get<{ Params: { account_id: string } }>('/12/accounts/:account_id/widgets', { config: { auth: ADS_AUTH } }, async (request, reply) => {
      const account = await requireAccount(ctx, request, request.params.account_id)
      const p = Params.query(request)
      const opts = listOptions(p, { countDefault: 2, countMax: 5, sortable: ['name', 'size', 'created_at'] })
      const ids = p.list('widget_ids', { max: 5 })
      const page = paginate((await repo.list(account.id)).filter((w) => !ids || ids.includes(w.id)), opts)
      return sendData(request, reply, page.data, 'widget', { next_cursor: page.next_cursor, ...(page.total_count !== undefined ? { total_count: page.total_count } : {}) })
    })
    app.post<{ Params: { account_id: string } }>('/12/accounts/:account_id/widgets', { config: { auth: ADS_AUTH } }, async (request, reply) => {
      const account = await requireAccount(ctx, request, request.params.account_id)
      const p = Params.query(request)
      const name = p.string('name', { required: true, max: 10 }) as string
      const size = p.int('size', { min: 1, max: 9 }) ?? 1
      p.time('due')
      const widget = await repo.create(account.id, { name, size }, actorOf(request))
      return sendData(request, reply, widget, 'widget')
    })
    app.put<{ Params: { account_id: string; id: string } }>('/12/accounts/:account_id/widgets/:id', { config: { auth: ADS_AUTH } }, async (request, reply) => {
      const account = await requireAccount(ctx, request, request.params.account_id)
      const p = Params.query(request)
      const patch: Partial<Widget> = {}
      const name = p.string('name', { max: 10 })
      if (name !== undefined) patch.name = name
      const widget = await repo.update(account.id, request.params.id, patch, actorOf(request), { notFoundCode: 'WIDGET_NOT_FOUND' })
      return sendData(request, reply, widget, 'widget')
    })
    app.delete<{ Params: { account_id: string; id: string } }>('/12/accounts/:account_id/widgets/:id', { config: { auth: ADS_AUTH } }, async (request, reply) => {
      const account = await requireAccount(ctx, request, request.params.account_id)
      const hard = Params.query(request).bool('hard', { default: false })
      const widget = hard
        ? await repo.hardDelete(account.id, request.params.id, actorOf(request), { notFoundCode: 'WIDGET_NOT_FOUND' })
        : await repo.softDelete(account.id, request.params.id, actorOf(request), { notFoundCode: 'WIDGET_NOT_FOUND' })
      return sendData(request, reply, widget, 'widget')
    })
  }
}

t.test('ads envelope, parameter errors, pagination, soft delete and ownership', async (t) => {
  const rt = await startTestRuntime(t, { services: [widgetService] })
  const changes: EntityChange[] = []
  const consumer = await rt.ctx.bus.subscribe({ groupId: 'test-changes', topics: [TOPICS.adsEntityChanges], handler: async (m: BusMessage) => { changes.push(m.value as EntityChange) } })
  t.teardown(() => consumer.close())
  const { id, account } = await createAdsIdentity(rt.ctx)
  const url = `${rt.baseUrl}/12/accounts/${account.id}/widgets`

  const created = []
  for (const [name, size] of [['delta', '4'], ['alpha', '2'], ['charlie', '9'], ['bravo', '1'], ['echo', '5']] as const) {
    const res = await oauth1Request('POST', url, id, { query: { name, size } })
    t.equal(res.status, 200, `create ${name}`)
    t.equal(res.headers.get('x-current-api-version'), '12')
    const body = res.json<{ data: Widget; data_type: string; request: { params: Record<string, unknown> } }>()
    t.equal(body.data_type, 'widget')
    t.same(body.request.params, { account_id: account.id, name, size })
    t.match(body.data, { name, size: Number(size), deleted: false, id: String, created_at: String, updated_at: String })
    created.push(body.data)
  }

  // Missing and invalid parameters name the parameter.
  const missing = await oauth1Request('POST', url, id, { query: { size: '3' } })
  t.equal(missing.status, 400)
  t.same(missing.json(), { errors: [{ code: 'MISSING_PARAMETER', message: '"name" is missing', parameter: 'name' }], request: { params: { account_id: account.id, size: '3' } } })
  const badInt = await oauth1Request('POST', url, id, { query: { name: 'x', size: 'big' } })
  t.equal(badInt.status, 400)
  t.match(badInt.json(), { errors: [{ code: 'INVALID_PARAMETER', parameter: 'size', message: 'Expected Integer, got "big" for size' }] })
  const tooLong = await oauth1Request('POST', url, id, { query: { name: 'x'.repeat(11) } })
  t.match(tooLong.json(), { errors: [{ code: 'INVALID_PARAMETER', parameter: 'name' }] })

  // count bounds, sort, cursor walk, total count exclusivity.
  for (const count of ['0', '6', 'x']) {
    const res = await oauth1Request('GET', url, id, { query: { count } })
    t.equal(res.status, 400, `count=${count} refused`)
    t.match(res.json(), { errors: [{ code: 'INVALID_PARAMETER', parameter: 'count' }] })
  }
  const names: string[] = []
  let cursor: string | null = null
  let pages = 0
  do {
    const query: Record<string, string> = { sort_by: 'name-asc', count: '2' }
    if (cursor) query.cursor = cursor
    const res = await oauth1Request('GET', url, id, { query })
    t.equal(res.status, 200)
    const body = res.json<{ data: Widget[]; next_cursor: string | null }>()
    names.push(...body.data.map((w) => w.name))
    cursor = body.next_cursor
    pages++
  } while (cursor && pages < 10)
  t.same(names, ['alpha', 'bravo', 'charlie', 'delta', 'echo'])
  t.equal(pages, 3)
  const total = await oauth1Request('GET', url, id, { query: { with_total_count: 'true', count: '5' } })
  t.equal(total.json<{ total_count: number }>().total_count, 5)
  const exclusive = await oauth1Request('GET', url, id, { query: { with_total_count: 'true', cursor: 'abc' } })
  t.equal(exclusive.status, 400)
  t.match(exclusive.json(), { errors: [{ code: 'EXCLUSIVE_PARAMETERS' }] })
  const badCursor = await oauth1Request('GET', url, id, { query: { cursor: 'not-a-cursor' } })
  t.match(badCursor.json(), { errors: [{ code: 'INVALID_PARAMETER', parameter: 'cursor' }] })
  const badSort = await oauth1Request('GET', url, id, { query: { sort_by: 'colour-asc' } })
  t.match(badSort.json(), { errors: [{ code: 'INVALID_PARAMETER', parameter: 'sort_by' }] })

  // Update and soft delete; deleted entities disappear from lists unless with_deleted.
  const first = created[0] as Widget
  const updated = await oauth1Request('PUT', `${url}/${first.id}`, id, { query: { name: 'zulu' } })
  t.equal(updated.json<{ data: Widget }>().data.name, 'zulu')
  const deleted = await oauth1Request('DELETE', `${url}/${first.id}`, id)
  t.equal(deleted.json<{ data: Widget }>().data.deleted, true)
  const again = await oauth1Request('DELETE', `${url}/${first.id}`, id)
  t.equal(again.status, 404)
  t.match(again.json(), { errors: [{ code: 'WIDGET_NOT_FOUND' }] })
  const live = await oauth1Request('GET', url, id, { query: { count: '5' } })
  t.equal(live.json<{ data: Widget[] }>().data.length, 4)
  const all = await oauth1Request('GET', url, id, { query: { count: '5', with_deleted: 'true' } })
  t.equal(all.json<{ data: Widget[] }>().data.length, 5)

  // Another user's account is refused; an unknown one is 404; no credentials is 401.
  const stranger = await createIdentity(rt.ctx.store)
  const foreign = await oauth1Request('GET', url, stranger)
  t.equal(foreign.status, 403)
  t.match(foreign.json(), { errors: [{ code: 'ACCOUNT_NOT_FOUND' }] })
  const unknown = await oauth1Request('GET', `${rt.baseUrl}/12/accounts/zzzzz/widgets`, id)
  t.equal(unknown.status, 404)
  const anonymous = await fetch(url)
  t.equal(anonymous.status, 401)
  t.match(await anonymous.json(), { errors: [{ code: 'UNAUTHORIZED_ACCESS' }] })

  // Every create, update and delete was published with a diff and a snapshot.
  await eventually(() => changes.length >= 7)
  t.same(changes.map((c) => c.change_type), ['CREATE', 'CREATE', 'CREATE', 'CREATE', 'CREATE', 'UPDATE', 'DELETE'])
  const update = changes[5] as EntityChange
  t.same(update.changes.name, { old: 'delta', new: 'zulu' })
  t.equal(update.entity_type, 'WIDGET')
  t.equal(update.changed_by.user_id, id.user.id)
  t.equal(update.entity_data.name, 'zulu')
})

t.test('parseIsoTime: one parser for every ads time, impossible dates refused', async (t) => {
  const ms = (s: string): number => Date.parse(s)
  t.equal(parseIsoTime('2030-01-31T00:00:00Z'), ms('2030-01-31T00:00:00Z'))
  t.equal(parseIsoTime('2028-02-29'), ms('2028-02-29T00:00:00Z'), 'a leap day; a bare date is midnight UTC')
  t.equal(parseIsoTime('2000-02-29T12:00'), ms('2000-02-29T12:00:00Z'), 'no zone means UTC')
  t.equal(parseIsoTime('2030-06-01T02:30:00+02:30'), ms('2030-06-01T00:00:00Z'))
  t.equal(parseIsoTime('2030-06-01T02:30:00.25+0230'), ms('2030-06-01T00:00:00.250Z'))
  for (const bad of ['2030-02-31T00:00:00Z', '2030-02-29', '2100-02-29', '2030-04-31', '2030-13-01', '2030-00-10', '2030-01-00', '2030-01-01T24:00:00Z', '2030-01-01T12:60Z', '2030-01-01T12:00:60Z', '2030-01-01T12:00+24:00', '2030-01-01 12:00', 'tomorrow', '']) {
    t.equal(parseIsoTime(bad), undefined, `${JSON.stringify(bad)} refused`)
  }
  t.equal(parseIsoTime('2030-01-01', { requireTime: true }), undefined)
  t.equal(parseIsoTime('2030-01-01T00:00', { requireZone: true }), undefined)
  t.equal(parseIsoTime('2030-01-01T00:00+01:00', { utcOnly: true }), undefined)
  t.equal(parseIsoTime('2030-01-01T00:00-00:00', { utcOnly: true }), ms('2030-01-01T00:00:00Z'))
  t.equal(formatIsoTime(ms('2030-01-01T00:00:00Z')), '2030-01-01T00:00:00Z')
})

t.test('request.params echo: lists as arrays where the route takes lists, free text as sent, times normalized', async (t) => {
  const rt = await startTestRuntime(t, { services: [widgetService] })
  const { id, account } = await createAdsIdentity(rt.ctx)
  const url = `${rt.baseUrl}/12/accounts/${account.id}/widgets`
  const params = (res: { json: <T>() => T }): Record<string, unknown> => res.json<{ request: { params: Record<string, unknown> } }>().request.params

  let res = await oauth1Request('POST', url, id, { query: { name: 'Smith, Jo', due: '2030-01-02' } })
  t.equal(res.status, 200)
  t.same(params(res), { account_id: account.id, name: 'Smith, Jo', due: '2030-01-02T00:00:00Z' }, 'a comma in free text is not a list; the time is normalized')
  res = await oauth1Request('POST', url, id, { query: { name: 'Jo', due: '2030-02-31' } })
  t.equal(res.status, 400, 'an impossible date is refused, not rolled over into March')
  t.match(res.json(), { errors: [{ code: 'INVALID_PARAMETER', parameter: 'due' }] })
  t.same(params(res), { account_id: account.id, name: 'Jo', due: '2030-02-31' }, 'an invalid time is echoed as sent')
  res = await oauth1Request('GET', url, id, { query: { widget_ids: 'abc' } })
  t.same(params(res), { account_id: account.id, widget_ids: ['abc'] }, 'a one-item list is an array')
  res = await oauth1Request('GET', url, id, { query: { widget_ids: 'a,b,c,d,e,f' } })
  t.match(res.json(), { errors: [{ code: 'INVALID_PARAMETER', parameter: 'widget_ids' }] })
  t.same(params(res).widget_ids, ['a', 'b', 'c', 'd', 'e', 'f'], 'a list that fails validation is still echoed as an array')
  res = await oauth1Request('GET', url, id, { query: { q: 'x,y' } })
  t.same(params(res), { account_id: account.id, q: 'x,y' }, 'a parameter the route does not take as a list stays a string')
})

t.test('cursors are keyset positions: deletions between pages skip nothing and repeat nothing', async (t) => {
  const rt = await startTestRuntime(t, { services: [widgetService] })
  const { id, account } = await createAdsIdentity(rt.ctx)
  const url = `${rt.baseUrl}/12/accounts/${account.id}/widgets`
  const ids: string[] = []
  for (const name of ['w1', 'w2', 'w3', 'w4', 'w5', 'w6', 'w7']) ids.push((await oauth1Request('POST', url, id, { query: { name } })).json<{ data: Widget }>().data.id)
  type Body = { data: Widget[]; next_cursor: string | null }
  const page = async (query: Record<string, string>): Promise<Body> => {
    const res = await oauth1Request('GET', url, id, { query })
    t.equal(res.status, 200, res.text)
    return res.json<Body>()
  }
  const names = (b: Body): string[] => b.data.map((w) => w.name)

  // Creation order: the first page's last item is soft-deleted, then an earlier one is hard-deleted.
  let p1 = await page({ count: '2' })
  t.same(names(p1), ['w1', 'w2'])
  await oauth1Request('DELETE', `${url}/${ids[1]}`, id)
  await oauth1Request('DELETE', `${url}/${ids[0]}`, id, { query: { hard: 'true' } })
  let p2 = await page({ count: '2', cursor: p1.next_cursor as string })
  t.same(names(p2), ['w3', 'w4'], 'w3 is not skipped although two items before it are gone')
  // The anchor itself removed for good: the page resumes at the item that followed it.
  await oauth1Request('DELETE', `${url}/${ids[3]}`, id, { query: { hard: 'true' } })
  const p3 = await page({ count: '2', cursor: p2.next_cursor as string })
  t.same(names(p3), ['w5', 'w6'])
  const p4 = await page({ count: '2', cursor: p3.next_cursor as string })
  t.same(names(p4), ['w7'])
  t.equal(p4.next_cursor, null)

  // sort_by: the keyset is (value, id); a deleted item shifts nothing.
  p1 = await page({ count: '2', sort_by: 'name-desc' })
  t.same(names(p1), ['w7', 'w6'])
  await oauth1Request('DELETE', `${url}/${ids[6]}`, id)
  p2 = await page({ count: '2', sort_by: 'name-desc', cursor: p1.next_cursor as string })
  t.same(names(p2), ['w5', 'w3'])

  // Garbled or forged cursors, and cursors made for another sort, are refused.
  const forged = (state: unknown): string => Buffer.from(JSON.stringify(state)).toString('base64url')
  for (const [cursor, query] of [
    ['%%%', {}],
    [Buffer.from('{"o":2}').toString('base64url'), {}],
    [forged({ v: 1, s: 'default', a: [] }), {}],
    [forged({ v: 1, s: 'default', a: ['x y'] }), {}],
    [forged({ v: 2, s: 'default', a: ['abc'] }), {}],
    [forged({ v: 1, s: 'default', a: ['abc'], t: '2030-02-31T00:00:00Z' }), {}],
    [forged({ v: 1, s: 'name-asc', k: [{}, 'abc'] }), { sort_by: 'name-asc' }],
    [p1.next_cursor as string, {}],
    [p1.next_cursor as string, { sort_by: 'name-asc' }]
  ] as Array<[string, Record<string, string>]>) {
    const res = await oauth1Request('GET', url, id, { query: { ...query, cursor } })
    t.equal(res.status, 400, `cursor ${cursor.slice(0, 30)} refused`)
    t.match(res.json(), { errors: [{ code: 'INVALID_PARAMETER', parameter: 'cursor' }] })
  }
})
