import { createHash } from 'node:crypto'
import { Counter, Gauge, type Registry } from 'prom-client'
import type { Logger } from 'pino'
import type { Bus, Headers, OutgoingMessage } from '../common/bus/types'
import { EventValidationError } from '../common/bus/validating'
import type { ServiceContext } from '../common/context'
import { newUuid } from '../common/ids'
import type { SchemaRegistry } from '../common/schemas'
import type { Worker } from '../common/service'
import type { Store, StoreOp } from '../common/store/types'

/**
 * The gateway's transactional outbox: "impossible to lose an event".
 *
 * A write that must be announced on the bus puts its outbox records in the
 * SAME store batch as the data it changes (Store.batch is atomic), so either
 * both are committed or neither is. The client's success depends only on
 * that batch. A relay then publishes the records and removes each one only
 * after the bus acknowledged it:
 *  - right after the write (the writer nudges the relay: low latency),
 *  - on start and every `sweepMs` (whatever a crash, a broker outage or a
 *    failed publish left behind).
 *
 * Records are spread over OUTBOX_PARTITIONS by the bus key (account id), so
 * one key's records share a partition. Within a partition records are
 * ordered by a sequence taken from the store, and the relay publishes them
 * in that order and stops at the first failure: a key's order on the bus is
 * the order its writes committed. Several gateway processes may relay: a
 * partition is drained only under its lease (`setIfAbsent` with a TTL that
 * the holder keeps renewing), so two relays never interleave one partition.
 * Delivery is at least once: a relay that dies between the bus's ack and the
 * removal publishes those records again (consumers dedupe by change id).
 *
 * Keys (gateway keyspace):
 *   ads:outbox:{p}:queue   sorted set: record JSON by sequence
 *   ads:outbox:{p}:seq     the partition's sequence
 *   ads:outbox:{p}:lease   the relay lease (token, TTL)
 *   ads:outbox:dead        records that can never be published (do not match their topic schema)
 */

export const OUTBOX_PARTITIONS = 16

export const OutboxKeys = {
  queue: (p: number) => `ads:outbox:${p}:queue`,
  seq: (p: number) => `ads:outbox:${p}:seq`,
  lease: (p: number) => `ads:outbox:${p}:lease`,
  dead: 'ads:outbox:dead'
}

/** One message to publish once the write that produced it has committed. */
export interface OutboxMessage {
  topic: string
  key: string
  value: unknown
  headers?: Headers
}

interface OutboxRecord extends OutboxMessage {
  /** Makes two records with the same content distinct members of the queue. */
  id: string
}

export function outboxPartition(key: string, partitions = OUTBOX_PARTITIONS): number {
  return createHash('sha1').update(key).digest().readUInt32BE(0) % partitions
}

/** What a writer adds to its batch: the outbox records, and the partitions to nudge after the commit. */
export interface StagedMessages {
  ops: StoreOp[]
  partitions: Set<number>
}

export interface RelayOptions {
  store: Store
  bus: Bus
  log: Logger
  /** Checks a message against its topic schema before it is staged or published. */
  schemas?: SchemaRegistry
  /** Registers the outbox metrics here. */
  metrics?: Registry
  partitions?: number
  /** Records published per bus call. */
  batchSize?: number
  /** Lease of a partition; renewed every third of it while draining. */
  leaseMs?: number
  /** Period of the background sweep over every partition. */
  sweepMs?: number
  /** Delay before trying again a partition another relay was draining. */
  busyRetryMs?: number
}

type DrainOutcome = 'drained' | 'busy' | 'failed'

/**
 * Publishes outbox records, partition by partition, under a lease. `nudge`
 * is the writers' fast path; `start` adds the sweep that retries.
 */
export class OutboxRelay {
  readonly partitions: number
  private readonly running = new Map<number, Promise<void>>()
  private readonly again = new Set<number>()
  private readonly busyRetries = new Map<number, NodeJS.Timeout>()
  private readonly busyAttempts = new Map<number, number>()
  private sweepTimer: NodeJS.Timeout | undefined
  private closed = false
  private readonly published: Counter | undefined
  private readonly failures: Counter | undefined

  constructor(private readonly options: RelayOptions) {
    this.partitions = options.partitions ?? OUTBOX_PARTITIONS
    if (options.metrics) {
      const { store } = options
      const partitions = this.partitions
      new Gauge({
        name: 'ads_outbox_depth',
        help: 'Outbox records committed but not yet acknowledged by the bus',
        registers: [options.metrics],
        async collect() {
          let depth = 0
          for (let p = 0; p < partitions; p++) depth += await store.zcard(OutboxKeys.queue(p)).catch(() => 0)
          this.set(depth)
        }
      })
      this.published = new Counter({ name: 'ads_outbox_published_total', help: 'Outbox records published and removed', registers: [options.metrics] })
      this.failures = new Counter({ name: 'ads_outbox_publish_failures_total', help: 'Outbox drains stopped by a failed publish (retried later)', registers: [options.metrics] })
    }
  }

  /** Drains these partitions now, in the background (the writers' low-latency path). */
  nudge(partitions: Iterable<number>): void {
    for (const p of partitions) void this.drain(p)
  }

  /**
   * Publishes partition `p` until it is empty, a publish fails, or another
   * relay holds its lease. A drain asked for while one runs in this process
   * runs again right after it, so a record committed meanwhile is not left.
   */
  drain(p: number): Promise<void> {
    const current = this.running.get(p)
    if (current) {
      this.again.add(p)
      return current
    }
    const run = (async () => {
      do {
        this.again.delete(p)
        const outcome = await this.drainOnce(p)
        if (outcome === 'busy') this.retryWhenFree(p)
        if (outcome !== 'drained') break
        this.busyAttempts.delete(p)
      } while (this.again.has(p) && !this.closed)
    })().finally(() => this.running.delete(p))
    this.running.set(p, run)
    return run
  }

  /** Drains every non-empty partition once; resolves when all drains ended. */
  async sweep(): Promise<void> {
    const drains: Array<Promise<void>> = []
    for (let p = 0; p < this.partitions && !this.closed; p++) {
      const depth = await this.options.store.zcard(OutboxKeys.queue(p)).catch(() => 0)
      if (depth > 0) drains.push(this.drain(p))
    }
    await Promise.all(drains)
  }

  /** Sweeps now (what an earlier process left) and then every `sweepMs`. */
  start(): void {
    const every = this.options.sweepMs ?? 1000
    const tick = (): void => {
      this.sweepTimer = undefined
      if (this.closed) return
      this.sweep()
        .catch((err: unknown) => this.options.log.warn({ err }, 'outbox sweep failed'))
        .finally(() => {
          if (!this.closed) this.sweepTimer = setTimeout(tick, every).unref()
        })
    }
    tick()
  }

  /** Stops sweeping and waits (bounded) for drains in flight: what they did not finish stays in the store. */
  async close(graceMs = 5000): Promise<void> {
    this.closed = true
    if (this.sweepTimer) clearTimeout(this.sweepTimer)
    for (const t of this.busyRetries.values()) clearTimeout(t)
    this.busyRetries.clear()
    let timer: NodeJS.Timeout | undefined
    const grace = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, graceMs)
    })
    await Promise.race([Promise.allSettled([...this.running.values()]), grace])
    clearTimeout(timer)
  }

  /**
   * Another relay holds the lease: it may have checked the queue before our
   * record landed, so look again soon, backing off; past the sweep period
   * the sweep takes over (the holder may be stuck on a broker outage).
   */
  private retryWhenFree(p: number): void {
    if (this.closed || this.busyRetries.has(p)) return
    const attempt = this.busyAttempts.get(p) ?? 0
    const delay = (this.options.busyRetryMs ?? 50) * 2 ** attempt
    if (delay > (this.options.sweepMs ?? 1000)) {
      this.busyAttempts.delete(p)
      return
    }
    this.busyAttempts.set(p, attempt + 1)
    const timer = setTimeout(() => {
      this.busyRetries.delete(p)
      void this.drain(p)
    }, delay)
    timer.unref()
    this.busyRetries.set(p, timer)
  }

  private async drainOnce(p: number): Promise<DrainOutcome> {
    const { store, log } = this.options
    const leaseMs = this.options.leaseMs ?? 15_000
    const token = newUuid()
    const lease = OutboxKeys.lease(p)
    try {
      if (!(await store.setIfAbsent(lease, token, leaseMs))) return 'busy'
    } catch (err) {
      if (!this.closed) log.warn({ err, partition: p }, 'outbox lease unavailable')
      return 'failed'
    }
    // A publish can wait long on a broker outage: keep the lease while this relay is alive.
    const renew = setInterval(() => {
      void (async () => {
        if ((await store.get(lease)) === token) await store.pexpire(lease, leaseMs)
      })().catch(() => undefined)
    }, Math.max(10, Math.floor(leaseMs / 3)))
    renew.unref()
    try {
      for (;;) {
        const members = (await store.zrange(OutboxKeys.queue(p), 0, (this.options.batchSize ?? 100) - 1)).map((m) => m.member)
        if (members.length === 0) return 'drained'
        await this.publishInOrder(p, members)
      }
    } catch (err) {
      this.failures?.inc()
      if (!this.closed) log.warn({ err, partition: p }, 'outbox publish failed; the records stay and are retried')
      return 'failed'
    } finally {
      clearInterval(renew)
      // Release only our own lease: an expired one may belong to another relay now.
      await (async () => {
        if ((await store.get(lease)) === token) await store.del(lease)
      })().catch(() => undefined)
    }
  }

  /** Publishes records oldest first, one bus call per run of the same topic, removing each run once acknowledged. */
  private async publishInOrder(p: number, members: string[]): Promise<void> {
    const { store, bus } = this.options
    let i = 0
    while (i < members.length) {
      const record = this.decode(members[i] as string)
      if (!record) {
        await this.bury(p, members[i] as string)
        i++
        continue
      }
      const run: string[] = [members[i] as string]
      const messages: OutgoingMessage[] = [toOutgoing(record)]
      let j = i + 1
      for (; j < members.length; j++) {
        const next = this.decode(members[j] as string)
        if (!next || next.topic !== record.topic) break
        run.push(members[j] as string)
        messages.push(toOutgoing(next))
      }
      await bus.publishMany(record.topic, messages)
      await store.zrem(OutboxKeys.queue(p), ...run)
      this.published?.inc(run.length)
      i = j
    }
  }

  /** The record, or undefined when it can never be published (kept aside, never blocking the partition). */
  private decode(member: string): OutboxRecord | undefined {
    let record: OutboxRecord
    try {
      record = JSON.parse(member) as OutboxRecord
    } catch {
      return undefined
    }
    if (typeof record.topic !== 'string' || typeof record.key !== 'string') return undefined
    const { schemas } = this.options
    if (schemas && checkMessage(schemas, record)) return undefined
    return record
  }

  private async bury(p: number, member: string): Promise<void> {
    this.options.log.error({ partition: p, record: member.slice(0, 500) }, 'outbox record cannot be published; moved to ads:outbox:dead')
    await this.options.store.batch([
      { op: 'sadd', key: OutboxKeys.dead, members: [member] },
      { op: 'zrem', key: OutboxKeys.queue(p), members: [member] }
    ])
  }
}

function toOutgoing(r: OutboxRecord): OutgoingMessage {
  return { key: r.key, value: r.value, ...(r.headers ? { headers: r.headers } : {}) }
}

/** The schema problem of a message, or undefined when it matches its topic schema. */
function checkMessage(schemas: SchemaRegistry, m: OutboxMessage): string | undefined {
  const id = `events/${m.topic}`
  if (!schemas.has(id)) return `no schema schemas/${id}.json`
  const validate = schemas.validator(id)
  return validate(m.value) ? undefined : JSON.stringify(validate.errors ?? [])
}

/**
 * The writers' side: stages records into a batch and nudges the relay once
 * the batch committed.
 */
export class Outbox {
  constructor(
    private readonly store: Store,
    readonly relay: OutboxRelay,
    private readonly schemas?: SchemaRegistry
  ) {}

  /**
   * The store ops that enqueue `messages`. A message that does not match its
   * topic schema is refused here, before anything is written (the bus would
   * refuse it forever).
   */
  async stage(messages: OutboxMessage[]): Promise<StagedMessages> {
    const staged: StagedMessages = { ops: [], partitions: new Set() }
    for (const m of messages) {
      const problem = this.schemas ? checkMessage(this.schemas, m) : undefined
      if (problem !== undefined) throw new EventValidationError(m.topic, problem)
    }
    for (const m of messages) {
      const p = outboxPartition(m.key, this.relay.partitions)
      // The sequence is taken before the batch: a batch that then fails leaves a gap, which is harmless.
      const seq = await this.store.incr(OutboxKeys.seq(p))
      const record: OutboxRecord = { id: newUuid(), topic: m.topic, key: m.key, value: m.value, ...(m.headers ? { headers: m.headers } : {}) }
      staged.ops.push({ op: 'zadd', key: OutboxKeys.queue(p), score: seq, member: JSON.stringify(record) })
      staged.partitions.add(p)
    }
    return staged
  }

  /** Commits `ops` and the outbox records of `messages` in one atomic batch, then publishes in the background. */
  async commit(ops: StoreOp[], messages: OutboxMessage[]): Promise<void> {
    const staged = await this.stage(messages)
    await this.store.batch([...ops, ...staged.ops])
    this.relay.nudge(staged.partitions)
  }
}

const outboxes = new WeakMap<ServiceContext, Outbox>()

/** The outbox of a context (one relay per context, so metrics are registered once). */
export function outboxOf(ctx: ServiceContext): Outbox {
  let outbox = outboxes.get(ctx)
  if (!outbox) {
    const relay = new OutboxRelay({ store: ctx.store, bus: ctx.bus, log: ctx.log.child({ component: 'outbox' }), schemas: ctx.schemas, metrics: ctx.metrics })
    outbox = new Outbox(ctx.store, relay, ctx.schemas)
    outboxes.set(ctx, outbox)
  }
  return outbox
}

/** The gateway worker that publishes what the writers' fast path could not (a crash, a broker outage). */
export function startOutboxRelay(ctx: ServiceContext): Worker {
  const { relay } = outboxOf(ctx)
  relay.start()
  return { name: 'ads-outbox-relay', close: () => relay.close() }
}
