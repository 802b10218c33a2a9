import type { Logger } from 'pino'
import { batchPlan, deadLetterValue, FailureCounter, runBatch, shouldDeadLetter, type BatchPlan } from './batch'
import type { Assignment, BusMessage, Consumer, SubscribeOptions } from './types'

/**
 * A member of a memory-bus consumer group: one worker per assigned
 * partition, each taking the partition's next batch from the group's
 * committed position, committing the handler's durable prefix, and backing
 * off (or dead-lettering, batch.ts) when a message fails.
 */

const RETRY_MIN_MS = 50
const RETRY_MAX_MS = 5000

/** A consumer group of the memory bus. */
export interface Group {
  id: string
  members: MemoryConsumer[]
  committed: Map<string, number>
  generation: number
}

/** What a member needs from its bus. */
export interface ConsumerHost {
  next(topic: string, partition: number, offset: number, max: number, stop: { stopped: boolean; wake?: () => void }): Promise<BusMessage[]>
  committedOffset(groupId: string, topic: string, partition: number): number | undefined
  commit(group: Group, generation: number, topic: string, partition: number, nextOffset: number): boolean
  leave(group: Group, consumer: MemoryConsumer): void
  publish(topic: string, key: string, value: unknown): Promise<void>
}

interface WorkerState {
  stopped: boolean
  generation: number
  wake?: () => void
}

export class MemoryConsumer implements Consumer {
  private workers = new Map<string, { state: WorkerState; done: Promise<void> }>()
  private closing: Promise<void> | undefined
  private readonly plan: BatchPlan
  private readonly failures = new FailureCounter()

  constructor(
    private readonly bus: ConsumerHost,
    private readonly group: Group,
    readonly options: SubscribeOptions,
    private readonly log?: Logger
  ) {
    this.plan = batchPlan(options)
  }

  get groupId(): string {
    return this.group.id
  }

  /** The partitions this member holds, by topic (the group's round robin among its members). */
  assigned(): Assignment[] {
    const byTopic = new Map<string, number[]>()
    for (const k of this.workers.keys()) {
      const i = k.lastIndexOf(':')
      const topic = k.slice(0, i)
      const partitions = byTopic.get(topic) ?? []
      partitions.push(Number(k.slice(i + 1)))
      byTopic.set(topic, partitions)
    }
    return [...byTopic].map(([topic, partitions]) => ({ group: this.group.id, topic, partitions: partitions.sort((a, b) => a - b) }))
  }

  /** Stops workers of partitions no longer ours, re-binds survivors to the new generation, starts new ones. */
  assign(partitions: Array<[string, number]>, generation: number): void {
    const wanted = new Set(partitions.map(([t, p]) => `${t}:${p}`))
    for (const [k, w] of this.workers) {
      if (wanted.has(k)) {
        w.state.generation = generation
        wanted.delete(k)
      } else {
        w.state.stopped = true
        w.state.wake?.()
        this.workers.delete(k)
      }
    }
    for (const k of wanted) {
      const i = k.lastIndexOf(':')
      const topic = k.slice(0, i)
      const partition = Number(k.slice(i + 1))
      const state: WorkerState = { stopped: false, generation }
      this.workers.set(k, { state, done: this.run(topic, partition, state) })
    }
  }

  private async run(topic: string, partition: number, state: WorkerState): Promise<void> {
    // Let a previous owner's in-flight commit land before reading the position.
    await new Promise((r) => setImmediate(r))
    let delay = RETRY_MIN_MS
    while (!state.stopped) {
      const position = this.bus.committedOffset(this.group.id, topic, partition) ?? 0
      const messages = await this.bus.next(topic, partition, position, this.plan.size, state)
      if (messages.length === 0 || state.stopped) return
      const { done, error } = await runBatch(this.plan.handler, messages)
      // The durable prefix is committed whatever happened after it.
      if (done > 0 && !this.bus.commit(this.group, state.generation, topic, partition, Number((messages[done - 1] as BusMessage).offset) + 1)) return
      if (error === undefined) {
        this.failures.clear(topic, partition)
        delay = RETRY_MIN_MS
        continue
      }
      const failed = messages[done] as BusMessage
      const attempts = this.failures.fail(failed)
      if (shouldDeadLetter(this.plan, attempts, error) && (await this.deadLetter(failed, error, attempts))) {
        this.failures.clear(topic, partition)
        if (!this.bus.commit(this.group, state.generation, topic, partition, Number(failed.offset) + 1)) return
        continue
      }
      this.log?.warn({ err: error, topic, partition, offset: failed.offset, group: this.group.id, attempt: attempts }, 'handler failed; message will be redelivered')
      // The backoff ends early when the consumer closes or loses the partition.
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, delay)
        state.wake = () => {
          clearTimeout(timer)
          resolve()
        }
      })
      delay = Math.min(delay * 2, RETRY_MAX_MS)
    }
  }

  /** Publishes `message` to the dead-letter topic; false when even that failed (it is retried like any failure). */
  private async deadLetter(message: BusMessage, error: Error, attempts: number): Promise<boolean> {
    try {
      await this.bus.publish(this.plan.deadLetterTopic, message.key, deadLetterValue(this.group.id, message, error, attempts))
    } catch (err) {
      this.log?.error({ err, topic: message.topic, partition: message.partition, offset: message.offset }, 'dead-letter publish failed')
      return false
    }
    this.log?.error({ err: error, topic: message.topic, partition: message.partition, offset: message.offset, group: this.group.id, attempts, deadLetterTopic: this.plan.deadLetterTopic }, 'message dead-lettered after repeated failures')
    return true
  }

  async close(): Promise<void> {
    if (!this.closing) {
      this.closing = (async () => {
        const running = [...this.workers.values()]
        for (const w of running) {
          w.state.stopped = true
          w.state.wake?.()
        }
        this.workers.clear()
        await Promise.all(running.map((w) => w.done))
        this.bus.leave(this.group, this)
      })()
    }
    return this.closing
  }
}
