import { spawn } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { ConfigError, configTableMarkdown, loadConfig, parseDuration, SETTINGS, TIMER_MAX_MS } from '../../services/common/config'
import { tempDir } from '../support/util'

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

t.test('durations are bounded: positive periods, timers that fit setTimeout', async (t) => {
  for (const [name, value, message] of [
    ['KAFKA_SESSION_TIMEOUT', '0', /KAFKA_SESSION_TIMEOUT must be between 1s and 30m, got "0"/],
    ['KAFKA_SESSION_TIMEOUT', '2h', /KAFKA_SESSION_TIMEOUT must be between/],
    ['RATE_LIMIT_WINDOW', '0', /RATE_LIMIT_WINDOW must be between 1s and 30d/],
    ['WEBHOOK_CRC_INTERVAL', '0', /WEBHOOK_CRC_INTERVAL must be between 100ms and/],
    ['WEBHOOK_CRC_INTERVAL', '30d', /WEBHOOK_CRC_INTERVAL must be between 100ms and 2147483647ms/],
    ['STREAM_KEEPALIVE', '0', /STREAM_KEEPALIVE must be between/],
    ['SHUTDOWN_GRACE', '25d', /SHUTDOWN_GRACE must be between 0ms and 2147483647ms \(about 24\.8 days/],
    ['SHUTDOWN_GRACE', '99999999999999999999d', /SHUTDOWN_GRACE must be between/],
    ['WEBHOOK_TIMEOUT', '0', /WEBHOOK_TIMEOUT must be between/],
    ['OAUTH2_ACCESS_TOKEN_TTL', '0', /OAUTH2_ACCESS_TOKEN_TTL must be between 1s/],
    ['WEBHOOK_RETRY_SCHEDULE', '0,,5s', /WEBHOOK_RETRY_SCHEDULE must be a comma list of durations without empty entries/],
    ['WEBHOOK_RETRY_SCHEDULE', '0,30d', /WEBHOOK_RETRY_SCHEDULE must be between/]
  ] as const) {
    t.throws(() => loadConfig({ [name]: value }), { name: 'ConfigError', message }, `${name}=${value}`)
  }
  t.equal(loadConfig({ SHUTDOWN_GRACE: String(TIMER_MAX_MS) }).shutdownGraceMs, TIMER_MAX_MS, 'the longest timer is accepted')
  t.equal(loadConfig({ SHUTDOWN_GRACE: '0' }).shutdownGraceMs, 0, 'no grace at all is allowed')
  t.equal(loadConfig({ OAUTH2_TOKEN_MIN_INTERVAL: '0' }).bearerMinIntervalMs, 0)
})

t.test('REDIS_URL and KAFKA_BROKERS: well-formed or refused, never silently something else', async (t) => {
  t.equal(loadConfig({ REDIS_URL: 'redis://127.0.0.1:6379/0' }).redisUrl, 'redis://127.0.0.1:6379/0')
  t.equal(loadConfig({ REDIS_URL: 'rediss://user:pw@cache.example:6380' }).redisUrl, 'rediss://user:pw@cache.example:6380')
  for (const bad of ['http://127.0.0.1:6379', '127.0.0.1:6379', 'redis://', 'not a url']) t.throws(() => loadConfig({ REDIS_URL: bad }), /REDIS_URL must be a redis:\/\/ or rediss:\/\/ URL/, bad)
  t.notMatch(String((() => { try { loadConfig({ REDIS_URL: 'http://u:secretpw@h:1' }) } catch (e) { return (e as Error).message } })()), /secretpw/, 'a password in a refused URL is not echoed')

  t.same(loadConfig({ KAFKA_BROKERS: '' }).kafkaBrokers, [], 'empty: the memory bus')
  t.same(loadConfig({ KAFKA_BROKERS: ' kafka-0:9092 , 10.0.0.2:9093,[::1]:9094' }).kafkaBrokers, ['kafka-0:9092', '10.0.0.2:9093', '[::1]:9094'])
  for (const bad of [',,', 'kafka-0:9092,', 'kafka-0', 'kafka-0:0', 'kafka-0:70000', 'http://kafka:9092', 'a b:1']) {
    t.throws(() => loadConfig({ KAFKA_BROKERS: bad }), /KAFKA_BROKERS entries must be host:port/, JSON.stringify(bad))
  }
})

t.test('a serving process refuses a short OPERATOR_TOKEN; the CLI may present any', async (t) => {
  t.throws(() => loadConfig({ OPERATOR_TOKEN: 'x'.repeat(31) }, {}, { server: true }), /OPERATOR_TOKEN must be at least 32 characters, got 31/)
  t.equal(loadConfig({ OPERATOR_TOKEN: 'x'.repeat(32) }, {}, { server: true }).operatorToken, 'x'.repeat(32))
  t.equal(loadConfig({ OPERATOR_TOKEN: '' }, {}, { server: true }).operatorToken, '', 'unset: generated (embedded) or closed (distributed)')
  t.equal(loadConfig({ OPERATOR_TOKEN: 'nope' }).operatorToken, 'nope', 'a client reading the variable only sends it (a wrong one is a 401)')
})

/** Runs the embedded entry with `env` on top of a valid test environment; resolves with its exit code and stderr. */
function runEmbedded(env: Record<string, string>, dataDir: string): Promise<{ code: number | null; stderr: string; stdout: string }> {
  const root = path.join(__dirname, '..', '..')
  const child = spawn(process.execPath, ['--import=tsx', path.join(root, 'services', 'embedded', 'main.ts')], {
    cwd: root,
    env: { ...process.env, PORT: '0', SANDBOX_PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'silent', DATA_DIR: dataDir, KAFKA_BROKERS: '', REDIS_URL: '', OPERATOR_TOKEN: '', ...env },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  let stderr = ''
  let stdout = ''
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()))
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString()))
  const timer = setTimeout(() => child.kill('SIGKILL'), 60_000)
  return new Promise((resolve) => child.once('exit', (code) => {
    clearTimeout(timer)
    resolve({ code, stderr, stdout })
  }))
}

t.test('a process refuses to start on an invalid setting: exit 2, every bad variable named', async (t) => {
  const dir = tempDir(t, 'gw-config-')
  const bad = await runEmbedded({ KAFKA_BROKERS: ',,', REDIS_URL: 'http://u:hunter2@cache:6379', SHUTDOWN_GRACE: '30d', KAFKA_SESSION_TIMEOUT: '0', OPERATOR_TOKEN: 'short-token' }, dir)
  t.equal(bad.code, 2, 'exit code 2')
  t.match(bad.stderr, /^embedded: refusing to start: invalid configuration:/)
  for (const name of ['KAFKA_BROKERS', 'REDIS_URL', 'SHUTDOWN_GRACE', 'KAFKA_SESSION_TIMEOUT', 'OPERATOR_TOKEN']) t.match(bad.stderr, new RegExp(`\\n  ${name} (entries )?must`), `${name} is named`)
  t.notMatch(bad.stderr, /hunter2|short-token/, 'no secret is echoed')
  t.equal(bad.stdout, '', 'nothing was served')
})

t.test('the README documents every setting exactly as the table says', async (t) => {
  const readme = fs.readFileSync(path.join(__dirname, '..', '..', 'README.md'), 'utf8')
  t.ok(readme.includes(configTableMarkdown()), 'README contains the generated table (make config-doc)')
  for (const s of Object.values(SETTINGS)) t.ok(readme.includes(`\`${s.env}\``), `${s.env} documented`)
})
