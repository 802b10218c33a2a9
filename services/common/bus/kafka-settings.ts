import { logLevel as KafkaLogLevel, type LogEntry } from 'kafkajs'
import type { Logger } from 'pino'

/** Settings of the Kafka bus (services/common/config.ts documents the ones operators set). */
export interface KafkaBusOptions {
  brokers: string[]
  clientId: string
  log: Logger
  /** Group session: a member that stops heartbeating this long is evicted and its partitions move. */
  sessionTimeoutMs?: number
  heartbeatIntervalMs?: number
  rebalanceTimeoutMs?: number
  /**
   * How long a group's leader waits before handing in the assignment (0: not at all). Real Kafka
   * answers a member's SyncGroup whenever it comes; librdkafka's mock cluster refuses one that comes
   * after the leader's (INVALID_REQUEST), which stops that consumer and costs another rebalance.
   */
  assignmentDelayMs?: number
  /** Longest a fetch waits for data on an idle partition. */
  maxWaitTimeMs?: number
  /** The same for background subscriptions (SubscribeOptions.background). */
  backgroundMaxWaitTimeMs?: number
  /** Most bytes one fetch returns per partition (a batch handler's batch comes out of one fetch). */
  maxBytesPerPartition?: number
  /** Most bytes one fetch returns in all. */
  maxBytes?: number
  /** How long a publish waits for others to share its produce request (0: only those of the same event-loop turn). */
  lingerMs?: number
  /** Codec of produced record batches: 'gzip' (kafkajs's built-in codec) or 'none'. */
  compression?: 'gzip' | 'none'
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

export const DEFAULTS = {
  sessionTimeoutMs: 30_000,
  heartbeatIntervalMs: 3_000,
  rebalanceTimeoutMs: 60_000,
  assignmentDelayMs: 0,
  // The same as KAFKA_FETCH_MAX_WAIT's default (config.ts): a bus built without settings behaves like a service's.
  maxWaitTimeMs: 100,
  backgroundMaxWaitTimeMs: 1000,
  maxBytesPerPartition: 1024 * 1024,
  maxBytes: 10 * 1024 * 1024,
  lingerMs: 0,
  compression: 'gzip' as 'gzip' | 'none',
  retryMinMs: 100,
  retryMaxMs: 30_000,
  partitionsConsumedConcurrently: 8,
  connectionTimeoutMs: 3_000,
  requestTimeoutMs: 30_000
}

export type Settings = typeof DEFAULTS & { idempotent: boolean | 'auto' }

/** kafkajs says this, with groupId, topic and partition, when a group's position is no longer on the broker. */
export const OFFSET_RESET_MESSAGE = 'Offset out of range, resetting to default offset'

/** kafkajs log entries into pino, under `component: kafkajs`; `seen` gets each entry's message and fields first. */
export function pinoLogCreator(log: Logger, seen?: (message: string, fields: Record<string, unknown>) => void) {
  const child = log.child({ component: 'kafkajs' })
  return () =>
    ({ namespace, level, log: entry }: LogEntry) => {
      // kafkajs repeats its own timestamp and logger name: pino has both already.
      const { message, timestamp: _timestamp, logger: _logger, ...extra } = entry as LogEntry['log'] & { timestamp?: string; logger?: string }
      seen?.(message, extra)
      const fields = { namespace, ...extra }
      if (level === KafkaLogLevel.ERROR) child.error(fields, message)
      else if (level === KafkaLogLevel.WARN) child.warn(fields, message)
      else if (level === KafkaLogLevel.INFO) child.info(fields, message)
      else child.debug(fields, message)
    }
}

export function kafkaLogLevel(log: Logger): KafkaLogLevel {
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
