import { CompressionTypes, Kafka, logLevel, Partitioners, type Admin, type ICustomPartitioner, type Message, type Producer } from 'kafkajs'
import type { Logger } from 'pino'
import { evictMember, fetchGroupOffsets, listGroups } from './kafka-admin'
import { KafkaBusConsumer, sleep } from './kafka-consumer'
import { GoneCounts } from './gone'
import { murmur2 } from './partitioner'
import { DEFAULTS, kafkaLogLevel, OFFSET_RESET_MESSAGE, pinoLogCreator, type KafkaBusOptions, type Settings } from './kafka-settings'
import type { Assignment, Bus, Consumer, Gone, GroupMembership, GroupOffsets, Headers, LagSource, OutgoingMessage, SubscribeOptions } from './types'
import { outgoingHeaders } from '../tracing'

export { fetchGroupOffsets, listGroups } from './kafka-admin'
export type { KafkaBusOptions } from './kafka-settings'

/**
 * The Bus on Kafka (kafkajs).
 *
 * Producing: acks from all in-sync replicas, retries with backoff, the
 * idempotent producer when the cluster supports it (it needs a controller,
 * which librdkafka's mock cluster does not report) and otherwise one request
 * in flight so retries cannot reorder a key. Keys go through Kafka's default
 * murmur2 partitioner (partitioner.ts computes the same partition).
 *
 * Consuming: kafka-consumer.ts (one kafkajs consumer per subscribe()).
 */


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

/**
 * kafkajs's DefaultPartitioner's placement (the Java client's murmur2 of the
 * key, positive, modulo the partition count) computed with 32-bit integer
 * math (./partitioner) instead of kafkajs's 64-bit Long emulation, which stood
 * out in a matcher's profile (bench/PROFILES.md "kafkajs's partitioner"). test/common/partitioner.test.ts
 * checks that both put every key on the same partition. Messages without a
 * key (the bus always gives one) go to the default partitioner.
 */
const murmur2Partitioner: ICustomPartitioner = () => {
  const keyless = Partitioners.DefaultPartitioner()
  return (args) => {
    const { message, partitionMetadata } = args
    if (message.partition !== undefined && message.partition !== null) return message.partition
    if (message.key === undefined || message.key === null) return keyless(args)
    const key = typeof message.key === 'string' ? Buffer.from(message.key) : message.key
    return (murmur2(key) & 0x7fffffff) % partitionMetadata.length
  }
}

export class KafkaBus implements Bus, LagSource, GroupMembership {
  readonly kind = 'kafka' as const
  private readonly consumers = new Set<KafkaBusConsumer>()
  private readonly outbox: Pending[] = []
  private flushing = false
  private producerClosed = false
  /** group -> topics, of the subscriptions made through this bus */
  private readonly groups = new Map<string, Set<string>>()
  private closing: Promise<void> | undefined
  private joinListener: ((groupId: string, memberId: string) => void) | undefined

  private constructor(
    private readonly kafka: Kafka,
    private readonly producer: Producer,
    private readonly admin: Admin,
    private readonly settings: Settings,
    private readonly log: Logger,
    readonly idempotent: boolean,
    /** What this process's consumers found gone, by group, topic and partition. */
    private readonly goneCounts: GoneCounts
  ) {}

  static async connect(options: KafkaBusOptions): Promise<KafkaBus> {
    if (options.brokers.length === 0) throw new Error('KafkaBus needs at least one broker')
    const settings: Settings = { ...DEFAULTS, idempotent: 'auto' }
    for (const [k, v] of Object.entries(options)) if (v !== undefined && k in settings) (settings as Record<string, unknown>)[k] = v
    const log = options.log.child({ component: 'bus' })
    const goneCounts = new GoneCounts()
    const kafka = new Kafka({
      clientId: options.clientId,
      brokers: options.brokers,
      connectionTimeout: settings.connectionTimeoutMs,
      requestTimeout: settings.requestTimeoutMs,
      retry: { initialRetryTime: 100, maxRetryTime: 5_000, retries: 10 },
      // At least its errors, whatever pino's level: the offset resets are counted from them (pino still drops what it must).
      logLevel: Math.max(kafkaLogLevel(options.log), logLevel.ERROR),
      logCreator: pinoLogCreator(options.log, (message, fields) => {
        if (message !== OFFSET_RESET_MESSAGE) return
        const { groupId, topic, partition } = fields
        if (typeof groupId === 'string' && typeof topic === 'string' && typeof partition === 'number') goneCounts.count(groupId, topic, partition, 'resets', 1)
      })
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
        createPartitioner: murmur2Partitioner,
        retry: { initialRetryTime: 100, maxRetryTime: 5_000, retries: 10 }
      })
      await producer.connect()
      return new KafkaBus(kafka, producer, admin, settings, log, idempotent, goneCounts)
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
    const encoded: Message[] = messages.map((m) => ({ key: m.key, value: JSON.stringify(m.value), headers: outgoingHeaders(m.headers) }))
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
      // Publishes issued in the same tick (or within the linger) share the first request too.
      const linger = this.settings.lingerMs
      await new Promise<void>((r) => (linger > 0 ? setTimeout(r, linger) : setImmediate(r)))
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
    for (const p of batch) {
      let list = byTopic.get(p.topic)
      if (!list) byTopic.set(p.topic, (list = []))
      for (const m of p.messages) list.push(m)
    }
    const compression = this.settings.compression === 'gzip' ? CompressionTypes.GZIP : CompressionTypes.None
    await this.producer.sendBatch({ acks: -1, compression, topicMessages: [...byTopic].map(([topic, messages]) => ({ topic, messages })) })
  }

  async subscribe(options: SubscribeOptions): Promise<Consumer> {
    if (this.closing) throw new Error('bus is closed')
    const consumer = new KafkaBusConsumer(this.kafka, options, this.settings, this.log, (topic, key, value) => this.publish(topic, key, value), (group, topic, partition, count) =>
      this.goneCounts.count(group, topic, partition, 'messages', count)
    )
    this.consumers.add(consumer)
    const topics = this.groups.get(options.groupId) ?? new Set<string>()
    for (const t of options.topics) topics.add(t)
    this.groups.set(options.groupId, topics)
    consumer.onClosed = () => this.consumers.delete(consumer)
    consumer.onJoined = (memberId) => this.joinListener?.(options.groupId, memberId)
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

  onJoined(listener: (groupId: string, memberId: string) => void): void {
    this.joinListener = listener
  }

  evict(groupId: string, memberId: string): Promise<void> {
    return evictMember(this.kafka, groupId, memberId, this.log)
  }

  assignments(): Assignment[] {
    return [...this.consumers].flatMap((c) => c.assigned())
  }

  gone(): Gone[] {
    return this.goneCounts.list()
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

