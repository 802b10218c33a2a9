import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { ConfigError, configTableMarkdown, loadConfig, parseDuration, SETTINGS } from '../../services/common/config'

t.test('defaults load and every setting has a default that parses', async (t) => {
  const config = loadConfig({})
  t.equal(config.port, 8080)
  t.equal(config.sandboxPort, 8081)
  t.equal(config.webhookAllowInsecure, false, 'the insecure webhook setting is off by default')
  t.same(config.kafkaBrokers, [])
  t.equal(config.redisUrl, '')
})

t.test('invalid values are refused with the variable named', async (t) => {
  t.throws(() => loadConfig({ PORT: 'eighty' }), { name: 'ConfigError', message: /PORT must be an integer/ })
  t.throws(() => loadConfig({ PORT: '70000' }), /PORT must be between 0 and 65535/)
  t.throws(() => loadConfig({ WEBHOOK_ALLOW_INSECURE: 'maybe' }), /WEBHOOK_ALLOW_INSECURE must be true or false/)
  t.throws(() => loadConfig({ LOG_LEVEL: 'loud' }), /LOG_LEVEL must be one of/)
  t.throws(() => loadConfig({ PUBLIC_URL: 'ftp://x' }), /PUBLIC_URL must be an http\(s\) URL/)
  t.throws(() => loadConfig({ TLS_CERT: '/x.pem' }), /TLS_CERT and TLS_KEY must be set together/)
  // Several problems are reported together.
  try {
    loadConfig({ PORT: 'x', SANDBOX_PORT: 'y' })
    t.fail('should throw')
  } catch (err) {
    t.ok(err instanceof ConfigError)
    t.match((err as Error).message, /PORT[\s\S]*SANDBOX_PORT/)
  }
})

t.test('durations', async (t) => {
  t.equal(parseDuration('0'), 0)
  t.equal(parseDuration('250ms'), 250)
  t.equal(parseDuration('5s'), 5000)
  t.equal(parseDuration('30m'), 1_800_000)
  t.equal(parseDuration('2h'), 7_200_000)
  t.throws(() => parseDuration('soon'))
  t.same(loadConfig({ WEBHOOK_RETRY_SCHEDULE: '0, 1s ,2m' }).webhookRetrySchedule, [0, 1000, 120_000])
})

t.test('the README documents every setting exactly as the table says', async (t) => {
  const readme = fs.readFileSync(path.join(__dirname, '..', '..', 'README.md'), 'utf8')
  t.ok(readme.includes(configTableMarkdown()), 'README contains the generated table (make config-doc)')
  for (const s of Object.values(SETTINGS)) t.ok(readme.includes(`\`${s.env}\``), `${s.env} documented`)
})
