import { isStoreUnavailable } from '../store/unavailable'
import { DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_BATCH, TOPICS, type BatchHandler, type BusMessage, type SubscribeOptions } from './types'

/**
 * What both buses share about running handlers on batches: turning a
 * per-message handler into a batch handler, reading a batch handler's
 * outcome, counting a message's failures and deciding when it is dead
 * rather than waiting for an outage to end.
 */

/** How a subscription's batches are run. */
export interface BatchPlan {
  handler: BatchHandler
  /** Messages per handler call: 1 for a per-message handler (each offset committed on its own). */
  size: number
  maxAttempts: number
  deadLetterTopic: string
}

export function batchPlan(options: SubscribeOptions): BatchPlan {
  const { handler, batchHandler } = options
  if ((handler === undefined) === (batchHandler === undefined)) throw new Error('subscribe needs exactly one of handler and batchHandler')
  const maxAttempts = options.maxAttempts ?? DEFAULT_MAX_ATTEMPTS
  const deadLetterTopic = options.deadLetterTopic ?? TOPICS.busDeadLetter
  if (batchHandler) return { handler: batchHandler, size: Math.max(1, options.maxBatch ?? DEFAULT_MAX_BATCH), maxAttempts, deadLetterTopic }
  const single = handler as NonNullable<typeof handler>
  return {
    size: 1,
    maxAttempts,
    deadLetterTopic,
    handler: async (messages) => {
      for (let i = 0; i < messages.length; i++) {
        try {
          await single(messages[i] as BusMessage)
        } catch (error) {
          return { done: i, error }
        }
      }
    }
  }
}

/** A handler call's outcome: `done` leading messages durable; `error` set when one failed. */
export interface Outcome {
  done: number
  error?: Error
}

function asError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err))
}

export async function runBatch(handler: BatchHandler, messages: BusMessage[]): Promise<Outcome> {
  let result
  try {
    result = await handler(messages)
  } catch (err) {
    return { done: 0, error: asError(err) }
  }
  if (result === undefined || result.done >= messages.length) return { done: messages.length }
  const done = Math.max(0, Math.floor(result.done))
  return { done, error: asError(result.error ?? new Error('the handler left the message undone'))  }
}

/**
 * An outage rather than a bad message: the store or the brokers cannot be
 * reached, or the bus is shutting down. Such a failure is retried for as
 * long as it lasts and never dead-letters a message.
 */
export function isTransient(err: unknown): boolean {
  if (isStoreUnavailable(err)) return true
  let current: unknown = err
  for (let depth = 0; depth < 5 && current instanceof Error; depth++) {
    if (current.name.startsWith('KafkaJS') || current.message === 'bus is closed' || (current as { transient?: unknown }).transient === true) return true
    current = current.cause
  }
  return false
}

/** Consecutive failures of the message at the head of each partition. */
export class FailureCounter {
  private readonly byPartition = new Map<string, { offset: string; attempts: number }>()

  /** Counts a failure of `message`; returns its attempts so far (1 for a first failure). */
  fail(message: BusMessage): number {
    const key = `${message.topic}:${message.partition}`
    const prev = this.byPartition.get(key)
    const attempts = prev && prev.offset === message.offset ? prev.attempts + 1 : 1
    this.byPartition.set(key, { offset: message.offset, attempts })
    return attempts
  }

  clear(topic: string, partition: number): void {
    this.byPartition.delete(`${topic}:${partition}`)
  }

  /** Failures of the head of `topic:partition` so far (the backoff grows with them). */
  attempts(topic: string, partition: number): number {
    return this.byPartition.get(`${topic}:${partition}`)?.attempts ?? 0
  }
}

/** Whether a message that failed `attempts` times with `error` goes to the dead-letter topic now. */
export function shouldDeadLetter(plan: BatchPlan, attempts: number, error: Error): boolean {
  return plan.maxAttempts > 0 && attempts >= plan.maxAttempts && !isTransient(error)
}

/** The dead-letter record of a message (schemas/events/bus.dead-letter.json); keyed like the original. */
export function deadLetterValue(groupId: string, message: BusMessage, error: Error, attempts: number): Record<string, unknown> {
  return {
    group: groupId,
    topic: message.topic,
    partition: message.partition,
    offset: message.offset,
    key: message.key,
    value: message.value,
    headers: message.headers,
    published_at: new Date(Number.isFinite(message.timestamp) ? message.timestamp : Date.now()).toISOString(),
    error: error.message.slice(0, 2000),
    attempts,
    dead_at: new Date().toISOString()
  }
}
