import type { Consumer as KafkaConsumer, ConsumerRunConfig, EachBatchPayload, IHeaders, Kafka, KafkaMessage } from 'kafkajs'
import type { Logger } from 'pino'
import { batchPlan, deadLetterValue, FailureCounter, runBatch, shouldDeadLetter, type BatchPlan } from './batch'
import type { Settings } from './kafka-settings'
import type { BusMessage, Consumer, Headers, SubscribeOptions } from './types'

/**
 * A subscription on Kafka: one kafkajs consumer, eachBatch with manual
 * resolution. A fetched partition batch is handed to the handler in chunks
 * (one message for a per-message handler, up to maxBatch for a batch
 * handler); the offset is resolved up to the durable prefix the handler
 * reports, and only resolved offsets are ever committed. Commits go out when
 * a batch ends (also when it fails, and when the consumer stops) and, within
 * a long batch, at most every COMMIT_INTERVAL_MS (commitOffsetsIfNecessary()
 * after each chunk). A commit per message would cost a broker round trip per
 * event; a commit per batch alone let a process killed in a burst (batches of
 * thousands) have everything it handled since the batch began delivered
 * again. With the interval, a crash repeats at most about a second of work
 * per partition (at least once, as the Bus contract says; handlers are
 * idempotent). When a message fails, the batch stops without resolving it:
 * kafkajs fetches a partition from its last resolved offset, so the next
 * fetch starts with the failed message again (after a growing backoff) and
 * the later messages of that partition wait behind it, until it succeeds or,
 * failing for a reason other than an outage, is dead-lettered (batch.ts).
 */

/** Longest a handled message waits for its offset commit inside a long batch (bounds redelivery after a crash). */
const COMMIT_INTERVAL_MS = 1000

/** Publishes one message (the bus's producer), for the dead-letter topic. */
export type Publish = (topic: string, key: string, value: unknown) => Promise<void>
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
  private crash: string | undefined
  private lastContact = 0
  onClosed: (() => void) | undefined

  constructor(
    kafka: Kafka,
    readonly options: SubscribeOptions,
    private readonly settings: Settings,
    private readonly log: Logger,
    private readonly publish: Publish
  ) {
    this.plan = batchPlan(options)
    this.consumer = kafka.consumer({
      groupId: options.groupId,
      sessionTimeout: settings.sessionTimeoutMs,
      rebalanceTimeout: settings.rebalanceTimeoutMs,
      heartbeatInterval: settings.heartbeatIntervalMs,
      maxWaitTimeInMs: settings.maxWaitTimeMs,
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
    const raws = batch.messages
    let i = 0
    while (i < raws.length) {
      if (!isRunning() || isStale()) return
      // The next chunk: up to plan.size decodable messages, and where each one sits in the batch.
      const chunk: BusMessage[] = []
      const at: number[] = []
      let end = i
      while (end < raws.length && chunk.length < this.plan.size) {
        const raw = raws[end] as (typeof raws)[number]
        const message = decode(batch.topic, batch.partition, raw)
        // Not JSON: no producer of ours wrote it, and redelivery cannot fix it.
        if (message === undefined) this.log.error({ topic: batch.topic, partition: batch.partition, offset: raw.offset, group: this.groupId }, 'undecodable message skipped')
        else {
          chunk.push(message)
          at.push(end)
        }
        end++
      }
      const { done, error } = chunk.length > 0 ? await this.handle(chunk, heartbeat) : { done: 0, error: undefined }
      if (error === undefined) {
        resolveOffset((raws[end - 1] as (typeof raws)[number]).offset)
        this.failures.clear(batch.topic, batch.partition)
        i = end
        await commitOffsetsIfNecessary()
        continue
      }
      // The durable prefix (and undecodable messages inside it) is resolved; the failed message is not.
      const failedAt = at[done] as number
      if (failedAt > i) resolveOffset((raws[failedAt - 1] as (typeof raws)[number]).offset)
      const failed = chunk[done] as BusMessage
      const attempts = this.failures.fail(failed)
      if (shouldDeadLetter(this.plan, attempts, error) && (await this.deadLetter(failed, error, attempts))) {
        resolveOffset(failed.offset)
        this.failures.clear(batch.topic, batch.partition)
        i = failedAt + 1
        await commitOffsetsIfNecessary()
        continue
      }
      await this.backoff(failed, error, attempts, heartbeat, isRunning)
      // Not resolved: the next fetch of this partition starts at the failed message again.
      return
    }
    await heartbeat()
  }

  /** Runs the handler while heartbeating, so a slow handler does not cost the partition. */
  private async handle(messages: BusMessage[], heartbeat: () => Promise<void>): Promise<{ done: number; error?: Error }> {
    let heartbeatError: unknown
    const ticker = setInterval(() => {
      heartbeat().catch((err: unknown) => {
        heartbeatError ??= err
      })
    }, this.settings.heartbeatIntervalMs)
    try {
      const outcome = await runBatch(this.plan.handler, messages)
      // A rebalance noticed while the handler ran: the partition may be someone else's now, so
      // leave the batch through kafkajs (it rejoins) instead of committing.
      if (heartbeatError !== undefined) throw heartbeatError
      return outcome
    } finally {
      clearInterval(ticker)
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

  private async backoff(message: BusMessage, err: Error, attempts: number, heartbeat: () => Promise<void>, isRunning: () => boolean): Promise<void> {
    const delay = Math.min(this.settings.retryMinMs * 2 ** (attempts - 1), this.settings.retryMaxMs)
    this.log.warn({ err, group: this.groupId, topic: message.topic, partition: message.partition, offset: message.offset, attempt: attempts, retryInMs: delay }, 'handler failed; message will be redelivered')
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
