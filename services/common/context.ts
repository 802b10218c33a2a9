import path from 'node:path'
import client from 'prom-client'
import type { Logger } from 'pino'
import type { Bus, GroupMembership } from './bus/types'
import { Liveness } from './liveness'
import { MemoryBus } from './bus/memory'
import { ValidatingBus } from './bus/validating'
import type { Config } from './config'
import { createLogger } from './logger'
import { schemaRegistry, type SchemaRegistry } from './schemas'
import { MemoryStore } from './store/memory'
import type { Store } from './store/types'

/**
 * What every service is handed: configuration, logger, bus, store, schemas
 * and metrics. Embedded mode builds one context for all services (memory bus,
 * journaled memory store); distributed mode builds one per process from
 * KAFKA_BROKERS and REDIS_URL. Service code never knows which.
 */
export interface ServiceContext {
  readonly serviceName: string
  readonly config: Config
  readonly log: Logger
  readonly bus: Bus
  readonly store: Store
  readonly schemas: SchemaRegistry
  readonly metrics: client.Registry
  readonly httpMetrics: client.Histogram<'method' | 'route' | 'status'>
  /** This process's heartbeat, and the release of what dead processes held (liveness.ts). */
  readonly liveness: Liveness
}

export interface ContextOptions {
  serviceName: string
  config: Config
  /** Use these instead of building from config (tests inject real Kafka/Redis or fresh memory ones). */
  bus?: Bus
  store?: Store
  log?: Logger
}

export async function createBus(config: Config, clientId: string, log: Logger): Promise<Bus> {
  // Journaled next to the store: what was published and not yet consumed survives a restart.
  if (config.kafkaBrokers.length === 0) return new MemoryBus(config.busPartitions, log, { dir: path.resolve(config.dataDir, 'bus') })
  const { KafkaBus } = await import('./bus/kafka')
  return KafkaBus.connect({
    brokers: config.kafkaBrokers,
    clientId: `${config.kafkaClientId}-${clientId}`,
    log,
    sessionTimeoutMs: config.kafkaSessionTimeoutMs,
    maxWaitTimeMs: config.kafkaFetchMaxWaitMs,
    backgroundMaxWaitTimeMs: config.kafkaBackgroundFetchMaxWaitMs,
    maxBytesPerPartition: config.kafkaFetchMaxBytesPerPartition,
    maxBytes: config.kafkaFetchMaxBytes,
    partitionsConsumedConcurrently: config.kafkaPartitionsConcurrently,
    lingerMs: config.kafkaProducerLingerMs,
    compression: config.kafkaCompression,
    heartbeatIntervalMs: Math.max(100, Math.floor(config.kafkaSessionTimeoutMs / 10)),
    // Members rejoin at once (eachBatch only queues), so two sessions is room enough; kafkajs waits
    // this + 5 s for a JoinGroup answer, so a join the cluster never answers is retried that soon.
    rebalanceTimeoutMs: 2 * config.kafkaSessionTimeoutMs,
    assignmentDelayMs: config.kafkaAssignmentDelayMs
  })
}

export async function createStore(config: Config, log: Logger): Promise<Store> {
  if (config.redisUrl === '' && config.redisClusterNodes.length === 0) return MemoryStore.open(path.resolve(config.dataDir, 'state'))
  const { RedisStore } = await import('./store/redis')
  if (config.redisClusterNodes.length > 0) return RedisStore.connectCluster(config.redisClusterNodes, log)
  return RedisStore.connect(config.redisUrl, log)
}

/**
 * The bus's group memberships through liveness: each member id this process
 * gets is noted, and a dead process's members are evicted from their groups
 * by the survivor that reaps it. A bus without groups across processes (the
 * memory bus) has nothing to link.
 */
export function linkGroupMembership(liveness: Liveness, bus: Bus, log: Logger): void {
  const m = bus as Partial<GroupMembership>
  if (typeof m.evict !== 'function' || typeof m.onJoined !== 'function') return
  const membership = bus as unknown as GroupMembership
  membership.onJoined((group, memberId) => void liveness.note(`kafka:${group}`, memberId).catch((err: unknown) => log.warn({ err, group }, 'group membership not noted')))
  liveness.addReaper('kafka groups', async (_dead, notes) => {
    for (const [field, memberId] of Object.entries(notes)) if (field.startsWith('kafka:')) await membership.evict(field.slice('kafka:'.length), memberId)
  })
}

export async function createContext(options: ContextOptions): Promise<ServiceContext> {
  const { config, serviceName } = options
  const log = options.log ?? createLogger(config.logLevel, serviceName)
  const schemas = schemaRegistry()
  const store = options.store ?? (await createStore(config, log))
  const rawBus = options.bus ?? (await createBus(config, serviceName, log))
  const bus = rawBus instanceof ValidatingBus ? rawBus : new ValidatingBus(rawBus, schemas)
  const metrics = new client.Registry()
  metrics.setDefaultLabels({ service: serviceName })
  client.collectDefaultMetrics({ register: metrics })
  const httpMetrics = new client.Histogram({
    name: 'http_request_duration_seconds',
    help: 'HTTP request duration by route and status',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10],
    registers: [metrics]
  })
  const liveness = new Liveness(store, log, { ttlMs: config.livenessTtlMs, beatMs: Math.max(100, Math.floor(config.livenessTtlMs / 3)) })
  linkGroupMembership(liveness, rawBus instanceof ValidatingBus ? rawBus.underlying : rawBus, log)
  return { serviceName, config, log, bus, store, schemas, metrics, httpMetrics, liveness }
}
