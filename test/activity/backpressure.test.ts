import t from 'tap'
import { activityService } from '../../services/activity/service'
import type { BusMessage } from '../../services/common/bus/types'
import { streamService } from '../../services/stream/service'
import { gate } from '../support/receivers'
import { createIdentity, startTestRuntime } from '../support/runtime'
import { eventually } from '../support/util'
import { nextUserId, openHttpStream, OPERATOR_TOKEN, sampleEvent, subscribe } from '../support/fixtures/activity'

/**
 * Backpressure of the ingest route: a consumer group named in
 * INGEST_BACKLOG_GROUPS whose handler is held builds a backlog; past
 * INGEST_BACKLOG_LIMIT a batch is answered 503 with Retry-After, as a v2
 * Problem, and nothing of it is published. Once the group drains, batches
 * are accepted again, and every event accepted reached the app's stream.
 */

const LIMIT = 40
const GROUP = 'backpressure-held'

t.test('past the backlog bound the ingest route answers 503 with Retry-After and publishes nothing', async (t) => {
  const rt = await startTestRuntime(t, { services: [activityService, streamService], env: { OPERATOR_TOKEN, INGEST_BACKLOG_LIMIT: String(LIMIT), INGEST_BACKLOG_GROUPS: GROUP } })
  const id = await createIdentity(rt.ctx.store)
  const userId = nextUserId()
  await subscribe(rt.baseUrl, id.bearer, { event_type: 'post.create', filter: { user_id: userId }, tag: 'pressure' })
  const stream = await openHttpStream(rt.baseUrl, id.bearer)
  t.teardown(() => stream.close())
  // A downstream consumer that cannot keep up: its handler waits until released.
  const held = gate()
  const handled: BusMessage[] = []
  const consumer = await rt.ctx.bus.subscribe({ groupId: GROUP, topics: ['activity.events'], batchHandler: async (messages) => {
    await held.promise
    handled.push(...messages)
  } })
  t.teardown(() => {
    held.open()
    return consumer.close()
  })

  const post = async (n: number): Promise<{ status: number; retryAfter: string | null; body: Record<string, unknown> }> => {
    const body = Array.from({ length: n }, () => JSON.stringify(sampleEvent('post.create', userId))).join('\n') + '\n'
    const res = await fetch(`${rt.baseUrl}/admin/activity/events`, { method: 'POST', headers: { authorization: `Bearer ${OPERATOR_TOKEN}`, 'content-type': 'application/x-ndjson' }, body })
    return { status: res.status, retryAfter: res.headers.get('retry-after'), body: (await res.json()) as Record<string, unknown> }
  }

  let accepted = 0
  const first = await post(30)
  t.equal(first.status, 200, 'under the bound: accepted')
  accepted += 30
  // The backlog is read at most once a second: past it once the reading shows it.
  let refused: Awaited<ReturnType<typeof post>> | undefined
  for (let i = 0; i < 20 && !refused; i++) {
    const answer = await post(10)
    if (answer.status === 200) accepted += 10
    else refused = answer
    await new Promise((r) => setTimeout(r, 150))
  }
  t.ok(refused, `past the bound a batch is refused (${accepted} accepted before)`)
  t.equal(refused?.status, 503, '503')
  t.match(refused?.retryAfter, /^[1-9]\d*$/, `with Retry-After in seconds (${refused?.retryAfter})`)
  t.match(refused?.body, { type: 'about:blank', title: 'Service Unavailable', status: 503, detail: new RegExp(`waiting to be delivered \\(the bound is ${LIMIT}\\); none of this batch was published`) }, 'as a v2 Problem')
  const published = await stream.waitFor((m) => m.length >= accepted, 10_000).then(() => stream.messages.length)
  t.equal(published, accepted, 'the stream got every accepted event and none of the refused batch')

  held.open()
  await eventually(() => handled.length >= accepted, 10_000)
  const again = await eventually(async () => {
    const answer = await post(5)
    return answer.status === 200 ? answer : undefined
  }, 10_000)
  t.equal(again.status, 200, 'once the backlog drained, batches are accepted again')
  accepted += 5
  await stream.waitFor((m) => m.length >= accepted, 10_000)
  t.equal(stream.messages.length, accepted, `every accepted event reached the stream (${accepted})`)
})

t.test('between two readings of the backlog, what was admitted counts against the bound: a flood is not let in whole', async (t) => {
  const rt = await startTestRuntime(t, { services: [activityService], env: { OPERATOR_TOKEN, INGEST_BACKLOG_LIMIT: String(LIMIT), INGEST_BACKLOG_GROUPS: GROUP } })
  const userId = nextUserId()
  const held = gate()
  const consumer = await rt.ctx.bus.subscribe({ groupId: GROUP, topics: ['activity.events'], batchHandler: () => held.promise })
  t.teardown(() => {
    held.open()
    return consumer.close()
  })
  const post = async (n: number): Promise<number> => {
    const body = Array.from({ length: n }, () => JSON.stringify(sampleEvent('post.create', userId))).join('\n') + '\n'
    const res = await fetch(`${rt.baseUrl}/admin/activity/events`, { method: 'POST', headers: { authorization: `Bearer ${OPERATOR_TOKEN}`, 'content-type': 'application/x-ndjson' }, body })
    await res.body?.cancel()
    return res.status
  }
  // The first batch reads the lag (0); the ones right after it come before the next reading (a second later).
  const statuses: number[] = []
  const startedAt = Date.now()
  for (let i = 0; i < 10; i++) statuses.push(await post(10))
  const tookMs = Date.now() - startedAt
  const accepted = statuses.filter((s) => s === 200).length * 10
  t.ok(tookMs < 1000, `ten batches within one reading (${tookMs} ms)`)
  t.ok(accepted <= LIMIT + 10, `${accepted} events admitted of 100 offered (the bound is ${LIMIT}): ${statuses.join(' ')}`)
  t.ok(statuses.includes(503), 'the rest refused with 503')
})
