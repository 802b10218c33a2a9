import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { Test } from 'tap'
import { LOCAL_SERVICES, streamNodeEnv } from '../../../scripts/up'
import { TOPICS } from '../../../services/common/bus/types'
import type { Bus } from '../../../services/common/bus/types'
import type { Store } from '../../../services/common/store/types'
import { kafkaBus, redisStore, startKafka, startRedis, type KafkaCluster, type RedisServer } from '../../support/infra'
import { ServiceProcess } from './processes'

/**
 * The distributed system on loopback, as `make up` runs it, for the fault
 * tests: a real redis-server and the Kafka mock cluster (test/support/infra),
 * and every service instance as its own OS process with KAFKA_BROKERS,
 * REDIS_URL and OPERATOR_TOKEN set. Any instance can be killed with
 * SIGKILL and started again; Redis can be restarted and a broker taken down
 * through the handles in `redis` and `kafka`.
 *
 * The test process itself holds a Redis store (to create apps and users the
 * way the CLI does) and a Kafka bus (to watch `webhook.dead-letter`).
 */

export const OPERATOR_TOKEN = 'fault-tests-operator-token-0123456789abcdef'

/** Settings of every service process: short timeouts and a retry schedule measured in seconds. */
export const SYSTEM_ENV: Record<string, string> = {
  LOG_LEVEL: 'warn',
  OPERATOR_TOKEN,
  WEBHOOK_ALLOW_INSECURE: 'true',
  WEBHOOK_TIMEOUT: '2s',
  WEBHOOK_RETRY_SCHEDULE: '0,200ms,500ms,1s,2s,2s,2s,2s',
  WEBHOOK_CRC_INTERVAL: '1h',
  // A dead member's partitions move after this; heartbeats every tenth of it.
  KAFKA_SESSION_TIMEOUT: '4s',
  // The mock cluster refuses a follower's SyncGroup that comes after the leader's (config.ts).
  KAFKA_ASSIGNMENT_DELAY: '500ms',
  STREAM_KEEPALIVE: '2s',
  STREAM_REGISTRY_TTL: '3s',
  SHUTDOWN_GRACE: '5s'
}

export interface SystemOptions {
  /** Instances per service; default: those of `make up` (scripts/up.ts LOCAL_SERVICES). */
  services?: ReadonlyArray<{ name: string; instances: number }>
  env?: Record<string, string>
  brokers?: number
}

export interface System {
  readonly redis: RedisServer
  readonly kafka: KafkaCluster
  /** The test's own Redis store and Kafka bus. */
  readonly store: Store
  readonly bus: Bus
  readonly processes: ServiceProcess[]
  /** Every instance of `service`. */
  instances(service: string): ServiceProcess[]
  /** The instance named `name` (`activity-2`, or `webhooks` when there is one). */
  instance(name: string): ServiceProcess
  /** Base URLs of the running instances of `service`. */
  urls(service: string): string[]
  /** Waits until every instance answers /readyz. */
  waitAllReady(timeoutMs?: number): Promise<void>
  /** The end of every instance's log, for a failure message. */
  diagnostics(lines?: number): string
  /** Crashes (exits nobody asked for) of every instance. */
  crashes(): string[]
}

/** What the tenant, load and accounting helpers need of a running system: startSystem's, or `make up`'s (up-system.ts). */
export type SystemView = Pick<System, 'store' | 'urls' | 'crashes' | 'diagnostics'>

export async function startSystem(t: Test, options: SystemOptions = {}): Promise<System> {
  const logDir = fs.mkdtempSync(path.join(os.tmpdir(), 'gw-faults-'))
  const kafka = await startKafka(t, { brokers: options.brokers ?? 3 })
  const redis = await startRedis(t)
  const store = await redisStore(t, redis)
  const bus = await kafkaBus(t, kafka, `fault-tests-${process.pid}`)

  const env: Record<string, string> = {
    ...SYSTEM_ENV,
    KAFKA_BROKERS: kafka.brokers.join(','),
    REDIS_URL: redis.url,
    ...(options.env ?? {})
  }
  const processes: ServiceProcess[] = []
  for (const { name, instances } of options.services ?? LOCAL_SERVICES) {
    for (let i = 1; i <= instances; i++) {
      const instance = instances > 1 ? `${name}-${i}` : name
      processes.push(
        new ServiceProcess({
          service: name,
          instance,
          env: { ...env, ...streamNodeEnv(name, instance), DATA_DIR: path.join(logDir, 'data', instance), KAFKA_CLIENT_ID: `fault-${instance}` },
          logDir
        })
      )
    }
  }
  const everyProcess = (): ServiceProcess[] => processes
  // Registered after Kafka's and Redis's: tap runs teardowns in reverse, so the services stop first.
  t.teardown(async () => {
    await Promise.allSettled(processes.map((p) => p.stop(5000)))
    // FAULT_KEEP_LOGS=1 keeps them after a passing run too.
    if (t.passing() && !process.env.FAULT_KEEP_LOGS) fs.rmSync(logDir, { recursive: true, force: true })
    else t.comment(`service logs kept in ${logDir}`)
  })

  const system: System = {
    redis,
    kafka,
    store,
    bus,
    processes,
    instances: (service) => processes.filter((p) => p.service === service),
    instance(name) {
      const p = processes.find((x) => x.name === name)
      if (!p) throw new Error(`no instance ${name}; have ${processes.map((x) => x.name).join(', ')}`)
      return p
    },
    urls: (service) => processes.filter((p) => p.service === service && p.running && p.url !== '').map((p) => p.url),
    async waitAllReady(timeoutMs = 60_000) {
      await Promise.all(processes.map((p) => p.waitReady(timeoutMs)))
    },
    diagnostics: (lines = 25) => everyProcess().map((p) => `== ${p.name} (pid ${p.pid ?? '-'}, started ${p.starts}x)\n${p.logTail(lines)}`).join('\n'),
    crashes: () => everyProcess().flatMap((p) => p.crashes.map((c) => `${p.name} exited on its own (code ${c.code}, signal ${c.signal})`))
  }

  // Spawned together: startup is mostly loading and compiling, which the two cores share.
  for (const p of processes) p.spawn()
  try {
    await system.waitAllReady(90_000)
  } catch (err) {
    t.comment(system.diagnostics())
    throw err
  }
  return system
}

/** Collects `webhook.dead-letter`: the deliveries the system reports as missing. */
export async function watchDeadLetters(t: Test, system: Pick<System, 'bus'>): Promise<Array<Record<string, unknown>>> {
  const seen: Array<Record<string, unknown>> = []
  const consumer = await system.bus.subscribe({
    groupId: `fault-tests-dead-letters-${process.pid}`,
    topics: [TOPICS.webhookDeadLetter],
    fromBeginning: true,
    handler: async (m) => {
      seen.push(m.value as Record<string, unknown>)
    }
  })
  t.teardown(() => consumer.close())
  return seen
}
