import t, { type Test } from 'tap'
import type { Runtime } from '../../services/common/runtime'
import { schemaRegistry } from '../../services/common/schemas'
import type { Store } from '../../services/common/store/types'
import { dayKey, UsageKeys } from '../../services/common/usage'
import { HeldKeys } from '../../services/webhooks/delivery/usage-gate'
import { bearerRequest, oauth1Request } from '../support/http'
import { startReceiver, type Receiver } from '../support/receivers'
import { createIdentity, startTestRuntime, type TestIdentity } from '../support/runtime'
import { eventually } from '../support/util'
import { ingest, nextUserId, openApiErrors, openHttpStream, subscribe } from '../support/fixtures/activity'
import { startRedis, redisStore } from '../support/infra'
import { run as runApps } from '../../services/cli/apps'

/**
 * Usage caps: posts consumed counted through real deliveries
 * (webhooks and streams), GET /2/usage/tweets reporting what was delivered,
 * caps set by the operator answering 429 usage-capped, and deliveries over a
 * cap held — not lost — until the cap is raised.
 */

const OPERATOR = 'operator-token-for-usage-tests-0123456789'
const ENV = { OPERATOR_TOKEN: OPERATOR, WEBHOOK_TIMEOUT: '1500ms', WEBHOOK_RETRY_SCHEDULE: '0,200ms,400ms' }
const responseSchema = schemaRegistry().validator('http/usage-tweets#/definitions/Response')

interface UsageBody {
  data: {
    cap_reset_day?: number
    daily_client_app_usage?: Array<{ client_app_id: string; usage: Array<{ date: string; usage: number }>; usage_result_count: number }>
    daily_project_usage?: { project_id: string; usage: Array<{ date: string; usage: number }> }
    project_cap?: number
    project_id?: string
    project_usage?: number
  }
}

function todayIso(): string {
  return `${new Date().toISOString().slice(0, 10)}T00:00:00.000Z`
}

async function admin(rt: Runtime, method: string, path: string, body?: unknown, token = OPERATOR): Promise<{ status: number; json: <T>() => T; text: string }> {
  const res = await fetch(`${rt.baseUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {})
  })
  const text = await res.text()
  return { status: res.status, text, json: <T>() => JSON.parse(text) as T }
}

/** An app with a webhook on a live receiver and a post.create subscription naming it. */
async function webhookApp(t: Test, rt: Runtime): Promise<{ id: TestIdentity; receiver: Receiver; webhookId: string; userId: string }> {
  const id = await createIdentity(rt.ctx.store)
  const receiver = await startReceiver(t, id.app.consumer_secret)
  const res = await bearerRequest('POST', `${rt.baseUrl}/2/webhooks`, id.bearer, { json: { url: receiver.url } })
  if (res.status !== 200) throw new Error(`webhook: ${res.status} ${res.text}`)
  const webhookId = res.json<{ data: { id: string } }>().data.id
  const userId = nextUserId()
  await subscribe(rt.baseUrl, id.bearer, { event_type: 'post.create', filter: { user_id: userId }, webhook_id: webhookId })
  return { id, receiver, webhookId, userId }
}

function posts(userId: string, n: number, text = 'post'): Array<Record<string, unknown>> {
  return Array.from({ length: n }, (_, i) => ({
    event_type: 'post.create',
    user_id: userId,
    created_at: new Date().toISOString(),
    payload: { id: `14458805484723${String(i).padStart(5, '0')}`, text: `${text} ${i}`, author_id: userId, created_at: '2021-10-06T22:43:21.000Z', edit_history_tweet_ids: ['1445880548472328192'] }
  }))
}

async function usage(rt: Runtime, bearer: string, query = 'usage.fields=cap_reset_day,daily_client_app_usage,daily_project_usage,project_cap,project_id,project_usage'): Promise<UsageBody> {
  const res = await bearerRequest('GET', `${rt.baseUrl}/2/usage/tweets?${query}`, bearer)
  if (res.status !== 200) throw new Error(`usage: ${res.status} ${res.text}`)
  const body = res.json<UsageBody>()
  if (!responseSchema(body)) throw new Error(`usage response off its schema: ${JSON.stringify(responseSchema.errors)}`)
  return body
}

function appUsage(body: UsageBody, appId: string): number {
  return (body.data.daily_client_app_usage ?? []).find((a) => a.client_app_id === appId)?.usage.reduce((s, d) => s + d.usage, 0) ?? 0
}

async function countingScenario(t: Test, rt: Runtime): Promise<void> {
  const hook = await webhookApp(t, rt)
  const streamer = await createIdentity(rt.ctx.store)
  const streamUser = nextUserId()
  await subscribe(rt.baseUrl, streamer.bearer, { event_type: 'post.create', filter: { user_id: streamUser } })
  const stream = await openHttpStream(rt.baseUrl, streamer.bearer)
  t.teardown(() => stream.close())
  t.equal(stream.status, 200)

  t.equal((await ingest(rt.baseUrl, [...posts(hook.userId, 3, 'hook'), ...posts(streamUser, 2, 'stream')], OPERATOR)).status, 200)
  await eventually(() => hook.receiver.accepted.length >= 3, 10_000)
  await stream.waitFor((m) => m.filter((x) => x.data).length >= 2, 10_000)

  // The counts land with the batches that delivered them (the stream's just after its write): watch the store, then ask once.
  const today = dayKey(Date.now())
  await eventually(async () => (await rt.ctx.store.get(UsageKeys.appDay(streamer.app.id, today))) === '2', 5000, 100)
  const body = await usage(rt, hook.id.bearer)
  t.equal(hook.receiver.accepted.length, 3, 'three webhook deliveries')
  t.equal(appUsage(body, hook.id.app.id), 3, 'the webhook app consumed what it was delivered')
  t.equal(appUsage(body, streamer.app.id), 2, 'the stream app consumed what was written to its stream')
  const mine = body.data.daily_client_app_usage?.find((a) => a.client_app_id === hook.id.app.id)
  t.same(mine?.usage, [{ date: todayIso(), usage: 3 }], 'one entry, today (UTC midnight)')
  t.equal(mine?.usage_result_count, 1)
  t.same(body.data.daily_project_usage?.usage, [{ date: todayIso(), usage: 5 }], 'the project: every app')
  t.equal(body.data.project_usage, 5, 'the billing cycle total')
  t.equal(body.data.cap_reset_day, 1)
  t.equal(body.data.daily_project_usage?.project_id, body.data.project_id)
  t.notOk('project_cap' in body.data, 'no project cap configured: none reported')

  // The platform's default fields without usage.fields.
  const plain = await usage(rt, hook.id.bearer, '')
  t.same(Object.keys(plain.data).sort(), ['cap_reset_day', 'project_id', 'project_usage'])
  t.equal(plain.data.project_usage, 5)

  // The same event delivered again by the bus (at least once) counts nothing more.
  const key = UsageKeys.appDay(hook.id.app.id, dayKey(Date.now()))
  t.equal(await rt.ctx.store.get(key), '3', 'the per-app per-day counter in the store')
}

t.test('posts delivered to webhooks and streams are counted per app per day and reported (memory store)', async (t) => {
  const rt = await startTestRuntime(t, { env: ENV })
  await countingScenario(t, rt)
})

t.test('the same on Redis', async (t) => {
  const redis = await startRedis(t)
  const store: Store = await redisStore(t, redis)
  const rt = await startTestRuntime(t, { env: ENV, store })
  await countingScenario(t, rt)
})

t.test('a webhook app over its daily cap: 429 usage-capped on replay and stream, deliveries held then released', async (t) => {
  const rt = await startTestRuntime(t, { env: ENV })
  const hook = await webhookApp(t, rt)
  const appId = hook.id.app.id

  // Operator route authorization.
  t.equal((await admin(rt, 'PUT', `/admin/apps/${appId}/usage-caps`, { daily: 2 }, 'not-the-operator-token-000000000000')).status, 401)
  const noToken = await fetch(`${rt.baseUrl}/admin/apps/${appId}/usage-caps`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: '{"daily":2}' })
  t.equal(noToken.status, 401)
  const asApp = await bearerRequest('PUT', `${rt.baseUrl}/admin/apps/${appId}/usage-caps`, hook.id.bearer, { json: { daily: 2 } })
  t.equal(asApp.status, 401, 'an app bearer is not the operator')
  t.equal((await admin(rt, 'PUT', `/admin/apps/${appId}/usage-caps`, { daily: -1 })).status, 400, 'a negative cap is refused')
  t.equal((await admin(rt, 'PUT', `/admin/apps/${appId}/usage-caps`, {})).status, 400, 'an empty change is refused')
  t.equal((await admin(rt, 'PUT', '/admin/apps/123456/usage-caps', { daily: 2 })).status, 404, 'an unknown app')

  const set = await admin(rt, 'PUT', `/admin/apps/${appId}/usage-caps`, { daily: 2 })
  t.equal(set.status, 200, set.text)
  t.match(set.json(), { data: { app_id: appId, caps: { daily: 2, monthly: 0 }, own: { daily: 2 }, today: 0 } })

  await ingest(rt.baseUrl, posts(hook.userId, 5, 'capped'), OPERATOR)
  await eventually(() => hook.receiver.accepted.length >= 2, 10_000)
  const held = await eventually(async () => ((await rt.ctx.store.zcard(HeldKeys.queue(appId))) === 3 ? 3 : undefined), 5000)
  t.equal(held, 3, 'the three over the cap are held, not dropped')
  await new Promise((r) => setTimeout(r, 300))
  t.equal(hook.receiver.accepted.length, 2, 'only the cap was delivered')
  const shown = await admin(rt, 'GET', `/admin/apps/${appId}/usage`)
  t.match(shown.json(), { data: { today: 2, capped: { period: 'Daily', scope: 'Account' } } })

  // v2 calls that consume posts answer 429 usage-capped.
  const stamp = (ms: number): string => new Date(ms).toISOString().replace(/[-T:]/g, '').slice(0, 12)
  const replay = await bearerRequest('POST', `${rt.baseUrl}/2/webhooks/replay`, hook.id.bearer, {
    json: { webhook_id: hook.webhookId, from_date: stamp(Date.now() - 3_600_000), to_date: stamp(Date.now() - 60_000) }
  })
  t.equal(replay.status, 429, replay.text)
  t.match(replay.headers.get('content-type'), /^application\/problem\+json/)
  const problem = replay.json<Record<string, unknown>>()
  t.same(problem, { title: 'UsageCapExceeded', detail: 'Usage cap exceeded: Daily account cap', type: 'https://api.twitter.com/2/problems/usage-capped', status: 429, period: 'Daily', scope: 'Account' })
  t.equal(openApiErrors('UsageCapExceededProblem', problem), undefined, 'the OpenAPI UsageCapExceededProblem')
  const stream = await bearerRequest('GET', `${rt.baseUrl}/2/activity/stream`, hook.id.bearer)
  t.equal(stream.status, 429, 'a stream connection is refused too')
  t.match(stream.json(), { type: 'https://api.twitter.com/2/problems/usage-capped', period: 'Daily', scope: 'Account' })
  // Reading the usage report consumes no posts: it still answers.
  t.equal(appUsage(await usage(rt, hook.id.bearer), appId), 2)

  // The operator raises the cap: the held deliveries go out, oldest first, and count.
  t.equal((await admin(rt, 'PUT', `/admin/apps/${appId}/usage-caps`, { daily: 10 })).status, 200)
  await eventually(() => hook.receiver.accepted.length >= 5, 15_000)
  const texts = hook.receiver.accepted.map((p) => (JSON.parse(p.body) as { data: { payload: { text: string } } }).data.payload.text)
  t.same(texts.slice(2).sort(), ['capped 2', 'capped 3', 'capped 4'], 'the held ones, none lost')
  // A release is counted and leaves its queue once its deliveries are durable: their first attempts' outcomes.
  await eventually(async () => (await rt.ctx.store.zcard(HeldKeys.queue(appId))) === 0, 5000).catch(() => undefined)
  t.equal(await rt.ctx.store.zcard(HeldKeys.queue(appId)), 0, 'nothing left held')
  await eventually(async () => appUsage(await usage(rt, hook.id.bearer), appId) === 5, 5000).catch(() => undefined)
  t.equal(appUsage(await usage(rt, hook.id.bearer), appId), 5, 'usage equals what was delivered')

  // Back to the default (none): null.
  const cleared = await admin(rt, 'PUT', `/admin/apps/${appId}/usage-caps`, { daily: null })
  t.match(cleared.json(), { data: { caps: { daily: 0 }, own: {} } })
})

t.test('a stream over its cap gets the usage-capped line and is closed; the project cap answers scope Product', async (t) => {
  const rt = await startTestRuntime(t, { env: { ...ENV, USAGE_PROJECT_CAP: '3' } })
  const id = await createIdentity(rt.ctx.store)
  const userId = nextUserId()
  await subscribe(rt.baseUrl, id.bearer, { event_type: 'post.create', filter: { user_id: userId } })
  const stream = await openHttpStream(rt.baseUrl, id.bearer)
  t.teardown(() => stream.close())
  await ingest(rt.baseUrl, posts(userId, 5, 's'), OPERATOR)
  const messages = await stream.waitFor((m) => m.some((x) => x.errors), 10_000)
  await stream.ended
  const events = messages.filter((m) => m.data)
  t.equal(events.length, 3, 'the project cap worth of events')
  const line = messages.find((m) => m.errors)?.errors?.[0]
  t.match(line, { type: 'https://api.twitter.com/2/problems/usage-capped', period: 'Monthly', scope: 'Product', detail: 'Usage cap exceeded: Monthly product cap' })
  t.equal(openApiErrors('UsageCapExceededProblem', line), undefined)
  const again = await bearerRequest('GET', `${rt.baseUrl}/2/activity/stream`, id.bearer)
  t.equal(again.status, 429)
  const report = await usage(rt, id.bearer)
  t.equal(report.data.project_cap, 3)
  t.equal(report.data.project_usage, 3)
  t.equal(appUsage(report, id.app.id), 3)
})

t.test('bad usage requests get invalid-request or the authentication Problem, never a 500', async (t) => {
  const rt = await startTestRuntime(t, { env: ENV })
  const id = await createIdentity(rt.ctx.store)
  for (const query of ['days=0', 'days=abc', 'days=91', 'days=1.5', 'usage.fields=nope', 'usage.fields=project_id,,', 'extra=1']) {
    const res = await bearerRequest('GET', `${rt.baseUrl}/2/usage/tweets?${query}`, id.bearer)
    t.equal(res.status, 400, `${query}: ${res.text}`)
    t.match(res.headers.get('content-type'), /^application\/problem\+json/)
    t.equal(openApiErrors('InvalidRequestProblem', res.json()), undefined, `${query}: InvalidRequestProblem`)
  }
  const named = await bearerRequest('GET', `${rt.baseUrl}/2/usage/tweets?usage.fields=project_id,nope`, id.bearer)
  t.match(named.json(), { errors: [{ parameters: { 'usage.fields': ['nope'] } }] })
  t.equal((await bearerRequest('GET', `${rt.baseUrl}/2/usage/tweets?days=90`, id.bearer)).status, 200)
  const user = await oauth1Request('GET', `${rt.baseUrl}/2/usage/tweets`, id)
  t.equal(user.status, 403, 'app-only, as the platform')
  t.match(user.json(), { type: 'https://api.twitter.com/2/problems/unsupported-authentication' })
  const none = await fetch(`${rt.baseUrl}/2/usage/tweets`)
  t.equal(none.status, 401)
})

t.test('the CLI (make app-caps): show usage, set and clear caps, refuse bad values', async (t) => {
  const rt = await startTestRuntime(t, { env: ENV })
  const id = await createIdentity(rt.ctx.store)
  const env = { GATEWAY_URL: rt.baseUrl, OPERATOR_TOKEN: OPERATOR }
  const io = (): { env: NodeJS.ProcessEnv; out: (s: string) => void; err: (s: string) => void; text: () => string; errText: () => string } => {
    let out = ''
    let err = ''
    return { env, out: (s) => (out += s), err: (s) => (err += s), text: () => out, errText: () => err }
  }
  const shown = io()
  t.equal(await runApps(['usage', '--id', id.app.id], shown), 0, shown.errText())
  t.match(shown.text(), /daily cap:\s+none \(default\)/)
  t.match(shown.text(), /capped:\s+no/)
  const set = io()
  t.equal(await runApps(['caps', '--id', id.app.id, '--daily', '5', '--monthly', '100', '--json'], set), 0, set.errText())
  t.match(JSON.parse(set.text()), { app_id: id.app.id, caps: { daily: 5, monthly: 100 }, own: { daily: 5, monthly: 100 } })
  const cleared = io()
  t.equal(await runApps(['caps', '--id', id.app.id, '--daily', 'default'], cleared), 0, cleared.errText())
  t.match(cleared.text(), /daily cap:\s+none \(default\)/)
  t.match(cleared.text(), /monthly cap:\s+100\n/)
  const bad = io()
  t.equal(await runApps(['caps', '--id', id.app.id, '--daily', '-3'], bad), 2, 'a bad value is a usage error')
  const unknown = io()
  t.equal(await runApps(['usage', '--id', '999'], unknown), 1)
  t.match(unknown.errText(), /404/)
})
