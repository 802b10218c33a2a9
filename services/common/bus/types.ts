/**
 * The message bus between services. Two implementations share this contract
 * (test/common/bus.contract.test.ts runs against both): MemoryBus (embedded mode)
 * and KafkaBus (kafkajs). Semantics, both:
 *  - messages with the same key keep their order (one partition per key);
 *  - a consumer group splits a topic's partitions among its members and
 *    rebalances when one joins or leaves;
 *  - at least once: a message's offset is committed only after its handler
 *    resolved; a handler that throws gets the same message again (after a
 *    backoff) and later messages of that partition wait behind it;
 *  - batches: a batch handler gets up to `maxBatch` messages of one partition
 *    at a time, in order, and reports how many leading ones are done (their
 *    effects durable); the offset is committed up to that contiguous prefix
 *    and the first message not done comes back first, after the backoff;
 *  - dead letter: a message that fails `maxAttempts` times in a row, for a
 *    reason that is not an outage (transient.ts), is published to the
 *    dead-letter topic (`bus.dead-letter` unless set) and passed over, so one
 *    poison message cannot stall its partition forever. An outage (store or
 *    brokers unreachable) is waited out however long it lasts.
 */

export type Headers = Record<string, string>

export interface BusMessage<T = unknown> {
  topic: string
  partition: number
  offset: string
  key: string
  value: T
  headers: Headers
  /** Publish time, ms since the epoch. */
  timestamp: number
}

export interface OutgoingMessage {
  key: string
  value: unknown
  headers?: Headers
}

export type MessageHandler = (message: BusMessage) => Promise<void>

/**
 * What a batch handler made durable: the first `done` messages of its batch.
 * When `done` is short of the batch, `error` says why the next one failed.
 */
export interface BatchResult {
  done: number
  error?: unknown
}

/** Handles messages of one partition, in order; resolving with nothing means all are done, throwing means none. */
export type BatchHandler = (messages: BusMessage[]) => Promise<BatchResult | void>

/** Default most messages one batch handler call gets. */
export const DEFAULT_MAX_BATCH = 500
/** Default attempts of a failing message before it is dead-lettered. */
export const DEFAULT_MAX_ATTEMPTS = 10

export interface SubscribeOptions {
  /** Consumer group; members of one group share the partitions. */
  groupId: string
  topics: string[]
  /** One message at a time (exactly one of handler and batchHandler). */
  handler?: MessageHandler
  /** Up to maxBatch messages of one partition at a time. */
  batchHandler?: BatchHandler
  /** Most messages per batchHandler call (default DEFAULT_MAX_BATCH). */
  maxBatch?: number
  /**
   * A partition that comes to this member from another (a rebalance) is handled only this long
   * after the join: the previous owner's handler may still be finishing work it will commit, and
   * starting at once would handle those records a second time. Default 0.
   */
  handoverMs?: number
  /** Failures of one message (not an outage) before it goes to the dead-letter topic; default DEFAULT_MAX_ATTEMPTS, 0: never. */
  maxAttempts?: number
  /** Where a message that kept failing goes (default TOPICS.busDeadLetter). */
  deadLetterTopic?: string
  /** Where a group with no committed offset starts. Default true: nothing published before the first start is missed. */
  fromBeginning?: boolean
  /**
   * Latency-tolerant (an index, a history): on Kafka its fetches may wait longer on idle
   * partitions (KAFKA_BACKGROUND_FETCH_MAX_WAIT), so an idle process polls the brokers less.
   */
  background?: boolean
}

export interface Consumer {
  readonly groupId: string
  /** Leaves the group after in-flight handlers finish (their offsets are committed). */
  close(): Promise<void>
}

export interface Bus {
  readonly kind: 'memory' | 'kafka'
  publish(topic: string, key: string, value: unknown, headers?: Headers): Promise<void>
  publishMany(topic: string, messages: OutgoingMessage[]): Promise<void>
  subscribe(options: SubscribeOptions): Promise<Consumer>
  /**
   * Readiness (GET /readyz): resolves when every open consumer is running in
   * its group; rejects with the reason otherwise (a consumer crashed, has not
   * joined yet, or has not reached the brokers for a whole session timeout).
   * Both implementations have it; it is optional so that thin wrappers (test
   * helpers sharing one bus between runtimes) need not forward it.
   */
  health?(): Promise<void>
  close(): Promise<void>
}

/**
 * Group membership across processes (services/common/liveness.ts): the member
 * ids this process's consumers get, and the eviction of a dead process's
 * members, so a group moves their partitions as soon as the death is known
 * rather than after a whole session timeout. The Kafka bus has it.
 */
export interface GroupMembership {
  /** `listener` is called with each member id this process's consumers get (at every join). */
  onJoined(listener: (groupId: string, memberId: string) => void): void
  /** Removes `memberId` from the group (a member that no longer exists is not an error). */
  evict(groupId: string, memberId: string): Promise<void>
}

/** A consumer group's position on one partition (operator view: `make lag`). */
export interface GroupOffsets {
  group: string
  topic: string
  partition: number
  /** Next offset the group reads; -1 when it never committed. */
  committed: number
  /** The partition's end offset (high watermark). */
  end: number
  lag: number
}

/** The partitions one consumer (group member) of this process holds now. */
export interface Assignment {
  group: string
  topic: string
  partitions: number[]
}

/** Messages a group never got: the broker dropped them (retention) before the group read them. */
export interface Gone {
  group: string
  topic: string
  partition: number
  /** Counted by this process's consumers since it started (a gap in the offsets they fetched). */
  messages: number
  /**
   * Times kafkajs found the group's position already dropped by the broker and reset it to the
   * oldest offset left. A reset under a reading member comes with its gap counted in `messages`;
   * one when the group comes back after all its members were down does not: kafkajs commits the
   * reset over the old position, so how many were lost is not known.
   */
  resets: number
}

/** Both buses report their consumer groups' offsets (services/common/admin-bus.ts). */
export interface LagSource {
  groupOffsets(groups?: string[]): Promise<GroupOffsets[]>
  /** What this process's own consumers hold: how a group's partitions are shared out among processes. */
  assignments(): Assignment[]
  /** What this process's consumers found gone from their partitions (a gap in the offsets they fetched). */
  gone(): Gone[]
}

/** Every topic of the system (deploy/topics.json has their partitions and retention). */
export const TOPICS = {
  activityEvents: 'activity.events',
  activityDeliveries: 'activity.deliveries',
  adsEntityChanges: 'ads.entity-changes',
  webhookDeadLetter: 'webhook.dead-letter',
  busDeadLetter: 'bus.dead-letter'
} as const

export type TopicName = (typeof TOPICS)[keyof typeof TOPICS]
