import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import https from 'node:https'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import t from 'tap'
import { WebhookKeys } from '../../services/webhooks/keys'
import { FAST_ENV, openApiErrors, registerWebhook, startWebhooks } from '../support/fixtures/webhooks'
import { bearerRequest, oauth1Request, plainRequest } from '../support/http'
import { metricsText, metricValue } from '../support/metrics'
import { startReceiver } from '../support/receivers'
import { firstMessage, type Problem } from '../support/problems'
import { createIdentity } from '../support/runtime'
import { tempDir, eventually } from '../support/util'

t.test('create, list, validate and delete round trip against a real receiver', async (t) => {
  const rt = await startWebhooks(t)
  const id = await createIdentity(rt.ctx.store)
  const receiver = await startReceiver(t, id.app.consumer_secret)

  const created = await bearerRequest('POST', `${rt.baseUrl}/2/webhooks`, id.bearer, { json: { url: receiver.url } })
  t.equal(created.status, 200, created.text)
  const data = created.json<{ data: Record<string, unknown> }>().data
  t.equal(openApiErrors('WebhookConfigCreateResponse', data), undefined, 'data is a WebhookConfigCreateResponse')
  t.match(data, { url: receiver.url, valid: true })
  t.match(data.id, /^[0-9]{1,19}$/)
  t.match(data.created_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
  t.equal(receiver.crcCount, 1, 'the create ran one CRC')

  const list = await bearerRequest('GET', `${rt.baseUrl}/2/webhooks`, id.bearer)
  t.equal(list.status, 200)
  const listed = list.json()
  t.equal(openApiErrors('Get2WebhooksResponse', listed), undefined, 'list is a Get2WebhooksResponse')
  t.same(listed, { data: [data], meta: { result_count: 1 } })

  const fields = await bearerRequest('GET', `${rt.baseUrl}/2/webhooks`, id.bearer, { query: { 'webhook_config.fields': 'id,valid' } })
  t.same(fields.json(), { data: [{ id: data.id, valid: true }], meta: { result_count: 1 } })
  const badFields = await bearerRequest('GET', `${rt.baseUrl}/2/webhooks`, id.bearer, { query: { 'webhook_config.fields': 'id,secret' } })
  t.equal(badFields.status, 400)
  t.match(firstMessage(badFields), /secret/)

  const validated = await bearerRequest('PUT', `${rt.baseUrl}/2/webhooks/${data.id}`, id.bearer)
  t.equal(validated.status, 200, validated.text)
  t.equal(openApiErrors('WebhookConfigPutResponse', validated.json()), undefined)
  t.same(validated.json(), { data: { attempted: true } })
  t.equal(receiver.crcCount, 2)

  const deleted = await bearerRequest('DELETE', `${rt.baseUrl}/2/webhooks/${data.id}`, id.bearer)
  t.equal(deleted.status, 200)
  t.equal(openApiErrors('WebhookConfigDeleteResponse', deleted.json()), undefined)
  t.same(deleted.json(), { data: { deleted: true } })
  t.same((await bearerRequest('GET', `${rt.baseUrl}/2/webhooks`, id.bearer)).json(), { data: [], meta: { result_count: 0 } })

  const again = await bearerRequest('DELETE', `${rt.baseUrl}/2/webhooks/${data.id}`, id.bearer)
  t.equal(again.status, 404)
  t.equal(openApiErrors('ResourceNotFoundProblem', again.json()), undefined)
  t.match(again.json(), { type: 'https://api.twitter.com/2/problems/resource-not-found', parameter: 'webhook_id', resource_id: data.id, resource_type: 'webhook', value: data.id })

  // The same URL can be registered again once deleted (the duplicate index was released).
  const recreated = await bearerRequest('POST', `${rt.baseUrl}/2/webhooks`, id.bearer, { json: { url: receiver.url } })
  t.equal(recreated.status, 200, recreated.text)
  t.equal(metricValue(await metricsText(rt), 'webhook_crc_checks_total', { trigger: 'create', result: 'pass' }), 2)
})

t.test('authentication per route follows the public platform', async (t) => {
  const rt = await startWebhooks(t, { env: { WEBHOOK_LIMIT_PER_APP: '3' } })
  const id = await createIdentity(rt.ctx.store)
  const receiver = await startReceiver(t, id.app.consumer_secret)

  const noAuth = await bearerRequest('POST', `${rt.baseUrl}/2/webhooks`, 'not-a-token', { json: { url: receiver.url } })
  t.equal(noAuth.status, 401)
  t.equal(openApiErrors('Error', (noAuth.json<{ errors: unknown[] }>().errors)[0]), undefined)

  // POST, PUT and DELETE accept a user-context OAuth 1.0a token too.
  const viaUser = await oauth1Request('POST', `${rt.baseUrl}/2/webhooks`, id, { json: { url: receiver.url } })
  t.equal(viaUser.status, 200, viaUser.text)
  const webhookId = viaUser.json<{ data: { id: string } }>().data.id
  t.equal((await oauth1Request('PUT', `${rt.baseUrl}/2/webhooks/${webhookId}`, id)).status, 200)

  // GET /2/webhooks and replay are bearer only.
  const listAsUser = await oauth1Request('GET', `${rt.baseUrl}/2/webhooks`, id)
  t.equal(listAsUser.status, 403)
  t.equal(openApiErrors('Problem', listAsUser.json()), undefined)
  t.match(listAsUser.json(), { type: 'https://api.twitter.com/2/problems/unsupported-authentication', title: 'Unsupported Authentication' })
  const replayAsUser = await oauth1Request('POST', `${rt.baseUrl}/2/webhooks/replay`, id, { json: { webhook_id: webhookId, from_date: '202501010000', to_date: '202501010100' } })
  t.equal(replayAsUser.status, 403)

  t.equal((await oauth1Request('DELETE', `${rt.baseUrl}/2/webhooks/${webhookId}`, id)).status, 200)

  // Another application cannot see, validate or delete this app's webhooks.
  const mine = await registerWebhook(t, rt, id)
  const other = await createIdentity(rt.ctx.store)
  t.same((await bearerRequest('GET', `${rt.baseUrl}/2/webhooks`, other.bearer)).json(), { data: [], meta: { result_count: 0 } })
  for (const method of ['PUT', 'DELETE']) {
    const res = await bearerRequest(method, `${rt.baseUrl}/2/webhooks/${mine.webhookId}`, other.bearer)
    t.equal(res.status, 404, `${method} of another app's webhook`)
    t.match(res.json(), { type: 'https://api.twitter.com/2/problems/resource-not-found', resource_id: mine.webhookId, resource_type: 'webhook' })
  }
})

t.test('the webhook routes are rate limited per app, with the x-rate-limit headers', async (t) => {
  const rt = await startWebhooks(t, { env: { RATE_LIMITS: 'webhooks=3/15m' } })
  const id = await createIdentity(rt.ctx.store)
  const remaining: string[] = []
  for (let i = 0; i < 3; i++) {
    const res = await bearerRequest('GET', `${rt.baseUrl}/2/webhooks`, id.bearer)
    t.equal(res.status, 200)
    t.equal(res.headers.get('x-rate-limit-limit'), '3')
    t.match(res.headers.get('x-rate-limit-reset'), /^\d{10}$/)
    remaining.push(res.headers.get('x-rate-limit-remaining') ?? '')
  }
  t.same(remaining, ['2', '1', '0'])
  const over = await bearerRequest('GET', `${rt.baseUrl}/2/webhooks`, id.bearer)
  t.equal(over.status, 429)
  t.same(over.json(), { errors: [{ code: 88, message: 'Rate limit exceeded' }] })
  const other = await createIdentity(rt.ctx.store)
  t.equal((await bearerRequest('GET', `${rt.baseUrl}/2/webhooks`, other.bearer)).status, 200, 'another app has its own window')
})

t.test('webhook_id must match ^[0-9]{1,19}$', async (t) => {
  const rt = await startWebhooks(t)
  const id = await createIdentity(rt.ctx.store)
  for (const bad of ['abc', '12345678901234567890', '-1', '1e5']) {
    for (const method of ['PUT', 'DELETE']) {
      const res = await bearerRequest(method, `${rt.baseUrl}/2/webhooks/${encodeURIComponent(bad)}`, id.bearer)
      t.equal(res.status, 400, `${method} ${bad}`)
      t.equal(res.headers.get('content-type'), 'application/problem+json; charset=utf-8')
      const p = res.json<Problem>()
      t.equal(openApiErrors('InvalidRequestProblem', p), undefined)
      t.equal(p.type, 'https://api.twitter.com/2/problems/invalid-request')
      t.match(firstMessage(res), /^WebhookIdInvalid: .*\^\[0-9\]\{1,19\}\$/)
      t.same(p.errors?.[0]?.parameters, { webhook_id: [bad] })
    }
  }
})

t.test('create failures carry the platform reasons', async (t) => {
  const rt = await startWebhooks(t)
  const id = await createIdentity(rt.ctx.store)
  const receiver = await startReceiver(t, id.app.consumer_secret)
  const create = (body: unknown) => bearerRequest('POST', `${rt.baseUrl}/2/webhooks`, id.bearer, { json: body })

  const missing = await create({})
  t.equal(missing.status, 400)
  t.match(firstMessage(missing), /^UrlValidationFailed: The `url` field is required/)
  const tooLong = await create({ url: `${receiver.url}?${'x'.repeat(200)}` })
  t.equal(tooLong.status, 400)
  t.match(firstMessage(tooLong), /^UrlValidationFailed: /)
  const extra = await create({ url: receiver.url, secret: 'x' })
  t.match(firstMessage(extra), /^UrlValidationFailed: The `secret` field is not allowed/)
  const notUrl = await create({ url: 'not a url' })
  t.match(firstMessage(notUrl), /^UrlValidationFailed: /)
  const ftp = await create({ url: 'ftp://127.0.0.1/hook' })
  t.match(firstMessage(ftp), /^UrlValidationFailed: The url must use https/)

  const tests: Array<[string, RegExp]> = [
    ['wrong', /^CrcValidationFailed: Invalid response_token$/],
    ['not-json', /^CrcValidationFailed: Invalid response_token/],
    ['redirect', /^CrcValidationFailed: The webhook answered 302/],
    ['error', /^CrcValidationFailed: The webhook answered 500/],
    ['hang', /^CrcValidationFailed: The webhook did not answer within 1500 ms/]
  ]
  for (const [mode, message] of tests) {
    receiver.crcMode = mode as typeof receiver.crcMode
    const res = await create({ url: receiver.url })
    t.equal(res.status, 400, `CRC ${mode} rejects the create`)
    const p = res.json<Problem>()
    t.equal(openApiErrors('InvalidRequestProblem', p), undefined)
    t.match(firstMessage(res), message, mode)
    t.same(p.errors?.[0]?.parameters, { url: [receiver.url] })
  }
  t.same((await bearerRequest('GET', `${rt.baseUrl}/2/webhooks`, id.bearer)).json<{ data: unknown[] }>().data, [], 'nothing was registered')

  receiver.crcMode = 'correct'
  t.equal((await create({ url: receiver.url })).status, 200)
  const dup = await create({ url: receiver.url })
  t.equal(dup.status, 400)
  t.match(firstMessage(dup), /^DuplicateUrlFailed: /)
  const other = await startReceiver(t, id.app.consumer_secret, '/other')
  const limited = await create({ url: other.url })
  t.equal(limited.status, 400)
  t.match(firstMessage(limited), /^WebhookLimitExceeded: .*limit of 1 webhook/)
  const text = await metricsText(rt)
  t.ok(metricValue(text, 'webhook_crc_checks_total', { trigger: 'create', result: 'invalid' }) >= 3)
  t.ok(metricValue(text, 'webhook_crc_checks_total', { trigger: 'create', result: 'transient' }) >= 2)
})

t.test('the normalised URL is stored and used; a fragment or whitespace does not make a second endpoint', async (t) => {
  const rt = await startWebhooks(t, { env: { WEBHOOK_LIMIT_PER_APP: '5' } })
  const id = await createIdentity(rt.ctx.store)
  const receiver = await startReceiver(t, id.app.consumer_secret)
  const create = (url: string) => bearerRequest('POST', `${rt.baseUrl}/2/webhooks`, id.bearer, { json: { url } })
  const upper = receiver.url.replace('http://', 'HTTP://')

  const created = await create(` \t${upper}#first\n`)
  t.equal(created.status, 200, created.text)
  t.equal(created.json<{ data: { url: string } }>().data.url, receiver.url, 'the stored URL is the parsed href, trimmed, without its fragment')
  const webhookId = created.json<{ data: { id: string } }>().data.id
  t.equal((await rt.ctx.store.hgetall(WebhookKeys.config(webhookId))).url, receiver.url)
  t.same((await bearerRequest('GET', `${rt.baseUrl}/2/webhooks`, id.bearer)).json<{ data: Array<{ url: string }> }>().data.map((w) => w.url), [receiver.url])

  for (const same of [`${receiver.url}#other`, receiver.url, ` ${receiver.url}`, `${receiver.url}#`]) {
    const dup = await create(same)
    t.equal(dup.status, 400, JSON.stringify(same))
    t.match(firstMessage(dup), /^DuplicateUrlFailed: /, JSON.stringify(same))
  }
  t.equal(receiver.crcCount, 1, 'no CRC for a duplicate')

  // Deliveries and checks go to the stored URL (the receiver only sees the path, never a fragment).
  t.equal((await bearerRequest('PUT', `${rt.baseUrl}/2/webhooks/${webhookId}`, id.bearer)).status, 200)
  t.equal(receiver.crcCount, 2)
})

t.test('a deeply nested or huge unknown field is a 400 invalid-request, never a 500', async (t) => {
  const rt = await startWebhooks(t)
  const id = await createIdentity(rt.ctx.store)
  // Written by hand: JSON.stringify itself overflows the stack on 5000 levels.
  const deep = `${'['.repeat(5000)}${']'.repeat(5000)}`
  const huge = JSON.stringify('x'.repeat(100_000))
  for (const [name, extra] of [['deep', deep], ['huge', huge]] as const) {
    const res = await fetch(`${rt.baseUrl}/2/webhooks`, {
      method: 'POST',
      headers: { authorization: `Bearer ${id.bearer}`, 'content-type': 'application/json' },
      body: `{"url":"https://example.com/hook","extra":${extra}}`
    })
    const text = await res.text()
    t.equal(res.status, 400, `${name}: ${text.slice(0, 200)}`)
    // The shared JSON parser may refuse the nesting itself; either way the answer is an invalid-request Problem.
    t.equal(openApiErrors('InvalidRequestProblem', JSON.parse(text)), undefined, name)
    t.ok(text.length < 4096, `${name}: the echo is bounded (${text.length} bytes)`)
  }
})

t.test('unknown ids get spec-valid Problems: WebhookIdInvalid on the operator API, resource-not-found on /2/, a plain 404 otherwise', async (t) => {
  const rt = await startWebhooks(t)
  const { id, webhookId } = await registerWebhook(t, rt)
  const admin = { authorization: `Bearer ${FAST_ENV.OPERATOR_TOKEN}` }
  const unknownWebhook: Array<[string, string, Record<string, unknown> | undefined]> = [
    ['GET', '/admin/webhooks/999', undefined],
    ['GET', '/admin/webhooks/999/deliveries', undefined],
    ['GET', '/admin/webhooks/999/deliveries/some-delivery', undefined],
    ['POST', '/admin/webhooks/999/resend', { since: new Date().toISOString() }],
    ['POST', '/admin/webhooks/999/replay', { from_date: '202501010000', to_date: '202501010100' }]
  ]
  for (const [method, path, json] of unknownWebhook) {
    const res = await plainRequest(method, `${rt.baseUrl}${path}`, { headers: admin, ...(json ? { json } : {}) })
    t.equal(res.status, 400, `${method} ${path}`)
    t.equal(openApiErrors('InvalidRequestProblem', res.json()), undefined)
    t.match(firstMessage(res), /^WebhookIdInvalid: No webhook with id \[999\]/)
    t.same(res.json<Problem>().errors?.[0]?.parameters, { webhook_id: ['999'] })
  }
  // The public routes answer resource-not-found for a webhook of another app or none.
  const other = await createIdentity(rt.ctx.store)
  const foreign = await bearerRequest('DELETE', `${rt.baseUrl}/2/webhooks/${webhookId}`, other.bearer)
  t.equal(foreign.status, 404)
  t.equal(openApiErrors('ResourceNotFoundProblem', foreign.json()), undefined)

  // No public resource type fits a delivery or a replay job: a generic (about:blank) 404 Problem.
  for (const path of [`/admin/webhooks/${webhookId}/deliveries/no-such-delivery`, '/admin/webhooks/replay-jobs/12345']) {
    const res = await plainRequest('GET', `${rt.baseUrl}${path}`, { headers: admin })
    t.equal(res.status, 404, path)
    const p = res.json<Problem & Record<string, unknown>>()
    t.equal(openApiErrors('Problem', p), undefined)
    t.match(p, { type: 'about:blank', title: 'Not Found', status: 404 })
    t.notOk('resource_type' in p, 'no resource_type outside the enum')
  }
  t.equal((await bearerRequest('GET', `${rt.baseUrl}/2/webhooks`, id.bearer)).status, 200)
})

t.test('a TLS failure fails the CRC at once', async (t) => {
  const dir = tempDir(t, 'wh-tls-')
  const key = path.join(dir, 'key.pem')
  const cert = path.join(dir, 'cert.pem')
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=localhost'], { stdio: 'ignore' })
  const server = https.createServer({ key: fs.readFileSync(key), cert: fs.readFileSync(cert) }, (_req, res) => res.end('{}'))
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => {
    server.closeAllConnections()
    server.close(() => resolve())
  }))
  const rt = await startWebhooks(t)
  const id = await createIdentity(rt.ctx.store)
  const url = `https://127.0.0.1:${(server.address() as AddressInfo).port}/hook`
  const res = await bearerRequest('POST', `${rt.baseUrl}/2/webhooks`, id.bearer, { json: { url } })
  t.equal(res.status, 400)
  t.match(firstMessage(res), /^CrcValidationFailed: TLS failure/)
  t.equal(metricValue(await metricsText(rt), 'webhook_crc_checks_total', { trigger: 'create', result: 'invalid' }), 1, 'counted as an immediate invalidation')
})

t.test('validation (PUT) applies immediate invalidation and the 28-hour rule', async (t) => {
  const rt = await startWebhooks(t)
  const { id, receiver, webhookId } = await registerWebhook(t, rt)
  const put = () => bearerRequest('PUT', `${rt.baseUrl}/2/webhooks/${webhookId}`, id.bearer)
  const valid = async () => (await bearerRequest('GET', `${rt.baseUrl}/2/webhooks`, id.bearer)).json<{ data: Array<{ valid: boolean }> }>().data[0]?.valid

  // Transient failures within 28 hours of the last passing check: still valid.
  for (const mode of ['error', 'hang'] as const) {
    receiver.crcMode = mode
    const res = await put()
    t.equal(res.status, 400)
    t.match(firstMessage(res), /^CrcValidationFailed: /)
    t.equal(await valid(), true, `${mode}: a transient failure keeps the webhook valid`)
  }

  // ...but not once the last passing check is more than 28 hours old.
  await rt.ctx.store.hset(WebhookKeys.config(webhookId), { last_crc_ok_at: new Date(Date.now() - 29 * 3_600_000).toISOString() })
  receiver.crcMode = 'error'
  t.equal((await put()).status, 400)
  t.equal(await valid(), false, 'invalid after 28 hours without success')

  receiver.crcMode = 'correct'
  t.equal((await put()).status, 200)
  t.equal(await valid(), true, 'a passing CRC makes it valid again')

  for (const mode of ['wrong', 'redirect'] as const) {
    receiver.crcMode = mode
    t.equal((await put()).status, 400)
    t.equal(await valid(), false, `${mode}: invalid at once`)
    receiver.crcMode = 'correct'
    t.equal((await put()).status, 200)
    t.equal(await valid(), true)
  }
  const text = await metricsText(rt)
  t.equal(metricValue(text, 'webhook_crc_checks_total', { trigger: 'put', result: 'invalid' }), 2)
  t.equal(metricValue(text, 'webhook_crc_checks_total', { trigger: 'put', result: 'transient' }), 3)
  t.equal(metricValue(text, 'webhook_crc_checks_total', { trigger: 'put', result: 'pass' }), 3)
})

t.test('the periodic CRC invalidates and revalidates', async (t) => {
  const rt = await startWebhooks(t, { env: { WEBHOOK_CRC_INTERVAL: '150ms' } })
  const { id, receiver } = await registerWebhook(t, rt)
  const valid = async () => (await bearerRequest('GET', `${rt.baseUrl}/2/webhooks`, id.bearer)).json<{ data: Array<{ valid: boolean }> }>().data[0]?.valid
  await eventually(() => receiver.crcCount >= 3, 5000)
  t.equal(await valid(), true)
  receiver.crcMode = 'wrong'
  await eventually(async () => (await valid()) === false, 5000)
  t.pass('a periodic check with a wrong token invalidated the webhook')
  receiver.crcMode = 'correct'
  await eventually(async () => (await valid()) === true, 5000)
  t.pass('a later passing periodic check made it valid again')
  t.ok(metricValue(await metricsText(rt), 'webhook_crc_checks_total', { trigger: 'periodic', result: 'pass' }) >= 2)
})
