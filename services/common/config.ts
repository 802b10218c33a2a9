/**
 * Every setting of every service, read and validated in one place.
 *
 * The table below is the single source of truth: the README's configuration
 * table is generated from it (`make config-doc`) and a test checks that the
 * README is in sync. An invalid value makes `loadConfig` throw a ConfigError
 * naming the variable, and every process entry refuses to start with it.
 */

export class ConfigError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'ConfigError'
  }
}

type Parser<T> = (raw: string, name: string) => T

const asString: Parser<string> = (raw) => raw

const asInt = (min: number, max: number): Parser<number> => (raw, name) => {
  if (!/^-?\d+$/.test(raw.trim())) throw new ConfigError(`${name} must be an integer, got "${raw}"`)
  const value = Number(raw)
  if (value < min || value > max) throw new ConfigError(`${name} must be between ${min} and ${max}, got ${value}`)
  return value
}

const asBool: Parser<boolean> = (raw, name) => {
  const v = raw.trim().toLowerCase()
  if (['1', 'true', 'yes', 'on'].includes(v)) return true
  if (['0', 'false', 'no', 'off', ''].includes(v)) return false
  throw new ConfigError(`${name} must be true or false, got "${raw}"`)
}

const asUrl: Parser<string> = (raw, name) => {
  if (raw === '') return raw
  try {
    const u = new URL(raw)
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error('scheme')
    return raw.replace(/\/+$/, '')
  } catch {
    throw new ConfigError(`${name} must be an http(s) URL, got "${raw}"`)
  }
}

const asEnum = <T extends string>(values: readonly T[]): Parser<T> => (raw, name) => {
  if (!(values as readonly string[]).includes(raw)) {
    throw new ConfigError(`${name} must be one of ${values.join(', ')}, got "${raw}"`)
  }
  return raw as T
}

/** Durations like `0`, `500ms`, `5s`, `5m`, `2h`, `1d`; a bare number is milliseconds. */
export function parseDuration(raw: string, name = 'duration'): number {
  const m = /^(\d+)(ms|s|m|h|d)?$/.exec(raw.trim())
  if (!m) throw new ConfigError(`${name} must be a duration such as 500ms, 5s, 5m, 2h, got "${raw}"`)
  const n = Number(m[1])
  const unit = m[2] ?? 'ms'
  const factor = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[unit] ?? 1
  return n * factor
}

const asDuration: Parser<number> = (raw, name) => parseDuration(raw, name)

const asDurationList: Parser<number[]> = (raw, name) => {
  const parts = raw.split(',').map((p) => p.trim()).filter((p) => p !== '')
  if (parts.length === 0) throw new ConfigError(`${name} must list at least one duration`)
  return parts.map((p) => parseDuration(p, name))
}

const asList: Parser<string[]> = (raw) => raw.split(',').map((p) => p.trim()).filter((p) => p !== '')

interface Setting<T> {
  env: string
  default: string
  description: string
  parse: Parser<T>
}

function setting<T>(env: string, def: string, description: string, parse: Parser<T>): Setting<T> {
  return { env, default: def, description, parse }
}

/** The settings table. Keys are the property names on the Config object. */
export const SETTINGS = {
  // --- process and HTTP ---
  host: setting('HOST', '0.0.0.0', 'Interface the HTTP servers bind to.', asString),
  port: setting('PORT', '8080', 'Port of {base_url} (v2, OAuth) and {ads_url} (advertising interface).', asInt(0, 65535)),
  sandboxPort: setting('SANDBOX_PORT', '8081', 'Port of {ads_sandbox_url}, the advertising sandbox host.', asInt(0, 65535)),
  publicUrl: setting('PUBLIC_URL', '', 'Public base URL clients use (OAuth signatures are checked against it; set it behind a proxy). Empty: http://localhost:PORT.', asUrl),
  sandboxPublicUrl: setting('SANDBOX_PUBLIC_URL', '', 'Public base URL of the sandbox host. Empty: http://localhost:SANDBOX_PORT.', asUrl),
  problemBase: setting('PROBLEM_BASE', 'https://api.twitter.com/2/problems', 'Prefix of Problem type URIs ({problem_base}).', asUrl),
  logLevel: setting('LOG_LEVEL', 'info', 'pino log level.', asEnum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const)),
  tlsCert: setting('TLS_CERT', '', 'Path of a PEM certificate; with TLS_KEY the servers speak HTTPS directly. Otherwise run behind a TLS proxy.', asString),
  tlsKey: setting('TLS_KEY', '', 'Path of the PEM private key matching TLS_CERT.', asString),
  bodyLimit: setting('BODY_LIMIT_BYTES', '5242880', 'Largest request body accepted (bytes); larger gets 413 in the interface\'s error shape.', asInt(1024, 100 * 1024 * 1024)),
  shutdownGraceMs: setting('SHUTDOWN_GRACE', '10s', 'How long SIGTERM waits for in-flight work before exiting.', asDuration),

  // --- state and bus ---
  dataDir: setting('DATA_DIR', './data', 'Directory of the embedded store\'s journal and of uploaded media.', asString),
  redisUrl: setting('REDIS_URL', '', 'Redis URL (redis://host:port/db). Empty: in-memory store persisted to DATA_DIR.', asString),
  kafkaBrokers: setting('KAFKA_BROKERS', '', 'Comma list of Kafka brokers. Empty: in-memory bus (embedded mode).', asList),
  kafkaClientId: setting('KAFKA_CLIENT_ID', 'activity-gateway', 'Kafka client id prefix.', asString),
  busPartitions: setting('BUS_PARTITIONS', '6', 'Partitions per topic of the in-memory bus (Kafka topics: deploy/topics.json).', asInt(1, 256)),

  // --- operators ---
  operatorToken: setting('OPERATOR_TOKEN', '', 'Bearer token of the operator API (/admin/*, used by the CLI). Empty: a random token is generated and stored in DATA_DIR/operator-token (embedded) or the admin API is closed (distributed).', asString),

  // --- authentication ---
  oauthTimestampWindowS: setting('OAUTH_TIMESTAMP_WINDOW', '300', 'Accepted distance (seconds) of oauth_timestamp from the server clock.', asInt(1, 86400)),
  requestTokenTtlMs: setting('OAUTH_REQUEST_TOKEN_TTL', '15m', 'Lifetime of an OAuth 1.0a request token.', asDuration),
  bearerMinIntervalMs: setting('OAUTH2_TOKEN_MIN_INTERVAL', '0', 'Minimum time between two oauth2/token calls of one app; faster gets 403 code 99.', asDuration),
  rateLimitWindowMs: setting('RATE_LIMIT_WINDOW', '15m', 'Length of a rate-limit window.', asDuration),
  rateLimitDefault: setting('RATE_LIMIT_DEFAULT', '900', 'Requests per window per token and route family where the spec gives no figure.', asInt(1, 10_000_000)),

  // --- webhooks ---
  webhookAllowInsecure: setting('WEBHOOK_ALLOW_INSECURE', 'false', 'Development only: allow http, explicit ports and loopback/private webhook URLs.', asBool),
  webhookLimitPerApp: setting('WEBHOOK_LIMIT_PER_APP', '1', 'Webhooks per application.', asInt(1, 1000)),
  webhookCrcIntervalMs: setting('WEBHOOK_CRC_INTERVAL', '1h', 'Period of the background CRC check of every webhook.', asDuration),
  webhookTimeoutMs: setting('WEBHOOK_TIMEOUT', '10s', 'Timeout of a CRC request and of a delivery.', asDuration),
  webhookRetrySchedule: setting('WEBHOOK_RETRY_SCHEDULE', '0,5s,5m,30m,2h,5h,10h,10h', 'Delays of the delivery retries (jitter is added).', asDurationList),
  webhookConcurrency: setting('WEBHOOK_CONCURRENCY', '8', 'Concurrent deliveries per webhook.', asInt(1, 1000)),

  // --- activity and stream ---
  subscriptionLimitPerApp: setting('SUBSCRIPTION_LIMIT_PER_APP', '1500', 'Activity subscriptions per application.', asInt(1, 10_000_000)),
  streamConnectionsPerApp: setting('STREAM_CONNECTIONS_PER_APP', '2', 'Concurrent stream connections per application.', asInt(1, 100_000)),
  streamKeepAliveMs: setting('STREAM_KEEPALIVE', '20s', 'Interval of the \\r\\n keep-alive on idle streams.', asDuration),
  streamSlowReaderBytes: setting('STREAM_SLOW_READER_BYTES', '4194304', 'Unsent bytes after which a stream consumer is disconnected as SlowReader.', asInt(1024, 1024 * 1024 * 1024)),
  streamBackfillMs: setting('STREAM_BACKFILL', '5m', 'How much recent activity each stream node keeps for backfill_minutes.', asDuration)
} as const

type SettingsTable = typeof SETTINGS
export type Config = { readonly [K in keyof SettingsTable]: SettingsTable[K] extends Setting<infer T> ? T : never }

/** Reads every setting from `env`; throws ConfigError listing every invalid variable. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env, overrides: Partial<Config> = {}): Config {
  const out: Record<string, unknown> = {}
  const problems: string[] = []
  for (const [key, s] of Object.entries(SETTINGS) as Array<[string, Setting<unknown>]>) {
    const raw = env[s.env] ?? s.default
    try {
      out[key] = s.parse(raw, s.env)
    } catch (err) {
      problems.push((err as Error).message)
    }
  }
  if (problems.length > 0) throw new ConfigError(`invalid configuration:\n  ${problems.join('\n  ')}`)
  const config = { ...out, ...overrides } as Config
  if ((config.tlsCert === '') !== (config.tlsKey === '')) {
    throw new ConfigError('invalid configuration:\n  TLS_CERT and TLS_KEY must be set together')
  }
  return config
}

/** The public base URL ({base_url}) derived from the config. */
export function baseUrl(config: Config): string {
  return config.publicUrl !== '' ? config.publicUrl : `http://localhost:${config.port}`
}

export function sandboxUrl(config: Config): string {
  return config.sandboxPublicUrl !== '' ? config.sandboxPublicUrl : `http://localhost:${config.sandboxPort}`
}

/** Markdown table of every setting, for the README. */
export function configTableMarkdown(): string {
  const rows = Object.values(SETTINGS).map((s) => `| \`${s.env}\` | \`${s.default}\` | ${s.description} |`)
  return ['| name | default | meaning |', '|---|---|---|', ...rows].join('\n')
}
