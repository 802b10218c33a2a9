import type { Logger } from 'pino'
import type { Bus } from '../../common/bus/types'
import { newUuid } from '../../common/ids'
import type { Worker } from '../../common/service'
import { WriteCoalescer } from '../../common/store/coalescer'
import type { Store, StoreOp } from '../../common/store/types'
import type { AttemptLog } from './attempt-log'
import { AttemptRunner } from './attempt'
import { claimDue, releaseOps, type ClaimDeps, type DueDelivery } from './claims'
import type { DeliveryLog, DeliveryRecord, DeliveryStatus } from '../delivery-log'
import type { WebhookClient } from '../http-client'
import { WebhookKeys } from '../keys'
import { dueAt, KNOWN_KEYS, readDue, scheduledAt, type Scheduled } from './schedule'
import { planIntake, readIntake, type AcceptResult, type IntakePlanDeps, type NewDelivery, type Prepared } from './intake'
import { FIRST_ATTEMPT_WAIT_MS, type FirstAttempt, pendingOps, untilDurable } from './first-attempt'
import { Lanes } from './lanes'
import { leaseOp, releaseLeasesOf, trimLeases } from './leases'
import type { WebhookMetrics } from '../metrics'
import { PollingWorker } from '../polling'
import type { WebhookRegistry } from '../registry'
import { pullForward, resend, type ReschedulingDeps } from './rescheduling'

/**
 * Signed delivery with durable retries.
 *
 * A batch of deliveries (acceptMany) reads its webhooks, apps and existing
 * records in one pipelined round trip. A delivery whose webhook has a free
 * slot is attempted at once and made durable by its outcome
 * (first-attempt.ts); the others are stored (record, log entry, schedule
 * entry) in one batch. The consumer returns, and the bus offset is
 * committed, once every delivery's future is recorded. Attempts run in the
 * webhook's lane (lanes.ts: at most WEBHOOK_CONCURRENCY in flight per
 * webhook per process): a slow or failing receiver delays only its own
 * webhook (and its own batch by FIRST_ATTEMPT_WAIT_MS at most).
 *
 * While an attempt runs, its schedule entry is pushed one lease ahead, so a
 * process that dies mid-attempt leaves a due entry behind for another (or
 * the restarted) process. A claim key keeps two processes from attempting
 * the same delivery at once, and the record's status and due time are
 * re-read after claiming, so a delivery that another process finished or
 * rescheduled is left alone.
 *
 * The attempt itself and what its outcome does (attempt.ts): after a
 * failure the next attempt is due after the next step of
 * WEBHOOK_RETRY_SCHEDULE (with jitter), or after Retry-After on 429/503.
 * 410 Gone disables the webhook. When the schedule is exhausted the delivery
 * goes to `webhook.dead-letter` and stays in the log as `failed`, where an
 * operator can re-send it.
 *
 * An invalid webhook's turns are skipped (each counts as a failed attempt);
 * when a CRC passes again its pending deliveries are made due at once
 * (`pullForward`) rather than left waiting for their next step.
 *
 * A delivery for a webhook that no longer exists (deleted, while activity
 * subscriptions still name it) is a clean drop: nothing is stored, retried
 * or dead-lettered, and it is counted as `webhook_deleted`. Deliveries
 * already pending when the webhook was deleted end `cancelled`.
 */

export interface EngineOptions {
  /** Delay before attempt n+1 (index n); its length is the number of attempts. */
  schedule: number[]
  concurrency: number
  /** Retention of records (the log). */
  retentionMs: number
}

export interface EngineDeps {
  store: Store
  bus: Bus
  registry: WebhookRegistry
  deliveryLog: DeliveryLog
  client: WebhookClient
  metrics: WebhookMetrics
  logger: Logger
  /** The console's record of attempts (attempt-log.ts). */
  attempts?: AttemptLog
  /** This process's liveness id (services/common/liveness.ts); a fresh id when not given. */
  processId?: string
}

/** Entries a pass reads from each shard of the schedule (twelve shards: about a thousand a pass). */
const SCHEDULER_PAGE_PER_SHARD = 84
/**
 * A pass whose first page is all held back by full lanes (a slow webhook's backlog, due before
 * anything else) reads on, up to this many pages, for due entries of webhooks with room: at most
 * once a second, since a backlog that stays is read through each time.
 */
const SCHEDULER_DEEP_PAGES = 10
const SCHEDULER_DEEP_EVERY_MS = 1000
/**
 * Answered attempts whose outcome is still being stored, beyond which an attempt keeps its lane
 * slot until its own outcome is stored: what is held in memory never outruns the store.
 */
const MAX_WRITING = 1024

/** Longest a consumed batch waits for room in its webhooks' lanes (lanes.ts holdForRoom). */
const HOLD_MS = 2000
/** How often the scheduler drops this process's leases that ran out (leases.ts). */
const TRIM_EVERY_MS = 5000

export class DeliveryEngine {
  /** This process's id (its liveness id): claims and leases carry it. */
  private readonly nodeId: string
  private readonly lanes: Lanes<Prepared>
  /** Runs one attempt and settles its outcome; replays POST through it too. */
  readonly runner: AttemptRunner
  private scheduler: PollingWorker | undefined
  /** Outcomes of answered attempts being stored (their lane slots already free). */
  private readonly writing = new Set<Promise<void>>()
  /** Claims released by the attempts of one turn go in one batch. */
  private readonly releases: WriteCoalescer
  private readonly claimDeps: ClaimDeps
  private readonly planDeps: IntakePlanDeps
  private closing = false
  /** When a pass last read past its first page. */
  private lastDeepScan = 0
  /** When this process last dropped its leases that ran out. */
  private lastTrim = 0
  readonly leaseMs: number

  constructor(
    private readonly deps: EngineDeps,
    private readonly options: EngineOptions
  ) {
    this.nodeId = deps.processId ?? newUuid()
    this.leaseMs = deps.client.timeoutMs + 30_000
    this.runner = new AttemptRunner(deps, options)
    this.releases = new WriteCoalescer(deps.store, undefined, KNOWN_KEYS)
    this.claimDeps = { store: deps.store, registry: deps.registry, nodeId: this.nodeId, leaseMs: this.leaseMs }
    this.lanes = new Lanes<Prepared>(options.concurrency, {
      run: (webhookId, { fresh }) => this.preparedAttempt(webhookId, fresh),
      failed: (err, webhookId, deliveryId) => this.deps.logger.warn({ err, delivery_id: deliveryId, webhook_id: webhookId }, 'delivery attempt failed; it stays scheduled'),
      drained: () => this.scheduler?.poke()
    })
    this.planDeps = {
      lanes: this.lanes,
      leaseMs: this.leaseMs,
      processId: this.nodeId,
      dropped: (d, why) => {
        this.runner.count(why === 'webhook deleted' ? 'webhook_deleted' : 'dropped')
        this.deps.logger.debug({ delivery_id: d.delivery_id, webhook_id: d.webhook_id }, `delivery dropped: ${why}`)
      }
    }
  }

  // ------------------------------------------------------------ intake

  /**
   * Makes a batch of deliveries durable: their webhooks, apps and existing
   * records are read in one round trip (issued together; the Redis client
   * pipelines them). A delivery whose webhook's lane here starts it soon (a
   * free slot, or one round of answers away) is attempted first and made durable by its outcome, or stored as pending
   * if it is still in flight after FIRST_ATTEMPT_WAIT_MS (first-attempt.ts);
   * the others' records, log entries and schedule entries are written in one
   * store batch, and each starts in its lane if it has room. Resolves once
   * every delivery of the batch is durable: the consumer then commits.
   */
  async acceptMany(list: NewDelivery[]): Promise<AcceptResult[]> {
    const { store } = this.deps
    // Overload: the backlog waits on the bus while the lanes here are full and answering (lanes.ts holdForRoom).
    await this.lanes.holdForRoom(list.map((d) => d.webhook_id), HOLD_MS)
    const { results, ops, repairs, starts } = planIntake(this.planDeps, list, await readIntake(store, this.deps.registry, list), Date.now())
    // Replicated: the consumer commits its offsets once this returns.
    const durable = { ...KNOWN_KEYS, replicated: true }
    // First attempts start before the others' writes: their receivers' time overlaps the store's.
    const firsts = starts.filter(({ fresh }) => fresh.first).filter(({ d, fresh }) => this.lanes.submit(d.webhook_id, d.delivery_id, fresh))
    const started = new Set(firsts.map(({ fresh }) => fresh))
    await Promise.all([ops.length > 0 ? store.batch(ops, durable) : undefined, ...repairs.map((entry) => this.repairSchedule(entry))])
    const refused = starts.filter(({ d, fresh }) => (fresh.first ? !started.has(fresh) : !this.lanes.submit(d.webhook_id, d.delivery_id, fresh)))
    if (refused.length > 0) {
      // Closing meanwhile: due now, for the next process (a first attempt that never started is stored whole).
      const due = Date.now()
      const handBack = refused.flatMap(({ d, fresh }) => {
        const entry = dueAt({ webhookId: d.webhook_id, deliveryId: d.delivery_id }, due)
        return fresh.first ? pendingOps(fresh.record, entry) : [entry]
      })
      await store.batch(handBack, durable)
    }
    await untilDurable(
      firsts.map(({ fresh }) => fresh.first as FirstAttempt),
      FIRST_ATTEMPT_WAIT_MS,
      (late) =>
        store.batch(
          late.flatMap((f) => {
            const entry = { webhookId: f.record.webhook_id, deliveryId: f.record.delivery_id }
            return [...pendingOps(f.record, dueAt(entry, f.leaseUntil)), leaseOp(this.nodeId, entry, f.leaseUntil)]
          }),
          durable
        )
    )
    return results
  }

  private async repairSchedule(entry: Scheduled): Promise<void> {
    if ((await scheduledAt(this.deps.store, entry)) === undefined) await this.deps.store.batch([dueAt(entry, Date.now())], { ...KNOWN_KEYS, replicated: true })
  }

  // ------------------------------------------------------------ attempts

  /**
   * A first attempt queued past its lease: from now on another process may
   * take it, so it is claimed like a scheduled one (claims.ts), one delivery.
   */
  private async claimAndAttempt(webhookId: string, deliveryId: string): Promise<void> {
    const [held] = await claimDue(this.claimDeps, [{ webhookId, deliveryId }])
    if (held) await this.claimedAttempt(held)
  }

  /**
   * An attempt of a delivery this process claimed; the claim goes once its outcome is stored,
   * with the claims of the attempts settling in the same turn.
   */
  private async claimedAttempt(p: Prepared): Promise<void> {
    const release = (): Promise<void> => this.releases.write([{ op: 'del', key: WebhookKeys.claim(p.record.delivery_id) }])
    let answered: { written: Promise<void> }
    try {
      answered = await this.runner.attempt(p.record, p.webhook, p.app)
    } catch (err) {
      await release()
      throw err
    }
    return this.afterAnswer(p.record, answered.written, release)
  }

  /**
   * The lane's slot is the receiver's: it frees at the answer, and the outcome's writes go on
   * outside it (a webhook's throughput is its concurrency over the POST's time, not over the POST
   * and the store round trips after it). Until they land, the delivery's schedule entry stays a
   * lease ahead, so no scheduler pass takes it again meanwhile.
   */
  private afterAnswer(record: DeliveryRecord, written: Promise<void>, then?: () => Promise<void>): Promise<void> {
    const stored: Promise<void> = written
      .catch((err: unknown) => this.deps.logger.warn({ err, delivery_id: record.delivery_id, webhook_id: record.webhook_id }, "could not store an attempt's outcome; the delivery stays scheduled"))
      .then(() => then?.())
      .catch((err: unknown) => this.deps.logger.warn({ err, delivery_id: record.delivery_id }, 'could not release a claim; it expires by itself'))
      .finally(() => this.writing.delete(stored))
    this.writing.add(stored)
    return this.writing.size > MAX_WRITING ? stored : Promise.resolve()
  }

  /**
   * An attempt whose record is in hand: the first attempt of a delivery this
   * process has just stored (its schedule entry is already a lease ahead, so
   * no other process touches it before the lease runs out, and no claim or
   * re-read is needed), or one a scheduler pass claimed with its batch.
   * Queued past its lease, a first attempt is claimed like any other; a
   * claimed one is handed back due now with its claim (while the claim is
   * surely still this process's), so the next pass claims it afresh rather
   * than it waiting for the lease to run out.
   */
  private async preparedAttempt(webhookId: string, p: Prepared): Promise<void> {
    const now = Date.now()
    const late = now + this.deps.client.timeoutMs + 5000 > p.leaseUntil
    if (p.claimed && late) {
      // The claim outlives the lease (claims.ts): before the lease ends it is still ours to give back.
      if (now < p.leaseUntil - 1000) {
        await this.releases.write(releaseOps({ webhookId, deliveryId: p.record.delivery_id }, now))
        this.scheduler?.poke()
      }
      return
    }
    if (p.claimed) return this.claimedAttempt(p)
    if (late) return this.claimAndAttempt(webhookId, p.record.delivery_id)
    // The webhook and app were read when the delivery was accepted, moments ago.
    const { written } = await this.runner.attempt(p.record, p.webhook, p.app, p.first)
    return this.afterAnswer(p.record, written)
  }

  // ------------------------------------------------------------ schedule

  /**
   * One scheduler pass: the due deliveries not already queued here, as many as
   * their lanes have room for, claimed together (claims.ts) and queued.
   */
  async runDue(now = Date.now()): Promise<number> {
    if (this.closing) return 0
    if (now - this.lastTrim >= TRIM_EVERY_MS) {
      this.lastTrim = now
      await trimLeases(this.deps.store, this.nodeId, now)
    }
    const room = new Map<string, number>()
    const picked: DueDelivery[] = []
    /** Due entries passed over because their lane was full when this pass planned. */
    let heldBack = 0
    const read = (page: number) => readDue(this.deps.store, now, page, SCHEDULER_PAGE_PER_SHARD)
    const consider = (entries: Scheduled[]): void => {
      for (const parsed of entries) {
        const left = room.get(parsed.webhookId) ?? this.lanes.room(parsed.webhookId)
        // A full lane pokes the scheduler once it has drained by half. Checked first: behind a full
        // lane most of a page is its own backlog (bench/PROFILES.md "Fewer store commands per attempt").
        if (left <= 0) {
          heldBack++
          continue
        }
        if (this.lanes.has(parsed.deliveryId)) continue
        room.set(parsed.webhookId, left - 1)
        picked.push({ webhookId: parsed.webhookId, deliveryId: parsed.deliveryId })
      }
    }
    const due = await read(0)
    consider(due.entries)
    if (due.full && picked.length === 0 && now - this.lastDeepScan >= SCHEDULER_DEEP_EVERY_MS) {
      this.lastDeepScan = now
      for (let page = 1; page < SCHEDULER_DEEP_PAGES && picked.length === 0; page++) {
        const more = await read(page)
        consider(more.entries)
        if (!more.full) break
      }
    }
    const claimed = await claimDue(this.claimDeps, picked)
    let started = 0
    const giveBack: StoreOp[] = []
    const giveBackAt = Date.now()
    for (const c of claimed) {
      if (this.lanes.submit(c.webhookId, c.deliveryId, { ...c, claimed: true })) started++
      else giveBack.push(...releaseOps(c, giveBackAt)) // closing meanwhile
    }
    if (giveBack.length > 0) await this.deps.store.batch(giveBack, KNOWN_KEYS)
    // The lanes it saw are asked again now, not as planned: their attempts ran on while the claims were
    // written, so a lane planned full may have room again. A full one is marked to call for the next
    // pass once it has drained by half (a lane planned full that was not marked drained without a
    // call, and the schedule waited a whole period: bench/PROFILES.md "A scheduler stall").
    let roomLeft = false
    for (const webhookId of room.keys()) if (this.lanes.room(webhookId) > 0) roomLeft = true
    // More is due than this pass took (a full page, or entries passed over for a lane that has room
    // again): the next pass runs now, not a period later. When every lane it saw is full, their
    // drained-by-half calls bring the next pass: a pass per freed slot read the whole batch each time
    // (bench/PROFILES.md "Webhook burst").
    if ((due.full || heldBack > 0) && started > 0 && roomLeft) this.scheduler?.poke()
    return started
  }

  /**
   * A dead process's leased deliveries, due now (leases.ts): called by the survivor that reaps it
   * (services/common/liveness.ts).
   */
  async releaseLeasesOf(deadId: string): Promise<number> {
    const released = await releaseLeasesOf(this.deps.store, deadId)
    if (released > 0) {
      this.deps.logger.info({ process_id: deadId, released }, "a dead process's leased deliveries are due again")
      this.scheduler?.poke()
    }
    return released
  }

  /** The retry scheduler: polls often enough for the shortest step of the schedule. */
  startScheduler(): Worker {
    const steps = this.options.schedule.filter((d) => d > 0)
    const shortest = steps.length > 0 ? Math.min(...steps) : 1000
    const period = Math.min(1000, Math.max(25, Math.floor(shortest / 4)))
    this.scheduler = new PollingWorker('webhooks-retries', period, () => this.runDue(), this.deps.logger)
    return this.scheduler
  }

  /**
   * Makes the webhook's pending deliveries due now (a CRC passed on a webhook
   * that was invalid: its skipped deliveries would otherwise wait for their
   * next step, up to 10 h); returns how many moved (rescheduling.ts).
   */
  async pullForward(webhookId: string, deliveryId?: string): Promise<number> {
    const moved = await pullForward(this.reschedulingDeps(), webhookId, deliveryId)
    if (moved > 0) this.scheduler?.poke()
    return moved
  }

  /** Puts logged deliveries back on the schedule (operator re-send; `deliveryId`: just that one); returns how many. */
  async resend(webhookId: string, filter: { since: number; status?: DeliveryStatus; deliveryId?: string }): Promise<number> {
    const count = await resend(this.reschedulingDeps(), webhookId, filter)
    if (count > 0) this.scheduler?.poke()
    return count
  }

  private reschedulingDeps(): ReschedulingDeps {
    return { store: this.deps.store, deliveryLog: this.deps.deliveryLog, nodeId: this.nodeId, leaseMs: this.leaseMs, retentionMs: this.options.retentionMs }
  }

  /** Stops taking work; queued attempts are handed back to the schedule as due; waits for those in flight. */
  async close(): Promise<void> {
    this.closing = true
    await this.scheduler?.close()
    const now = Date.now()
    // Claimed ones also give their claim back, or no process could take them until it expired.
    const handBack: StoreOp[] = this.lanes
      .stop()
      .flatMap(({ webhookId, deliveryId, fresh }) =>
        fresh.claimed ? releaseOps({ webhookId, deliveryId }, now) : [dueAt({ webhookId, deliveryId }, now)]
      )
    if (handBack.length > 0) await this.deps.store.batch(handBack, KNOWN_KEYS).catch((err: unknown) => this.deps.logger.warn({ err }, 'could not hand queued deliveries back'))
    await this.lanes.idle()
    await Promise.allSettled([...this.writing])
  }
}
