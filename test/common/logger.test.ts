import { randomBytes } from 'node:crypto'
import { Writable } from 'node:stream'
import t from 'tap'
import { createLogger, redactUrl, SECRET_KEYS } from '../../services/common/logger'

/**
 * Secrets go through the real logger (pino, as every service builds it) into
 * a stream; the test reads what would have been written and looks for them.
 */

function capture(): { stream: Writable; text: () => string; lines: () => Array<Record<string, unknown>> } {
  const chunks: string[] = []
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      chunks.push(chunk.toString())
      done()
    }
  })
  const text = (): string => chunks.join('')
  return { stream, text, lines: () => text().trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>) }
}

const secret = (label: string): string => `SECRET-${label}-${randomBytes(6).toString('hex')}`

const KEYS = [
  'oauth_signature',
  'oauth_verifier',
  'oauth_token_secret',
  'refresh_token',
  'code_verifier',
  'access_token',
  'token',
  'client_secret',
  'consumer_secret',
  'password',
  'cookie',
  'cookies',
  'set-cookie',
  'authorization',
  'signing_secret',
  'previous_signing_secret'
]

t.test('every secret field is censored at any depth, in any case, and the rest is kept', async (t) => {
  const out = capture()
  const log = createLogger('info', 'redaction-test', out.stream)
  const secrets: string[] = []
  const s = (label: string): string => {
    const v = secret(label)
    secrets.push(v)
    return v
  }

  for (const key of KEYS) {
    t.ok(SECRET_KEYS.has(key), `${key} is a secret key`)
    log.info({ [key]: s(`top-${key}`), kept: 'visible-top' }, 'top level')
    log.info({ body: { form: { [key]: s(`nested-${key}`) } }, kept: 'visible-nested' }, 'nested')
    log.info({ [key.toUpperCase()]: s(`upper-${key}`) }, 'upper case')
    log.info({ items: [{ [key]: s(`array-${key}`) }, 'plain'] }, 'in an array')
  }
  const caller = { headers: { Authorization: s('hdr-auth'), COOKIE: s('hdr-cookie'), 'Set-Cookie': [s('hdr-setcookie')], 'content-type': 'application/json' } }
  log.info(caller, 'headers')
  log.warn({ req: { method: 'POST', headers: { authorization: `Bearer ${s('req-bearer')}` } } }, 'request-like object')
  log.info({ url: `/2/x?token=${s('url-token')}&crc_token=visible-crc&max_results=5` }, 'url')
  log.info({ callbackUrl: `https://a.example/cb?code=${s('url-code')}&code_verifier=${s('url-verifier')}&state=visible-state` }, 'a field named like a URL')
  log.child({ client_secret: s('binding') }).info('from a child')
  const err = Object.assign(new Error('request failed'), { config: { headers: { Authorization: `OAuth oauth_signature="${s('err-sig')}"` } }, password: s('err-password') })
  log.error({ err }, 'an error carrying request headers')
  log.error(Object.assign(new Error('thrown alone'), { token: s('err-alone') }))
  const circular: Record<string, unknown> = { password: s('circular') }
  circular.self = circular
  log.info({ circular }, 'a circular object')

  const written = out.text()
  for (const v of secrets) t.notOk(written.includes(v), `${v.split('-').slice(1, -1).join('-')} is not written`)
  t.match(written, /visible-top/, 'fields that are not secret are kept')
  t.match(written, /visible-nested/)
  t.match(written, /visible-crc/, 'crc_token is a public challenge and stays')
  t.match(written, /visible-state/)
  t.match(written, /"content-type":"application\/json"/)
  t.match(written, /"message":"request failed"/, 'the error itself is still logged')
  t.match(written, /max_results=5/)
  const lines = out.lines()
  t.equal(lines.length, KEYS.length * 4 + 8, 'one line per call')
  t.match(lines.find((l) => l.msg === 'headers'), { headers: { Authorization: '[redacted]', COOKIE: '[redacted]', 'Set-Cookie': '[redacted]' } })
  t.equal(caller.headers.Authorization.startsWith('SECRET-'), true, "the caller's object is not modified")
})

t.test("a webhook's config record logged whole keeps its Standard Webhooks secrets out", async (t) => {
  const out = capture()
  const log = createLogger('info', 'redaction-test', out.stream)
  const current = `whsec_${randomBytes(32).toString('base64')}`
  const previous = `whsec_${randomBytes(32).toString('base64')}`
  // The fields of a webhooks:config hash (services/webhooks/registry.ts) with signing on, mid-rotation.
  const record = { id: '123', app_id: '9', url: 'https://a.example/hook', valid: 'true', signing_secret: current, previous_signing_secret: previous, previous_signing_secret_until: '2030-01-01T00:00:00.000Z' }
  log.info({ webhook: record }, 'a webhook')
  log.info(record, 'its fields at the top')
  const written = out.text()
  t.notOk(written.includes(current.slice(6)) || written.includes(previous.slice(6)), 'neither secret is written')
  t.match(written, /previous_signing_secret_until":"2030-01-01/, 'the end of the overlap is not a secret and stays')
})

t.test('redactUrl hides credential query parameters, whatever their case or position', async (t) => {
  t.equal(redactUrl('/2/x?token=abc'), '/2/x?token=[redacted]')
  t.equal(
    redactUrl('/oauth2/token?grant_type=authorization_code&code=abc&code_verifier=def&refresh_token=ghi&access_token=jkl'),
    '/oauth2/token?grant_type=authorization_code&code=[redacted]&code_verifier=[redacted]&refresh_token=[redacted]&access_token=[redacted]'
  )
  t.equal(redactUrl('/oauth/access_token?oauth_verifier=v&oauth_token=public'), '/oauth/access_token?oauth_verifier=[redacted]&oauth_token=public', 'oauth_token is a public identifier')
  t.equal(redactUrl('/x?Client_Secret=s&PASSWORD=p#frag'), '/x?Client_Secret=[redacted]&PASSWORD=[redacted]#frag')
  t.equal(redactUrl('/webhooks?crc_token=challenge'), '/webhooks?crc_token=challenge')
  t.equal(redactUrl('/x?mytoken=kept&token_type=bearer'), '/x?mytoken=kept&token_type=bearer', 'only whole parameter names match')
})
