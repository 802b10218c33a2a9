import t from 'tap'
import { Webhook as StandardVerifier } from 'standardwebhooks'
import { newStandardSecret } from '../../services/webhooks/signature'
import { WebhookKeys } from '../../services/webhooks/keys'
import { deliveryMessage, FAST_ENV, openApiErrors, publishDeliveries, startWebhooks } from '../support/fixtures/webhooks'
import { bearerRequest, plainRequest } from '../support/http'
import { type ReceivedPost, startReceiver } from '../support/receivers'
import { createIdentity } from '../support/runtime'
import { sleep, eventually } from '../support/util'
import { formatReplayDate } from '../../services/webhooks/replay'

/**
 * Standard Webhooks signing, opt-in per webhook, checked the way a receiver
 * checks it: every delivery that reached a loopback receiver is verified
 * with the `standardwebhooks` library (its Webhook.verify, as receivers call
 * it), next to the platform's own header, which every delivery keeps.
 */

const ADMIN = { authorization: `Bearer ${FAST_ENV.OPERATOR_TOKEN}` }
const MINUTE = 60_000
const STANDARD_HEADERS = ['webhook-id', 'webhook-timestamp', 'webhook-signature']

interface Signing {
  enabled: boolean
  secret?: string
  previous_secret_expires_at?: string
}

/** The request's Standard Webhooks headers as the library takes them. */
function headersOf(p: ReceivedPost): Record<string, string> {
  const out: Record<string, string> = {}
  for (const name of STANDARD_HEADERS) {
    const v = p.headers[name]
    if (typeof v === 'string') out[name] = v
  }
  return out
}

/**
 * The library's verdict on a received request, its clock at `nowMs` (the
 * time a receiver would get it; verify is synchronous, so nothing else sees
 * the clock moved): undefined when it verifies, else the library's error.
 */
function verdict(secret: string, p: ReceivedPost, nowMs = Date.now()): string | undefined {
  const realNow = Date.now
  Date.now = () => nowMs
  try {
    new StandardVerifier(secret).verify(p.body, headersOf(p))
    return undefined
  } catch (err) {
    return (err as Error).message
  } finally {
    Date.now = realNow
  }
}

function standardHeaderNames(p: ReceivedPost): string[] {
  return Object.keys(p.headers).filter((h) => h.startsWith('webhook-'))
}

t.test('created with standard_webhooks: each delivery and retry verifies with the library; a capture replayed past its tolerance does not', async (t) => {
  // The retry a little over a second after the first attempt: each has its own webhook-timestamp.
  const rt = await startWebhooks(t, { env: { WEBHOOK_RETRY_SCHEDULE: '0,1100ms' } })
  const id = await createIdentity(rt.ctx.store)
  const receiver = await startReceiver(t, id.app.consumer_secret)
  const created = await bearerRequest('POST', `${rt.baseUrl}/2/webhooks`, id.bearer, { json: { url: receiver.url, standard_webhooks: true } })
  t.equal(created.status, 200, 'created with the option')
  const data = created.json<{ data: { id: string; standard_webhooks: Signing } }>().data
  t.equal(openApiErrors('WebhookConfigCreateResponse', data), undefined, "the answer is still the platform's WebhookConfig")
  t.match(data.standard_webhooks, { enabled: true, secret: /^whsec_[A-Za-z0-9+/]{43}=$/ }, 'the secret, shown once: whsec_ and 32 bytes in base64')
  const secret = data.standard_webhooks.secret as string
  const webhookId = data.id
  t.equal((await rt.ctx.store.hgetall(WebhookKeys.config(webhookId))).signing_secret, secret, "kept in the webhook's config record")

  // Never shown again: not by the list, not by the operator's views.
  const listed = await bearerRequest('GET', `${rt.baseUrl}/2/webhooks`, id.bearer)
  t.equal(openApiErrors('Get2WebhooksResponse', listed.json()), undefined)
  t.match(listed.json(), { data: [{ id: webhookId, standard_webhooks: { enabled: true } }] }, 'the list says signing is on')
  const secretPart = secret.slice('whsec_'.length)
  for (const [what, res] of [
    ['GET /2/webhooks', listed],
    ['GET /admin/webhooks', await plainRequest('GET', `${rt.baseUrl}/admin/webhooks`, { headers: ADMIN })],
    ['GET /admin/webhooks/{id}', await plainRequest('GET', `${rt.baseUrl}/admin/webhooks/${webhookId}`, { headers: ADMIN })]
  ] as const) {
    t.equal(res.status, 200, what)
    t.notOk(res.text.includes(secretPart) || res.text.includes('whsec_'), `${what} shows no secret`)
  }

  // The first attempt of each delivery is refused, the retry accepted.
  const refusedOnce = new Set<string>()
  receiver.onPost = (p) => {
    const deliveryId = String(p.headers['webhook-id'])
    if (refusedOnce.has(deliveryId)) return { status: 200 }
    refusedOnce.add(deliveryId)
    return { status: 500 }
  }
  const messages = ['ünïcødé "signed"', 'second'].map((text) => deliveryMessage({ appId: id.app.id, webhookId, text }))
  await publishDeliveries(rt, messages)
  await eventually(() => receiver.accepted.length === 2, 10_000)
  t.equal(receiver.posts.length, 4, 'two deliveries, two attempts each')
  for (const [i, p] of receiver.posts.entries()) {
    t.equal(verdict(secret, p), undefined, `attempt ${i + 1} verifies with the library`)
    t.ok(p.signatureValid, `attempt ${i + 1} still carries a valid x-twitter-webhooks-signature`)
    const timestamp = Number(p.headers['webhook-timestamp'])
    t.ok(Number.isInteger(timestamp) && Math.abs(timestamp - Math.floor(p.at / 1000)) <= 1, `webhook-timestamp is the attempt's time in seconds (${timestamp})`)
  }
  for (const m of messages) {
    const attempts = receiver.posts.filter((p) => p.headers['webhook-id'] === m.delivery_id)
    t.equal(attempts.length, 2, 'webhook-id is the delivery id, the same on both attempts')
    t.ok(Number(attempts[1]?.headers['webhook-timestamp']) > Number(attempts[0]?.headers['webhook-timestamp']), 'the retry has its own, later webhook-timestamp')
  }

  // Someone who captured a delivery sends it again later: the receiver's timestamp check refuses it.
  const captured = receiver.accepted[0] as ReceivedPost
  t.equal(verdict(secret, captured, captured.at + MINUTE), undefined, 'a minute after, the capture still verifies')
  t.equal(verdict(secret, captured, captured.at + 5 * MINUTE + 2000), 'Message timestamp too old', 'past five minutes the library refuses it')
  t.equal(verdict(newStandardSecret(), captured), 'No matching signature found', 'another secret does not verify it')
  const changed = captured.body.replace('post.create', 'post.delete')
  t.not(changed, captured.body)
  t.equal(verdict(secret, { ...captured, body: changed }), 'No matching signature found', 'nor a changed body')
})

t.test('without the option: the platform answers unchanged and deliveries carry no webhook-* header', async (t) => {
  const rt = await startWebhooks(t, { env: { WEBHOOK_LIMIT_PER_APP: '3' } })
  const id = await createIdentity(rt.ctx.store)
  const receiver = await startReceiver(t, id.app.consumer_secret)
  for (const body of [{ url: receiver.url }, { url: receiver.urlFor('/explicitly-off'), standard_webhooks: false }]) {
    const res = await bearerRequest('POST', `${rt.baseUrl}/2/webhooks`, id.bearer, { json: body })
    t.equal(res.status, 200, res.text)
    t.same(Object.keys(res.json<{ data: object }>().data).sort(), ['created_at', 'id', 'url', 'valid'], `create ${JSON.stringify(body)}: the platform's fields only`)
  }
  const listed = await bearerRequest('GET', `${rt.baseUrl}/2/webhooks`, id.bearer)
  const webhooks = listed.json<{ data: Array<Record<string, unknown>> }>().data
  t.ok(webhooks.length === 2 && webhooks.every((w) => Object.keys(w).sort().join() === 'created_at,id,url,valid'), "the list: the platform's fields only")
  const webhookId = String(webhooks[0]?.id)
  t.match((await bearerRequest('PUT', `${rt.baseUrl}/2/webhooks/${webhookId}`, id.bearer)).json(), { data: { attempted: true } }, 'PUT is still the CRC trigger')
  const bad = await bearerRequest('POST', `${rt.baseUrl}/2/webhooks`, id.bearer, { json: { url: receiver.urlFor('/bad'), standard_webhooks: 'yes' } })
  t.equal(bad.status, 400, 'a malformed option is a 400')
  t.equal(openApiErrors('InvalidRequestProblem', bad.json()), undefined)

  await publishDeliveries(rt, webhooks.map((w) => deliveryMessage({ appId: id.app.id, webhookId: String(w.id) })))
  await eventually(() => receiver.accepted.length === 2, 10_000)
  t.ok(receiver.posts.every((p) => p.signatureValid), 'the platform header verifies')
  t.same(receiver.posts.flatMap(standardHeaderNames), [], 'no webhook-* header')
  t.equal(verdict(newStandardSecret(), receiver.posts[0] as ReceivedPost), 'Missing required headers', 'so the library has nothing to verify')
})

t.test('turned on later, rotated: both secrets verify during the overlap, only the new one after; turned off again', async (t) => {
  const rt = await startWebhooks(t)
  const id = await createIdentity(rt.ctx.store)
  const receiver = await startReceiver(t, id.app.consumer_secret)
  const created = await bearerRequest('POST', `${rt.baseUrl}/2/webhooks`, id.bearer, { json: { url: receiver.url } })
  const webhookId = created.json<{ data: { id: string } }>().data.id
  const patch = (json: unknown) => bearerRequest('PATCH', `${rt.baseUrl}/2/webhooks/${webhookId}`, id.bearer, { json })
  const rotate = (json?: unknown) => bearerRequest('POST', `${rt.baseUrl}/2/webhooks/${webhookId}/standard_webhooks/rotate`, id.bearer, json === undefined ? {} : { json })
  const signingOf = (res: { json: <T>() => T }): Signing => res.json<{ data: { standard_webhooks: Signing } }>().data.standard_webhooks
  let sent = 0
  /** One delivery now; the request the receiver got. */
  const deliver = async (): Promise<ReceivedPost> => {
    const before = receiver.posts.length
    await publishDeliveries(rt, [deliveryMessage({ appId: id.app.id, webhookId, text: `delivery ${++sent}` })])
    await eventually(() => receiver.posts.length === before + 1, 10_000)
    return receiver.posts[before] as ReceivedPost
  }

  const notOn = await rotate()
  t.equal(notOn.status, 409, 'rotating a webhook that does not sign is a conflict')
  t.match(notOn.json(), { type: 'https://api.twitter.com/2/problems/conflict', detail: /not enabled/ })
  t.equal((await patch({ standard_webhooks: 'on' })).status, 400, 'a malformed update is a 400')
  t.equal((await patch({})).status, 400, 'so is an empty one')
  t.equal((await bearerRequest('PATCH', `${rt.baseUrl}/2/webhooks/1234`, id.bearer, { json: { standard_webhooks: true } })).status, 404, 'an unknown webhook is not found')

  const enabled = await patch({ standard_webhooks: true })
  t.equal(enabled.status, 200, 'turned on')
  const first = signingOf(enabled)
  t.match(first, { enabled: true, secret: /^whsec_/ })
  const s1 = first.secret as string
  t.equal(verdict(s1, await deliver()), undefined, 'turned on: the delivery verifies with the secret')
  const again = await patch({ standard_webhooks: true })
  t.same(signingOf(again), { enabled: true }, 'turning it on again changes nothing and shows no secret')

  // Default overlap: 24 hours.
  const rotated = await rotate()
  t.equal(rotated.status, 200, 'rotated')
  const second = signingOf(rotated)
  const s2 = second.secret as string
  t.ok(s2.startsWith('whsec_') && s2 !== s1, 'a new secret')
  const expires = Date.parse(second.previous_secret_expires_at ?? '')
  t.ok(Math.abs(expires - (Date.now() + 24 * 3_600_000)) < MINUTE, `the replaced secret is signed with for 24 h (until ${second.previous_secret_expires_at})`)
  const during = await deliver()
  t.equal(String(during.headers['webhook-signature']).split(' ').length, 2, 'two space-separated v1 signatures')
  t.equal(verdict(s2, during), undefined, 'during the overlap the new secret verifies')
  t.equal(verdict(s1, during), undefined, 'and so does the old one')
  t.ok(during.signatureValid, 'the platform header too')

  // A short overlap, then past it.
  const short = await rotate({ overlap_seconds: 2 })
  t.equal(short.status, 200, 'rotated with a 2 s overlap')
  const third = signingOf(short)
  const s3 = third.secret as string
  const duringShort = await deliver()
  t.equal(verdict(s3, duringShort), undefined, 'the newest secret verifies')
  t.equal(verdict(s2, duringShort), undefined, 'the one it replaced too, during its overlap')
  t.equal(verdict(s1, duringShort), 'No matching signature found', 'the oldest is dropped by the second rotation')
  t.equal((await rotate({ overlap_seconds: 86_401 })).status, 400, 'an overlap over 24 h is refused')
  await sleep(Math.max(0, Date.parse(third.previous_secret_expires_at ?? '') - Date.now()) + 100)
  const listedAfter = await bearerRequest('GET', `${rt.baseUrl}/2/webhooks`, id.bearer)
  t.same(listedAfter.json<{ data: Array<{ standard_webhooks?: Signing }> }>().data[0]?.standard_webhooks, { enabled: true }, 'the list no longer names an overlap')
  const after = await deliver()
  t.equal(String(after.headers['webhook-signature']).split(' ').length, 1, 'one signature after the overlap')
  t.equal(verdict(s3, after), undefined, 'the new secret verifies')
  t.equal(verdict(s2, after), 'No matching signature found', 'the old one no longer does')

  const off = await patch({ standard_webhooks: false })
  t.same(signingOf(off), { enabled: false }, 'turned off')
  const record = await rt.ctx.store.hgetall(WebhookKeys.config(webhookId))
  t.same(Object.keys(record).filter((k) => k.includes('signing')), [], 'its secrets are deleted from the record')
  const plain = await deliver()
  t.same(standardHeaderNames(plain), [], 'off: no webhook-* header')
  t.ok(plain.signatureValid)
})

t.test('a replay signs the same way: the event keeps its webhook-id', async (t) => {
  const rt = await startWebhooks(t)
  const id = await createIdentity(rt.ctx.store)
  const receiver = await startReceiver(t, id.app.consumer_secret)
  const created = await bearerRequest('POST', `${rt.baseUrl}/2/webhooks`, id.bearer, { json: { url: receiver.url, standard_webhooks: true } })
  const { id: webhookId, standard_webhooks: signing } = created.json<{ data: { id: string; standard_webhooks: Signing } }>().data
  const secret = signing.secret as string
  const base = Math.floor(Date.now() / MINUTE) * MINUTE
  const events = [13, 12].map((m) => deliveryMessage({ appId: id.app.id, webhookId, createdAt: new Date(base - m * MINUTE).toISOString(), text: `minute ${m}` }))
  await publishDeliveries(rt, events)
  await eventually(() => receiver.accepted.length === 2, 10_000)
  const res = await bearerRequest('POST', `${rt.baseUrl}/2/webhooks/replay`, id.bearer, {
    json: { webhook_id: webhookId, from_date: formatReplayDate(base - 20 * MINUTE), to_date: formatReplayDate(base - 5 * MINUTE) }
  })
  t.equal(res.status, 200, res.text)
  await eventually(() => receiver.posts.some((p) => 'replay_job_status' in p.json), 10_000)
  const replayed = receiver.posts.slice(2)
  t.equal(replayed.length, 3, 'two events and the job status')
  for (const p of replayed) {
    t.equal(verdict(secret, p), undefined, `replayed ${'replay_job_status' in p.json ? 'job status' : 'event'} verifies with the library`)
    t.ok(p.signatureValid)
  }
  t.same(
    replayed.filter((p) => !('replay_job_status' in p.json)).map((p) => p.headers['webhook-id']).sort(),
    events.map((e) => e.delivery_id).sort(),
    'each replayed event has the webhook-id of its delivery'
  )
  const status = replayed.find((p) => 'replay_job_status' in p.json) as ReceivedPost
  t.notOk(events.some((e) => e.delivery_id === status.headers['webhook-id']), `the job status is a message of its own (${String(status.headers['webhook-id'])})`)
})
