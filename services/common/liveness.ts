import type { Logger } from 'pino'
import { newUuid } from './ids'
import type { Store } from './store/types'

/**
 * Which processes are alive, and what happens to the work of one that died
 * (docs/operations.md "Recovery").
 *
 * Each process beats a key in the store every `beatMs` that expires after
 * `ttlMs`; a process whose key is gone is dead. The first survivor to notice
 * takes the reap lock and runs every reaper registered in its process with
 * what the dead one noted about itself (its Kafka group memberships, ...):
 * the Kafka bus evicts its members from their groups, so the group moves
 * their partitions at once instead of after a whole session timeout; the
 * webhooks engine makes the deliveries it had leased due again, instead of
 * leaving them until their lease runs out. Once every reaper succeeded the
 * dead process is forgotten; a reaper that failed is tried again at a later
 * beat (the lock expires).
 *
 * A process stalled longer than the TTL (a machine swapping, a debugger) is
 * taken for dead: its consumers rejoin their groups when it wakes up and its
 * leased deliveries may be attempted twice, the at-least-once that any crash
 * already gives. The TTL is LIVENESS_TTL (config.ts).
 */

export const LivenessKeys = {
  processes: 'liveness:processes',
  alive: (id: string) => `liveness:alive:${id}`,
  notes: (id: string) => `liveness:notes:${id}`,
  /** hash: reaper name -> 1 once it ran for the dead process; `since` -> when it was first found dead */
  reaped: (id: string) => `liveness:reaped:${id}`,
  reaping: (id: string, reaper: string) => `liveness:reaping:${id}:${reaper}`
}

/** Called with a dead process's id and its notes. */
export type Reaper = (deadId: string, notes: Record<string, string>) => Promise<void>

export interface LivenessOptions {
  beatMs: number
  ttlMs: number
}

/** How long a survivor holds a dead process's reap lock: its reaper's time, at most. */
const REAP_LOCK_MS = 60_000
/**
 * Reapers differ by service (only a webhooks process releases webhook leases), so each runs under
 * its own lock wherever it is registered; a dead process is forgotten this long after it was first
 * found dead, when every kind of survivor has had its beats to reap it.
 */
const FORGET_AFTER_MS = 60_000

export class Liveness {
  readonly id = newUuid()
  private readonly reapers = new Map<string, Reaper>()
  private timer: NodeJS.Timeout | undefined
  private running: Promise<void> = Promise.resolve()
  private started = false
  private closed = false

  constructor(
    private readonly store: Store,
    private readonly log: Logger,
    readonly options: LivenessOptions
  ) {}

  /** Runs `reap` for each dead process this one reaps (one reaper per name). */
  addReaper(name: string, reap: Reaper): void {
    this.reapers.set(name, reap)
  }

  /** Something survivors need to know if this process dies (written at once). */
  async note(field: string, value: string): Promise<void> {
    await this.store.hset(LivenessKeys.notes(this.id), { [field]: value })
  }

  /** Announces this process and starts beating (idempotent). */
  async start(): Promise<void> {
    if (this.started || this.closed) return
    this.started = true
    await this.beatOnce()
    await this.store.sadd(LivenessKeys.processes, this.id)
    this.schedule()
  }

  private schedule(): void {
    if (this.closed) return
    this.timer = setTimeout(() => {
      this.running = this.beat().finally(() => this.schedule())
    }, this.options.beatMs)
    this.timer.unref()
  }

  private async beatOnce(): Promise<void> {
    await this.store.set(LivenessKeys.alive(this.id), String(Date.now()), this.options.ttlMs)
  }

  private async beat(): Promise<void> {
    try {
      await this.beatOnce()
      await this.reapDead()
    } catch (err) {
      this.log.warn({ err }, 'liveness beat failed')
    }
  }

  /** One look for dead processes; runs each of this process's reapers whose lock it wins. Returns the ids it reaped. */
  async reapDead(now = Date.now()): Promise<string[]> {
    const ids = (await this.store.smembers(LivenessKeys.processes)).filter((id) => id !== this.id)
    if (ids.length === 0) return []
    const beats = await this.store.mget(ids.map((id) => LivenessKeys.alive(id)))
    const dead = ids.filter((_, i) => beats[i] === undefined)
    const reaped: string[] = []
    for (const id of dead) {
      if (this.closed) break
      const done = await this.store.hgetall(LivenessKeys.reaped(id))
      const since = Number(done.since ?? 0)
      if (since === 0) await this.store.hset(LivenessKeys.reaped(id), { since: String(now) })
      else if (now - since > FORGET_AFTER_MS) {
        await this.store.del(LivenessKeys.notes(id), LivenessKeys.reaped(id))
        await this.store.srem(LivenessKeys.processes, id)
        continue
      }
      if (await this.reap(id, done)) reaped.push(id)
    }
    return reaped
  }

  /** Runs the reapers not yet run for `id` whose lock this process wins; true when it ran one. */
  private async reap(id: string, done: Record<string, string>): Promise<boolean> {
    let ran = false
    let notes: Record<string, string> | undefined
    for (const [name, reap] of this.reapers) {
      if (done[name] !== undefined) continue
      if (!(await this.store.setIfAbsent(LivenessKeys.reaping(id, name), this.id, REAP_LOCK_MS))) continue
      notes ??= await this.store.hgetall(LivenessKeys.notes(id))
      this.log.info({ process_id: id, reaper: name, notes: Object.keys(notes) }, 'a process stopped beating: releasing what it held')
      try {
        await reap(id, notes)
        await this.store.hset(LivenessKeys.reaped(id), { [name]: '1' })
        ran = true
      } catch (err) {
        // The lock goes, so this or another survivor tries again at a later beat.
        await this.store.del(LivenessKeys.reaping(id, name))
        this.log.warn({ err, process_id: id, reaper: name }, 'could not release what a dead process held; tried again later')
      }
    }
    return ran
  }

  /**
   * Stops beating. Its key is removed, so survivors reap it at their next beat: a graceful exit
   * left its groups and handed its work back already, and what is left to release is released.
   */
  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    clearTimeout(this.timer)
    await this.running
    if (this.started) await this.store.del(LivenessKeys.alive(this.id)).catch(() => undefined)
  }
}
