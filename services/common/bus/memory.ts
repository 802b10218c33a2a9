import type { Logger } from 'pino'
import { BusJournal, encodeMessage, type Commit, type StoredPartition } from './journal'
import { partitionFor } from './partitioner'
import { MemoryConsumer, type ConsumerHost, type Group } from './memory-consumer'
import { loadTopics } from './topics'
import type { Assignment, Bus, BusMessage, Consumer, Gone, GroupOffsets, Headers, LagSource, OutgoingMessage, SubscribeOptions } from './types'
import { outgoingHeaders } from '../tracing'

/**
 * In-process bus with Kafka's semantics (partitions by key, consumer groups
 * with rebalancing, commit after the handler, redelivery on failure), so the
 * embedded runtime and the distributed one run the same service code.
 *
 * Durability: with a directory (the embedded runtime uses DATA_DIR/bus) every
 * published message is journaled before publish resolves, and every commit
 * before it counts (see journal.ts), so a restart, even after kill -9,
 * delivers again exactly what was accepted but not committed.
 *
 * Retention, like the Kafka topics: messages every group reading a partition
 * has committed are dropped; so is any message older than its topic's
 * retention (deploy/topics.json; a day for topics not listed there); a
 * partition no group reads also keeps at most `maxUnreadPerPartition`.
 */

interface Partition {
  /** Offset of messages[0]; earlier messages were trimmed after every group passed them. */
  base: number
  messages: BusMessage[]
  waiters: Set<() => void>
}

/** Retention of a topic deploy/topics.json does not list (the replay window). */
const DEFAULT_RETENTION_MS = 24 * 3_600_000
const DEFAULT_MAX_UNREAD = 50_000
const SWEEP_INTERVAL_MS = 60_000
/** Trimming on commit waits for this many droppable messages (an array splice per commit would cost too much). */
const TRIM_BATCH = 1024
/** A topic file is rewritten once it holds this many more trimmed lines than kept ones. */
const COMPACT_MIN_TRIMMED = 10_000

export interface MemoryBusOptions {
  /** Journal directory; without one the bus lives in memory only. */
  dir?: string
  /** Retention per topic (ms); default: deploy/topics.json, else one day. */
  retentionMs?: (topic: string) => number
  /** Most messages a partition no group reads keeps. */
  maxUnreadPerPartition?: number
}

/** Topic retentions of deploy/topics.json; empty when it cannot be read (then every topic keeps a day). */
function declaredRetentions(): Map<string, number> {
  try {
    return new Map(loadTopics().topics.map((t) => [t.name, t.retentionMs]))
  } catch {
    return new Map()
  }
}

export class MemoryBus implements Bus, LagSource, ConsumerHost {
  readonly kind = 'memory' as const
  private topics = new Map<string, Partition[]>()
  private groups = new Map<string, Group>()
  private closed = false
  private readonly journal: BusJournal | undefined
  private readonly retentionMs: (topic: string) => number
  private readonly maxUnread: number
  /** Journal lines of trimmed messages still in each topic's file. */
  private readonly trimmedLines = new Map<string, number>()
  private readonly sweepTimer: NodeJS.Timeout

  constructor(
    private readonly partitions: number,
    private readonly log?: Logger,
    options: MemoryBusOptions = {}
  ) {
    const declared = options.retentionMs ? undefined : declaredRetentions()
    this.retentionMs = options.retentionMs ?? ((topic) => declared?.get(topic) ?? DEFAULT_RETENTION_MS)
    this.maxUnread = options.maxUnreadPerPartition ?? DEFAULT_MAX_UNREAD
    if (options.dir !== undefined) {
      this.journal = new BusJournal(options.dir, partitions)
      this.restore(this.journal)
    }
    this.sweepTimer = setInterval(() => this.sweep(), SWEEP_INTERVAL_MS)
    this.sweepTimer.unref()
  }

  /** Topics, then groups' committed offsets, then the trims they allow. */
  private restore(journal: BusJournal): void {
    for (const [name, stored] of journal.loadTopics()) {
      this.topics.set(name, stored.map((p) => ({ base: p.base, messages: p.messages, waiters: new Set<() => void>() })))
      this.trimmedLines.set(name, 0)
    }
    for (const c of journal.loadOffsets()) {
      let group = this.groups.get(c.group)
      if (!group) {
        group = { id: c.group, members: [], committed: new Map(), generation: 0 }
        this.groups.set(c.group, group)
      }
      group.committed.set(`${c.topic}:${c.partition}`, c.offset)
    }
    this.sweep()
    const restored = [...this.topics.values()].reduce((n, parts) => n + parts.reduce((m, p) => m + p.messages.length, 0), 0)
    if (restored > 0) this.log?.info({ dir: journal.dir, messages: restored, groups: this.groups.size }, 'memory bus restored from its journal')
  }

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
    // Encoded first: a value that cannot be serialized fails the publish before anything is kept.
    const now = Date.now()
    const next = parts.map((part) => part.base + part.messages.length)
    const encoded = messages.map((m) => {
      const json = JSON.stringify(m.value) ?? 'null'
      const p = partitionFor(m.key, this.partitions)
      const offset = next[p] as number
      next[p] = offset + 1
      // Consumers get the value as Kafka would hand it over: decoded JSON, never the producer's object.
      const message: BusMessage = { topic, partition: p, offset: String(offset), key: m.key, value: JSON.parse(json) as unknown, headers: outgoingHeaders(m.headers), timestamp: now }
      return { message, json }
    })
    this.journal?.appendMessages(topic, encoded.map((e) => encodeMessage(e.message, e.json)).join(''))
    const touched = new Set<Partition>()
    for (const { message } of encoded) {
      const part = parts[message.partition] as Partition
      part.messages.push(message)
      touched.add(part)
    }
    // A partition no group reads is bounded here; one with readers is trimmed as they commit.
    for (const p of new Set(encoded.map((e) => e.message.partition))) this.trim(topic, p, TRIM_BATCH)
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

  /** Up to `max` messages from `offset` on, waiting until one is published or `stop` fires (then []). */
  async next(topic: string, partition: number, offset: number, max: number, stop: { stopped: boolean; wake?: () => void }): Promise<BusMessage[]> {
    const part = this.topic(topic)[partition] as Partition
    for (;;) {
      if (stop.stopped || this.closed) return []
      const index = Math.max(0, offset - part.base)
      if (index < part.messages.length) return part.messages.slice(index, index + max)
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
    if ((group.committed.get(k) ?? 0) < nextOffset) {
      group.committed.set(k, nextOffset)
      this.journalCommit({ group: group.id, topic, partition, offset: nextOffset })
    }
    this.trim(topic, partition, TRIM_BATCH)
    return true
  }

  /** Journaled before the commit returns: a committed message is never delivered again, even after kill -9. */
  private journalCommit(commit: Commit): void {
    this.journal?.appendCommits([commit], () => this.allCommits())
  }

  private allCommits(): Commit[] {
    const out: Commit[] = []
    for (const g of this.groups.values()) {
      for (const [k, offset] of g.committed) {
        const i = k.lastIndexOf(':')
        out.push({ group: g.id, topic: k.slice(0, i), partition: Number(k.slice(i + 1)), offset })
      }
    }
    return out
  }

  committedOffset(groupId: string, topic: string, partition: number): number | undefined {
    return this.groups.get(groupId)?.committed.get(`${topic}:${partition}`)
  }

  /**
   * Drops the head of a partition: what every group reading it has committed,
   * what is older than the topic's retention, and (when no group reads it)
   * what exceeds maxUnreadPerPartition. Waits until at least `atLeast` can go.
   */
  private trim(topic: string, partition: number, atLeast = 1): void {
    const part = this.topic(topic)[partition] as Partition
    const end = part.base + part.messages.length
    let committed = Number.POSITIVE_INFINITY
    for (const g of this.groups.values()) {
      const c = g.committed.get(`${topic}:${partition}`)
      if (c !== undefined) committed = Math.min(committed, c)
    }
    let upTo = Math.min(committed, end)
    if (committed === Number.POSITIVE_INFINITY) upTo = Math.max(part.base, end - this.maxUnread)
    const oldest = Date.now() - this.retentionMs(topic)
    let expired = part.base
    while (expired < end && (part.messages[expired - part.base] as BusMessage).timestamp < oldest) expired++
    if (expired > upTo && committed !== Number.POSITIVE_INFINITY) {
      this.log?.warn({ topic, partition, dropped: expired - Math.max(upTo, part.base) }, 'memory bus: messages past the topic retention dropped before every group read them')
    }
    upTo = Math.max(upTo, expired)
    const drop = upTo - part.base
    if (drop < atLeast || drop <= 0) return
    part.messages.splice(0, drop)
    part.base += drop
    this.noteTrimmed(topic, drop)
  }

  /** Rewrites a topic's journal file once it is mostly trimmed messages. */
  private noteTrimmed(topic: string, dropped: number): void {
    if (!this.journal) return
    const trimmed = (this.trimmedLines.get(topic) ?? 0) + dropped
    this.trimmedLines.set(topic, trimmed)
    const parts = this.topic(topic)
    const kept = parts.reduce((n, p) => n + p.messages.length, 0)
    if (trimmed < COMPACT_MIN_TRIMMED || trimmed < kept) return
    this.journal.rewriteTopic(topic, parts.map((p): StoredPartition => ({ base: p.base, messages: p.messages })))
    this.trimmedLines.set(topic, 0)
  }

  /** Applies retention to every partition (periodically, and once after a restore). */
  private sweep(): void {
    if (this.closed) return
    for (const [topic, parts] of this.topics) for (let p = 0; p < parts.length; p++) this.trim(topic, p)
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

  assignments(): Assignment[] {
    return [...this.groups.values()].flatMap((g) => g.members.flatMap((m) => m.assigned()))
  }

  /** Always none: a partition is trimmed only past what every group that reads it has committed. */
  gone(): Gone[] {
    return []
  }

  async close(): Promise<void> {
    if (this.closed) return
    const members = [...this.groups.values()].flatMap((g) => g.members)
    await Promise.all(members.map((m) => m.close()))
    this.closed = true
    clearInterval(this.sweepTimer)
    this.journal?.close()
    for (const parts of this.topics.values()) for (const part of parts) for (const w of part.waiters) w()
  }
}
