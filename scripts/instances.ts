/**
 * What `make up` runs: the services, how many instances of each, and the
 * environment of every instance (scripts/up.ts starts them).
 */

/**
 * The service processes of `make up` by default: two instances of each, so
 * that nginx always has another instance to send a request to while
 * supervisord restarts a killed one.
 */
export const LOCAL_SERVICES: ReadonlyArray<{ name: string; instances: number }> = [
  { name: 'gateway', instances: 2 },
  { name: 'webhooks', instances: 2 },
  { name: 'activity', instances: 2 },
  { name: 'stream', instances: 2 },
  { name: 'account-history', instances: 2 }
]

/** The environment variable giving a service's instance count: ACTIVITY=3, ACCOUNT_HISTORY=2. */
export function instancesEnvName(service: string): string {
  return service.toUpperCase().replace(/-/g, '_')
}

/**
 * Instances per service: LOCAL_SERVICES, each overridden by its count
 * variable (`make up ACTIVITY=3 STREAM=1`); 0 leaves a service out. The
 * instances of a service share its consumer groups, so the count is how
 * far a service is scaled out.
 */
export function instanceCounts(env: NodeJS.ProcessEnv = process.env): Array<{ name: string; instances: number }> {
  return LOCAL_SERVICES.map(({ name, instances }) => {
    const variable = instancesEnvName(name)
    const raw = env[variable]
    if (raw === undefined || raw.trim() === '') return { name, instances }
    const n = Number(raw)
    if (!Number.isInteger(n) || n < 0 || n > 16) throw new Error(`${variable} must be an instance count from 0 to 16, got "${raw}"`)
    return { name, instances: n }
  })
}

/**
 * A stream node's identity (STREAM_NODE_ID): its consumer group on
 * activity.deliveries is named from it, so a restarted node resumes its own
 * group. Every local node runs on one host on an ephemeral port, so the
 * service's default (host name + port) would not survive a restart: each
 * node is named after its instance (stream-1, stream-2).
 */
export function streamNodeEnv(service: string, instance: string): Record<string, string> {
  return service === 'stream' ? { STREAM_NODE_ID: instance } : {}
}

/** What `up` decides for every service instance. */
export interface SharedSettings {
  kafkaBrokers: string[]
  redisUrl: string
  /** Set: the store is this Redis Cluster (REDIS_CLUSTER_NODES), not redisUrl. */
  redisClusterNodes?: string[]
  operatorToken: string
}

/** What `up` decides for one service instance. */
export interface InstanceSettings {
  service: string
  instance: string
  port: number
  sandboxPort: number
  dataDir: string
}

/**
 * The environment every instance shares (supervisord's own, which its
 * programs inherit): the operator's whole environment (every configuration
 * variable, e.g. `make up KAFKA_FETCH_MAX_WAIT=50ms`, reaches every process),
 * then loopback, the local Redis and Kafka and the shared operator token.
 * A session timeout of 10 s unless set: a killed member's partitions move
 * within it.
 */
export function sharedEnv(base: NodeJS.ProcessEnv, s: SharedSettings): Record<string, string> {
  const env: Record<string, string> = {}
  for (const [k, v] of Object.entries(base)) if (v !== undefined) env[k] = v
  return {
    ...env,
    HOST: '127.0.0.1',
    KAFKA_BROKERS: s.kafkaBrokers.join(','),
    REDIS_URL: s.redisUrl,
    REDIS_CLUSTER_NODES: (s.redisClusterNodes ?? []).join(','),
    OPERATOR_TOKEN: s.operatorToken,
    KAFKA_SESSION_TIMEOUT: base.KAFKA_SESSION_TIMEOUT ?? '5s',
    KAFKA_ASSIGNMENT_DELAY: base.KAFKA_ASSIGNMENT_DELAY ?? '1s'
  }
}

/** What differs between instances (a supervisord program's `environment=`): ports, data directory, stream node identity. */
export function instanceEnv(s: InstanceSettings): Record<string, string> {
  return { PORT: String(s.port), SANDBOX_PORT: String(s.sandboxPort), DATA_DIR: s.dataDir, ...streamNodeEnv(s.service, s.instance) }
}

/** The whole environment one instance runs with. */
export function serviceEnv(base: NodeJS.ProcessEnv, s: SharedSettings & InstanceSettings): Record<string, string> {
  return { ...sharedEnv(base, s), ...instanceEnv(s) }
}

/**
 * The ports a process printed when it started: a service's
 * `{base_url} and {ads_url}: http://127.0.0.1:P` and `{ads_sandbox_url}: ...:S`
 * lines (the fault tests' processes listen on port 0 and learn their port
 * from these).
 */
export function printedPorts(text: string): { port?: number; sandboxPort?: number } {
  const service = /\{base_url\} and \{ads_url\}: https?:\/\/[^:\s]+:(\d+)/.exec(text)
  const sandbox = /\{ads_sandbox_url\}:\s+https?:\/\/[^:\s]+:(\d+)/.exec(text)
  const port = service?.[1]
  const sandboxPort = sandbox?.[1]
  return { ...(port ? { port: Number(port) } : {}), ...(sandboxPort ? { sandboxPort: Number(sandboxPort) } : {}) }
}

/** UP_SERVICES=gateway,webhooks starts a subset (default: every service with at least one instance). */
export function selectedServices(env: NodeJS.ProcessEnv = process.env): ReadonlyArray<{ name: string; instances: number }> {
  const counts = instanceCounts(env)
  const raw = env.UP_SERVICES ?? ''
  if (raw.trim() === '') return counts.filter((s) => s.instances > 0)
  const wanted = raw.split(',').map((s) => s.trim()).filter((s) => s !== '')
  const unknown = wanted.filter((w) => !LOCAL_SERVICES.some((s) => s.name === w))
  if (unknown.length > 0) throw new Error(`UP_SERVICES names unknown service(s): ${unknown.join(', ')} (known: ${LOCAL_SERVICES.map((s) => s.name).join(', ')})`)
  return counts.filter((s) => wanted.includes(s.name) && s.instances > 0)
}
