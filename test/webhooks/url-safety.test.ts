import http from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { WebhookClient } from '../../services/webhooks/http-client'
import { checkWebhookUrl, isPublicAddress, parseWebhookUrl, type Resolver, UnsafeUrlError } from '../../services/webhooks/url-safety'
import { startWebhooks } from '../support/fixtures/webhooks'
import { bearerRequest } from '../support/http'
import { createIdentity } from '../support/runtime'

t.test('only public unicast addresses are public', async (t) => {
  const refused = [
    '127.0.0.1', '127.8.9.10', '10.0.0.1', '10.255.255.255', '172.16.0.1', '172.31.255.1', '192.168.1.1', '169.254.169.254',
    '100.64.0.1', '0.0.0.0', '224.0.0.1', '255.255.255.255', '192.0.2.7', '198.18.0.1',
    '::1', '[::1]', '::', 'fe80::1', 'fe80::1%eth0', 'fc00::1', 'fd12:3456::1', 'ff02::1', '2001:db8::1', '::ffff:127.0.0.1', '::ffff:7f00:1',
    '::ffff:10.0.0.1', '64:ff9b::a00:1', '2002:7f00:1::1', 'not-an-ip'
  ]
  for (const a of refused) t.equal(isPublicAddress(a), false, a)
  for (const a of ['8.8.8.8', '93.184.216.34', '172.32.0.1', '1.1.1.1', '2606:4700:4700::1111', '2a00:1450:4001::200e', '::ffff:8.8.8.8']) {
    t.equal(isPublicAddress(a), true, a)
  }
})

t.test('URL rules: https, no explicit port, no credentials', async (t) => {
  const refusedSecure: Array<[string, RegExp]> = [
    ['http://example.com/hook', /must use https/],
    ['ftp://example.com/hook', /must use https/],
    ['https://example.com:8443/hook', /must not specify a port/],
    ['https://example.com:443/hook', /must not specify a port/],
    ['https://[2606:4700::1111]:443/hook', /must not specify a port/],
    ['https://user:pw@example.com/hook', /credentials/],
    ['/relative', /not a valid absolute URL/]
  ]
  for (const [url, why] of refusedSecure) t.throws(() => parseWebhookUrl(url, false), why, url)
  t.equal(parseWebhookUrl('https://example.com/hook?x=1#frag', false).href, 'https://example.com/hook?x=1', 'the fragment is dropped')
})

// Forms the WHATWG parser tolerates: no or odd slashes after the scheme, backslashes, surrounding whitespace, tabs inside.
const PORT_EVASIONS = [
  'https:example.com:8443/hook',
  'https:/example.com:8443/hook',
  'https:\\\\example.com:8443/hook',
  'https:\\example.com:443/hook',
  'https:///example.com:443/hook',
  ' https://example.com:8443/hook',
  '\thttps://example.com:8443/hook',
  ' \thttps://example.com:443/hook',
  '\nhttps://example.com:443/hook \n',
  'https://example.com:4\t43/hook',
  'https://example.com\t:443/hook',
  'HTTPS://EXAMPLE.COM:443/hook',
  'https://example.com:/hook',
  'https://[2606:4700::1111]:443/hook',
  'https:[2606:4700::1111]:8443/hook'
]

t.test('no explicit port in any form the URL parser accepts', async (t) => {
  for (const url of PORT_EVASIONS) {
    t.doesNotThrow(() => new URL(url), `${JSON.stringify(url)} is a URL the parser accepts`)
    t.throws(() => parseWebhookUrl(url, false), /must not specify a port/, JSON.stringify(url))
  }
  // The same odd forms without a port are fine, and come back normalised.
  for (const url of ['https:example.com/hook', 'https:\\\\example.com/hook', ' https://example.com/hook\t', 'https://Example.COM/hook#x']) {
    t.equal(parseWebhookUrl(url, false).href, 'https://example.com/hook', JSON.stringify(url))
  }

  t.equal(parseWebhookUrl('https://example.com/hook?x=1', false).hostname, 'example.com')
  t.equal(parseWebhookUrl('https://[2606:4700::1111]/hook', false).hostname, '[2606:4700::1111]')
  // The development setting lifts scheme and port rules (but never allows other schemes or credentials).
  t.equal(parseWebhookUrl('http://127.0.0.1:8080/hook', true).port, '8080')
  t.throws(() => parseWebhookUrl('ftp://127.0.0.1/hook', true), UnsafeUrlError)
  t.throws(() => parseWebhookUrl('http://u:p@127.0.0.1/hook', true), UnsafeUrlError)
})

t.test('registration refuses hosts that resolve to non-public addresses', async (t) => {
  const policy = { allowInsecure: false }
  for (const url of ['https://127.0.0.1/hook', 'https://10.1.2.3/hook', 'https://169.254.169.254/latest/meta-data', 'https://[::1]/hook', 'https://localhost/hook']) {
    await t.rejects(checkWebhookUrl(url, policy), { name: 'UnsafeUrlError', message: /not a public address/ }, url)
  }
  const mixed: Resolver = async () => [{ address: '93.184.216.34', family: 4 }, { address: '10.0.0.5', family: 4 }]
  await t.rejects(checkWebhookUrl('https://mixed.example/hook', { allowInsecure: false, resolve: mixed }), /mixed\.example \(10\.0\.0\.5\) is not a public address/, 'every address must be public')
  const publicOnly: Resolver = async () => [{ address: '93.184.216.34', family: 4 }, { address: '2606:2800:220:1::1', family: 6 }]
  t.equal((await checkWebhookUrl('https://public.example/hook', { allowInsecure: false, resolve: publicOnly })).hostname, 'public.example')
  const nx: Resolver = async () => {
    throw Object.assign(new Error('nope'), { code: 'ENOTFOUND' })
  }
  await t.rejects(checkWebhookUrl('https://nx.example/hook', { allowInsecure: false, resolve: nx }), /does not resolve \(ENOTFOUND\)/)
  t.equal((await checkWebhookUrl('http://localhost:1234/hook', { allowInsecure: true })).port, '1234', 'allowed by the development setting')
})

t.test('every connection re-checks the address it connects to (DNS rebinding)', async (t) => {
  let hits = 0
  const server = http.createServer((_req, res) => {
    hits++
    res.end('{}')
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  const port = (server.address() as AddressInfo).port

  // A name that was public at registration and now answers with loopback.
  let lookups = 0
  const rebinding: Resolver = async () => (++lookups === 1 ? [{ address: '93.184.216.34', family: 4 }] : [{ address: '127.0.0.1', family: 4 }])
  const policy = { allowInsecure: false, resolve: rebinding }
  await checkWebhookUrl('https://rebind.example/hook', policy)
  const client = new WebhookClient({ policy, timeoutMs: 2000, connectionsPerLane: 2 })
  t.teardown(() => client.close())
  // The port is explicit only so that, were the check missing, the request would reach the loopback server.
  const viaName = await client.send('POST', `http://rebind.example:${port}/hook`, { body: '{}' })
  t.match(viaName, { kind: 'error', failure: 'unsafe' })
  const viaLiteral = await client.send('POST', `http://127.0.0.1:${port}/hook`, { body: '{}' })
  t.match(viaLiteral, { kind: 'error', failure: 'unsafe' })
  const viaV6 = await client.send('GET', `http://[::1]:${port}/hook`)
  t.match(viaV6, { kind: 'error', failure: 'unsafe' })
  t.equal(hits, 0, 'no request reached the loopback server')

  // With the development setting the same loopback server is reachable.
  const insecure = new WebhookClient({ policy: { allowInsecure: true }, timeoutMs: 2000, connectionsPerLane: 2 })
  t.teardown(() => insecure.close())
  t.match(await insecure.send('POST', `http://127.0.0.1:${port}/hook`, { body: '{}' }), { kind: 'response', status: 200 })
  t.equal(hits, 1)
})

t.test('POST /2/webhooks refuses private targets unless WEBHOOK_ALLOW_INSECURE=true', async (t) => {
  const rt = await startWebhooks(t, { env: { WEBHOOK_ALLOW_INSECURE: 'false' } })
  const id = await createIdentity(rt.ctx.store)
  const cases: Array<[string, RegExp]> = [
    ['https://127.0.0.1/hook', /^UrlValidationFailed: .*127\.0\.0\.1 is not a public address/],
    ['https://10.0.0.8/hook', /^UrlValidationFailed: .*10\.0\.0\.8 is not a public address/],
    ['https://169.254.169.254/latest/meta-data/', /^UrlValidationFailed: .*169\.254\.169\.254 is not a public address/],
    ['https://[::1]/hook', /^UrlValidationFailed: .*::1 is not a public address/],
    ['https://localhost/hook', /^UrlValidationFailed: .*localhost \((127\.0\.0\.1|::1)\) is not a public address/],
    ['http://example.com/hook', /^UrlValidationFailed: The url must use https/],
    ['https://example.com:8443/hook', /^UrlValidationFailed: The url must not specify a port/],
    ...PORT_EVASIONS.map((url): [string, RegExp] => [url, /^UrlValidationFailed: The url must not specify a port/])
  ]
  for (const [url, message] of cases) {
    const res = await bearerRequest('POST', `${rt.baseUrl}/2/webhooks`, id.bearer, { json: { url } })
    t.equal(res.status, 400, url)
    const body = res.json<{ type: string; errors: Array<{ message: string; parameters: Record<string, string[]> }> }>()
    t.equal(body.type, 'https://api.twitter.com/2/problems/invalid-request')
    t.match(body.errors[0]?.message, message, url)
    t.same(body.errors[0]?.parameters, { url: [url] })
  }
  t.same((await bearerRequest('GET', `${rt.baseUrl}/2/webhooks`, id.bearer)).json(), { data: [], meta: { result_count: 0 } })
})
