import type { Delivery } from '../common/bus/deliveries'
import { TOPICS } from '../common/bus/types'
import type { BusMessage, Consumer } from '../common/bus/types'
import type { ServiceContext } from '../common/context'
import { problemBody, Problems, type DisconnectType } from '../common/errors'
import { newUuid } from '../common/ids'
import type { Worker } from '../common/service'
import { type CapHit, type UsageAllowance, usageCappedProblem, usageMeter, type UsageMeter } from '../common/usage'
import { RecentBuffer } from './backfill'
import { createStreamMetrics, type StreamMetrics } from './metrics'
import type { StreamConnection } from './connections'
import { ConnectionRegistry, type Lease } from './registry'
import { streamNodeSettings, type StreamNodeSettings } from './settings'
import { contextOf, endSpan, tracingOn, type Context } from '../common/tracing'
import { writeSpan } from './write-span'

/**
 * One stream node's state: its open connections by application, its recent
 * buffer, and its consumer of `activity.deliveries` in a group of its own
 * (`stream-<node id>`), so every node sees every delivery and serves the
 * connections it holds.
 *
 * The node id is stable (settings.ts), so is the group: a node's first start
 * begins at the end of the topic, and a restart resumes from the group's
 * committed offsets. The deliveries published while the node was down are
 * caught up into the backfill buffer (those still inside the backfill
 * window, at their publish time) and go live only to connections whose
 * backfill_minutes reach back to them: a client that reconnects after a
 * ForceDisconnect gets what it missed, nobody gets old lines as new ones.
 *
 * Fan-out works a batch at a time: a batch of deliveries from the bus
 * becomes one write per connection (its lines joined; on WebSocket, its
 * messages corked into one socket write).
 *
 * Writing never waits for a client. Each write is followed by a look at the
 * connection's unsent bytes: a client still above STREAM_SLOW_READER_BYTES a
 * moment later (SLOW_READER_GRACE_MS, time for a burst written in one turn of
 * the event loop to drain) or at once above four times it gets the SlowReader
 * line and is closed, so one stalled reader costs a bounded amount of memory
 * and never delays the others.
 *
 * Usage (services/common/usage.ts): each event written to at least one of an
 * app's streams on this node is one post consumed, counted per batch in one
 * store write. An app over its usage cap is refused a new connection (429
 * usage-capped) and its open streams get the usage-capped Problem line and
 * are closed; the events it could not take stay in the backfill buffer.
 */

/** How long a closed connection may take to flush its last line before its socket is destroyed. */
const CLOSE_GRACE_MS = 5000
/** How long a client may stay above the slow-reader threshold before it is disconnected. */
const SLOW_READER_GRACE_MS = 1000
/** Above this multiple of the threshold a client is disconnected at once (memory bound). */
const SLOW_READER_HARD_FACTOR = 4
const WS_GOING_AWAY = 1001
/** Deliveries fanned out per write to each connection. */
const FANOUT_BATCH = 500
const WS_POLICY_VIOLATION = 1008

export interface Admission {
  connectionId: string
  lease: Lease
}

export class StreamHub {
  readonly nodeId: string
  readonly registry: ConnectionRegistry
  private readonly byApp = new Map<string, Set<StreamConnection>>()
  private readonly leases = new Map<StreamConnection, Lease>()
  /** The oldest publish time each connection asked for (its backfill window start, or when it opened). */
  private readonly wantsFrom = new Map<StreamConnection, number>()
  /** When this node's consumer started: a delivery published before was missed while the node was down. */
  private consumingSince = Number.NEGATIVE_INFINITY
  private readonly overThreshold = new Set<StreamConnection>()
  private readonly buffer: RecentBuffer
  private readonly metrics: StreamMetrics
  private readonly usage: UsageMeter
  private timers: NodeJS.Timeout[] = []
  private consumer: Consumer | undefined
  private closingState = false

  constructor(
    private readonly ctx: ServiceContext,
    overrides: Partial<StreamNodeSettings> = {}
  ) {
    const { config } = ctx
    const settings = { ...streamNodeSettings(config), ...overrides }
    this.nodeId = settings.nodeId
    this.registry = new ConnectionRegistry(ctx.store, this.nodeId, config.streamConnectionsPerApp, config.streamRegistryTtlMs)
    this.buffer = new RecentBuffer({
      windowMs: config.streamBackfillMs,
      maxEventsPerApp: config.streamBackfillMaxEvents,
      maxBytesPerApp: settings.backfillMaxBytesPerApp,
      maxBytes: settings.backfillMaxBytes
    })
    this.metrics = createStreamMetrics(ctx.metrics, this.leases, this.buffer)
    this.usage = usageMeter(ctx)
  }

  /** The node's consumer group on activity.deliveries. */
  get groupId(): string {
    return `stream-${this.nodeId}`
  }

  get closing(): boolean {
    return this.closingState
  }

  /** Live connections on this node (all applications). */
  connectionCount(): number {
    return this.leases.size
  }

  /**
   * Reserves a place for a new connection of `appId`: the Problem the client
   * gets when the node is shutting down or the app is at its limit.
   */
  async admit(appId: string): Promise<Admission> {
    if (this.closingState) {
      this.metrics.refused.inc({ reason: 'shutting-down' })
      throw Problems.generic(503, 'This stream node is shutting down; reconnect.')
    }
    const hit = await this.usage.capped(appId)
    if (hit) {
      this.metrics.refused.inc({ reason: 'usage-capped' })
      throw usageCappedProblem(hit)
    }
    const connectionId = newUuid()
    const lease = await this.registry.acquire(appId, connectionId)
    if (!lease) {
      this.metrics.refused.inc({ reason: 'too-many-connections' })
      throw Problems.tooManyConnections(
        `This application already has the maximum of ${this.ctx.config.streamConnectionsPerApp} stream connections; close one before opening another.`
      )
    }
    return { connectionId, lease }
  }

  /** Gives back a place taken by `admit` that never became a connection (e.g. a failed upgrade). */
  async abandon(admission: Admission): Promise<void> {
    await this.registry.release(admission.lease).catch((err) => this.ctx.log.warn({ err }, 'stream registry release failed'))
  }

  /**
   * Starts serving `conn`: the backfill first, then live deliveries. Both
   * happen in the same turn of the event loop as the registration, so no
   * delivery falls between them or arrives twice.
   */
  attach(conn: StreamConnection, lease: Lease, backfillMinutes: number): void {
    this.leases.set(conn, lease)
    const openedAt = Date.now()
    this.wantsFrom.set(conn, openedAt - backfillMinutes * 60_000)
    this.metrics.opened.inc({ transport: conn.transport })
    if (this.closingState) {
      // Admitted just before shutdown began: it gets the same goodbye as the others.
      void this.disconnect(conn, 'ForceDisconnect', 'This stream is being closed because the server is shutting down; reconnect.', WS_GOING_AWAY, 1000)
      return
    }
    if (backfillMinutes > 0) {
      for (const line of this.buffer.since(conn.appId, openedAt - backfillMinutes * 60_000)) {
        if (!this.deliver(conn, [line])) break
      }
    }
    if (this.leases.has(conn)) {
      let set = this.byApp.get(conn.appId)
      if (!set) {
        set = new Set()
        this.byApp.set(conn.appId, set)
      }
      set.add(conn)
    }
    void conn.done.then(() => {
      if (this.leases.has(conn)) this.metrics.disconnects.inc({ reason: 'client' })
      return this.detach(conn)
    })
  }

  /** One delivery from the bus, published at `publishedAt` (see dispatchBatch). */
  dispatch(delivery: Pick<Delivery, 'app_id' | 'envelope'>, publishedAt = Date.now()): void {
    this.dispatchBatch([{ delivery, publishedAt }])
  }

  /**
   * Deliveries from the bus, in order: each is kept for backfill and goes to
   * its app's open streams on this node, every connection getting the
   * batch's lines in one write. One published while the node was down goes
   * only to streams whose backfill reaches back to it.
   *
   * With an `allowance`, an app's events go out while it has room under its
   * usage caps; at the first that does not fit, its streams are closed with
   * the usage-capped Problem. Returns the events written per app (the posts
   * each consumed on this node).
   */
  dispatchBatch(items: Array<{ delivery: Pick<Delivery, 'app_id' | 'envelope'>; publishedAt: number; trace?: Context | undefined }>, allowance?: UsageAllowance): Map<string, number> {
    const pending = new Map<StreamConnection, string[]>()
    // Traced: the trace context of each line, per connection (each write's span is their child, linked).
    const traces = tracingOn() ? new Map<StreamConnection, Array<Context | undefined>>() : undefined
    const consumed = new Map<string, number>()
    const capped = new Map<string, CapHit | undefined>()
    const liveSince = this.consumingSince
    const oldest = Date.now() - this.ctx.config.streamBackfillMs
    for (const { delivery, publishedAt, trace } of items) {
      this.metrics.received.inc()
      const missed = publishedAt < liveSince
      if (missed && publishedAt < oldest) {
        this.metrics.caughtUp.inc({ outcome: 'too-old' })
        continue
      }
      if (missed) this.metrics.caughtUp.inc({ outcome: 'buffered' })
      const line = JSON.stringify(delivery.envelope)
      this.buffer.push(delivery.app_id, line, publishedAt)
      const set = this.byApp.get(delivery.app_id)
      if (!set || capped.has(delivery.app_id)) continue
      const to = [...set].filter((conn) => !(missed && publishedAt < (this.wantsFrom.get(conn) ?? Number.POSITIVE_INFINITY)))
      if (to.length === 0) continue
      if (allowance && !allowance.take(delivery.app_id)) {
        capped.set(delivery.app_id, allowance.blocked(delivery.app_id))
        continue
      }
      consumed.set(delivery.app_id, (consumed.get(delivery.app_id) ?? 0) + 1)
      for (const conn of to) {
        const lines = pending.get(conn)
        if (lines) lines.push(line)
        else pending.set(conn, [line])
        const traced = traces?.get(conn)
        if (traced) traced.push(trace)
        else traces?.set(conn, [trace])
      }
    }
    for (const [conn, lines] of pending) {
      if (!this.leases.has(conn)) continue
      const span = traces ? writeSpan(conn, lines.length, traces.get(conn) ?? []) : undefined
      this.deliver(conn, lines)
      endSpan(span)
    }
    for (const [appId, hit] of capped) {
      if (!hit) continue
      for (const conn of [...(this.byApp.get(appId) ?? [])]) this.capDisconnect(conn, hit)
    }
    return consumed
  }

  /** The app reached a usage cap: its stream gets the usage-capped Problem line and is closed. */
  private capDisconnect(conn: StreamConnection, hit: CapHit): void {
    if (!this.leases.has(conn)) return
    this.metrics.disconnects.inc({ reason: 'UsageCapped' })
    void this.detach(conn)
    const line = JSON.stringify({ errors: [usageCappedProblem(hit).body(this.ctx.config.problemBase)] })
    conn.closeWith(line, CLOSE_GRACE_MS, WS_POLICY_VIOLATION)
  }

  /** Writes events in one write; false when the connection was closed as a slow reader. */
  private deliver(conn: StreamConnection, lines: string[]): boolean {
    if (lines.length === 1) conn.send(lines[0] as string)
    else conn.sendMany(lines)
    this.metrics.sent.inc({ kind: 'event' }, lines.length)
    const threshold = this.ctx.config.streamSlowReaderBytes
    const unsent = conn.unsentBytes()
    if (unsent > threshold * SLOW_READER_HARD_FACTOR) {
      this.slowReader(conn)
      return false
    }
    if (unsent > threshold && !this.overThreshold.has(conn)) {
      this.overThreshold.add(conn)
      const timer = setTimeout(() => {
        this.overThreshold.delete(conn)
        if (this.leases.has(conn) && conn.unsentBytes() > threshold) this.slowReader(conn)
      }, SLOW_READER_GRACE_MS)
      timer.unref()
    }
    return true
  }

  private slowReader(conn: StreamConnection): void {
    void this.disconnect(conn, 'SlowReader', 'This stream consumer is not reading fast enough; its buffer exceeded the limit.', WS_POLICY_VIOLATION)
  }

  private errorsLine(type: DisconnectType, detail: string): string {
    return JSON.stringify({ errors: [problemBody(this.ctx.config.problemBase, 'operational-disconnect', detail, undefined, { disconnect_type: type })] })
  }

  private disconnect(conn: StreamConnection, type: DisconnectType, detail: string, closeCode: number, graceMs = CLOSE_GRACE_MS): Promise<void> {
    if (!this.leases.has(conn)) return Promise.resolve()
    this.metrics.disconnects.inc({ reason: type })
    const released = this.detach(conn)
    conn.closeWith(this.errorsLine(type, detail), graceMs, closeCode)
    return released
  }

  /** Stops serving `conn` and gives its place back in the shared registry. */
  private detach(conn: StreamConnection): Promise<void> {
    const lease = this.leases.get(conn)
    if (!lease) return Promise.resolve()
    this.leases.delete(conn)
    this.wantsFrom.delete(conn)
    const set = this.byApp.get(conn.appId)
    set?.delete(conn)
    if (set && set.size === 0) this.byApp.delete(conn.appId)
    return this.registry.release(lease).catch((err) => this.ctx.log.warn({ err }, 'stream registry release failed'))
  }

  /** Bare keep-alives on streams idle for most of STREAM_KEEPALIVE (the sweep runs every quarter of it). */
  private sweepKeepAlives(): void {
    const interval = this.ctx.config.streamKeepAliveMs
    const idleAfter = interval - Math.floor(interval / 4)
    const now = Date.now()
    for (const conn of this.leases.keys()) {
      if (now - conn.lastWriteAt >= idleAfter) {
        conn.keepAlive()
        this.metrics.sent.inc({ kind: 'keep-alive' })
      }
    }
  }

  private async renewLeases(): Promise<void> {
    const snapshot = [...this.leases.entries()]
    await this.registry.renew(snapshot.map(([, lease]) => lease))
    // A connection that ended while the renewal was in flight must not be re-registered by it.
    for (const [conn, lease] of snapshot) if (!this.leases.has(conn)) await this.registry.release(lease)
  }

  async start(): Promise<Worker> {
    const { config, log } = this.ctx
    const every = (ms: number, fn: () => void | Promise<void>): void => {
      const timer = setInterval(() => {
        void Promise.resolve()
          .then(fn)
          .catch((err) => log.warn({ err }, 'stream timer failed'))
      }, Math.max(10, ms))
      timer.unref()
      this.timers.push(timer)
    }
    every(Math.floor(config.streamKeepAliveMs / 4), () => this.sweepKeepAlives())
    every(Math.floor(config.streamRegistryTtlMs / 3), () => this.renewLeases())
    every(Math.min(10_000, Math.max(1000, Math.floor(config.streamBackfillMs / 10))), () => this.buffer.trim())

    this.consumingSince = Date.now()
    log.info({ nodeId: this.nodeId, group: this.groupId }, 'stream node consuming activity.deliveries')
    this.consumer = await this.ctx.bus.subscribe({
      groupId: this.groupId,
      topics: [TOPICS.activityDeliveries],
      // A new group starts live; a known one resumes from its committed offsets (the catch-up above).
      fromBeginning: false,
      maxBatch: FANOUT_BATCH,
      batchHandler: async (messages: BusMessage[]) => {
        const items: Array<{ delivery: Delivery; publishedAt: number; trace: Context | undefined }> = []
        for (const message of messages) {
          const delivery = message.value as Partial<Delivery> | undefined
          if (typeof delivery?.app_id !== 'string' || typeof delivery.envelope !== 'object' || delivery.envelope === null) {
            // Producers validate deliveries; one that still lacks its parts cannot be streamed, and retrying will not change it.
            log.warn({ partition: message.partition, offset: message.offset }, 'skipping a delivery without app_id or envelope')
            continue
          }
          items.push({ delivery: delivery as Delivery, publishedAt: Number.isFinite(message.timestamp) ? message.timestamp : Date.now(), trace: contextOf(message.headers) })
        }
        // Usage caps of the apps with streams here (the meter reads the store at most once a second per app);
        // with the store unreachable the events still flow, counted once it is back.
        const apps = [...new Set(items.map((i) => i.delivery.app_id).filter((id) => this.byApp.has(id)))]
        const allowance = apps.length > 0 ? await this.usage.allowance(apps).catch((err: unknown) => void log.warn({ err }, 'usage caps unreadable: streaming uncapped')) : undefined
        // The stream only forwards: whatever happens to one client, the batch is done for this node.
        const consumed = this.dispatchBatch(items, allowance ?? undefined)
        // Counted in process and written within a second (usage.ts); with the store out they wait for it.
        if (consumed.size > 0) this.usage.count(consumed)
      }
    })
    return { name: 'stream-deliveries', close: () => this.stop() }
  }

  private async stop(): Promise<void> {
    for (const t of this.timers) clearInterval(t)
    this.timers = []
    await this.consumer?.close()
    this.consumer = undefined
    await this.usage.flush().catch((err: unknown) => this.ctx.log.warn({ err }, 'usage counts not written at shutdown'))
  }

  /**
   * Shutdown: no new connections; every open stream gets the ForceDisconnect
   * line and is closed. Resolves when all are closed, or after the grace time
   * (clients that do not read are destroyed then).
   */
  async forceDisconnectAll(): Promise<void> {
    this.closingState = true
    const grace = Math.min(CLOSE_GRACE_MS, Math.max(100, Math.floor(this.ctx.config.shutdownGraceMs / 2)))
    const conns = [...this.leases.keys()]
    const released = conns.map((conn) =>
      this.disconnect(conn, 'ForceDisconnect', 'This stream is being closed because the server is shutting down; reconnect.', WS_GOING_AWAY, grace)
    )
    await Promise.all(released)
    const all = Promise.all(conns.map((c) => c.done))
    let timer: NodeJS.Timeout | undefined
    await Promise.race([all, new Promise<void>((resolve) => (timer = setTimeout(resolve, grace + 100)))])
    if (timer) clearTimeout(timer)
  }
}
