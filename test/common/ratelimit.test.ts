import t from 'tap'
import { ConfigError, loadConfig } from '../../services/common/config'
import { FAMILY_DEFAULTS, RateLimiter, routeFamily } from '../../services/common/ratelimit'
import { MemoryStore } from '../../services/common/store/memory'
import { createAccount } from '../../services/gateway/ads/accounts'
import { openHttpStream, openWsStream } from '../support/fixtures/activity'
import { BACKENDS, startBackend } from '../support/fixtures/oauth'
import { oauth1Request, oauthHeader, send } from '../support/http'
import { classic } from '../support/problems'
import { createIdentity, startTestRuntime } from '../support/runtime'

t.test('limits: RATE_LIMITS overrides, then the route, then the published figures, then RATE_LIMIT_DEFAULT', async (t) => {
  const store = await MemoryStore.open()
  t.teardown(() => store.close())
  const config = loadConfig({ RATE_LIMITS: 'webhooks=50/1m,with_total_count=300', RATE_LIMIT_DEFAULT: '900', RATE_LIMIT_WINDOW: '15m' })
  const limiter = new RateLimiter(store, config)
  t.same(limiter.policy({ family: 'webhooks', limit: 10 }), { limit: 50, windowMs: 60_000 }, 'operator override wins')
  t.same(limiter.policy({ family: 'with_total_count' }), { limit: 300, windowMs: 15 * 60_000 }, 'override of the limit keeps the family window')
  t.same(limiter.policy({ family: 'activity', limit: 25 }), { limit: 25, windowMs: 15 * 60_000 }, 'the route’s own limit')
  t.same(limiter.policy({ family: 'custom-audience-users' }), { limit: 1500, windowMs: 60_000 }, 'published: 1500 per 1 minute window')
  t.same(limiter.policy({ family: 'anything' }), { limit: 900, windowMs: 15 * 60_000 }, 'the configured default')
  t.same(FAMILY_DEFAULTS.with_total_count, { limit: 200, windowMs: 15 * 60_000 }, 'published: with_total_count 200 per 15 minutes')
  t.throws(() => loadConfig({ RATE_LIMITS: 'webhooks' }), ConfigError)
  t.throws(() => loadConfig({ RATE_LIMITS: 'webhooks=0' }), ConfigError)
  t.throws(() => loadConfig({ RATE_LIMITS: 'webhooks=5/10ms' }), ConfigError)
})

t.test('windows: counted per identity, reset at the window end', async (t) => {
  const store = await MemoryStore.open()
  t.teardown(() => store.close())
  const limiter = new RateLimiter(store, loadConfig({}))
  const policy = { limit: 2, windowMs: 60_000 }
  const now = 1_700_000_000_000
  const a1 = await limiter.consume('f', 'user:a', policy, now)
  const a2 = await limiter.consume('f', 'user:a', policy, now + 1)
  const a3 = await limiter.consume('f', 'user:a', policy, now + 2)
  t.same([a1.remaining, a2.remaining, a3.remaining], [1, 0, 0])
  t.same([a1.exceeded, a2.exceeded, a3.exceeded], [false, false, true])
  t.ok(a1.resetAt * 1000 > now && a1.resetAt * 1000 <= now + 61_000, 'reset is the end of the current window')
  t.equal((await limiter.consume('f', 'user:b', policy, now)).remaining, 1, 'another caller has its own window')
  t.equal((await limiter.consume('g', 'user:a', policy, now)).remaining, 1, 'another family has its own window')
  const next = await limiter.consume('f', 'user:a', policy, a1.resetAt * 1000 + 1)
  t.equal(next.remaining, 1, 'a new window after the reset')
  t.notOk(next.exceeded)
})

for (const backend of BACKENDS) {
  t.test(`rate-limited routes answer 429 in their interface's shape (${backend} store)`, async (t) => {
    const rt = await startBackend(t, backend)
    const base = rt.baseUrl
    const id = await createIdentity(rt.ctx.store)
    const url = `${base}/2/probe/limited`
    const remaining: string[] = []
    for (let i = 0; i < 3; i++) {
      const r = await send('GET', url, { authorization: oauthHeader('GET', url, id) })
      t.equal(r.status, 200)
      t.equal(r.headers.get('x-rate-limit-limit'), '3')
      remaining.push(r.headers.get('x-rate-limit-remaining') as string)
    }
    t.same(remaining, ['2', '1', '0'])
    const over = await send('GET', url, { authorization: oauthHeader('GET', url, id) })
    t.equal(over.status, 429)
    t.same(over.json(), { errors: [{ code: 88, message: 'Rate limit exceeded' }] }, 'code 88 on v2')
    t.equal(over.headers.get('x-rate-limit-remaining'), '0')
    const reset = Number(over.headers.get('x-rate-limit-reset'))
    t.ok(reset > Date.now() / 1000 && reset <= Date.now() / 1000 + 15 * 60 + 1, 'reset: epoch seconds within the 15-minute window')

    const other = await createIdentity(rt.ctx.store)
    t.equal((await send('GET', url, { authorization: oauthHeader('GET', url, other) })).status, 200, 'per user')
    t.equal((await send('GET', url, { authorization: `Bearer ${id.bearer}` })).status, 200, 'the app-only token counts for the app, separately')

    const adsUrl = `${base}/12/probe/limited`
    for (let i = 0; i < 2; i++) t.equal((await send('GET', adsUrl, { authorization: oauthHeader('GET', adsUrl, id) })).status, 200)
    const adsOver = await send('GET', `${adsUrl}?count=5`, { authorization: oauthHeader('GET', `${adsUrl}?count=5`, id) })
    t.equal(adsOver.status, 429)
    t.same(adsOver.json(), { errors: [{ code: 'TOO_MANY_REQUESTS', message: 'Rate limit exceeded' }], request: { params: { count: '5' } } }, 'TOO_MANY_REQUESTS on ads')

    const metrics = await send('GET', `${base}/metrics`)
    t.match(metrics.text, /rate_limited_requests_total\{[^}]*family="probe"[^}]*\} 1/)

    const failed = await send('GET', url, { authorization: oauthHeader('GET', url, id, { consumerSecret: 'wrong' }) })
    t.equal(classic(failed).code, 32, 'authentication comes first: a forged request is not counted as the user')
  })
}

t.test('with_total_count requests: 200 per 15 minutes, counted apart from the rest', async (t) => {
  const rt = await startBackend(t, 'memory')
  const id = await createIdentity(rt.ctx.store)
  const url = `${rt.baseUrl}/12/probe/accounts?with_total_count=true`
  let last = await send('GET', url, { authorization: oauthHeader('GET', url, id) })
  t.equal(last.headers.get('x-rate-limit-limit'), '200')
  t.equal(last.headers.get('x-rate-limit-remaining'), '199')
  for (let i = 1; i < 200; i++) {
    last = await send('GET', url, { authorization: oauthHeader('GET', url, id) })
    if (last.status !== 200) break
  }
  t.equal(last.status, 200, '200 requests pass')
  t.equal(last.headers.get('x-rate-limit-remaining'), '0')
  const over = await send('GET', url, { authorization: oauthHeader('GET', url, id) })
  t.equal(over.status, 429, 'the 201st is refused')
  t.match(over.json(), { errors: [{ code: 'TOO_MANY_REQUESTS' }] })
  const plain = `${rt.baseUrl}/12/probe/accounts`
  const without = await send('GET', plain, { authorization: oauthHeader('GET', plain, id) })
  t.equal(without.status, 200, 'the same route without with_total_count is not limited by it')
  t.equal(without.headers.get('x-rate-limit-limit'), String(rt.ctx.config.rateLimitDefault), 'only by its own default window')
})

t.test('default families: method and fixed path segments, valid RATE_LIMITS names', async (t) => {
  t.equal(routeFamily('GET', '/12/accounts/:account_id/campaigns/:campaign_id'), 'get:12.accounts.campaigns')
  t.equal(routeFamily('HEAD', '/12/accounts/:account_id/campaigns'), 'get:12.accounts.campaigns', 'HEAD counts as the GET it mirrors')
  t.equal(routeFamily('POST', '/2/media/upload/:id/append'), 'post:2.media.upload.append')
  const family = routeFamily('DELETE', '/2/activity/subscriptions/:subscription_id')
  t.same(loadConfig({ RATE_LIMITS: `${family}=7/1m` }).rateLimits[family], { limit: 7, windowMs: 60_000 }, 'an operator can override a default family')
})

t.test('every authenticated route has a window; ads GETs also count per account', async (t) => {
  const rt = await startTestRuntime(t, { env: { RATE_LIMIT_DEFAULT: '4', RATE_LIMIT_WINDOW: '1m', RATE_LIMITS: 'ads-account=2/15m' } })
  const id = await createIdentity(rt.ctx.store)
  const [a, b] = [await createAccount(rt.ctx, id.user.id, { name: 'account a' }), await createAccount(rt.ctx, id.user.id, { name: 'account b' })]
  const campaignsOf = (account: string): string => `${rt.baseUrl}/12/accounts/${account}/campaigns`
  const headers = (r: { headers: Headers }, prefix: string): string[] => ['limit', 'remaining'].map((k) => r.headers.get(`${prefix}-${k}`) ?? 'none')

  const first = await oauth1Request('GET', campaignsOf(a.id), id)
  t.equal(first.status, 200, first.text)
  t.same(headers(first, 'x-rate-limit'), ['4', '3'], 'the user window of the route family (RATE_LIMIT_DEFAULT)')
  t.same(headers(first, 'x-account-rate-limit'), ['2', '1'], 'the account window (x-account-rate-limit-*)')
  const reset = Number(first.headers.get('x-account-rate-limit-reset'))
  t.ok(reset > Date.now() / 1000 && reset <= Date.now() / 1000 + 15 * 60 + 1, 'account reset: epoch seconds within its window')
  t.equal((await oauth1Request('GET', campaignsOf(a.id), id)).status, 200)

  const accountOver = await oauth1Request('GET', campaignsOf(a.id), id)
  t.equal(accountOver.status, 429, 'the third read of account a is over the account limit')
  t.same(accountOver.json(), { errors: [{ code: 'TOO_MANY_REQUESTS', message: 'Rate limit exceeded' }], request: { params: { account_id: a.id } } })
  t.same(headers(accountOver, 'x-account-rate-limit'), ['2', '0'])
  t.same(headers(accountOver, 'x-rate-limit'), ['4', '1'], 'while the user still had requests left')

  const otherAccount = await oauth1Request('GET', campaignsOf(b.id), id)
  t.equal(otherAccount.status, 200, 'another account has its own window')
  t.same(headers(otherAccount, 'x-account-rate-limit'), ['2', '1'])
  const userOver = await oauth1Request('GET', campaignsOf(b.id), id)
  t.equal(userOver.status, 429, 'the user window of the family is spent')
  t.same(userOver.json(), { errors: [{ code: 'TOO_MANY_REQUESTS', message: 'Rate limit exceeded' }], request: { params: { account_id: b.id } } })
  t.same(headers(userOver, 'x-rate-limit'), ['4', '0'])

  const write = await oauth1Request('POST', campaignsOf(a.id), id, { query: { name: 'x' } })
  t.same(headers(write, 'x-rate-limit'), ['4', '3'], 'a write has its own family window')
  t.equal(write.headers.get('x-account-rate-limit-limit'), null, 'writes are not counted per account')

  const subscriptions = `${rt.baseUrl}/2/activity/subscriptions`
  for (let i = 0; i < 4; i++) {
    const r = await send('GET', subscriptions, { authorization: `Bearer ${id.bearer}` })
    t.equal(r.status, 200, r.text)
    t.same(headers(r, 'x-rate-limit'), ['4', String(3 - i)])
  }
  const v2Over = await send('GET', subscriptions, { authorization: `Bearer ${id.bearer}` })
  t.equal(v2Over.status, 429)
  t.same(v2Over.json(), { errors: [{ code: 88, message: 'Rate limit exceeded' }] }, 'code 88 on v2')

  const upload = await oauth1Request('POST', `${rt.baseUrl}/2/media/upload`, id, { query: { command: 'STATUS' } })
  t.same(headers(upload, 'x-rate-limit'), ['4', '3'], `media upload is limited (answered ${upload.status})`)

  const stream = await openHttpStream(rt.baseUrl, id.bearer)
  stream.close()
  t.equal(stream.status, 200)
  t.same([stream.headers['x-rate-limit-limit'], stream.headers['x-rate-limit-remaining']], ['4', '3'], 'the stream is limited too, and says so in its head')

  // The WebSocket upgrade bypasses fastify's hooks; it counts in the same window as the HTTP stream.
  const ws = await openWsStream(rt.baseUrl, id.bearer)
  ws.close()
  await ws.ended
  const refusals: Array<{ status?: number; body?: string }> = []
  for (let i = 0; i < 3; i++) {
    await openWsStream(rt.baseUrl, id.bearer).then(
      async (opened) => {
        opened.close()
        await opened.ended
      },
      (err: { status?: number; body?: string }) => refusals.push(err)
    )
  }
  t.equal(refusals.length, 1, 'with the HTTP stream and three upgrades the window of 4 is spent: the fifth open is refused')
  t.equal(refusals[0]?.status, 429)
  t.same(JSON.parse(refusals[0]?.body ?? '{}'), { errors: [{ code: 88, message: 'Rate limit exceeded' }] }, 'code 88, like the HTTP stream')

  const metrics = await send('GET', `${rt.baseUrl}/metrics`)
  t.match(metrics.text, /rate_limited_requests_total\{[^}]*family="ads-account"[^}]*\} 1/)
})

t.test('RATE_LIMITS changes a family without touching code', async (t) => {
  const rt = await startBackend(t, 'memory', { RATE_LIMITS: 'probe=1/1m' })
  const id = await createIdentity(rt.ctx.store)
  const url = `${rt.baseUrl}/2/probe/limited`
  const first = await send('GET', url, { authorization: oauthHeader('GET', url, id) })
  t.equal(first.headers.get('x-rate-limit-limit'), '1')
  t.equal((await send('GET', url, { authorization: oauthHeader('GET', url, id) })).status, 429)
})
