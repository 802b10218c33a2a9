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

const asPattern = (pattern: RegExp, what: string): Parser<string> => (raw, name) => {
  if (raw !== '' && !pattern.test(raw)) throw new ConfigError(`${name} must be ${what}, got "${raw}"`)
  return raw
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

const SECOND = 1000
const MINUTE = 60 * SECOND
const HOUR = 60 * MINUTE
const DAY = 24 * HOUR
/** The longest delay Node's timers honour: a longer one fires after 1 ms instead. */
export const TIMER_MAX_MS = 2 ** 31 - 1
/** Upper bound of lifetimes kept in the store (TTLs, retentions): ten years. */
const TTL_MAX_MS = 3650 * DAY

/** 1500 -> "1500ms", 60000 -> "1m", the timer limit -> "2147483647ms (about 24.8 days)". */
export function formatDuration(ms: number): string {
  if (ms === TIMER_MAX_MS) return `${ms}ms (about 24.8 days, the longest timer)`
  for (const [unit, size] of [['d', DAY], ['h', HOUR], ['m', MINUTE], ['s', SECOND]] as const) {
    if (ms >= size && ms % size === 0) return `${ms / size}${unit}`
  }
  return `${ms}ms`
}

/** A duration within [min, max]: timers need a positive period that fits setTimeout, TTLs a positive lifetime. */
const asDuration = (min: number, max: number): Parser<number> => (raw, name) => {
  const ms = parseDuration(raw, name)
  if (ms < min || ms > max) throw new ConfigError(`${name} must be between ${formatDuration(min)} and ${formatDuration(max)}, got "${raw}"`)
  return ms
}

const asDurationList = (min: number, max: number): Parser<number[]> => (raw, name) => {
  const parts = raw.split(',').map((p) => p.trim())
  if (parts.some((p) => p === '')) throw new ConfigError(`${name} must be a comma list of durations without empty entries, got "${raw}"`)
  return parts.map((p) => asDuration(min, max)(p, name))
}

const asRedisUrl: Parser<string> = (raw, name) => {
  if (raw === '') return raw
  let url: URL | undefined
  try {
    url = new URL(raw)
  } catch {
    url = undefined
  }
  if (!url || (url.protocol !== 'redis:' && url.protocol !== 'rediss:') || url.hostname === '') {
    throw new ConfigError(`${name} must be a redis:// or rediss:// URL such as redis://host:6379/0, got "${redactSecretInUrl(raw)}"`)
  }
  return raw
}

/** Config errors are printed: a password in a rejected URL must not be. */
function redactSecretInUrl(raw: string): string {
  return raw.replace(/(\/\/[^:/@]*:)[^@/]*@/, '$1***@')
}

const BROKER = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?):([0-9]{1,5})$/

/** Empty: no Kafka (embedded bus). Otherwise every entry must be host:port; `,,` is a typo, not "no brokers". */
const asHostPortList =
  (what: string): Parser<string[]> =>
  (raw) => {
    if (raw.trim() === '') return []
    return raw.split(',').map((entry) => {
      const hostPort = entry.trim()
      const m = BROKER.exec(hostPort)
      const port = Number(m?.[3])
      if (!m || port < 1 || port > 65535) throw new ConfigError(`${what}, got "${hostPort}" in "${raw}"`)
      return hostPort
    })
  }

const asBrokerList: Parser<string[]> = (raw, name) => asHostPortList(`${name} entries must be host:port (e.g. kafka-0:9092)`)(raw, name)

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
  shutdownGraceMs: setting('SHUTDOWN_GRACE', '10s', 'How long SIGTERM waits for in-flight work before exiting (0 to 24.8 days).', asDuration(0, TIMER_MAX_MS)),

  // --- state and bus ---
  dataDir: setting('DATA_DIR', './data', 'Directory of the embedded store\'s and bus\'s journals (state/, bus/) and of uploaded media.', asString),
  redisUrl: setting('REDIS_URL', '', 'Redis URL, `redis://` or `rediss://` (TLS): redis://[user:password@]host:port/db. Empty: in-memory store persisted to DATA_DIR.', asRedisUrl),
  redisClusterNodes: setting('REDIS_CLUSTER_NODES', '', 'Comma list of Redis Cluster nodes, each host:port (any of them: the rest are discovered). Set: the store is that cluster (REDIS_URL is then ignored); keys that change together share a hash tag, and a batch is atomic per hash slot (docs/operations.md "Redis Cluster").', asHostPortList('REDIS_CLUSTER_NODES entries must be host:port (e.g. redis-0:6379)')),
  kafkaBrokers: setting('KAFKA_BROKERS', '', 'Comma list of Kafka brokers, each host:port. Empty: in-memory bus (embedded mode).', asBrokerList),
  kafkaClientId: setting('KAFKA_CLIENT_ID', 'activity-gateway', 'Kafka client id prefix.', asString),
  busPartitions: setting('BUS_PARTITIONS', '6', 'Partitions per topic of the in-memory bus (Kafka topics: deploy/topics.json).', asInt(1, 256)),
  kafkaFetchMaxWaitMs: setting('KAFKA_FETCH_MAX_WAIT', '100ms', 'Longest a Kafka fetch waits on partitions without new data (kafkajs maxWaitTimeInMs). A broker answers as soon as data arrives, so under load this costs nothing; librdkafka\'s mock cluster (tests, make up) answers an empty fetch only after the whole wait, which then bounds each hop\'s latency at low load. 100 ms keeps an idle consumer at ten fetches a second per broker.', asDuration(1, MINUTE)),
  kafkaBackgroundFetchMaxWaitMs: setting('KAFKA_BACKGROUND_FETCH_MAX_WAIT', '1s', 'KAFKA_FETCH_MAX_WAIT of the latency-tolerant consumer groups (keyword insights, audience targeting index, account history): an idle process polls the brokers less; on the mock cluster their changes show up to this much later.', asDuration(1, MINUTE)),
  kafkaFetchMaxBytesPerPartition: setting('KAFKA_FETCH_MAX_BYTES_PER_PARTITION', '1048576', 'Most bytes one Kafka fetch returns per partition (kafkajs maxBytesPerPartition): the upper bound of one consumed batch (about 1,000 deliveries of 1 KB).', asInt(1024, 64 * 1024 * 1024)),
  kafkaFetchMaxBytes: setting('KAFKA_FETCH_MAX_BYTES', '10485760', 'Most bytes one Kafka fetch returns over all its partitions (kafkajs maxBytes).', asInt(1024, 256 * 1024 * 1024)),
  kafkaPartitionsConcurrently: setting('KAFKA_PARTITIONS_CONCURRENTLY', '12', 'Partitions whose batches one consumer handles at the same time (kafkajs partitionsConsumedConcurrently); deploy/topics.json gives the event topics 12.', asInt(1, 256)),
  kafkaProducerLingerMs: setting('KAFKA_PRODUCER_LINGER', '0ms', 'How long a publish waits for others to share its produce request. 0: the publishes of one event-loop turn leave together, and those made while a request is in flight leave together in the next one (batching under load, no added latency when idle).', asDuration(0, SECOND)),
  kafkaCompression: setting('KAFKA_COMPRESSION', 'gzip', 'Codec of the record batches the services produce: `gzip` or `none`. Deliveries and events are JSON with the same field names over and over: gzip shrinks a batch several times, so a topic keeps that many more unread records within its retention bytes (a consumer group that falls behind a burst loses nothing as long as the burst fits). Compressing and decompressing run on libuv\'s thread pool, off the event loop.', asEnum(['gzip', 'none'] as const)),
  kafkaAssignmentDelayMs: setting('KAFKA_ASSIGNMENT_DELAY', '0', 'How long a consumer group\'s leader waits before handing in the partition assignment. Real Kafka needs none; librdkafka\'s mock cluster (tests, make up: 1s) refuses a member whose SyncGroup comes after the leader\'s, which stops that consumer and costs another rebalance.', asDuration(0, MINUTE)),
  kafkaSessionTimeoutMs: setting('KAFKA_SESSION_TIMEOUT', '30s', 'Kafka consumer group session: a member silent this long is evicted and its partitions move to the others (heartbeats every tenth of it); 1s to 30m, the brokers\' default bounds.', asDuration(SECOND, 30 * MINUTE)),
  livenessTtlMs: setting('LIVENESS_TTL', '3s', 'How long a process may go without beating (every third of it, a key in the store) before the others take it for dead and release what it held: its Kafka group memberships (its partitions move at once, not after KAFKA_SESSION_TIMEOUT) and the webhook deliveries it had leased (due again at once, not after their lease). A process stalled longer than this is taken for dead too: its consumers rejoin when it wakes, and an attempt it had in flight may be made twice.', asDuration(SECOND, 10 * MINUTE)),

  // --- media (POST /2/media/upload, advertising creatives) ---
  mediaDir: setting('MEDIA_DIR', '', 'Directory of uploaded media bytes (only their metadata is in the store). Empty: DATA_DIR/media.', asString),
  mediaMaxBytes: setting('MEDIA_MAX_BYTES', '536870912', 'Largest media upload accepted (bytes); images (5 MB) and GIFs (15 MB) have their own lower limits.', asInt(1024, 16 * 1024 * 1024 * 1024)),
  mediaFfmpeg: setting('MEDIA_FFMPEG', 'ffmpeg', 'ffmpeg executable used to extract a video\'s first frame as its default poster. Empty: no default poster.', asString),
  mediaFfprobe: setting('MEDIA_FFPROBE', 'ffprobe', 'ffprobe executable (Debian ffmpeg) that reads GIF frames and a video\'s duration and size.', asString),
  mediaUploadTtlMs: setting('MEDIA_UPLOAD_TTL', '24h', 'Lifetime of an unfinished chunked upload (INIT to FINALIZE, and its STATUS after); the segments of an expired one are removed.', asDuration(SECOND, TTL_MAX_MS)),

  // --- operators ---
  operatorToken: setting('OPERATOR_TOKEN', '', 'Bearer token of the operator API (/admin/*, used by the CLI); a server refuses one shorter than 32 characters. Empty: a random token is generated and stored in DATA_DIR/operator-token (embedded) or the admin API is closed (distributed).', asString),

  // --- web console (/console/) ---
  consoleSessionTtlMs: setting('CONSOLE_SESSION_TTL', '8h', 'Lifetime of a web console session (operator or app developer); signing out ends it sooner.', asDuration(MINUTE, 30 * DAY)),
  consoleLinkTtlMs: setting('CONSOLE_LINK_TTL', '15m', 'Lifetime of an app developer\'s portal link (`make console-link`); each link signs in once.', asDuration(MINUTE, DAY)),

  // --- authentication ---
  oauthTimestampWindowS: setting('OAUTH_TIMESTAMP_WINDOW', '300', 'Accepted distance (seconds) of oauth_timestamp from the server clock.', asInt(1, 86400)),
  requestTokenTtlMs: setting('OAUTH_REQUEST_TOKEN_TTL', '15m', 'Lifetime of an OAuth 1.0a request token.', asDuration(SECOND, TTL_MAX_MS)),
  bearerMinIntervalMs: setting('OAUTH2_TOKEN_MIN_INTERVAL', '0', 'Minimum time between two oauth2/token calls of one app; faster gets 403 code 99.', asDuration(0, DAY)),
  oauth2AccessTokenTtlMs: setting('OAUTH2_ACCESS_TOKEN_TTL', '2h', 'Lifetime of an OAuth 2.0 user-context access token.', asDuration(SECOND, TTL_MAX_MS)),
  oauth2RefreshTokenTtlMs: setting('OAUTH2_REFRESH_TOKEN_TTL', '180d', 'Lifetime of an OAuth 2.0 refresh token (issued with offline.access); each refresh rotates it.', asDuration(SECOND, TTL_MAX_MS)),
  oauth2CodeTtlMs: setting('OAUTH2_CODE_TTL', '30s', 'Lifetime of an OAuth 2.0 authorization code (single use).', asDuration(SECOND, TTL_MAX_MS)),
  oauth2AllowPlainPkce: setting('OAUTH2_ALLOW_PLAIN_PKCE', 'false', 'Accept code_challenge_method=plain (otherwise only S256).', asBool),
  rateLimitWindowMs: setting('RATE_LIMIT_WINDOW', '15m', 'Length of a rate-limit window (1s to 30d).', asDuration(SECOND, 30 * DAY)),
  rateLimitDefault: setting('RATE_LIMIT_DEFAULT', '900', 'Requests per window per token and route family where the spec gives no figure.', asInt(1, 10_000_000)),
  rateLimits: setting('RATE_LIMITS', '', 'Per-family overrides, `family=limit[/window]` comma list (e.g. `webhooks=50/15m,with_total_count=200/15m`); families: services/common/ratelimit.ts.', asRateLimitOverrides),
  signInSessionTtlMs: setting('OAUTH_SESSION_TTL', '14d', 'How long the sign-in page remembers a signed-in browser (oauth/authenticate then skips the password).', asDuration(SECOND, TTL_MAX_MS)),

  // --- webhooks ---
  webhookAllowInsecure: setting('WEBHOOK_ALLOW_INSECURE', 'false', 'Development only: allow http, explicit ports and loopback/private webhook URLs.', asBool),
  webhookLimitPerApp: setting('WEBHOOK_LIMIT_PER_APP', '1', 'Webhooks per application.', asInt(1, 1000)),
  webhookCrcIntervalMs: setting('WEBHOOK_CRC_INTERVAL', '1h', 'Period of the background CRC check of every webhook (at least 100ms, at most 24.8 days).', asDuration(100, TIMER_MAX_MS)),
  webhookTimeoutMs: setting('WEBHOOK_TIMEOUT', '10s', 'Timeout of a CRC request and of a delivery.', asDuration(1, TIMER_MAX_MS)),
  webhookRetrySchedule: setting('WEBHOOK_RETRY_SCHEDULE', '0,5s,5m,30m,2h,5h,10h,10h', 'Delays of the delivery retries (jitter is added).', asDurationList(0, TIMER_MAX_MS)),
  webhookConcurrency: setting('WEBHOOK_CONCURRENCY', '32', 'Concurrent deliveries per webhook per webhooks process (its keep-alive connections to the receiver). A webhook\'s throughput is about this divided by the time one POST takes: at 8 and 40 ms per POST on a busy process, 200/s.', asInt(1, 1000)),
  webhookSubscriptionLimit: setting('WEBHOOK_SUBSCRIPTION_LIMIT', '5000', 'Account Activity user subscriptions per application, across its webhooks.', asInt(1, 10_000_000)),
  webhookLogRetentionMs: setting('WEBHOOK_LOG_RETENTION', '7d', 'How long the delivery log keeps each delivery (inspection, re-send; replay reads the last 24 h of it).', asDuration(SECOND, TTL_MAX_MS)),

  // --- activity and stream ---
  ingestBacklogLimit: setting('INGEST_BACKLOG_LIMIT', '20000', 'Undelivered messages (the consumer lag of INGEST_BACKLOG_GROUPS, summed) past which the ingest route answers 503 with Retry-After instead of accepting more: accepted events are never dropped, a publisher that honours Retry-After loses nothing. 0: never refuse.', asInt(0, 1_000_000_000)),
  ingestBacklogGroups: setting('INGEST_BACKLOG_GROUPS', 'activity-matcher,webhooks-delivery', 'Consumer groups whose lag is the backlog INGEST_BACKLOG_LIMIT bounds: the matcher and the webhooks delivery consumer (a receiver that fails does not count: its deliveries wait in the retry schedule, not on the bus).', asList),
  subscriptionLimitPerApp: setting('SUBSCRIPTION_LIMIT_PER_APP', '1500', 'Activity subscriptions per application.', asInt(1, 10_000_000)),
  streamConnectionsPerApp: setting('STREAM_CONNECTIONS_PER_APP', '2', 'Concurrent stream connections per application.', asInt(1, 100_000)),
  streamKeepAliveMs: setting('STREAM_KEEPALIVE', '20s', 'Interval of the \\r\\n keep-alive on idle streams (at least 100ms, at most 24.8 days).', asDuration(100, TIMER_MAX_MS)),
  streamSlowReaderBytes: setting('STREAM_SLOW_READER_BYTES', '4194304', 'Unsent bytes after which a stream consumer is disconnected as SlowReader.', asInt(1024, 1024 * 1024 * 1024)),
  streamBackfillMs: setting('STREAM_BACKFILL', '5m', 'How much recent activity each stream node keeps for backfill_minutes.', asDuration(0, 30 * DAY)),
  streamBackfillMaxEvents: setting('STREAM_BACKFILL_MAX_EVENTS', '10000', 'Most recent deliveries each stream node keeps per application for backfill (memory bound).', asInt(0, 10_000_000)),
  streamNodeId: setting('STREAM_NODE_ID', '', 'Stable id of this stream node: its consumer group is stream-<id>, so a restarted node resumes and refills its backfill. Empty: <hostname>-<PORT> (random when PORT=0).', asPattern(/^[A-Za-z0-9._-]{1,100}$/, '1 to 100 of A-Z a-z 0-9 . _ -')),
  streamBackfillMaxBytes: setting('STREAM_BACKFILL_MAX_BYTES', '268435456', 'Backfill bytes each stream node keeps over every application (oldest dropped first).', asInt(1024, Number.MAX_SAFE_INTEGER)),
  streamBackfillMaxBytesPerApp: setting('STREAM_BACKFILL_MAX_BYTES_PER_APP', '33554432', 'Backfill bytes each stream node keeps for one application.', asInt(1024, Number.MAX_SAFE_INTEGER)),
  streamRegistryTtlMs: setting('STREAM_REGISTRY_TTL', '15s', 'Lifetime of a stream connection\'s entry in the shared registry; nodes renew it every third of it, so a dead node\'s connections stop counting against the limit after this.', asDuration(SECOND, TIMER_MAX_MS)),

  // --- usage caps ---
  usageCapDaily: setting('USAGE_CAP_DAILY', '0', 'Posts an application may consume per UTC day (webhook deliveries and stream events) unless the operator set its own cap (`make app-caps`); 0: no cap.', asInt(0, Number.MAX_SAFE_INTEGER)),
  usageCapMonthly: setting('USAGE_CAP_MONTHLY', '0', 'Posts an application may consume per billing cycle unless the operator set its own cap; 0: no cap.', asInt(0, Number.MAX_SAFE_INTEGER)),
  usageProjectCap: setting('USAGE_PROJECT_CAP', '0', 'Posts every application together may consume per billing cycle (the usage report\'s `project_cap`); 0: no cap.', asInt(0, Number.MAX_SAFE_INTEGER)),
  usageCapResetDay: setting('USAGE_CAP_RESET_DAY', '1', 'Day of the month (UTC) a billing cycle starts (the usage report\'s `cap_reset_day`).', asInt(1, 28)),

  // --- ads: catalog and audiences ---
  catalogImageCheck: setting('ADS_CATALOG_IMAGE_CHECK', 'fetch', 'How product images are checked: `fetch` downloads each new image URL and checks type, 500x500 px minimum and 5 MB maximum; `url` checks the URL only.', asEnum(['fetch', 'url'] as const)),
  catalogImageAllowPrivate: setting('ADS_CATALOG_IMAGE_ALLOW_PRIVATE', 'false', 'Development only: let the image check fetch loopback and private addresses.', asBool),
  catalogImageTimeoutMs: setting('ADS_CATALOG_IMAGE_TIMEOUT', '5s', 'Timeout of one product image fetch.', asDuration(1, TIMER_MAX_MS)),
  productSetEvalIntervalMs: setting('ADS_PRODUCT_SET_EVAL_INTERVAL', '200ms', 'How often the product set evaluator looks for FILTERED sets to (re)compute.', asDuration(10, TIMER_MAX_MS)),
  insightsRetentionMs: setting('ADS_INSIGHTS_RETENTION', '30d', 'How long ingested posts stay in the keyword-insights corpus.', asDuration(SECOND, TTL_MAX_MS))
} as const

type SettingsTable = typeof SETTINGS
export type Config = { readonly [K in keyof SettingsTable]: SettingsTable[K] extends Setting<infer T> ? T : never }

export const OPERATOR_TOKEN_MIN_LENGTH = 32

/**
 * Rules for a process that serves the settings rather than presents them: the
 * operator token a server accepts must be long enough not to be guessed. (The
 * CLI reads the same variable only to send it; a wrong one is a 401 there.)
 */
function serverProblems(parsed: Record<string, unknown>): string[] {
  const token = parsed.operatorToken
  if (typeof token === 'string' && token !== '' && token.length < OPERATOR_TOKEN_MIN_LENGTH) {
    return [`OPERATOR_TOKEN must be at least ${OPERATOR_TOKEN_MIN_LENGTH} characters, got ${token.length} (e.g. openssl rand -base64 32)`]
  }
  return []
}

export interface LoadOptions {
  /** Also apply the rules of a serving process (every runMain entry). */
  server?: boolean
}

/** Reads every setting from `env`; throws ConfigError listing every invalid variable. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env, overrides: Partial<Config> = {}, options: LoadOptions = {}): Config {
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
  if (options.server) problems.push(...serverProblems(out))
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
