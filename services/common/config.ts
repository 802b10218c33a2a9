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

/** `family=limit[/window]` pairs (RATE_LIMITS). */
export interface RateLimitOverride {
  limit: number
  windowMs?: number
}

const asRateLimitOverrides: Parser<Record<string, RateLimitOverride>> = (raw, name) => {
  const out: Record<string, RateLimitOverride> = {}
  for (const part of asList(raw, name)) {
    const m = /^([a-z0-9_.:-]+)=(\d+)(?:\/(.+))?$/i.exec(part)
    if (!m || Number(m[2]) < 1) throw new ConfigError(`${name} entries must look like family=limit or family=limit/window (e.g. webhooks=50/15m), got "${part}"`)
    const windowMs = m[3] === undefined ? undefined : parseDuration(m[3], name)
    if (windowMs !== undefined && windowMs < 1000) throw new ConfigError(`${name}: the window of "${part}" must be at least 1s`)
    out[m[1] as string] = windowMs === undefined ? { limit: Number(m[2]) } : { limit: Number(m[2]), windowMs }
  }
  return out
}

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
  trustProxy: setting('TRUST_PROXY', 'false', 'Trust X-Forwarded-For/-Proto from the reverse proxy in front (client address for login limits, scheme for OAuth base URLs).', asBool),
  bodyLimit: setting('BODY_LIMIT_BYTES', '5242880', 'Largest request body accepted (bytes); larger gets 413 in the interface\'s error shape.', asInt(1024, 100 * 1024 * 1024)),
  shutdownGraceMs: setting('SHUTDOWN_GRACE', '10s', 'How long SIGTERM waits for in-flight work before exiting.', asDuration),

  // --- state and bus ---
  dataDir: setting('DATA_DIR', './data', 'Directory of the embedded store\'s journal and of uploaded media.', asString),
  redisUrl: setting('REDIS_URL', '', 'Redis URL (redis://host:port/db). Empty: in-memory store persisted to DATA_DIR.', asString),
  kafkaBrokers: setting('KAFKA_BROKERS', '', 'Comma list of Kafka brokers. Empty: in-memory bus (embedded mode).', asList),
  kafkaClientId: setting('KAFKA_CLIENT_ID', 'activity-gateway', 'Kafka client id prefix.', asString),
  busPartitions: setting('BUS_PARTITIONS', '6', 'Partitions per topic of the in-memory bus (Kafka topics: deploy/topics.json).', asInt(1, 256)),
  kafkaSessionTimeoutMs: setting('KAFKA_SESSION_TIMEOUT', '30s', 'Kafka consumer group session: a member silent this long is evicted and its partitions move to the others (heartbeats every tenth of it).', asDuration),

  // --- media (POST /2/media/upload, advertising creatives) ---
  mediaDir: setting('MEDIA_DIR', '', 'Directory of uploaded media bytes (only their metadata is in the store). Empty: DATA_DIR/media.', asString),
  mediaMaxBytes: setting('MEDIA_MAX_BYTES', '536870912', 'Largest media upload accepted (bytes); images (5 MB) and GIFs (15 MB) have their own lower limits.', asInt(1024, 16 * 1024 * 1024 * 1024)),
  mediaFfmpeg: setting('MEDIA_FFMPEG', 'ffmpeg', 'ffmpeg executable used to extract a video\'s first frame as its default poster. Empty: no default poster.', asString),

  // --- operators ---
  operatorToken: setting('OPERATOR_TOKEN', '', 'Bearer token of the operator API (/admin/*, used by the CLI). Empty: a random token is generated and stored in DATA_DIR/operator-token (embedded) or the admin API is closed (distributed).', asString),

  // --- authentication ---
  oauthTimestampWindowS: setting('OAUTH_TIMESTAMP_WINDOW', '300', 'Accepted distance (seconds) of oauth_timestamp from the server clock.', asInt(1, 86400)),
  requestTokenTtlMs: setting('OAUTH_REQUEST_TOKEN_TTL', '15m', 'Lifetime of an OAuth 1.0a request token.', asDuration),
  bearerMinIntervalMs: setting('OAUTH2_TOKEN_MIN_INTERVAL', '0', 'Minimum time between two oauth2/token calls of one app; faster gets 403 code 99.', asDuration),
  oauth2AccessTokenTtlMs: setting('OAUTH2_ACCESS_TOKEN_TTL', '2h', 'Lifetime of an OAuth 2.0 user-context access token.', asDuration),
  oauth2RefreshTokenTtlMs: setting('OAUTH2_REFRESH_TOKEN_TTL', '180d', 'Lifetime of an OAuth 2.0 refresh token (issued with offline.access); each refresh rotates it.', asDuration),
  oauth2CodeTtlMs: setting('OAUTH2_CODE_TTL', '30s', 'Lifetime of an OAuth 2.0 authorization code (single use).', asDuration),
  oauth2AllowPlainPkce: setting('OAUTH2_ALLOW_PLAIN_PKCE', 'false', 'Accept code_challenge_method=plain (otherwise only S256).', asBool),
  rateLimitWindowMs: setting('RATE_LIMIT_WINDOW', '15m', 'Length of a rate-limit window.', asDuration),
  rateLimitDefault: setting('RATE_LIMIT_DEFAULT', '900', 'Requests per window per token and route family where the spec gives no figure.', asInt(1, 10_000_000)),
  rateLimits: setting('RATE_LIMITS', '', 'Per-family overrides, `family=limit[/window]` comma list (e.g. `webhooks=50/15m,with_total_count=200/15m`); families: services/common/ratelimit.ts.', asRateLimitOverrides),
  signInSessionTtlMs: setting('OAUTH_SESSION_TTL', '14d', 'How long the sign-in page remembers a signed-in browser (oauth/authenticate then skips the password).', asDuration),

  // --- webhooks ---
  webhookAllowInsecure: setting('WEBHOOK_ALLOW_INSECURE', 'false', 'Development only: allow http, explicit ports and loopback/private webhook URLs.', asBool),
  webhookLimitPerApp: setting('WEBHOOK_LIMIT_PER_APP', '1', 'Webhooks per application.', asInt(1, 1000)),
  webhookCrcIntervalMs: setting('WEBHOOK_CRC_INTERVAL', '1h', 'Period of the background CRC check of every webhook.', asDuration),
  webhookTimeoutMs: setting('WEBHOOK_TIMEOUT', '10s', 'Timeout of a CRC request and of a delivery.', asDuration),
  webhookRetrySchedule: setting('WEBHOOK_RETRY_SCHEDULE', '0,5s,5m,30m,2h,5h,10h,10h', 'Delays of the delivery retries (jitter is added).', asDurationList),
  webhookConcurrency: setting('WEBHOOK_CONCURRENCY', '8', 'Concurrent deliveries per webhook.', asInt(1, 1000)),
  webhookSubscriptionLimit: setting('WEBHOOK_SUBSCRIPTION_LIMIT', '5000', 'Account Activity user subscriptions per application, across its webhooks.', asInt(1, 10_000_000)),
  webhookLogRetentionMs: setting('WEBHOOK_LOG_RETENTION', '7d', 'How long the delivery log keeps each delivery (inspection, re-send; replay reads the last 24 h of it).', asDuration),

  // --- activity and stream ---
  subscriptionLimitPerApp: setting('SUBSCRIPTION_LIMIT_PER_APP', '1500', 'Activity subscriptions per application.', asInt(1, 10_000_000)),
  streamConnectionsPerApp: setting('STREAM_CONNECTIONS_PER_APP', '2', 'Concurrent stream connections per application.', asInt(1, 100_000)),
  streamKeepAliveMs: setting('STREAM_KEEPALIVE', '20s', 'Interval of the \\r\\n keep-alive on idle streams.', asDuration),
  streamSlowReaderBytes: setting('STREAM_SLOW_READER_BYTES', '4194304', 'Unsent bytes after which a stream consumer is disconnected as SlowReader.', asInt(1024, 1024 * 1024 * 1024)),
  streamBackfillMs: setting('STREAM_BACKFILL', '5m', 'How much recent activity each stream node keeps for backfill_minutes.', asDuration),
  streamBackfillMaxEvents: setting('STREAM_BACKFILL_MAX_EVENTS', '10000', 'Most recent deliveries each stream node keeps per application for backfill (memory bound).', asInt(0, 10_000_000)),
  streamRegistryTtlMs: setting('STREAM_REGISTRY_TTL', '15s', 'Lifetime of a stream connection\'s entry in the shared registry; nodes renew it every third of it, so a dead node\'s connections stop counting against the limit after this.', asDuration),

  // --- ads: catalog and audiences ---
  catalogImageCheck: setting('ADS_CATALOG_IMAGE_CHECK', 'fetch', 'How product images are checked: `fetch` downloads each new image URL and checks type, 500x500 px minimum and 5 MB maximum; `url` checks the URL only.', asEnum(['fetch', 'url'] as const)),
  catalogImageAllowPrivate: setting('ADS_CATALOG_IMAGE_ALLOW_PRIVATE', 'false', 'Development only: let the image check fetch loopback and private addresses.', asBool),
  catalogImageTimeoutMs: setting('ADS_CATALOG_IMAGE_TIMEOUT', '5s', 'Timeout of one product image fetch.', asDuration),
  productSetEvalIntervalMs: setting('ADS_PRODUCT_SET_EVAL_INTERVAL', '200ms', 'How often the product set evaluator looks for FILTERED sets to (re)compute.', asDuration),
  insightsRetentionMs: setting('ADS_INSIGHTS_RETENTION', '30d', 'How long ingested posts stay in the keyword-insights corpus.', asDuration)
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
