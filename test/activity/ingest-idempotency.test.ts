import { randomUUID } from 'node:crypto'
import t, { type Test } from 'tap'
import { activityService } from '../../services/activity/service'
import type { BusMessage } from '../../services/common/bus/types'
import type { Runtime } from '../../services/common/runtime'
import { streamService } from '../../services/stream/service'
import { createIdentity, startTestRuntime, type TestIdentity } from '../support/runtime'
import { nextUserId, openHttpStream, OPERATOR_TOKEN, sampleEvent, type StreamClient, subscribe } from '../support/fixtures/activity'

/**
 * Idempotent ingest in the embedded runtime: a batch sent again with its
 * Idempotency-Key (a producer whose request timed out) is answered as the
 * first time and publishes nothing more; the app's open stream gets exactly
 * one line per event.
 */

const WAIT = 15_000

interface Answer {
  status: number
  replayed: string | null
  text: string
}

async function post(rt: Runtime, events: unknown[], key?: string, contentType = 'application/x-ndjson'): Promise<Answer> {
  const body = contentType === 'application/json' ? JSON.stringify(events) : events.map((e) => JSON.stringify(e)).join('\n') + '\n'
  const headers: Record<string, string> = { authorization: `Bearer ${OPERATOR_TOKEN}`, 'content-type': contentType }
  if (key !== undefined) headers['idempotency-key'] = key
  const res = await fetch(`${rt.baseUrl}/admin/activity/events`, { method: 'POST', headers, body })
  return { status: res.status, replayed: res.headers.get('idempotent-replayed'), text: await res.text() }
}

function uuidsOf(answer: Answer): string[] {
  return (JSON.parse(answer.text) as { data: { event_uuids: string[] } }).data.event_uuids
}

async function start(t: Test): Promise<{ rt: Runtime; id: TestIdentity; userId: string; stream: StreamClient; published: BusMessage[] }> {
  const rt = await startTestRuntime(t, { services: [activityService, streamService], env: { OPERATOR_TOKEN } })
  const id = await createIdentity(rt.ctx.store)
  const userId = nextUserId()
  await subscribe(rt.baseUrl, id.bearer, { event_type: 'post.create', filter: { user_id: userId }, tag: 'once' })
  const published: BusMessage[] = []
  const observer = await rt.ctx.bus.subscribe({ groupId: `observer-${randomUUID()}`, topics: ['activity.events'], handler: async (m) => void published.push(m) })
  t.teardown(() => observer.close())
  const stream = await openHttpStream(rt.baseUrl, id.bearer)
  t.teardown(() => stream.close())
  return { rt, id, userId, stream, published }
}

/** Everything the stream got before a barrier event sent after the batches (one user: one partition, in order). */
async function linesBeforeBarrier(t: Test, rt: Runtime, stream: StreamClient, userId: string): Promise<string[]> {
  const barrier = await post(rt, [sampleEvent('post.create', userId, { text: 'barrier' })])
  t.equal(barrier.status, 200)
  const [uuid] = uuidsOf(barrier)
  await stream.waitFor((m) => m.some((e) => e.data?.event_uuid === uuid), WAIT)
  return stream.messages.map((m) => m.data?.event_uuid ?? '?').filter((u) => u !== uuid)
}

t.test('a batch sent again with its Idempotency-Key gets the first answer and is delivered once', async (t) => {
  const { rt, userId, stream, published } = await start(t)
  const batch = [1, 2, 3].map((n) => sampleEvent('post.create', userId, { text: `event ${n}` }))
  const key = randomUUID()
  const first = await post(rt, batch, key)
  t.equal(first.status, 200, 'accepted')
  t.equal(first.replayed, null)
  const again = await post(rt, batch, key)
  t.equal(again.status, 200)
  t.equal(again.text, first.text, 'the same answer, event_uuids included')
  t.equal(again.replayed, 'true', 'marked as a replay')

  const lines = await linesBeforeBarrier(t, rt, stream, userId)
  t.same(lines, uuidsOf(first), 'exactly one line per event on the stream')
  t.equal(published.length, 4, 'three events and the barrier on activity.events, nothing twice')
  const metrics = await (await fetch(`${rt.baseUrl}/metrics`)).text()
  t.match(metrics, /^activity_ingest_replayed_total(\{[^}]*\})? 1$/m, "counted as a replay")

  const keys: string[] = []
  for await (const k of rt.ctx.store.scanPrefix('activity:ingest-key:')) keys.push(k)
  t.equal(keys.length, 1, 'one store key per Idempotency-Key')
  const ttl = await rt.ctx.store.pttl(keys[0] as string)
  t.ok(ttl > 23.9 * 3600_000 && ttl <= 24 * 3600_000, `kept 24 hours (${ttl} ms left)`)
})

t.test('concurrent duplicates: one publishes, all get its answer', async (t) => {
  const { rt, userId, stream, published } = await start(t)
  const batch = [sampleEvent('post.create', userId, { text: 'a' }), sampleEvent('post.create', userId, { text: 'b' })]
  const key = randomUUID()
  const answers = await Promise.all([0, 1, 2, 3, 4].map(() => post(rt, batch, key)))
  t.same(answers.map((a) => a.status), [200, 200, 200, 200, 200])
  t.equal(new Set(answers.map((a) => a.text)).size, 1, 'one answer for all')
  t.equal(answers.filter((a) => a.replayed === null).length, 1, 'one of them published')
  const lines = await linesBeforeBarrier(t, rt, stream, userId)
  t.same(lines, uuidsOf(answers[0] as Answer), 'two events, two lines')
  t.equal(published.length, 3)
})

t.test('a key reused with another batch is refused; a refused batch leaves its key free; malformed keys are 400', async (t) => {
  const { rt, userId, stream, published } = await start(t)
  const key = randomUUID()
  const batch = [sampleEvent('post.create', userId, { text: 'original' })]
  const first = await post(rt, batch, key)
  t.equal(first.status, 200)
  for (const [why, answer] of [
    ['another batch', await post(rt, [sampleEvent('post.create', userId, { text: 'changed' })], key)],
    ['the same events as a JSON array', await post(rt, batch, key, 'application/json')]
  ] as const) {
    t.equal(answer.status, 422, why)
    t.match(JSON.parse(answer.text), { type: 'about:blank', title: 'Unprocessable Entity', status: 422, detail: /already used with a different batch/ }, why)
  }

  const spare = randomUUID()
  const invalid = await post(rt, [sampleEvent('post.create', userId, { text: 'fine' }), { event_type: 'post.create', user_id: userId }], spare)
  t.equal(invalid.status, 400, 'an invalid line refuses the batch')
  const corrected = await post(rt, [sampleEvent('post.create', userId, { text: 'fine' })], spare)
  t.equal(corrected.status, 200, 'the corrected batch goes through under the same key')
  t.equal(corrected.replayed, null)

  for (const bad of ['x'.repeat(256), ' ']) {
    const res = await post(rt, batch, bad)
    t.equal(res.status, 400, `key of ${bad.length} characters`)
    t.match(JSON.parse(res.text), { type: 'https://api.twitter.com/2/problems/invalid-request', errors: [{ message: /Idempotency-Key/, parameters: { 'Idempotency-Key': [] } }] })
  }

  const lines = await linesBeforeBarrier(t, rt, stream, userId)
  t.same(lines, [...uuidsOf(first), ...uuidsOf(corrected)], 'only the accepted batches were delivered')
  t.equal(published.length, 3)
})
