import t, { type Test as TapTest } from 'tap'
import { checkWindow, formatReplayDate, parseReplayDate } from '../../services/webhooks/replay'
import type { Runtime } from '../../services/common/runtime'
import { deliveryMessage, FAST_ENV, openApiErrors, publishDeliveries, type Registered, registerWebhook, startWebhooks } from '../support/fixtures/webhooks'
import { bearerRequest, plainRequest } from '../support/http'
import { metricsText, metricValue } from '../support/metrics'
import { firstMessage } from '../support/problems'
import { gate } from '../support/receivers'
import { eventually } from '../support/util'

const MINUTE = 60_000

t.test('replay dates are yyyymmddhhmm UTC within the past 24 hours', async (t) => {
  t.equal(parseReplayDate('202504242000'), Date.UTC(2025, 3, 24, 20, 0))
  t.equal(formatReplayDate(Date.UTC(2025, 3, 24, 20, 7, 59)), '202504242007')
  for (const bad of ['202513010000', '202502300000', '202504242460', '2025042420', 'abcdefghijkl']) t.equal(parseReplayDate(bad), undefined, bad)
  const now = Date.UTC(2025, 3, 24, 20, 30, 15)
  t.equal(checkWindow(now - 2 * 3_600_000, now - 3_600_000, now), undefined)
  t.equal(checkWindow(Date.UTC(2025, 3, 23, 20, 30), now - 1000, now), undefined, 'the minute that began 24 h ago is inside')
  t.match(checkWindow(Date.UTC(2025, 3, 23, 20, 29), now - 1000, now), /older than 24 hours/)
  t.match(checkWindow(now - 1000, now - 1000, now), /earlier than to_date/)
  t.match(checkWindow(now - 60_000, now + 60_000, now), /in the future/)
})

t.test('a replay re-delivers exactly the events of its window, then reports its state', async (t) => {
  const rt = await startWebhooks(t)
  const { id, receiver, webhookId } = await registerWebhook(t, rt)
  const base = Math.floor(Date.now() / MINUTE) * MINUTE
  const at = (minutesAgo: number, seconds = 0) => new Date(base - minutesAgo * MINUTE + seconds * 1000).toISOString()
  const events = {
    before: deliveryMessage({ appId: id.app.id, webhookId, createdAt: at(150, 30), text: 'before' }),
    atFrom: deliveryMessage({ appId: id.app.id, webhookId, createdAt: at(140), text: 'at from' }),
    inside: deliveryMessage({ appId: id.app.id, webhookId, createdAt: at(130, 30), text: 'inside' }),
    failed: deliveryMessage({ appId: id.app.id, webhookId, createdAt: at(120, 30), text: 'fail-me' }),
    atTo: deliveryMessage({ appId: id.app.id, webhookId, createdAt: at(100), text: 'at to' }),
    after: deliveryMessage({ appId: id.app.id, webhookId, createdAt: at(70), text: 'after' })
  }
  receiver.onPost = (p) => ({ status: p.body.includes('fail-me') ? 500 : 200 })
  await publishDeliveries(rt, Object.values(events))
  await eventually(() => receiver.accepted.length === 5 && receiver.posts.length === 8, 10_000)
  const initial = receiver.posts.length

  // Replays are slow to answer, so the job is still running when a second one is asked for.
  receiver.onPost = () => ({ status: 200, delayMs: 250 })
  const replay = (from: string, to: string) => bearerRequest('POST', `${rt.baseUrl}/2/webhooks/replay`, id.bearer, { json: { webhook_id: webhookId, from_date: from, to_date: to } })
  const from = formatReplayDate(base - 140 * MINUTE)
  const to = formatReplayDate(base - 100 * MINUTE)
  const created = await replay(from, to)
  t.equal(created.status, 200, created.text)
  const job = created.json<{ data: { job_id: string; created_at: string } }>().data
  t.equal(openApiErrors('ReplayJobCreateResponse', job), undefined)
  t.match(job.job_id, /^[0-9]{1,19}$/)

  const second = await replay(from, to)
  t.equal(second.status, 409)
  t.equal(openApiErrors('ConflictProblem', second.json()), undefined)
  t.match(second.json(), { type: 'https://api.twitter.com/2/problems/conflict', title: 'Conflict', status: 409 })

  await eventually(() => receiver.posts.some((p) => 'replay_job_status' in p.json), 10_000)
  const replayed = receiver.posts.slice(initial).filter((p) => !('replay_job_status' in p.json))
  t.same(
    replayed.map((p) => p.body).sort(),
    [events.atFrom, events.inside, events.failed].map((m) => JSON.stringify(m.envelope)).sort(),
    'from is inclusive, to exclusive; delivered and failed (attempted) events alike'
  )
  t.ok(receiver.posts.every((p) => p.signatureValid))
  const status = receiver.posts.find((p) => 'replay_job_status' in p.json)
  t.same(status?.json, {
    replay_job_status: { webhook_id: webhookId, job_state: 'Complete', job_state_description: 'Job completed successfully', job_id: job.job_id }
  })

  // The webhook is free for the next job; a job whose events fail ends Incomplete.
  receiver.onPost = (p) => ({ status: 'replay_job_status' in p.json ? 200 : 500 })
  const next = await replay(from, to)
  t.equal(next.status, 200, next.text)
  const nextId = next.json<{ data: { job_id: string } }>().data.job_id
  await eventually(() => receiver.posts.some((p) => (p.json.replay_job_status as { job_id?: string } | undefined)?.job_id === nextId), 10_000)
  const incomplete = receiver.posts.find((p) => (p.json.replay_job_status as { job_id?: string } | undefined)?.job_id === nextId)
  t.match(incomplete?.json, { replay_job_status: { job_state: 'Incomplete', job_state_description: 'Job failed to deliver all events, please retry your replay job' } })
})

t.test('replay requests are validated', async (t) => {
  const rt = await startWebhooks(t)
  const { id, receiver, webhookId } = await registerWebhook(t, rt)
  const now = Date.now()
  const replay = (body: Record<string, unknown>) => bearerRequest('POST', `${rt.baseUrl}/2/webhooks/replay`, id.bearer, { json: body })
  const hourAgo = formatReplayDate(now - 3_600_000)
  const twoHoursAgo = formatReplayDate(now - 7_200_000)
  const cases: Array<[Record<string, unknown>, RegExp]> = [
    [{ webhook_id: webhookId, from_date: hourAgo, to_date: twoHoursAgo }, /^QueryParamInvalid: from_date must be earlier than to_date/],
    [{ webhook_id: webhookId, from_date: formatReplayDate(now - 25 * 3_600_000), to_date: hourAgo }, /^QueryParamInvalid: from_date is older than 24 hours/],
    [{ webhook_id: webhookId, from_date: hourAgo, to_date: formatReplayDate(now + 3_600_000) }, /^QueryParamInvalid: to_date is in the future/],
    [{ webhook_id: webhookId, from_date: '202513010000', to_date: hourAgo }, /^QueryParamInvalid: from_date is not a valid/],
    [{ webhook_id: webhookId, from_date: '2025', to_date: hourAgo }, /^QueryParamInvalid: The `from_date` field must match pattern/],
    [{ webhook_id: webhookId, from_date: twoHoursAgo }, /^QueryParamInvalid: The `to_date` field is required/],
    [{ webhook_id: 'abc', from_date: twoHoursAgo, to_date: hourAgo }, /^WebhookIdInvalid: /]
  ]
  for (const [body, message] of cases) {
    const res = await replay(body)
    t.equal(res.status, 400, JSON.stringify(body))
    t.equal(openApiErrors('InvalidRequestProblem', res.json()), undefined)
    t.match(firstMessage(res), message)
  }
  // A well-formed id that names no webhook of this app: resource-not-found.
  const unknown = await replay({ webhook_id: '1234', from_date: twoHoursAgo, to_date: hourAgo })
  t.equal(unknown.status, 404)
  t.match(unknown.json(), { type: 'https://api.twitter.com/2/problems/resource-not-found', parameter: 'webhook_id', resource_id: '1234', resource_type: 'webhook', value: '1234' })
  t.equal(openApiErrors('ResourceNotFoundProblem', unknown.json()), undefined)
  receiver.crcMode = 'wrong'
  t.equal((await bearerRequest('PUT', `${rt.baseUrl}/2/webhooks/${webhookId}`, id.bearer)).status, 400)
  const invalid = await replay({ webhook_id: webhookId, from_date: twoHoursAgo, to_date: hourAgo })
  t.equal(invalid.status, 400)
  t.match(firstMessage(invalid), /^CrcValidationFailed: /)
})

/** Three delivered events a few minutes old, and a replay of their window; returns the job id. */
async function replayThree(t: TapTest, rt: Runtime, reg: Registered): Promise<{ jobId: string; bodies: string[] }> {
  const { id, receiver, webhookId } = reg
  const base = Math.floor(Date.now() / MINUTE) * MINUTE
  const events = [13, 12, 11].map((m) => deliveryMessage({ appId: id.app.id, webhookId, createdAt: new Date(base - m * MINUTE).toISOString(), text: `minute ${m}` }))
  await publishDeliveries(rt, events)
  await eventually(() => receiver.accepted.length === 3, 10_000)
  const res = await bearerRequest('POST', `${rt.baseUrl}/2/webhooks/replay`, id.bearer, {
    json: { webhook_id: webhookId, from_date: formatReplayDate(base - 20 * MINUTE), to_date: formatReplayDate(base - 5 * MINUTE) }
  })
  t.equal(res.status, 200, res.text)
  return { jobId: res.json<{ data: { job_id: string } }>().data.job_id, bodies: events.map((e) => JSON.stringify(e.envelope)) }
}

async function finishedJob(rt: Runtime, jobId: string): Promise<Record<string, unknown>> {
  return eventually(async () => {
    const res = await plainRequest('GET', `${rt.baseUrl}/admin/webhooks/replay-jobs/${jobId}`, { headers: { authorization: `Bearer ${FAST_ENV.OPERATOR_TOKEN}` } })
    const job = res.json<{ data: Record<string, unknown> }>().data
    return job.state !== 'running' ? job : undefined
  }, 10_000)
}

async function webhookState(rt: Runtime, webhookId: string): Promise<Record<string, string>> {
  return rt.ctx.store.hgetall(`webhooks:config:${webhookId}`)
}

t.test('a 410 during a replay disables the webhook and ends the job', async (t) => {
  // One replay request at a time, so "nothing after the 410" is exact.
  const rt = await startWebhooks(t, { env: { WEBHOOK_CONCURRENCY: '1' } })
  const reg = await registerWebhook(t, rt)
  const { receiver, webhookId } = reg
  // The three original deliveries succeed; the replay is answered 410 Gone.
  receiver.onPost = (_p, n) => ({ status: n <= 3 ? 200 : 410 })
  const { jobId } = await replayThree(t, rt, reg)
  const job = await finishedJob(rt, jobId)
  t.match(job, { state: 'Incomplete' })
  t.equal(receiver.posts.length, 4, 'one replayed event was answered 410; nothing was sent after it, not even the job status')
  const state = await webhookState(rt, webhookId)
  t.equal(state.valid, 'false')
  t.ok(state.disabled_at, 'disabled as a delivery 410 would')
  t.equal(metricValue(await metricsText(rt), 'webhook_deliveries_total', { outcome: 'gone' }), 1)
})

t.test('a webhook that turns invalid during a replay is sent nothing more', async (t) => {
  const rt = await startWebhooks(t, { env: { WEBHOOK_CONCURRENCY: '1', WEBHOOK_TIMEOUT: '10s' } })
  const reg = await registerWebhook(t, rt)
  const { id, receiver, webhookId } = reg
  const firstReplayed = gate()
  const held = gate()
  let seen = 0
  receiver.onPost = () => {
    seen++
    if (seen === 4) {
      // The first replayed event: held until the webhook has been made invalid.
      firstReplayed.open()
      return { status: 200, release: held.promise }
    }
    return { status: 200 }
  }
  const { jobId } = await replayThree(t, rt, reg)
  await firstReplayed.promise
  receiver.crcMode = 'wrong'
  t.equal((await bearerRequest('PUT', `${rt.baseUrl}/2/webhooks/${webhookId}`, id.bearer)).status, 400)
  t.equal((await webhookState(rt, webhookId)).valid, 'false')
  held.open()
  const job = await finishedJob(rt, jobId)
  t.match(job, { state: 'Incomplete' })
  t.equal(receiver.posts.length, 4, 'the two remaining events and the job status were not sent to the invalid webhook')
})
