import {
  Kafka,
  KafkaJSError,
  Partitioners,
  logLevel as KafkaLogLevel,
  type Admin,
  type Consumer as KafkaConsumer,
  type ConsumerRunConfig,
  type EachBatchPayload,
  type IHeaders,
  type KafkaMessage,
  type LogEntry,
  type Message,
  type Producer
} from 'kafkajs'
import type { Logger } from 'pino'
import type { Bus, BusMessage, Consumer, GroupOffsets, Headers, LagSource, OutgoingMessage, SubscribeOptions } from './types'

/** Longest a handled message waits for its offset commit inside a long batch (bounds redelivery after a crash). */
const COMMIT_INTERVAL_MS = 1000

/**
 * The Bus on Kafka (kafkajs).
 *
 * Producing: acks from all in-sync replicas, retries with backoff, the
 * idempotent producer when the cluster supports it (it needs a controller,
 * which librdkafka's mock cluster does not report) and otherwise one request
 * in flight so retries cannot reorder a key. Keys go through Kafka's default
 * murmur2 partitioner (partitioner.ts computes the same partition).
 *
 * Consuming: one kafkajs consumer per subscribe(), eachBatch with manual
 * resolution. A message's offset is resolved only after its handler
 * resolved, and only resolved offsets are ever committed. Commits go out when
 * a batch ends (also when it fails, and when the consumer stops) and, within
 * a long batch, at most every COMMIT_INTERVAL_MS (the commitOffsetsIfNecessary()
 * call after each message). A commit per message would cost a broker round
 * trip per event; a commit per batch alone let a process killed in a burst
 * (batches of thousands) have everything it handled since the batch began
 * delivered again. With the interval, a crash repeats at most about a
 * second of work per partition (at least once, as the Bus contract says;
 * handlers are idempotent). When a handler throws,
 * the batch stops without resolving that message: kafkajs fetches a partition
 * from its last resolved offset, so the next fetch starts with the failed
 * message again (after a growing backoff) and the later messages of that
 * partition wait behind it.
 */

export interface KafkaBusOptions {
  brokers: string[]
  clientId: string
  log: Logger
  /** Group session: a member that stops heartbeating this long is evicted and its partitions move. */
  sessionTimeoutMs?: number
  heartbeatIntervalMs?: number
  rebalanceTimeoutMs?: number
  /** Longest a fetch waits for data on an idle partition. */
  maxWaitTimeMs?: number
  /** Backoff of a failing handler: doubles from min to max. */
  retryMinMs?: number
  retryMaxMs?: number
  /** Partitions whose handlers run at the same time within one consumer. */
  partitionsConsumedConcurrently?: number
  /** 'auto' (default): idempotent when the cluster reports a controller. */
  idempotent?: boolean | 'auto'
  connectionTimeoutMs?: number
  requestTimeoutMs?: number
}

const DEFAULTS = {
  sessionTimeoutMs: 30_000,
  heartbeatIntervalMs: 3_000,
  rebalanceTimeoutMs: 60_000,
  maxWaitTimeMs: 500,
  retryMinMs: 100,
  retryMaxMs: 30_000,
  partitionsConsumedConcurrently: 8,
  connectionTimeoutMs: 3_000,
  requestTimeoutMs: 30_000
}

type Settings = typeof DEFAULTS & { idempotent: boolean | 'auto' }

/** kafkajs log entries into pino, under `component: kafkajs`. */
function pinoLogCreator(log: Logger) {
  const child = log.child({ component: 'kafkajs' })
  return () =>
    ({ namespace, level, log: entry }: LogEntry) => {
      // kafkajs repeats its own timestamp and logger name: pino has both already.
      const { message, timestamp: _timestamp, logger: _logger, ...extra } = entry as LogEntry['log'] & { timestamp?: string; logger?: string }
      const fields = { namespace, ...extra }
      if (level === KafkaLogLevel.ERROR) child.error(fields, message)
      else if (level === KafkaLogLevel.WARN) child.warn(fields, message)
      else if (level === KafkaLogLevel.INFO) child.info(fields, message)
      else child.debug(fields, message)
    }
}

function kafkaLogLevel(log: Logger): KafkaLogLevel {
  switch (log.level) {
    case 'silent':
      return KafkaLogLevel.NOTHING
    case 'fatal':
    case 'error':
      return KafkaLogLevel.ERROR
    case 'warn':
      return KafkaLogLevel.WARN
    case 'info':
      return KafkaLogLevel.INFO
    default:
      return KafkaLogLevel.DEBUG
  }
}

function headerString(value: IHeaders[string]): string {
  if (value === undefined) return ''
  if (Array.isArray(value)) return value.map((v) => v.toString()).join(',')
  return value.toString()
}

/** Decodes a Kafka record into a BusMessage; undefined when its value is not JSON. */
function decode(topic: string, partition: number, m: KafkaMessage): BusMessage | undefined {
  let value: unknown
  try {
    value = m.value === null ? null : JSON.parse(m.value.toString())
  } catch {
    return undefined
  }
  const headers: Headers = {}
  for (const [k, v] of Object.entries(m.headers ?? {})) headers[k] = headerString(v)
  return { topic, partition, offset: m.offset, key: m.key?.toString() ?? '', value, headers, timestamp: Number(m.timestamp) }
}

/** True when `promise` settled within `ms`. */
async function within(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), ms)
  })
  try {
    return await Promise.race([promise.then(() => true), timeout])
  } finally {
    clearTimeout(timer)
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms))
}

/**
 * Committed offset, end offset and lag of each group on each topic it
 * committed to. `groups` default: every group the cluster lists.
 */
export async function fetchGroupOffsets(admin: Admin, groups: string[], topicsOf: (group: string) => string[] | undefined = () => undefined): Promise<GroupOffsets[]> {
  const out: GroupOffsets[] = []
  const ends = new Map<string, Map<number, number>>()
  let topicList: string[] | undefined
  const allTopics = async (): Promise<string[]> => {
    topicList ??= (await admin.listTopics()).filter((t) => !t.startsWith('__')).sort()
    return topicList
  }
  const endOf = async (topic: string): Promise<Map<number, number>> => {
    let m = ends.get(topic)
    if (!m) {
      m = new Map((await admin.fetchTopicOffsets(topic)).map((p) => [p.partition, Number(p.high)]))
      ends.set(topic, m)
    }
    return m
  }
  for (const group of groups) {
    // With the group's topics known, partitions it never committed show up too (committed -1).
    // Otherwise every topic is asked (some brokers, the mock cluster among them, answer nothing
    // to "all topics") and only those the group committed on are kept.
    const known = topicsOf(group)
    const topics = known ?? (await allTopics())
    const fetched = topics.length === 0 ? [] : await admin.fetchOffsets({ groupId: group, topics })
    for (const { topic, partitions } of fetched) {
      if (!known && !partitions.some((p) => Number(p.offset) >= 0)) continue
      const end = await endOf(topic)
      for (const p of partitions) {
        const committed = Number(p.offset)
        const high = end.get(p.partition) ?? 0
        out.push({ group, topic, partition: p.partition, committed, end: high, lag: committed < 0 ? high : Math.max(0, high - committed) })
      }
    }
  }
  return out.sort((a, b) => a.group.localeCompare(b.group) || a.topic.localeCompare(b.topic) || a.partition - b.partition)
}

/** Every consumer group the cluster knows; undefined when the broker lacks ListGroups (the mock cluster). */
export async function listGroups(admin: Admin): Promise<string[] | undefined> {
  try {
    return (await admin.listGroups()).groups.map((g) => g.groupId).sort()
  } catch (err) {
    if (err instanceof KafkaJSError && /does not support|not\s+implemented|UNSUPPORTED_VERSION/i.test(err.message)) return undefined
    throw err
  }
}

/** A publish waiting for the producer. */
interface Pending {
  topic: string
  messages: Message[]
  bytes: number
  resolve: () => void
  reject: (err: unknown) => void
}

/** Upper bound of one produce request built from queued publishes (below Kafka's 1 MB default). */
const SEND_MAX_BYTES = 512 * 1024

export class KafkaBus implements Bus, LagSource {
  readonly kind = 'kafka' as const
  private readonly consumers = new Set<KafkaBusConsumer>()
  private readonly outbox: Pending[] = []
  private flushing = false
  private producerClosed = false
  /** group -> topics, of the subscriptions made through this bus */
  private readonly groups = new Map<string, Set<string>>()
  private closing: Promise<void> | undefined

  private constructor(
    private readonly kafka: Kafka,
    private readonly producer: Producer,
    private readonly admin: Admin,
    private readonly settings: Settings,
    private readonly log: Logger,
    readonly idempotent: boolean
  ) {}

  static async connect(options: KafkaBusOptions): Promise<KafkaBus> {
    if (options.brokers.length === 0) throw new Error('KafkaBus needs at least one broker')
    const settings: Settings = { ...DEFAULTS, idempotent: 'auto' }
    for (const [k, v] of Object.entries(options)) if (v !== undefined && k in settings) (settings as Record<string, unknown>)[k] = v
    const log = options.log.child({ component: 'bus' })
    const kafka = new Kafka({
      clientId: options.clientId,
      brokers: options.brokers,
      connectionTimeout: settings.connectionTimeoutMs,
      requestTimeout: settings.requestTimeoutMs,
      retry: { initialRetryTime: 100, maxRetryTime: 5_000, retries: 10 },
      logLevel: kafkaLogLevel(options.log),
      logCreator: pinoLogCreator(options.log)
    })
    const admin = kafka.admin()
    await admin.connect()
    try {
      let idempotent = settings.idempotent === true
      if (settings.idempotent === 'auto') {
        const cluster = await admin.describeCluster()
        idempotent = cluster.brokers.some((b) => b.nodeId === cluster.controller)
        if (!idempotent) log.info('the cluster reports no controller: producing without idempotence (acks=all, one request in flight)')
      }
      const producer = kafka.producer({
        idempotent,
        // Without idempotence a retried request could overtake the next one: keep one in flight.
        maxInFlightRequests: idempotent ? 5 : 1,
        allowAutoTopicCreation: false,
        createPartitioner: Partitioners.DefaultPartitioner,
        retry: { initialRetryTime: 100, maxRetryTime: 5_000, retries: 10 }
      })
      await producer.connect()
      return new KafkaBus(kafka, producer, admin, settings, log, idempotent)
    } catch (err) {
      await admin.disconnect().catch(() => undefined)
      throw err
    }
  }

  publish(topic: string, key: string, value: unknown, headers: Headers = {}): Promise<void> {
    return this.publishMany(topic, [{ key, value, headers }])
  }

  /**
   * Publishes made while a request is on its way wait in a queue and leave
   * together in the next request (per-key order is queue order), so
   * concurrent publishers share round trips instead of queueing one request
   * each behind the single in-flight one.
   */
  publishMany(topic: string, messages: OutgoingMessage[]): Promise<void> {
    if (this.producerClosed) return Promise.reject(new Error('bus is closed'))
    if (messages.length === 0) return Promise.resolve()
    const encoded: Message[] = messages.map((m) => ({ key: m.key, value: JSON.stringify(m.value), headers: { ...(m.headers ?? {}) } }))
    const bytes = encoded.reduce((n, m) => n + (m.value as string).length + (m.key as string).length, 0)
    return new Promise((resolve, reject) => {
      this.outbox.push({ topic, messages: encoded, bytes, resolve, reject })
      void this.flush()
    })
  }

  private async flush(): Promise<void> {
    if (this.flushing) return
    this.flushing = true
    try {
      // Publishes issued in the same tick share the first request too.
      await new Promise<void>((r) => setImmediate(r))
      while (this.outbox.length > 0) {
        // Take whole publishes up to SEND_MAX_BYTES (at least one).
        let size = 0
        let n = 0
        while (n < this.outbox.length && (n === 0 || size + (this.outbox[n] as Pending).bytes <= SEND_MAX_BYTES)) size += (this.outbox[n++] as Pending).bytes
        const batch = this.outbox.splice(0, n)
        try {
          await this.send(batch)
          for (const p of batch) p.resolve()
        } catch (err) {
          if (batch.length === 1) (batch[0] as Pending).reject(err)
          // One bad publish (an unknown topic) must not fail the others that shared its request.
          else for (const p of batch) await this.send([p]).then(p.resolve, p.reject)
        }
      }
    } finally {
      this.flushing = false
    }
  }

  private async send(batch: Pending[]): Promise<void> {
    const byTopic = new Map<string, Message[]>()
    for (const p of batch) byTopic.set(p.topic, [...(byTopic.get(p.topic) ?? []), ...p.messages])
    await this.producer.sendBatch({ acks: -1, topicMessages: [...byTopic].map(([topic, messages]) => ({ topic, messages })) })
  }

  async subscribe(options: SubscribeOptions): Promise<Consumer> {
    if (this.closing) throw new Error('bus is closed')
    const consumer = new KafkaBusConsumer(this.kafka, options, this.settings, this.log)
    this.consumers.add(consumer)
    const topics = this.groups.get(options.groupId) ?? new Set<string>()
    for (const t of options.topics) topics.add(t)
    this.groups.set(options.groupId, topics)
    consumer.onClosed = () => this.consumers.delete(consumer)
    try {
      await consumer.start()
    } catch (err) {
      this.consumers.delete(consumer)
      await consumer.close().catch(() => undefined)
      throw err
    }
    return consumer
  }

  /** Rejects naming every consumer that is not running in its group (see Bus.health). */
  async health(): Promise<void> {
    if (this.closing) throw new Error('bus is closed')
    const now = Date.now()
    const problems = [...this.consumers].map((c) => c.healthProblem(now)).filter((p): p is string => p !== undefined)
    if (problems.length > 0) throw new Error(problems.join('; '))
  }

  /** Lag of every group the cluster lists, or (when it cannot list them) of the groups this process subscribed. */
  async groupOffsets(groups?: string[]): Promise<GroupOffsets[]> {
    const names = groups ?? (await listGroups(this.admin)) ?? [...this.groups.keys()].sort()
    return fetchGroupOffsets(this.admin, names, (group) => {
      const topics = this.groups.get(group)
      return topics ? [...topics] : undefined
    })
  }

  /** Stops every consumer (in-flight handlers finish and commit, groups are left), then the producer. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      // Handlers finishing now may still publish: the producer stays open until they are done.
      await Promise.allSettled([...this.consumers].map((c) => c.close()))
      this.producerClosed = true
      while (this.flushing || this.outbox.length > 0) await sleep(5)
      await this.producer.disconnect().catch((err) => this.log.warn({ err }, 'producer disconnect failed'))
      await this.admin.disconnect().catch((err) => this.log.warn({ err }, 'admin disconnect failed'))
    })()
    return this.closing
  }
}

class KafkaBusConsumer implements Consumer {
  private readonly consumer: KafkaConsumer
  /** Consecutive failures per topic-partition: the backoff grows with them. */
  private readonly failures = new Map<string, number>()
  private closing: Promise<void> | undefined
  private recoveryTimer: NodeJS.Timeout | undefined
  private recoveries = 0
  /** Readiness: in the group, not crashed, and in touch with the brokers (last fetch or heartbeat). */
  private joined = false
  private crash: string | undefined
  private lastContact = 0
  onClosed: (() => void) | undefined

  constructor(
    kafka: Kafka,
    readonly options: SubscribeOptions,
    private readonly settings: Settings,
    private readonly log: Logger
  ) {
    this.consumer = kafka.consumer({
      groupId: options.groupId,
      sessionTimeout: settings.sessionTimeoutMs,
      rebalanceTimeout: settings.rebalanceTimeoutMs,
      heartbeatInterval: settings.heartbeatIntervalMs,
      maxWaitTimeInMs: settings.maxWaitTimeMs,
      allowAutoTopicCreation: false,
      retry: {
        initialRetryTime: 100,
        maxRetryTime: 5_000,
        retries: 10,
        // kafkajs schedules its own restart after a crash, and a disconnect that comes before
        // that timer is set does not cancel it (kafkajs#1147): a closed bus must not restart.
        restartOnFailure: async () => this.closing === undefined
      }
    })
    this.consumer.on(this.consumer.events.CRASH, (event) => {
      this.log.error({ err: event.payload.error, group: options.groupId, restart: event.payload.restart }, 'consumer crashed')
      // Not ready until it is back in its group, whether kafkajs or scheduleRecovery restarts it.
      this.joined = false
      this.crash = event.payload.error.message
      // kafkajs restarts by itself only after retriable errors; after any other it stays
      // stopped for good while the process looks healthy. Restart it here instead.
      if (!event.payload.restart) this.scheduleRecovery()
    })
    // Back in a group: a later crash starts again from the shortest delay.
    this.consumer.on(this.consumer.events.GROUP_JOIN, () => {
      // A restart already under way when close() ran can still join (kafkajs#1639): leave again.
      if (this.closing) {
        void this.consumer.disconnect().catch(() => undefined)
        return
      }
      this.recoveries = 0
      this.joined = true
      this.crash = undefined
      this.lastContact = Date.now()
    })
    // An idle consumer fetches every maxWaitTime; a busy one heartbeats from its handler (see handle).
    const contact = (): void => {
      this.lastContact = Date.now()
    }
    this.consumer.on(this.consumer.events.FETCH, contact)
    this.consumer.on(this.consumer.events.HEARTBEAT, contact)
  }

  /**
   * Why this consumer is not ready, or undefined. Silence longer than the session
   * timeout means the group has evicted it by now, whatever kafkajs reports.
   */
  healthProblem(now: number): string | undefined {
    if (this.closing) return undefined
    if (this.crash !== undefined) return `consumer of group ${this.groupId} crashed (${this.crash}); restarting`
    if (!this.joined) return `consumer of group ${this.groupId} has not joined its group`
    const silentMs = now - this.lastContact
    if (silentMs > this.settings.sessionTimeoutMs) return `consumer of group ${this.groupId} has not reached the brokers for ${silentMs} ms`
    return undefined
  }

  /** Reconnects and runs a consumer kafkajs gave up on, with a growing delay, until closed. */
  private scheduleRecovery(): void {
    if (this.closing || this.recoveryTimer) return
    const delay = Math.min(this.settings.retryMinMs * 2 ** this.recoveries, this.settings.retryMaxMs)
    this.recoveries++
    this.recoveryTimer = setTimeout(() => {
      this.recoveryTimer = undefined
      if (this.closing) return
      this.log.warn({ group: this.groupId, attempt: this.recoveries }, 'restarting the crashed consumer')
      this.consumer
        .connect()
        // Closed meanwhile: close() disconnects it; running it now would outlive the bus.
        .then(() => (this.closing ? undefined : this.consumer.run(this.runConfig())))
        .catch((err: unknown) => {
          this.log.error({ err, group: this.groupId }, 'consumer restart failed; trying again')
          this.scheduleRecovery()
        })
    }, delay)
  }

  private runConfig(): ConsumerRunConfig {
    return {
      eachBatchAutoResolve: false,
      autoCommit: true,
      autoCommitInterval: COMMIT_INTERVAL_MS,
      partitionsConsumedConcurrently: this.settings.partitionsConsumedConcurrently,
      eachBatch: (payload) => this.eachBatch(payload)
    }
  }

  get groupId(): string {
    return this.options.groupId
  }

  /** Connects, subscribes and resolves once the consumer joined its group (bounded by the rebalance timeout). */
  async start(): Promise<void> {
    const joined = new Promise<void>((resolve) => {
      const off = this.consumer.on(this.consumer.events.GROUP_JOIN, () => {
        off()
        resolve()
      })
    })
    const firstFetch = joined.then(
      () =>
        new Promise<void>((resolve) => {
          const off = this.consumer.on(this.consumer.events.FETCH, () => {
            off()
            resolve()
          })
        })
    )
    await this.consumer.connect()
    await this.consumer.subscribe({ topics: this.options.topics, fromBeginning: this.options.fromBeginning ?? true })
    await this.consumer.run(this.runConfig())
    const late = !(await within(joined, this.settings.rebalanceTimeoutMs + this.settings.sessionTimeoutMs))
    if (late) {
      this.log.warn({ group: this.groupId }, 'consumer has not joined its group yet; it keeps trying in the background')
      return
    }
    // The start position of a partition without a committed offset is looked up before the
    // first fetch: waiting for it means nothing published after subscribe() resolves is missed.
    await within(firstFetch, Math.max(2000, 4 * this.settings.maxWaitTimeMs))
  }

  private async eachBatch(payload: EachBatchPayload): Promise<void> {
    const { batch, resolveOffset, heartbeat, commitOffsetsIfNecessary, isRunning, isStale } = payload
    const tp = `${batch.topic}:${batch.partition}`
    for (const raw of batch.messages) {
      if (!isRunning() || isStale()) return
      const message = decode(batch.topic, batch.partition, raw)
      if (message === undefined) {
        // Not JSON: no producer of ours wrote it, and redelivery cannot fix it.
        this.log.error({ topic: batch.topic, partition: batch.partition, offset: raw.offset, group: this.groupId }, 'undecodable message skipped')
      } else {
        const failed = await this.handle(message, heartbeat)
        if (failed) {
          await this.backoff(tp, failed, heartbeat, isRunning)
          // Not resolved: the next fetch of this partition starts at this message again.
          return
        }
        this.failures.delete(tp)
      }
      resolveOffset(raw.offset)
      // A no-op with the default run config (commits are per batch, see above); it honours an interval or threshold if one is set.
      await commitOffsetsIfNecessary()
    }
    await heartbeat()
  }

  /** Runs the handler while heartbeating, so a slow handler does not cost the partition. Returns the error, if any. */
  private async handle(message: BusMessage, heartbeat: () => Promise<void>): Promise<Error | undefined> {
    let heartbeatError: unknown
    const ticker = setInterval(() => {
      heartbeat().catch((err: unknown) => {
        heartbeatError ??= err
      })
    }, this.settings.heartbeatIntervalMs)
    let failure: Error | undefined
    try {
      await this.options.handler(message)
    } catch (err) {
      failure = err instanceof Error ? err : new Error(String(err))
    } finally {
      clearInterval(ticker)
    }
    // A rebalance noticed while the handler ran: the partition may be someone else's now, so
    // leave the batch through kafkajs (it rejoins) instead of committing.
    if (heartbeatError !== undefined) throw heartbeatError
    return failure
  }

  private async backoff(tp: string, err: Error, heartbeat: () => Promise<void>, isRunning: () => boolean): Promise<void> {
    const n = (this.failures.get(tp) ?? 0) + 1
    this.failures.set(tp, n)
    const delay = Math.min(this.settings.retryMinMs * 2 ** (n - 1), this.settings.retryMaxMs)
    this.log.warn({ err, group: this.groupId, partition: tp, attempt: n, retryInMs: delay }, 'handler failed; message will be redelivered')
    const until = Date.now() + delay
    while (isRunning() && Date.now() < until) {
      await sleep(Math.min(until - Date.now(), this.settings.heartbeatIntervalMs))
      await heartbeat()
    }
  }

  /** Stops fetching, lets in-flight handlers finish and commit, leaves the group. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      clearTimeout(this.recoveryTimer)
      this.recoveryTimer = undefined
      try {
        await this.consumer.disconnect()
      } finally {
        this.onClosed?.()
      }
    })()
    return this.closing
  }
}
