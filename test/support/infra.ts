import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { Test } from 'tap'
import type { Logger } from 'pino'
import { KafkaBus, type KafkaBusOptions } from '../../services/common/bus/kafka'
import type { Bus } from '../../services/common/bus/types'
import { createLogger } from '../../services/common/logger'
import { RedisStore } from '../../services/common/store/redis'
import type { Store } from '../../services/common/store/types'
import {
  deployTopicArgs,
  freePort,
  launchMockCluster,
  launchRedis,
  MockClusterControl,
  terminate,
  type Launched
} from '../../scripts/local-infra'

/**
 * Real infrastructure for tests: a `redis-server` on a free loopback port and
 * librdkafka's mock cluster (a Kafka-protocol cluster, 3 brokers by default,
 * with every topic of deploy/topics.json). Everything started here stops when
 * the test ends (t.teardown), when this process exits, and, through
 * PR_SET_PDEATHSIG, even when it is killed.
 */

const running = new Set<Launched>()

// Last line of defence for a test process that ends without its teardowns.
process.once('exit', () => {
  for (const l of running) if (l.child.exitCode === null) l.child.kill('SIGKILL')
})

function track(launched: Launched): Launched {
  running.add(launched)
  void launched.exited.then(() => running.delete(launched))
  return launched
}

function testLog(name: string): Logger {
  return createLogger(process.env.TEST_LOG_LEVEL ?? 'silent', name)
}

// ------------------------------------------------------------------ Redis

export interface RedisServer {
  readonly url: string
  readonly port: number
  /** Stops redis-server (SIGTERM: the AOF is flushed) and starts it again on the same port and data. */
  restart(options?: { downMs?: number; hard?: boolean }): Promise<void>
  /** Stops it until `start()`; clients see a connection refused meanwhile. */
  stop(): Promise<void>
  start(): Promise<void>
}

export async function startRedis(t: Test): Promise<RedisServer> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gw-redis-'))
  let port = 0
  let current: Launched | undefined
  for (let attempt = 0; ; attempt++) {
    port = await freePort()
    try {
      current = track(await launchRedis({ port, dir, tied: true }))
      break
    } catch (err) {
      // Another process took the port between probe and bind: try another.
      if (attempt >= 4) throw err
    }
  }
  const stop = async (hard = false): Promise<void> => {
    if (!current) return
    const l = current
    current = undefined
    if (hard) {
      l.child.kill('SIGKILL')
      await l.exited
    } else await terminate(l)
  }
  const start = async (): Promise<void> => {
    if (current) return
    current = track(await launchRedis({ port, dir, tied: true }))
  }
  t.teardown(async () => {
    await stop()
    fs.rmSync(dir, { recursive: true, force: true })
  })
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    async restart(options = {}) {
      await stop(options.hard ?? false)
      if (options.downMs) await new Promise((r) => setTimeout(r, options.downMs))
      await start()
    },
    stop: () => stop(),
    start
  }
}

export async function redisStore(t: Test, redis: RedisServer, log: Logger = testLog('redis-store')): Promise<Store> {
  const store = await RedisStore.connect(redis.url, log)
  t.teardown(() => store.close())
  return store
}

// ------------------------------------------------------------------ Kafka

export interface KafkaCluster {
  readonly brokers: string[]
  /** Broker ids are 1..n. Disconnects the broker and refuses connections (leadership does not move). */
  setBrokerDown(id: number): Promise<void>
  setBrokerUp(id: number): Promise<void>
  /** Moves a partition's leadership to another broker. */
  setLeader(topic: string, partition: number, brokerId: number): Promise<void>
  createTopic(name: string, partitions: number): Promise<void>
  /**
   * The next requests of Kafka API `apiKey` (0 Produce, 1 Fetch, 8 OffsetCommit, 12 Heartbeat ...)
   * fail with these error codes, one request each, whichever client sends them.
   */
  pushRequestErrors(apiKey: number, ...errorCodes: number[]): Promise<void>
  stop(): Promise<void>
}

export interface KafkaStartOptions {
  brokers?: number
  /** Topics in addition to deploy/topics.json, as `name:partitions`. */
  extraTopics?: string[]
  /** false: start without the topics of deploy/topics.json (to test their absence). */
  deployTopics?: boolean
}

export async function startKafka(t: Test, options: KafkaStartOptions = {}): Promise<KafkaCluster> {
  const launched = await launchMockCluster({ brokers: options.brokers ?? 3, detach: false, topics: [...(options.deployTopics === false ? [] : deployTopicArgs()), ...(options.extraTopics ?? [])] })
  track(launched)
  const control = new MockClusterControl(launched.child)
  const stop = async (): Promise<void> => {
    if (launched.child.exitCode !== null || launched.child.signalCode !== null) return
    launched.child.stdin?.end()
    const timer = setTimeout(() => launched.child.kill('SIGKILL'), 5000)
    await launched.exited
    clearTimeout(timer)
  }
  // Registered first, so it runs after the clients' teardowns (tap runs them in reverse).
  t.teardown(stop)
  return {
    brokers: launched.bootstrap,
    setBrokerDown: (id) => control.send(`down ${id}`),
    setBrokerUp: (id) => control.send(`up ${id}`),
    setLeader: (topic, partition, id) => control.send(`leader ${topic} ${partition} ${id}`),
    createTopic: (name, partitions) => control.send(`topic ${name} ${partitions}`),
    pushRequestErrors: (apiKey, ...codes) => control.send(`request-errors ${apiKey} ${codes.join(' ')}`),
    stop
  }
}

/**
 * Timings for tests: the mock cluster completes a rebalance only after
 * (session timeout - 1 s) when a member joins a stable group, so tests use a
 * short session.
 */
export const TEST_KAFKA_TIMINGS: Partial<KafkaBusOptions> = {
  sessionTimeoutMs: 3000,
  heartbeatIntervalMs: 500,
  rebalanceTimeoutMs: 6000,
  assignmentDelayMs: 300,
  maxWaitTimeMs: 100,
  retryMinMs: 50,
  retryMaxMs: 1000
}

export async function kafkaBus(t: Test, kafka: KafkaCluster, clientId: string, options: Partial<KafkaBusOptions> = {}): Promise<Bus> {
  const bus = await KafkaBus.connect({ brokers: kafka.brokers, clientId, log: options.log ?? testLog(clientId), ...TEST_KAFKA_TIMINGS, ...options })
  t.teardown(() => bus.close())
  return bus
}
