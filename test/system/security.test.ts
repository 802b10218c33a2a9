import { randomBytes } from 'node:crypto'
import path from 'node:path'
import { Writable } from 'node:stream'
import t, { type Test } from 'tap'
import { MemoryBus } from '../../services/common/bus/memory'
import { createContext } from '../../services/common/context'
import { createLogger, type Logger } from '../../services/common/logger'
import { startRuntime, type Runtime } from '../../services/common/runtime'
import { MemoryStore } from '../../services/common/store/memory'
import type { Store } from '../../services/common/store/types'
import { type Account, createAccount, getAccount } from '../../services/gateway/ads/accounts'
import { ALL_SERVICES } from '../../services/embedded/services'
import { FORM, oauthClient, submitSignIn, verifierOf } from '../support/fixtures/oauth'
import { bearerRequest, oauth1Request, oauthHeader, send, type TestResponse } from '../support/http'
import { classic } from '../support/problems'
import { createIdentity, testConfig, type TestIdentity } from '../support/runtime'
import { eventually } from '../support/util'
import { redisStore, startRedis } from '../support/infra'

/**
 * The gateway's security properties end to end, over real HTTP against the
 * embedded runtime (every service) with the memory store and with a real
 * redis-server: forged, replayed and stale OAuth 1.0a requests, revoked
 * access tokens and bearers, another user's ads account, a read-only token
 * writing, SSRF webhook URLs with WEBHOOK_ALLOW_INSECURE off, the operator API
 * without its token. Throughout, the runtime's own pino output is captured
 * (debug level) and, at the end, searched for every secret the run used.
 */

const PROBLEM_BASE = 'https://api.twitter.com/2/problems'
const CALLBACK = 'http://127.0.0.1/callback'
/** Each backend's run; the whole file stays well under a minute. */
const RUN_TIMEOUT_MS = 25_000

const secretValue = (label: string): string => `${label}-${randomBytes(16).toString('hex')}`

// ------------------------------------------------------------------ runtime with captured logs

interface LogCapture {
  stream: Writable
  text: () => string
}

function captureLogs(): LogCapture {
  const chunks: string[] = []
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      chunks.push(chunk.toString())
      done()
    }
  })
  return { stream, text: () => chunks.join('') }
}

interface Harness {
  rt: Runtime
  logs: LogCapture
  operatorToken: string
  /** Every secret the run sends or receives; none may reach the log. */
  secrets: Map<string, string>
  /** Closes the runtime once (the test's end and the teardown both ask). */
  close: () => Promise<void>
}

/**
 * The embedded runtime as test/support/runtime.ts builds it, but with the logger
 * writing into `logs` and the production URL policy (WEBHOOK_ALLOW_INSECURE off).
 */
async function startCapturedRuntime(t: Test, backend: 'memory' | 'redis'): Promise<Harness> {
  const operatorToken = secretValue('operator')
  const config = testConfig(t, { OPERATOR_TOKEN: operatorToken, WEBHOOK_ALLOW_INSECURE: 'false', PROBLEM_BASE, LOG_LEVEL: 'debug' })
  const logs = captureLogs()
  const log: Logger = createLogger(config.logLevel, 'security-test', logs.stream)
  const store: Store = backend === 'redis' ? await redisStore(t, await startRedis(t), log) : await MemoryStore.open(path.join(config.dataDir, 'state'))
  const bus = new MemoryBus(config.busPartitions, log)
  const ctx = await createContext({ serviceName: 'security-test', config, bus, store, log })
  const rt = await startRuntime({ services: ALL_SERVICES, ctx })
  let closing: Promise<void> | undefined
  const close = (): Promise<void> => (closing ??= rt.close())
  t.teardown(close)
  const secrets = new Map<string, string>([['operator token', operatorToken]])
  return { rt, logs, operatorToken, secrets, close }
}

function remember(h: Harness, id: TestIdentity, label: string): void {
  h.secrets.set(`${label} consumer secret`, id.app.consumer_secret)
  h.secrets.set(`${label} token secret`, id.token.secret)
  h.secrets.set(`${label} bearer`, id.bearer)
}

// ------------------------------------------------------------------ assertions on answers

function expectClassic(t: Test, res: TestResponse, status: number, code: number, what: string): void {
  t.equal(res.status, status, `${what}: HTTP ${status}`)
  t.equal(res.status === status ? classic(res).code : undefined, code, `${what}: code ${code} (${res.text.slice(0, 200)})`)
}

function adsCode(res: TestResponse): string | undefined {
  return res.json<{ errors?: Array<{ code?: string }> }>().errors?.[0]?.code
}

const verifyCredentials = (h: Harness): string => `${h.rt.baseUrl}/1.1/account/verify_credentials.json`

// ------------------------------------------------------------------ the checks

async function checkOAuth1Signatures(t: Test, h: Harness, id: TestIdentity): Promise<void> {
  const url = verifyCredentials(h)
  const valid = await send('GET', url, { authorization: oauthHeader('GET', url, id) })
  t.equal(valid.status, 200, `a correctly signed request is accepted (${valid.text.slice(0, 200)})`)

  const forgedSecret = secretValue('forged-consumer-secret')
  h.secrets.set('forged consumer secret', forgedSecret)
  expectClassic(t, await send('GET', url, { authorization: oauthHeader('GET', url, id, { consumerSecret: forgedSecret }) }), 401, 32, 'forged signature')

  const once = oauthHeader('GET', url, id, { nonce: secretValue('nonce') })
  t.equal((await send('GET', url, { authorization: once })).status, 200, 'the first use of a nonce is accepted')
  expectClassic(t, await send('GET', url, { authorization: once }), 401, 32, 'the same signed request replayed')

  const anHourAgo = Math.floor(Date.now() / 1000) - 3600
  expectClassic(t, await send('GET', url, { authorization: oauthHeader('GET', url, id, { timestamp: anHourAgo }) }), 401, 135, 'a timestamp an hour old')
}

async function checkRevokedAccessToken(t: Test, h: Harness, id: TestIdentity): Promise<void> {
  const revoked = await oauth1Request('POST', `${h.rt.baseUrl}/1.1/oauth/invalidate_token`, id)
  t.equal(revoked.status, 200, `the token revokes itself (${revoked.text.slice(0, 200)})`)
  expectClassic(t, await oauth1Request('GET', verifyCredentials(h), id), 401, 89, 'a revoked access token')
}

async function checkRevokedBearer(t: Test, h: Harness, id: TestIdentity): Promise<void> {
  const basic = `Basic ${Buffer.from(`${encodeURIComponent(id.app.consumer_key)}:${encodeURIComponent(id.app.consumer_secret)}`).toString('base64')}`
  const issued = await send('POST', `${h.rt.baseUrl}/oauth2/token`, { ...FORM, authorization: basic }, 'grant_type=client_credentials')
  t.equal(issued.status, 200, `the app gets its bearer (${issued.text.slice(0, 200)})`)
  const bearer = issued.json<{ access_token: string }>().access_token
  h.secrets.set('issued bearer', bearer)
  t.equal((await bearerRequest('GET', `${h.rt.baseUrl}/2/webhooks`, bearer)).status, 200, 'the bearer works before revocation')
  const invalidated = await send('POST', `${h.rt.baseUrl}/oauth2/invalidate_token`, { ...FORM, authorization: basic }, new URLSearchParams({ access_token: bearer }).toString())
  t.equal(invalidated.status, 200, `the bearer is invalidated (${invalidated.text.slice(0, 200)})`)
  expectClassic(t, await bearerRequest('GET', `${h.rt.baseUrl}/2/webhooks`, bearer), 401, 89, 'a revoked bearer')
}

/** An ads account belongs to its user: another user's token reads and writes nothing of it (docs/architecture.md). */
async function checkOtherUsersAccount(t: Test, h: Harness, intruder: TestIdentity, intruderAccount: Account, victimAccount: Account): Promise<void> {
  const base = `${h.rt.baseUrl}/12/accounts`
  t.equal((await oauth1Request('GET', `${base}/${intruderAccount.id}`, intruder)).status, 200, 'a user reads their own account')
  const attempts: Array<[string, string, Record<string, string>?]> = [
    ['GET', `/${victimAccount.id}`],
    ['GET', `/${victimAccount.id}/campaigns`],
    ['GET', `/${victimAccount.id}/funding_instruments`],
    ['PUT', `/${victimAccount.id}`, { name: 'taken over' }]
  ]
  for (const [method, suffix, query] of attempts) {
    const res = await oauth1Request(method, `${base}${suffix}`, intruder, query ? { query } : {})
    t.equal(`${res.status} ${adsCode(res)}`, '403 ACCOUNT_NOT_FOUND', `${method} another user's ${suffix.replace(victimAccount.id, ':account_id')} is refused`)
  }
  t.equal((await getAccount(h.rt.ctx, victimAccount.id))?.name, victimAccount.name, "the other user's account is unchanged")
}

/** A read-only token reads but cannot write: 403 code 220 on v2, its ads form on the ads interface. */
async function checkReadOnlyToken(t: Test, h: Harness, reader: TestIdentity, account: Account): Promise<void> {
  const accountUrl = `${h.rt.baseUrl}/12/accounts/${account.id}`
  t.equal((await oauth1Request('GET', accountUrl, reader)).status, 200, 'a read-only token reads its account')
  const write = await oauth1Request('PUT', accountUrl, reader, { query: { name: 'renamed' } })
  t.equal(`${write.status} ${adsCode(write)}`, '403 UNAUTHORIZED_CLIENT_APPLICATION', 'a read-only token cannot change its account')
  t.match(write.text, /read-only/, 'the refusal says why')
  expectClassic(t, await oauth1Request('POST', `${h.rt.baseUrl}/2/webhooks`, reader, { json: { url: 'https://example.com/hook' } }), 403, 220, 'a read-only token creating a webhook')
}

const SSRF_URLS = [
  'https://127.0.0.1/hook',
  'https://10.1.2.3/hook',
  'https://169.254.169.254/latest/meta-data/',
  'https://[::1]/hook',
  'https://localhost/hook',
  'https://example.com:8443/hook',
  'http://example.com/hook'
]

/** Webhook URLs that point inside the network are refused before any request is made to them. */
async function checkSsrfWebhooks(t: Test, h: Harness, id: TestIdentity): Promise<void> {
  const webhooks = `${h.rt.baseUrl}/2/webhooks`
  for (const url of SSRF_URLS) {
    const res = await bearerRequest('POST', webhooks, id.bearer, { json: { url } })
    t.equal(res.status, 400, `${url}: 400`)
    const body = res.status === 400 ? res.json<{ type?: string; errors?: Array<{ message?: string; parameters?: Record<string, string[]> }> }>() : {}
    t.equal(body.type, `${PROBLEM_BASE}/invalid-request`, `${url}: the invalid-request Problem`)
    t.match(body.errors?.[0]?.message ?? res.text, /^UrlValidationFailed: /, `${url}: UrlValidationFailed`)
    t.same(body.errors?.[0]?.parameters, { url: [url] }, `${url}: the url parameter is named`)
  }
  const listed = await bearerRequest('GET', webhooks, id.bearer)
  t.same(listed.json<{ data: unknown[] }>().data, [], 'no webhook was registered')
}

async function checkOperatorApi(t: Test, h: Harness): Promise<void> {
  const apps = `${h.rt.baseUrl}/admin/apps`
  t.equal((await send('GET', apps)).status, 401, 'the operator API without a token: 401')
  const wrong = secretValue('wrong-operator')
  h.secrets.set('wrong operator token', wrong)
  t.equal((await send('GET', apps, { authorization: `Bearer ${wrong}` })).status, 401, 'the operator API with a wrong token: 401')
  t.equal((await send('GET', apps, { authorization: `Bearer ${h.operatorToken}` })).status, 200, 'the operator API with its token: 200')
}

/**
 * A user made through the operator API with a password, signed in on the
 * OAuth 1.0a authorize page (once with a wrong password), and the access
 * token and secret that flow hands out: every one of them travels over HTTP.
 */
async function checkPasswordFlows(t: Test, h: Harness, id: TestIdentity): Promise<void> {
  const password = secretValue('password')
  const wrongPassword = secretValue('wrong-password')
  h.secrets.set('password', password)
  h.secrets.set('wrong password', wrongPassword)
  const screenName = `sec_${randomBytes(4).toString('hex')}`
  const created = await send('POST', `${h.rt.baseUrl}/admin/users`, { authorization: `Bearer ${h.operatorToken}`, 'content-type': 'application/json' }, JSON.stringify({ screen_name: screenName, password }))
  t.equal(created.status, 201, `the operator creates a user (${created.text.slice(0, 200)})`)

  const client = oauthClient(h.rt.baseUrl, id.app, CALLBACK)
  const denied = await client.requestToken()
  h.secrets.set('request token secret (refused sign-in)', denied.secret)
  const refused = await submitSignIn(h.rt.baseUrl, denied.token, { screenName, password: wrongPassword })
  t.not(refused.status, 303, 'a wrong password does not authorize')

  const requested = await client.requestToken()
  h.secrets.set('request token secret', requested.secret)
  const verifier = verifierOf(await submitSignIn(h.rt.baseUrl, requested.token, { screenName, password }))
  const access = await client.accessToken(requested.token, requested.secret, verifier)
  h.secrets.set('3-legged token secret', access.secret)
  const me = await client.get(verifyCredentials(h), access.token, access.secret)
  t.equal(me.status, 200, 'the token the flow handed out works')
}

async function checkNoSecretInLogs(t: Test, h: Harness): Promise<void> {
  // Barrier: the line of a last, marked request is written, so every earlier one is too.
  const marker = `marker${randomBytes(6).toString('hex')}`
  await send('GET', `${h.rt.baseUrl}/healthz?${marker}=1`)
  await eventually(() => h.logs.text().includes(marker), 5000)
  await h.close()
  const text = h.logs.text()
  t.match(text, /"url":"\/1\.1\/account\/verify_credentials\.json"[^\n]*"status":401/, 'the capture holds the refused requests (it sees what the runtime logs)')
  t.match(text, /"url":"\/admin\/users"/, 'the capture holds the operator requests')
  for (const [label, value] of h.secrets) t.notOk(text.includes(value), `the ${label} is not in the log`)
}

async function securityRun(t: Test, backend: 'memory' | 'redis'): Promise<void> {
  t.setTimeout(RUN_TIMEOUT_MS)
  const h = await startCapturedRuntime(t, backend)
  const { store } = h.rt.ctx
  const owner = await createIdentity(store)
  const other = await createIdentity(store)
  const reader = await createIdentity(store, { access: 'read' })
  for (const [label, id] of [['owner', owner], ['other user', other], ['read-only', reader]] as const) remember(h, id, label)
  h.secrets.set('password of the fixture users', owner.password)
  const ownerAccount = await createAccount(h.rt.ctx, owner.user.id, { name: 'Owner account' })
  const otherAccount = await createAccount(h.rt.ctx, other.user.id, { name: 'Other account' })
  const readerAccount = await createAccount(h.rt.ctx, reader.user.id, { name: 'Reader account' })

  await t.test('operator API', (t) => checkOperatorApi(t, h))
  await t.test('OAuth 1.0a: forged, replayed, stale', (t) => checkOAuth1Signatures(t, h, owner))
  await t.test("another user's ads account", (t) => checkOtherUsersAccount(t, h, owner, ownerAccount, otherAccount))
  await t.test('read-only token writing', (t) => checkReadOnlyToken(t, h, reader, readerAccount))
  await t.test('SSRF webhook URLs with WEBHOOK_ALLOW_INSECURE off', (t) => checkSsrfWebhooks(t, h, other))
  await t.test('passwords and the 3-legged flow', (t) => checkPasswordFlows(t, h, other))
  await t.test('revoked access token', (t) => checkRevokedAccessToken(t, h, owner))
  await t.test('revoked bearer', (t) => checkRevokedBearer(t, h, owner))
  await t.test('no secret in the log', (t) => checkNoSecretInLogs(t, h))
}

t.test('security over HTTP: embedded runtime, memory store', (t) => securityRun(t, 'memory'))
t.test('security over HTTP: embedded runtime, Redis store', (t) => securityRun(t, 'redis'))
