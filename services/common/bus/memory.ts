import type { Logger } from 'pino'
import { partitionFor } from './partitioner'
import type { Bus, BusMessage, Consumer, GroupOffsets, Headers, LagSource, OutgoingMessage, SubscribeOptions } from './types'

/**
 * In-process bus with Kafka's semantics (partitions by key, consumer groups
 * with rebalancing, commit after the handler, redelivery on failure), so the
 * embedded runtime and the distributed one run the same service code.
 */

interface Partition {
  /** Offset of messages[0]; earlier messages were trimmed after every group passed them. */
  base: number
  messages: BusMessage[]
  waiters: Set<() => void>
}

interface Group {
  id: string
  members: MemoryConsumer[]
  committed: Map<string, number>
  generation: number
}

const RETRY_MIN_MS = 50
const RETRY_MAX_MS = 5000

export class MemoryBus implements Bus, LagSource {
  readonly kind = 'memory' as const
  private topics = new Map<string, Partition[]>()
  private groups = new Map<string, Group>()
  private closed = false

  constructor(
    private readonly partitions: number,
    private readonly log?: Logger
  ) {}

  private topic(name: string): Partition[] {
    let t = this.topics.get(name)
    if (!t) {
      t = Array.from({ length: this.partitions }, () => ({ base: 0, messages: [], waiters: new Set<() => void>() }))
      this.topics.set(name, t)
    }
    return t
  }

  async publish(topic: string, key: string, value: unknown, headers: Headers = {}): Promise<void> {
    await this.publishMany(topic, [{ key, value, headers }])
  }

  async publishMany(topic: string, messages: OutgoingMessage[]): Promise<void> {
    if (this.closed) throw new Error('bus is closed')
    const parts = this.topic(topic)
    const touched = new Set<Partition>()
    for (const m of messages) {
      const p = partitionFor(m.key, this.partitions)
      const part = parts[p] as Partition
      // Values are copied so a consumer can never observe a producer's later mutation.
      part.messages.push({
        topic,
        partition: p,
        offset: String(part.base + part.messages.length),
        key: m.key,
        value: structuredClone(m.value),
        headers: { ...(m.headers ?? {}) },
        timestamp: Date.now()
      })
      touched.add(part)
    }
    for (const part of touched) {
      const waiters = [...part.waiters]
      part.waiters.clear()
      for (const w of waiters) w()
    }
  }

  async subscribe(options: SubscribeOptions): Promise<Consumer> {
    if (this.closed) throw new Error('bus is closed')
    let group = this.groups.get(options.groupId)
    if (!group) {
      group = { id: options.groupId, members: [], committed: new Map(), generation: 0 }
      this.groups.set(options.groupId, group)
    }
    for (const t of options.topics) {
      const parts = this.topic(t)
      parts.forEach((part, p) => {
        const k = `${t}:${p}`
        if (!group.committed.has(k)) {
          group.committed.set(k, options.fromBeginning === false ? part.base + part.messages.length : part.base)
        }
      })
    }
    const consumer = new MemoryConsumer(this, group, options, this.log)
    group.members.push(consumer)
    this.rebalance(group)
    return consumer
  }

  /** Round-robin assignment of every (topic, partition) among the group's members. */
  rebalance(group: Group): void {
    group.generation++
    const topics = new Set<string>()
    for (const m of group.members) for (const t of m.options.topics) topics.add(t)
    const assignments = new Map<MemoryConsumer, Array<[string, number]>>()
    for (const m of group.members) assignments.set(m, [])
    for (const t of [...topics].sort()) {
      const members = group.members.filter((m) => m.options.topics.includes(t))
      for (let p = 0; p < this.partitions; p++) {
        const owner = members[p % members.length]
        if (owner) assignments.get(owner)?.push([t, p])
      }
    }
    for (const [m, parts] of assignments) m.assign(parts, group.generation)
  }

  leave(group: Group, consumer: MemoryConsumer): void {
    group.members = group.members.filter((m) => m !== consumer)
    this.rebalance(group)
  }

  /** The next message at or after `offset`, waiting until one is published or `signal` fires. */
  async next(topic: string, partition: number, offset: number, stop: { stopped: boolean; wake?: () => void }): Promise<BusMessage | undefined> {
    const part = this.topic(topic)[partition] as Partition
    for (;;) {
      if (stop.stopped || this.closed) return undefined
      const index = offset - part.base
      if (index < part.messages.length) return part.messages[Math.max(0, index)]
      await new Promise<void>((resolve) => {
        part.waiters.add(resolve)
        stop.wake = () => {
          part.waiters.delete(resolve)
          resolve()
        }
      })
    }
  }

  commit(group: Group, generation: number, topic: string, partition: number, nextOffset: number): boolean {
    // A member that lost the partition in a rebalance may not move the group's position.
    if (generation !== group.generation) return false
    const k = `${topic}:${partition}`
    if ((group.committed.get(k) ?? 0) < nextOffset) group.committed.set(k, nextOffset)
    this.trim(topic, partition)
    return true
  }

  committedOffset(groupId: string, topic: string, partition: number): number | undefined {
    return this.groups.get(groupId)?.committed.get(`${topic}:${partition}`)
  }

  /** Drops messages every group subscribed to the topic has committed. */
  private trim(topic: string, partition: number): void {
    const part = this.topic(topic)[partition] as Partition
    let min = Number.POSITIVE_INFINITY
    for (const g of this.groups.values()) {
      const c = g.committed.get(`${topic}:${partition}`)
      if (c !== undefined) min = Math.min(min, c)
    }
    const drop = Math.min(min, part.base + part.messages.length) - part.base
    if (drop > 1024) {
      part.messages.splice(0, drop)
      part.base += drop
    }
  }

  /** Messages published but not yet committed by the group (consumer lag). */
  lag(groupId: string): number {
    const g = this.groups.get(groupId)
    if (!g) return 0
    let lag = 0
    for (const [k, committed] of g.committed) {
      const [topic, p] = [k.slice(0, k.lastIndexOf(':')), Number(k.slice(k.lastIndexOf(':') + 1))]
      const part = this.topic(topic)[p] as Partition
      lag += part.base + part.messages.length - committed
    }
    return lag
  }

  /** In-process consumers cannot lose their group: ready while open. */
  async health(): Promise<void> {
    if (this.closed) throw new Error('bus is closed')
  }

  /** Committed offset, end and lag of every group (or of `groups`) on every partition it reads. */
  async groupOffsets(groups?: string[]): Promise<GroupOffsets[]> {
    const out: GroupOffsets[] = []
    for (const g of this.groups.values()) {
      if (groups && !groups.includes(g.id)) continue
      for (const [k, committed] of g.committed) {
        const i = k.lastIndexOf(':')
        const topic = k.slice(0, i)
        const partition = Number(k.slice(i + 1))
        const part = this.topic(topic)[partition] as Partition
        const end = part.base + part.messages.length
        out.push({ group: g.id, topic, partition, committed, end, lag: Math.max(0, end - committed) })
      }
    }
    return out.sort((a, b) => a.group.localeCompare(b.group) || a.topic.localeCompare(b.topic) || a.partition - b.partition)
  }

  async close(): Promise<void> {
    if (this.closed) return
    const members = [...this.groups.values()].flatMap((g) => g.members)
    await Promise.all(members.map((m) => m.close()))
    this.closed = true
    for (const parts of this.topics.values()) for (const part of parts) for (const w of part.waiters) w()
  }
}

interface WorkerState {
  stopped: boolean
  generation: number
  wake?: () => void
}

class MemoryConsumer implements Consumer {
  private workers = new Map<string, { state: WorkerState; done: Promise<void> }>()
  private closing: Promise<void> | undefined

  constructor(
    private readonly bus: MemoryBus,
    private readonly group: Group,
    readonly options: SubscribeOptions,
    private readonly log?: Logger
  ) {}

  get groupId(): string {
    return this.group.id
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
      const message = await this.bus.next(topic, partition, position, state)
      if (!message || state.stopped) return
      try {
        await this.options.handler(message)
        delay = RETRY_MIN_MS
        if (!this.bus.commit(this.group, state.generation, topic, partition, Number(message.offset) + 1)) return
      } catch (err) {
        this.log?.warn({ err, topic, partition, offset: message.offset, group: this.group.id }, 'handler failed; message will be redelivered')
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
