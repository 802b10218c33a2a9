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
  freeClusterPort,
  freePort,
  launchMockCluster,
  launchRedis,
  launchRedisCluster,
  runCommand,
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

// ------------------------------------------------------------------ Redis Cluster

export interface RedisClusterServer {
  /** `127.0.0.1:port` of every node (the startup nodes a client is given). */
  readonly nodes: string[]
  readonly ports: number[]
  /** Ports of the nodes that are masters now (asked of the cluster). */
  masters(): Promise<number[]>
  /** kill -9 of one node. */
  kill(port: number): Promise<void>
  /** Starts a killed node again (same port and files: it rejoins, as a replica if it lost its slots). */
  start(port: number): Promise<void>
  /** `INFO <section>` of one node, as text. */
  info(port: number, section: string): Promise<string>
}

/**
 * A real Redis Cluster on loopback: six Debian `redis-server` nodes (three
 * masters, a replica of each) joined by `redis-cli --cluster create`, with a
 * short cluster-node-timeout so a replica takes over a dead master in about
 * a second. Stopped when the test ends.
 */
export async function startRedisCluster(t: Test, options: { nodeTimeoutMs?: number } = {}): Promise<RedisClusterServer> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gw-redis-cluster-'))
  const nodeTimeoutMs = options.nodeTimeoutMs ?? 1000
  let launched: Launched[] = []
  let ports: number[] = []
  for (let attempt = 0; ; attempt++) {
    const taken = new Set<number>()
    ports = []
    for (let i = 0; i < 6; i++) {
      const port = await freeClusterPort(taken)
      taken.add(port)
      taken.add(port + 10_000)
      ports.push(port)
    }
    try {
      launched = await launchRedisCluster({ ports, dir, tied: true, nodeTimeoutMs })
      break
    } catch (err) {
      if (attempt >= 2) throw err
    }
  }
  const byPort = new Map<number, Launched>(ports.map((p, i) => [p, track(launched[i] as Launched)]))
  t.teardown(async () => {
    await Promise.all([...byPort.values()].map((l) => terminate(l)))
    fs.rmSync(dir, { recursive: true, force: true })
  })
  return {
    nodes: ports.map((p) => `127.0.0.1:${p}`),
    ports,
    async masters() {
      const text = await runCommand('redis-cli', ['-p', String(ports.find((p) => byPort.get(p)?.child.exitCode === null) ?? ports[0]), 'cluster', 'nodes'], 5000)
      return text
        .split('\n')
        .filter((l) => / master /.test(` ${l.split(' ')[2]?.replace(/,/g, ' ')} `) && !l.includes('fail'))
        .map((l) => Number(/:(\d+)@/.exec(l)?.[1]))
        .filter((p) => Number.isInteger(p))
    },
    async kill(port) {
      const l = byPort.get(port)
      if (!l) return
      l.child.kill('SIGKILL')
      await l.exited
    },
    async start(port) {
      byPort.set(port, track(await launchRedis({ port, dir: path.join(dir, `node-${port}`), tied: true, clusterNodeTimeoutMs: nodeTimeoutMs })))
    },
    info: (port, section) => runCommand('redis-cli', ['-p', String(port), 'info', section], 5000)
  }
}

export async function redisClusterStore(t: Test, cluster: RedisClusterServer, log: Logger = testLog('redis-cluster-store')): Promise<RedisStore> {
  const store = await RedisStore.connectCluster(cluster.nodes, log)
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
