import fs from 'node:fs'
import path from 'node:path'
import { Writable } from 'node:stream'
import t, { type Test } from 'tap'
import { EVENT_TYPES } from '../../services/activity/event-types'
import { activityService } from '../../services/activity/service'
import { publish } from '../../services/cli/events'
import type { BusMessage } from '../../services/common/bus/types'
import type { Runtime } from '../../services/common/runtime'
import { gatewayService } from '../../services/gateway/service'
import { scrapedValue } from '../support/metrics'
import { startTestRuntime } from '../support/runtime'
import { eventually, tempDir } from '../support/util'
import { ingest, nextUserId, OPERATOR_TOKEN, sampleEvent } from '../support/fixtures/activity'

const services = [gatewayService, activityService]

/** Everything published on activity.events, seen by a consumer group of the test's own. */
async function observe(t: Test, rt: Runtime): Promise<BusMessage[]> {
  const seen: BusMessage[] = []
  const consumer = await rt.ctx.bus.subscribe({ groupId: `observer-${Math.random()}`, topics: ['activity.events'], handler: async (m) => void seen.push(m) })
  t.teardown(() => consumer.close())
  return seen
}

function sink(): Writable & { text: () => string } {
  let text = ''
  const w = new Writable({
    write(chunk, _enc, cb) {
      text += String(chunk)
      cb()
    }
  })
  return Object.assign(w, { text: () => text })
}

t.test('one JSON event or an NDJSON batch of every kind is published, keyed by user', async (t) => {
  const rt = await startTestRuntime(t, { services, env: { OPERATOR_TOKEN } })
  const seen = await observe(t, rt)
  const userId = nextUserId()

  const single = await fetch(`${rt.baseUrl}/admin/activity/events`, {
    method: 'POST',
    headers: { authorization: `Bearer ${OPERATOR_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ event_type: 'ProfileBioUpdate', user_id: userId, payload: { before: 'a', after: 'b' } })
  })
  t.equal(single.status, 200)
  const sb = (await single.json()) as { data: { accepted: number; event_uuids: string[] } }
  t.equal(sb.data.accepted, 1)
  t.match(sb.data.event_uuids[0], /^[0-9]{19}$/, 'an event_uuid is assigned')

  const batch = EVENT_TYPES.map((type) => sampleEvent(type, userId))
  const res = await ingest(rt.baseUrl, batch)
  t.equal(res.status, 200, res.text)
  t.equal(res.json<{ data: { accepted: number } }>().data.accepted, EVENT_TYPES.length)

  await eventually(() => seen.length === EVENT_TYPES.length + 1)
  const first = seen[0]?.value as Record<string, unknown>
  t.equal(first.event_type, 'profile.update.bio', 'PascalCase is published dotted')
  t.match(first.created_at, /Z$/, 'created_at defaults to now')
  t.same(seen.slice(1).map((m) => (m.value as { event_type: string }).event_type), [...EVENT_TYPES], 'order kept within the user key')
  t.ok(seen.every((m) => m.key === userId), 'keyed by user_id')
  t.equal(await scrapedValue(rt.baseUrl, 'activity_events_ingested_total', { event_type: 'post.create' }), 1)
})

t.test('a batch with invalid lines is refused whole, line by line, and counted', async (t) => {
  const rt = await startTestRuntime(t, { services, env: { OPERATOR_TOKEN } })
  const seen = await observe(t, rt)
  const userId = nextUserId()
  const dm = sampleEvent('dm.sent', userId) as { payload: { direct_message_events: Array<Record<string, unknown>> } }
  dm.payload.direct_message_events[0] = { ...dm.payload.direct_message_events[0], participant_ids: ['1', '2'] }
  const lines = [
    JSON.stringify(sampleEvent('post.create', userId)),
    '{"event_type": "post.create", "user_id": ',
    JSON.stringify({ ...sampleEvent('post.create', userId), event_type: 'post.like' }),
    JSON.stringify({ ...sampleEvent('post.create', userId), payload: { id: '1' } }),
    '',
    JSON.stringify({ ...sampleEvent('profile.update.bio', userId), user_id: 'me' }),
    JSON.stringify(dm),
    JSON.stringify({ ...sampleEvent('spaces.start', userId), colour: 'red' }),
    '[1,2]',
    JSON.stringify(sampleEvent('post.delete', userId)),
    JSON.stringify({ ...sampleEvent('post.delete', userId), payload: { id: '1445880548472328192', author_id: '2244994945' } })
  ]
  const res = await fetch(`${rt.baseUrl}/admin/activity/events`, {
    method: 'POST',
    headers: { authorization: `Bearer ${OPERATOR_TOKEN}`, 'content-type': 'application/x-ndjson' },
    body: lines.join('\n')
  })
  t.equal(res.status, 400)
  t.equal(res.headers.get('content-type'), 'application/problem+json; charset=utf-8')
  const problem = (await res.json()) as { detail: string; errors: Array<{ message: string; parameters: { line: string[] } }> }
  t.equal(problem.detail, '8 of 10 events are invalid; none was published.')
  const byLine = new Map(problem.errors.map((e) => [e.parameters.line[0], e.message]))
  t.match(byLine.get('2'), /^line 2: not valid JSON/)
  t.match(byLine.get('3'), /^line 3: unknown event_type "post\.like"; accepted: .*ProfileBioUpdate/)
  t.match(byLine.get('4'), /^line 4: \/payload is missing "text"/)
  t.match(byLine.get('6'), /^line 6: \/user_id must match pattern/)
  t.match(byLine.get('7'), /^line 7: \/payload\/direct_message_events\/0 must not have this property set/)
  t.match(byLine.get('8'), /^line 8: the event has unexpected property "colour"/)
  t.match(byLine.get('9'), /^line 9: an event must be a JSON object/)
  t.match(byLine.get('11'), /^line 11: \/payload\/author_id \(2244994945\) must be the event's user_id/, 'a post is deleted by its author')
  t.notOk(byLine.has('1') || byLine.has('10'), 'valid lines are not listed')

  // Barrier: a valid event sent afterwards arrives; had the refused batch published anything, it would be ahead of it.
  const after = await ingest(rt.baseUrl, [sampleEvent('post.delete', userId)])
  t.equal(after.status, 200, after.text)
  await eventually(() => seen.length >= 1)
  t.same(seen.map((m) => (m.value as { event_uuid: string }).event_uuid), after.json<{ data: { event_uuids: string[] } }>().data.event_uuids, 'nothing of the refused batch was published')
  t.equal(await scrapedValue(rt.baseUrl, 'activity_events_rejected_total', { reason: 'schema' }), 5)
  t.equal(await scrapedValue(rt.baseUrl, 'activity_events_rejected_total', { reason: 'json' }), 1)
  t.equal(await scrapedValue(rt.baseUrl, 'activity_events_rejected_total', { reason: 'event_type' }), 1)
  t.equal(await scrapedValue(rt.baseUrl, 'activity_events_rejected_total', { reason: 'inconsistent' }), 1)
})

t.test('the ingest route needs the operator token and a body', async (t) => {
  const rt = await startTestRuntime(t, { services, env: { OPERATOR_TOKEN } })
  const event = sampleEvent('post.create', nextUserId())
  t.equal((await ingest(rt.baseUrl, [event], 'wrong')).status, 401)
  const none = await fetch(`${rt.baseUrl}/admin/activity/events`, { method: 'POST', body: JSON.stringify(event), headers: { 'content-type': 'application/json' } })
  t.equal(none.status, 401)
  const empty = await fetch(`${rt.baseUrl}/admin/activity/events`, { method: 'POST', headers: { authorization: `Bearer ${OPERATOR_TOKEN}`, 'content-type': 'application/x-ndjson' }, body: '\n\n' })
  t.equal(empty.status, 400)
  t.match(await empty.text(), /no events/)
  const noBody = await fetch(`${rt.baseUrl}/admin/activity/events`, { method: 'POST', headers: { authorization: `Bearer ${OPERATOR_TOKEN}` } })
  t.equal(noBody.status, 400)
  const text = await fetch(`${rt.baseUrl}/admin/activity/events`, { method: 'POST', headers: { authorization: `Bearer ${OPERATOR_TOKEN}`, 'content-type': 'text/csv' }, body: 'a,b' })
  t.equal(text.status, 415, 'an unknown content type is refused, not guessed')
  const badJson = await fetch(`${rt.baseUrl}/admin/activity/events`, { method: 'POST', headers: { authorization: `Bearer ${OPERATOR_TOKEN}`, 'content-type': 'application/json' }, body: '{"a":' })
  t.equal(badJson.status, 400)
})

t.test('`events publish` sends a file in batches with progress, and stops at a refused batch', async (t) => {
  const rt = await startTestRuntime(t, { services, env: { OPERATOR_TOKEN } })
  const seen = await observe(t, rt)
  const dir = tempDir(t)
  const userId = nextUserId()
  const env = { GATEWAY_URL: rt.baseUrl, OPERATOR_TOKEN, DATA_DIR: dir }

  const good = path.join(dir, 'good.ndjson')
  fs.writeFileSync(good, [...EVENT_TYPES.map((type) => JSON.stringify(sampleEvent(type, userId))), ''].join('\n\n'))
  const out = sink()
  const err = sink()
  t.equal(await publish(good, 5, 1, env, out, err), 0, err.text())
  t.match(out.text(), /published 5 events \(through line 9,/)
  t.match(out.text(), new RegExp(`done: ${EVENT_TYPES.length} events published`))
  await eventually(() => seen.length === EVENT_TYPES.length)

  const bad = path.join(dir, 'bad.ndjson')
  const lines = Array.from({ length: 6 }, () => JSON.stringify(sampleEvent('post.create', userId)))
  lines[4] = JSON.stringify({ ...sampleEvent('post.create', userId), user_id: 'nope' })
  fs.writeFileSync(bad, lines.join('\n'))
  const out2 = sink()
  const err2 = sink()
  t.equal(await publish(bad, 3, 1, env, out2, err2), 1)
  t.match(out2.text(), /published 3 events \(through line 3,/)
  t.match(err2.text(), /lines 4\.\.6 refused \(HTTP 400\); 3 events published before them/)
  t.match(err2.text(), /line 5: \/user_id must match pattern/)
  t.match(err2.text(), /resume with --from-line 4/)
  await eventually(() => seen.length === EVENT_TYPES.length + 3)

  lines[4] = JSON.stringify(sampleEvent('post.create', userId))
  fs.writeFileSync(bad, lines.join('\n'))
  t.equal(await publish(bad, 3, 4, env, sink(), sink()), 0, 'resuming publishes the rest only')
  await eventually(() => seen.length === EVENT_TYPES.length + 6)
  t.equal(await publish(path.join(dir, 'missing.ndjson'), 3, 1, env, sink(), sink()), 2)
})
