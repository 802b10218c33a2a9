import t from 'tap'
import { run as runApps, type CliIO } from '../../services/cli/apps'
import { run as runUsers } from '../../services/cli/users'
import { checkCredentials } from '../../services/gateway/identity'
import { BACKENDS, FORM, startBackend } from '../support/fixtures/oauth'
import { send } from '../support/http'

/**
 * The operator API for apps and users (/admin/*) and the CLI that drives it
 * (`make app`, `make user`), against a running gateway over HTTP.
 */

const OPERATOR = 'operator-token-for-tests-0123456789'

function io(env: Record<string, string>): CliIO & { stdout: () => string; stderr: () => string } {
  let out = ''
  let err = ''
  return {
    env,
    out: (text) => {
      out += text
    },
    err: (text) => {
      err += text
    },
    stdout: () => out,
    stderr: () => err
  }
}

function admin(token = OPERATOR, json = true): Record<string, string> {
  return json ? { authorization: `Bearer ${token}`, 'content-type': 'application/json' } : { authorization: `Bearer ${token}` }
}

async function bearerStatus(base: string, key: string, secret: string): Promise<number> {
  const basic = Buffer.from(`${key}:${secret}`).toString('base64')
  return (await send('POST', `${base}/oauth2/token`, { ...FORM, authorization: `Basic ${basic}` }, 'grant_type=client_credentials')).status
}

for (const backend of BACKENDS) {
  t.test(`operator API for apps and users (${backend} store)`, async (t) => {
    const rt = await startBackend(t, backend, { OPERATOR_TOKEN: OPERATOR })
    const base = rt.baseUrl

    const anonymous = await send('GET', `${base}/admin/apps`)
    t.equal(anonymous.status, 401)
    t.match(anonymous.headers.get('content-type'), /application\/problem\+json/)
    t.equal((await send('GET', `${base}/admin/apps`, admin('wrong-token'))).status, 401)
    t.equal((await send('POST', `${base}/admin/apps`, admin('wrong-token'), '{"bad json')).status, 401, 'the token is checked before the body is read')

    const created = await send('POST', `${base}/admin/apps`, admin(), JSON.stringify({ name: 'Ops App', callback_urls: ['https://ops.example/cb', 'myapp://callback'], access_level: 'read-write-dm' }))
    t.equal(created.status, 201, created.text)
    const app = created.json<{ data: { id: string; consumer_key: string; consumer_secret: string; access_level: string; callback_urls: string[]; sign_in_with: boolean } }>().data
    t.match(app, { id: /^\d{19}$/, access_level: 'read-write-dm', callback_urls: ['https://ops.example/cb', 'myapp://callback'], sign_in_with: true })
    t.ok(app.consumer_key && app.consumer_secret, 'the key and secret are returned at creation')
    t.equal(await bearerStatus(base, app.consumer_key, app.consumer_secret), 200, 'the new credentials work')

    const list = await send('GET', `${base}/admin/apps`, admin())
    const listed = list.json<{ data: Array<Record<string, unknown>>; meta: { result_count: number } }>()
    t.ok(listed.data.some((a) => a.id === app.id))
    t.notOk(list.text.includes(app.consumer_secret), 'lists never show secrets')
    t.notOk('consumer_secret' in (listed.data[0] ?? {}))
    const one = await send('GET', `${base}/admin/apps/${app.id}`, admin())
    t.equal(one.json<{ data: { name: string } }>().data.name, 'Ops App')
    const missing = await send('GET', `${base}/admin/apps/1234567890123456789`, admin())
    t.equal(missing.status, 404)
    t.match(missing.json(), { type: 'https://api.twitter.com/2/problems/resource-not-found' })

    const patched = await send('PATCH', `${base}/admin/apps/${app.id}`, admin(), JSON.stringify({ callback_urls: ['https://ops.example/other'], sign_in_with: false }))
    t.equal(patched.status, 200)
    t.match(patched.json(), { data: { callback_urls: ['https://ops.example/other'], sign_in_with: false } })

    const rotated = await send('POST', `${base}/admin/apps/${app.id}/rotate-secret`, admin(OPERATOR, false))
    const newSecret = rotated.json<{ data: { consumer_secret: string } }>().data.consumer_secret
    t.not(newSecret, app.consumer_secret)
    t.equal(await bearerStatus(base, app.consumer_key, app.consumer_secret), 403, 'the old secret stops working')
    t.equal(await bearerStatus(base, app.consumer_key, newSecret), 200, 'the new one works')

    for (const [why, body] of [
      ['no name', {}],
      ['name too long', { name: 'x'.repeat(33) }],
      ['unknown level', { name: 'a', access_level: 'admin' }],
      ['script callback', { name: 'a', callback_urls: ['javascript:alert(1)'] }],
      ['relative callback', { name: 'a', callback_urls: ['/cb'] }],
      ['unknown field', { name: 'a', owner: 'me' }]
    ] as Array<[string, unknown]>) {
      const r = await send('POST', `${base}/admin/apps`, admin(), JSON.stringify(body))
      t.equal(r.status, 400, why)
      t.match(r.json(), { type: 'https://api.twitter.com/2/problems/invalid-request', errors: [{ message: String }] }, why)
    }

    const screenName = `ops_${backend}`
    const user = await send('POST', `${base}/admin/users`, admin(), JSON.stringify({ screen_name: screenName, password: 'a long password' }))
    t.equal(user.status, 201, user.text)
    t.match(user.json(), { data: { id: /^\d{19}$/, screen_name: screenName } })
    t.notOk(user.text.includes('scrypt'), 'the password hash is never returned')
    t.ok(await checkCredentials(rt.ctx.store, screenName, 'a long password'), 'the user can sign in')
    const taken = await send('POST', `${base}/admin/users`, admin(), JSON.stringify({ screen_name: screenName.toUpperCase(), password: 'another password' }))
    t.equal(taken.status, 409, 'screen names are unique regardless of case')
    const short = await send('POST', `${base}/admin/users`, admin(), JSON.stringify({ screen_name: 'shorty', password: 'short' }))
    t.equal(short.status, 400)
    t.notOk(short.text.includes('"short"'), 'the rejected password is not echoed')
    const users = await send('GET', `${base}/admin/users`, admin())
    t.ok(users.json<{ data: Array<{ screen_name: string }> }>().data.some((u) => u.screen_name === screenName))
    t.notOk(users.text.includes('password'))
  })
}

t.test('the operator API is closed in a distributed process without OPERATOR_TOKEN', async (t) => {
  const rt = await startBackend(t, 'redis')
  const r = await send('GET', `${rt.baseUrl}/admin/apps`, admin())
  t.equal(r.status, 403)
  t.match(r.json(), { detail: /closed/ })
})

t.test('the CLI: app create/list/show/update/rotate-secret and user create/list', async (t) => {
  const rt = await startBackend(t, 'memory', { OPERATOR_TOKEN: OPERATOR })
  const env = { GATEWAY_URL: rt.baseUrl, OPERATOR_TOKEN: OPERATOR, PORT: '1' }

  const create = io(env)
  t.equal(await runApps(['create', '--name', 'CLI App', '--callback', 'https://a.example/cb', '--callback', 'https://b.example/cb,https://c.example/cb', '--access', 'read', '--json'], create), 0, create.stderr())
  const app = JSON.parse(create.stdout()) as { id: string; consumer_key: string; consumer_secret: string; callback_urls: string[]; access_level: string }
  t.same(app.callback_urls, ['https://a.example/cb', 'https://b.example/cb', 'https://c.example/cb'], 'repeatable and comma-separated callbacks')
  t.equal(app.access_level, 'read')
  t.equal(await bearerStatus(rt.baseUrl, app.consumer_key, app.consumer_secret), 200)

  const human = io(env)
  t.equal(await runApps(['create', '--name', 'Readable', '--no-sign-in-with'], human), 0)
  t.match(human.stdout(), /created application "Readable"/)
  t.match(human.stdout(), /consumer secret: \S+ {3}\(shown only now/)
  t.match(human.stdout(), /callback URLs: {3}\(none: PIN-based oob only\)/)
  t.match(human.stdout(), /sign in with: {4}off/)

  const list = io(env)
  t.equal(await runApps(['list'], list), 0)
  t.match(list.stdout(), /^ID\s+NAME\s+CONSUMER KEY\s+ACCESS\s+CALLBACKS\n/)
  t.match(list.stdout(), new RegExp(`${app.id}\\s+CLI App\\s+${app.consumer_key}\\s+read\\s+3`))
  t.notOk(list.stdout().includes(app.consumer_secret))

  const show = io(env)
  t.equal(await runApps(['show', '--id', app.id, '--json'], show), 0)
  t.notOk('consumer_secret' in JSON.parse(show.stdout()))

  const update = io(env)
  t.equal(await runApps(['update', '--id', app.id, '--access', 'read-write', '--sign-in-with', 'false', '--json'], update), 0, update.stderr())
  t.match(JSON.parse(update.stdout()), { access_level: 'read-write', sign_in_with: false })

  const rotate = io(env)
  t.equal(await runApps(['rotate-secret', '--id', app.id, '--json'], rotate), 0)
  const rotated = JSON.parse(rotate.stdout()) as { consumer_secret: string }
  t.not(rotated.consumer_secret, app.consumer_secret)
  t.equal(await bearerStatus(rt.baseUrl, app.consumer_key, rotated.consumer_secret), 200)

  const user = io({ ...env, NEW_PASSWORD: 'from the environment' })
  t.equal(await runUsers(['create', '--screen-name', 'cli_user', '--password-env', 'NEW_PASSWORD', '--json'], user), 0, user.stderr())
  t.match(JSON.parse(user.stdout()), { screen_name: 'cli_user', id: /^\d{19}$/ })
  t.ok(await checkCredentials(rt.ctx.store, 'cli_user', 'from the environment'))
  const direct = io(env)
  t.equal(await runUsers(['create', '--screen-name', 'cli_user2', '--password', 'typed on the command line'], direct), 0)
  t.match(direct.stdout(), /created user @cli_user2/)
  const users = io(env)
  t.equal(await runUsers(['list'], users), 0)
  t.match(users.stdout(), /@cli_user\b/)

  const usage = io(env)
  t.equal(await runApps(['create'], usage), 2, 'usage errors exit 2')
  t.match(usage.stderr(), /--name is required/)
  t.match(usage.stderr(), /usage:/)
  t.equal(await runApps(['explode'], io(env)), 2)
  t.equal(await runUsers(['create', '--screen-name', 'x'], io(env)), 2, 'a password source is required')

  const invalid = io(env)
  t.equal(await runApps(['create', '--name', 'Bad', '--callback', 'javascript:alert(1)'], invalid), 1, 'API errors exit 1')
  t.match(invalid.stderr(), /^error: 400 .*callback URL scheme javascript: is not allowed/)
  const dup = io(env)
  t.equal(await runUsers(['create', '--screen-name', 'cli_user', '--password', 'whatever long'], dup), 1)
  t.match(dup.stderr(), /error: 409 .*taken/)

  const unauthorized = io({ ...env, OPERATOR_TOKEN: 'nope' })
  t.equal(await runApps(['list'], unauthorized), 1)
  t.match(unauthorized.stderr(), /error: 401/)
  const down = io({ GATEWAY_URL: 'http://127.0.0.1:9', OPERATOR_TOKEN: OPERATOR })
  t.equal(await runApps(['list'], down), 1)
  t.match(down.stderr(), /cannot reach the gateway/)
})

t.test('embedded mode: the operator token is created in DATA_DIR and found by the CLI', async (t) => {
  const rt = await startBackend(t, 'memory')
  const out = io({ GATEWAY_URL: rt.baseUrl, DATA_DIR: rt.ctx.config.dataDir })
  t.equal(await runApps(['list', '--json'], out), 0, out.stderr())
  t.ok(Array.isArray(JSON.parse(out.stdout())))
})
