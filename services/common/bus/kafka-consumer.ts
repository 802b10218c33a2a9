import { PartitionAssigners, type Consumer as KafkaConsumer, type ConsumerRunConfig, type EachBatchPayload, type IHeaders, type Kafka, type KafkaMessage, type PartitionAssigner } from 'kafkajs'
import type { Logger } from 'pino'
import { batchPlan, deadLetterValue, FailureCounter, type BatchPlan } from './batch'
import type { Settings } from './kafka-settings'
import { type Entry, PartitionQueue } from './partition-queue'
import type { Assignment, BusMessage, Consumer, Headers, SubscribeOptions } from './types'

/**
 * A subscription on Kafka: one kafkajs consumer, eachBatch with manual
 * resolution and commits. A fetched partition batch is only queued
 * (partition-queue.ts) and its offsets resolved, so kafkajs fetches on; each
 * partition's queue drains on its own, handing the handler up to maxBatch
 * messages at a time (one for a per-message handler), and commits only past
 * what was handled (at most every COMMIT_INTERVAL_MS while draining, at once
 * when closing): a crash repeats at most about a second of handled work plus
 * what was queued (at least once, as the Bus contract says; handlers are
 * idempotent). When a message fails, its partition waits on it (a growing
 * backoff) until it succeeds or, failing for a reason other than an outage,
 * is dead-lettered (batch.ts); the other partitions go on.
 */

/** Longest a handled message waits for its offset commit while its partition's queue drains (bounds redelivery after a crash). */
const COMMIT_INTERVAL_MS = 1000
/** A partition's queue holds this many handler calls' worth of records (at least QUEUE_MIN) before its fetching waits. */
const QUEUE_CHUNKS = 4
const QUEUE_MIN = 1000

/**
 * kafkajs's round-robin assignment, handed in by the leader only after `delayMs`: the other members'
 * SyncGroups arrive first. The same name and protocol, so members with and without it share a group.
 */
export function delayedRoundRobin(delayMs: number): PartitionAssigner {
  return (config) => {
    const inner = PartitionAssigners.roundRobin(config)
    return {
      ...inner,
      assign: async (group) => {
        const assignment = await inner.assign(group)
        await sleep(delayMs)
        return assignment
      }
    }
  }
}

/** Publishes one message (the bus's producer), for the dead-letter topic. */
export type Publish = (topic: string, key: string, value: unknown) => Promise<void>
/** Where a consumer reports messages gone from a partition before its group read them. */
export type GoneSink = (group: string, topic: string, partition: number, count: number) => void
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

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms))
}

export class KafkaBusConsumer implements Consumer {
  private readonly consumer: KafkaConsumer
  /** Consecutive failures of each partition's head: the backoff grows with them. */
  private readonly failures = new FailureCounter()
  private readonly plan: BatchPlan
  private closing: Promise<void> | undefined
  private recoveryTimer: NodeJS.Timeout | undefined
  private recoveries = 0
  /** Readiness: in the group, not crashed, and in touch with the brokers (last fetch or heartbeat). */
  private joined = false
  /** Partitions by topic, as the group's last assignment gave them to this member. */
  private assignment: Record<string, number[]> = {}
  private crash: string | undefined
  private lastContact = 0
  onClosed: (() => void) | undefined
  /** Set by the bus: told this member's id at each join (liveness notes it for survivors). */
  onJoined: ((memberId: string) => void) | undefined
  /** close() began: no more fetched batches are queued, the drains stop after their chunk in hand. */
  private stopping = false
  /** Each assigned partition's queue, by topic and partition. */
  private readonly queues = new Map<string, PartitionQueue>()
  /** Revoked queues whose drain may still have a chunk in hand (a partition that comes back waits for it). */
  private readonly retired = new Map<string, Promise<void>>()
  /** Records a partition may have queued before its fetching waits (a few handler calls' worth). */
  private readonly queueCap: number
  /** Longest a fetch waits on idle partitions: longer for a background subscription. */
  private readonly maxWaitMs: number
  private readonly queueDeps: ConstructorParameters<typeof PartitionQueue>[2]

  constructor(
    kafka: Kafka,
    readonly options: SubscribeOptions,
    private readonly settings: Settings,
    private readonly log: Logger,
    private readonly publish: Publish,
    private readonly onGone: GoneSink
  ) {
    this.plan = batchPlan(options)
    this.queueCap = Math.max(QUEUE_CHUNKS * this.plan.size, QUEUE_MIN)
    this.maxWaitMs = options.background ? Math.max(settings.maxWaitTimeMs, settings.backgroundMaxWaitTimeMs) : settings.maxWaitTimeMs
    this.queueDeps = {
      plan: this.plan,
      groupId: options.groupId,
      log,
      failures: this.failures,
      retryMinMs: settings.retryMinMs,
      retryMaxMs: settings.retryMaxMs,
      commitIntervalMs: COMMIT_INTERVAL_MS,
      commit: (topic, partition, offset) => this.consumer.commitOffsets([{ topic, partition, offset }]),
      deadLetter: (message, error, attempts) => this.deadLetter(message, error, attempts),
      stopping: () => this.stopping,
      gone: (topic, partition, count) => this.onGone(options.groupId, topic, partition, count)
    }
    this.consumer = kafka.consumer({
      groupId: options.groupId,
      sessionTimeout: settings.sessionTimeoutMs,
      rebalanceTimeout: settings.rebalanceTimeoutMs,
      heartbeatInterval: settings.heartbeatIntervalMs,
      ...(settings.assignmentDelayMs > 0 ? { partitionAssigners: [delayedRoundRobin(settings.assignmentDelayMs)] } : {}),
      maxWaitTimeInMs: this.maxWaitMs,
      maxBytesPerPartition: settings.maxBytesPerPartition,
      maxBytes: settings.maxBytes,
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
      this.assignment = {}
      this.crash = event.payload.error.message
      // kafkajs restarts by itself only after retriable errors; after any other it stays
      // stopped for good while the process looks healthy. Restart it here instead.
      if (!event.payload.restart) this.scheduleRecovery()
    })
    // Back in a group: a later crash starts again from the shortest delay.
    this.consumer.on(this.consumer.events.GROUP_JOIN, (event) => {
      // A restart already under way when close() ran can still join (kafkajs#1639): leave again.
      if (this.closing) {
        void this.consumer.disconnect().catch(() => undefined)
        return
      }
      this.onJoined?.(event.payload.memberId)
      // Partitions that went to other members: their queues go, their new owners read on from the commits.
      const assigned = event.payload.memberAssignment
      // Partitions that came from another member wait out its handover (SubscribeOptions.handoverMs).
      const handover = this.options.handoverMs ?? 0
      if (handover > 0) {
        const until = new Promise<void>((resolve) => setTimeout(resolve, handover).unref())
        for (const [topic, partitions] of Object.entries(assigned)) {
          for (const partition of partitions) {
            if ((this.assignment[topic] ?? []).includes(partition)) continue
            const key = `${topic}\u0000${partition}`
            const before = this.retired.get(key)
            this.retired.set(key, before ? Promise.all([before, until]).then(() => undefined) : until)
          }
        }
      }
      for (const [key, q] of this.queues) {
        if (!(assigned[q.topic] ?? []).includes(q.partition)) {
          q.revoke()
          this.queues.delete(key)
          const ended = q.idle().catch(() => undefined)
          this.retired.set(key, ended)
          void ended.then(() => {
            if (this.retired.get(key) === ended) this.retired.delete(key)
          })
        }
      }
      this.assignment = assigned
      this.recoveries = 0
      this.joined = true
      this.crash = undefined
      this.lastContact = Date.now()
    })
    // An idle consumer fetches every maxWaitTime; eachBatch returns at once, so kafkajs heartbeats between fetches.
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
      // Commits are the partition queues' own: only past what was handled, never what was merely fetched.
      autoCommit: false,
      partitionsConsumedConcurrently: this.settings.partitionsConsumedConcurrently,
      eachBatch: (payload) => this.eachBatch(payload)
    }
  }

  get groupId(): string {
    return this.options.groupId
  }

  /** The partitions this member holds (none while out of its group). */
  assigned(): Assignment[] {
    if (this.closing) return []
    return Object.entries(this.assignment)
      .filter(([, partitions]) => partitions.length > 0)
      .map(([topic, partitions]) => ({ group: this.groupId, topic, partitions: [...partitions].sort((a, b) => a - b) }))
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
    await within(firstFetch, Math.max(2000, 4 * this.maxWaitMs))
  }

  /** Queues a fetched partition batch and returns, so kafkajs fetches on while the queue drains (partition-queue.ts). */
  private async eachBatch(payload: EachBatchPayload): Promise<void> {
    const { batch, resolveOffset, heartbeat, isRunning, isStale } = payload
    if (this.stopping || isStale() || batch.messages.length === 0) return
    const key = `${batch.topic}\u0000${batch.partition}`
    let queue = this.queues.get(key)
    if (!queue) {
      queue = new PartitionQueue(batch.topic, batch.partition, this.queueDeps, this.retired.get(key))
      this.queues.set(key, queue)
    }
    const entries: Entry[] = batch.messages.map((raw) => {
      const message = decode(batch.topic, batch.partition, raw)
      // Not JSON: no producer of ours wrote it, and handling it again cannot fix it.
      if (message === undefined) this.log.error({ topic: batch.topic, partition: batch.partition, offset: raw.offset, group: this.groupId }, 'undecodable message skipped')
      return message === undefined ? { offset: raw.offset } : { offset: raw.offset, message }
    })
    queue.add(entries)
    // Resolved means fetched, not handled: with autoCommit off it only moves kafkajs's fetch position.
    resolveOffset((batch.messages[batch.messages.length - 1] as KafkaMessage).offset)
    // A bounded queue: past it, this partition's fetching waits for the drain (heartbeating meanwhile).
    // A heartbeat's error ends the wait: on a rebalance kafkajs must rejoin now (it does so when the
    // error reaches it), or this member holds the whole group's rebalance up until the queue drains
    // and may miss its join window. The queued entries stay; a refetch of them is deduplicated.
    while (queue.size > this.queueCap && isRunning() && !isStale() && !this.stopping) {
      await sleep(Math.min(100, this.settings.heartbeatIntervalMs))
      await heartbeat()
    }
  }

  /** Publishes `message` to the dead-letter topic; false when even that failed (it is retried like any failure). */
  private async deadLetter(message: BusMessage, error: Error, attempts: number): Promise<boolean> {
    try {
      await this.publish(this.plan.deadLetterTopic, message.key, deadLetterValue(this.groupId, message, error, attempts))
    } catch (err) {
      this.log.error({ err, topic: message.topic, partition: message.partition, offset: message.offset }, 'dead-letter publish failed')
      return false
    }
    this.log.error({ err: error, topic: message.topic, partition: message.partition, offset: message.offset, group: this.groupId, attempts, deadLetterTopic: this.plan.deadLetterTopic }, 'message dead-lettered after repeated failures')
    return true
  }

  /** Stops fetching, lets in-flight handlers finish and commit, leaves the group. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      clearTimeout(this.recoveryTimer)
      this.recoveryTimer = undefined
      this.stopping = true
      try {
        // The chunks in hand finish and their offsets are committed; what is still queued goes to the next owner.
        await Promise.allSettled([...this.queues.values()].map((q) => q.idle()))
        await this.consumer.disconnect()
      } finally {
        this.onClosed?.()
      }
    })()
    return this.closing
  }
}
