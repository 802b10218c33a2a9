import t from 'tap'
import type { ServiceDefinition } from '../../services/common/service'
import { TOPICS, type BusMessage } from '../../services/common/bus/types'
import { requireAccount } from '../../services/gateway/ads/accounts'
import { actorOf, ADS_AUTH, listOptions, paginate, Params, sendData } from '../../services/gateway/ads/conventions'
import { EntityRepo, type AdsEntity, type EntityChange } from '../../services/gateway/ads/entities'
import { createIdentity, eventually, oauth1Request, startTestRuntime } from '../helper'
import { createAdsIdentity } from './helper'

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
      const page = paginate(await repo.list(account.id), opts)
      return sendData(request, reply, page.data, 'widget', { next_cursor: page.next_cursor, ...(page.total_count !== undefined ? { total_count: page.total_count } : {}) })
    })
    app.post<{ Params: { account_id: string } }>('/12/accounts/:account_id/widgets', { config: { auth: ADS_AUTH } }, async (request, reply) => {
      const account = await requireAccount(ctx, request, request.params.account_id)
      const p = Params.query(request)
      const name = p.string('name', { required: true, max: 10 }) as string
      const size = p.int('size', { min: 1, max: 9 }) ?? 1
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
      const widget = await repo.softDelete(account.id, request.params.id, actorOf(request), { notFoundCode: 'WIDGET_NOT_FOUND' })
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
