import type { Store, StoreOp } from '../../../common/store/types'
import { newShortId } from '../../../common/ids'
import { withLock } from '../catalog/lock'

/**
 * Real membership of a custom audience or a do-not-reach list.
 *
 * A member is one person known by one or more identifiers (`email:<sha256>`,
 * `handle:<sha256>`, `partner_user_id:<id>`...). An Update naming several
 * identifiers of one user links them to one member (and merges members that
 * turn out to be the same person); a Delete removes every member any of its
 * identifiers points to. Each member has an effective window: it counts from
 * `effective_at` until `expires_at`, after which it is purged. Every upload is
 * applied in one atomic store batch under a lease, so it lands entirely or
 * not at all. Keys (`{kind}` is `custom_audience` or `do_not_reach_list`):
 *
 *   ads:members:{kind}:{list}:ident:{identifier}  member id
 *   ads:members:{kind}:{list}:rec:{member}        {ids, effective_at, expires_at} (ms)
 *   ads:members:{kind}:{list}:expiry              zset member by expires_at
 *   ads:members:{kind}:{list}:pending             zset member by effective_at (future ones only)
 *   ads:members:{kind}:{list}:count               number of members (incl. pending)
 *   ads:members:{kind}:{list}:uploads             number of uploads applied
 */

export type MemberListKind = 'custom_audience' | 'do_not_reach_list'

export interface MemberRecord {
  ids: string[]
  effective_at: number
  expires_at: number
}

export interface MembershipOperation {
  type: 'Update' | 'Delete'
  /** One entry per user object: its identifiers as `type:value`. */
  users: string[][]
  effectiveAt: number
  expiresAt: number
}

export interface MembershipSummary {
  /** Members in effect now. */
  size: number
  /** Uploads applied so far (0: the list has never been filled). */
  uploads: number
}

/** The list before and after an upload, as summary() reports it. */
export interface UploadSummaries {
  before: MembershipSummary
  after: MembershipSummary
}

/**
 * Commits the writes of an upload (one atomic batch): the caller adds its
 * entity change, computed from the summaries, to the same batch.
 */
export type MembershipCommit = (ops: StoreOp[], summaries: UploadSummaries) => Promise<void>

const PURGE_BATCH = 1000

export class Membership {
  private readonly base: string
  constructor(
    private readonly store: Store,
    kind: MemberListKind,
    listId: string
  ) {
    this.base = `ads:members:${kind}:${listId}:`
  }

  private ident(id: string): string {
    return `${this.base}ident:${id}`
  }

  private rec(member: string): string {
    return `${this.base}rec:${member}`
  }

  private get expiry(): string {
    return `${this.base}expiry`
  }

  private get pending(): string {
    return `${this.base}pending`
  }

  private get count(): string {
    return `${this.base}count`
  }

  private get uploads(): string {
    return `${this.base}uploads`
  }

  private get lock(): string {
    return `${this.base}lock`
  }

  /**
   * Applies every operation atomically. Returns, per operation, the number of
   * its user objects whose planned state is really in the store afterwards
   * (read back under the lease): the upload's success counts come from this,
   * not from the input, so a write that did not fully land shows as a mismatch.
   * `commit` writes the batch (default: the store's batch), knowing the
   * list's summary before and after it.
   */
  async apply(operations: MembershipOperation[], now = Date.now(), commit?: MembershipCommit): Promise<number[]> {
    return withLock(this.store, this.lock, async () => {
      await this.purgeExpired(now)
      const before = await this.currentSummary(now)
      const identifiers = [...new Set(operations.flatMap((o) => o.users.flat()))]
      const found = await this.store.mget(identifiers.map((i) => this.ident(i)))
      const identMap = new Map<string, string | null>()
      identifiers.forEach((id, n) => identMap.set(id, found[n] ?? null))
      const knownMembers = [...new Set(found.filter((m): m is string => m !== undefined))]
      const loaded = await this.store.mgetJson<MemberRecord>(knownMembers.map((m) => this.rec(m)))
      const records = new Map<string, MemberRecord | null>()
      knownMembers.forEach((m, n) => records.set(m, loaded[n] ?? null))
      const original = new Set(knownMembers.filter((m) => records.get(m)))
      const wasPending = new Set(knownMembers.filter((m) => (records.get(m)?.effective_at ?? 0) > now))
      const touchedIdents = new Set<string>()

      const removeMember = (member: string): void => {
        const r = records.get(member)
        if (!r) return
        for (const id of r.ids) {
          identMap.set(id, null)
          touchedIdents.add(id)
        }
        records.set(member, null)
      }

      for (const op of operations) {
        for (const user of op.users) {
          const members = [...new Set(user.map((id) => identMap.get(id)).filter((m): m is string => typeof m === 'string' && records.get(m) != null))]
          if (op.type === 'Delete') {
            for (const m of members) removeMember(m)
            continue
          }
          const target = members[0] ?? newShortId(12)
          const merged = new Set<string>(records.get(target)?.ids ?? [])
          for (const m of members.slice(1)) {
            for (const id of records.get(m)?.ids ?? []) merged.add(id)
            records.set(m, null)
          }
          for (const id of user) merged.add(id)
          for (const id of merged) {
            identMap.set(id, target)
            touchedIdents.add(id)
          }
          records.set(target, { ids: [...merged].sort(), effective_at: op.effectiveAt, expires_at: op.expiresAt })
        }
      }

      const ops: StoreOp[] = []
      for (const id of touchedIdents) {
        const m = identMap.get(id)
        ops.push(m ? { op: 'set', key: this.ident(id), value: m } : { op: 'del', key: this.ident(id) })
      }
      // Members (delta) and members not yet in effect (pendingDelta) gained or lost by this upload.
      let delta = 0
      let pendingDelta = 0
      for (const [member, r] of records) {
        if (r) {
          if (!original.has(member)) delta++
          ops.push({ op: 'set', key: this.rec(member), value: JSON.stringify(r) })
          ops.push({ op: 'zadd', key: this.expiry, score: r.expires_at, member })
          if (r.effective_at > now) {
            ops.push({ op: 'zadd', key: this.pending, score: r.effective_at, member })
            if (!wasPending.has(member)) pendingDelta++
          } else if (wasPending.has(member)) {
            ops.push({ op: 'zrem', key: this.pending, members: [member] })
            pendingDelta--
          }
        } else if (original.has(member)) {
          delta--
          ops.push({ op: 'del', key: this.rec(member) })
          ops.push({ op: 'zrem', key: this.expiry, members: [member] })
          if (wasPending.has(member)) {
            ops.push({ op: 'zrem', key: this.pending, members: [member] })
            pendingDelta--
          }
        }
      }
      if (delta !== 0) ops.push({ op: 'incr', key: this.count, by: delta })
      ops.push({ op: 'incr', key: this.uploads, by: 1 })
      const after: MembershipSummary = { size: Math.max(0, before.counted + delta - (before.pending + pendingDelta)), uploads: before.uploads + 1 }
      const summaries = { before: { size: before.size, uploads: before.uploads }, after }
      await (commit ? commit(ops, summaries) : this.store.batch(ops))
      return this.appliedCounts(operations, identMap, records)
    })
  }

  /**
   * Per operation, how many of its users the store now holds as planned:
   * each of their identifiers belongs to the planned live member (or, after
   * a Delete, to no live member), reading identifiers and records back.
   */
  private async appliedCounts(operations: MembershipOperation[], identMap: Map<string, string | null>, records: Map<string, MemberRecord | null>): Promise<number[]> {
    const identifiers = [...identMap.keys()]
    const stored = await this.store.mget(identifiers.map((i) => this.ident(i)))
    const storedMember = new Map(identifiers.map((id, n) => [id, stored[n] ?? null]))
    const members = [...new Set([...identMap.values(), ...storedMember.values()].filter((m): m is string => m !== null))]
    const recs = await this.store.mget(members.map((m) => this.rec(m)))
    const hasRecord = new Set(members.filter((_, n) => recs[n] !== undefined))
    const plannedLive = (id: string): string | null => {
      const m = identMap.get(id) ?? null
      return m !== null && records.get(m) ? m : null
    }
    const storedLive = (id: string): string | null => {
      const m = storedMember.get(id) ?? null
      return m !== null && hasRecord.has(m) ? m : null
    }
    return operations.map((op) => op.users.filter((user) => user.every((id) => plannedLive(id) === storedLive(id))).length)
  }

  /** Removes members whose expires_at passed. */
  private async purgeExpired(now: number): Promise<void> {
    for (;;) {
      const expired = await this.store.zpopByScore(this.expiry, now, PURGE_BATCH)
      if (expired.length === 0) return
      const recs = await this.store.mgetJson<MemberRecord>(expired.map((e) => this.rec(e.member)))
      const ops: StoreOp[] = []
      let removed = 0
      expired.forEach((e, n) => {
        const r = recs[n]
        if (!r) return
        removed++
        for (const id of r.ids) ops.push({ op: 'del', key: this.ident(id) })
        ops.push({ op: 'del', key: this.rec(e.member) })
        ops.push({ op: 'zrem', key: this.pending, members: [e.member] })
      })
      if (removed > 0) ops.push({ op: 'incr', key: this.count, by: -removed })
      if (ops.length > 0) await this.store.batch(ops)
      if (expired.length < PURGE_BATCH) return
    }
  }

  /** Members in effect now (after purging expired ones) and uploads applied. */
  async summary(now = Date.now()): Promise<MembershipSummary> {
    const uploads = Number((await this.store.get(this.uploads)) ?? 0)
    if (uploads === 0) return { size: 0, uploads }
    // Reads stay lock-free unless someone's expires_at has passed.
    const due = await this.store.zrangeByScore(this.expiry, 0, now, { limit: 1 })
    if (due.length > 0) await withLock(this.store, this.lock, () => this.purgeExpired(now))
    const { size } = await this.currentSummary(now)
    return { size, uploads }
  }

  /**
   * The summary with its parts: members counted (incl. pending) and members
   * not yet in effect. Expired members must have been purged.
   */
  private async currentSummary(now: number): Promise<MembershipSummary & { counted: number; pending: number }> {
    // Members whose effective_at has come no longer wait.
    while ((await this.store.zpopByScore(this.pending, now, PURGE_BATCH)).length === PURGE_BATCH) {
      // keep popping until every member now in effect has left the pending set
    }
    const [uploads, count, pending] = await Promise.all([this.store.get(this.uploads), this.store.get(this.count), this.store.zcard(this.pending)])
    const counted = Number(count ?? 0)
    return { size: Math.max(0, counted - pending), uploads: Number(uploads ?? 0), counted, pending }
  }

  /** Whether an identifier belongs to a member in effect now. */
  async contains(identifier: string, now = Date.now()): Promise<boolean> {
    const member = await this.store.get(this.ident(identifier))
    if (!member) return false
    const r = await this.store.getJson<MemberRecord>(this.rec(member))
    return !!r && r.effective_at <= now && r.expires_at > now
  }

  /** Every member in effect now, with its identifiers. */
  async members(now = Date.now()): Promise<Array<{ id: string; record: MemberRecord }>> {
    const prefix = `${this.base}rec:`
    const keys: string[] = []
    for await (const key of this.store.scanPrefix(prefix)) keys.push(key)
    const records = await this.store.mgetJson<MemberRecord>(keys)
    const out: Array<{ id: string; record: MemberRecord }> = []
    keys.forEach((key, i) => {
      const r = records[i]
      if (r && r.effective_at <= now && r.expires_at > now) out.push({ id: key.slice(prefix.length), record: r })
    })
    return out.sort((a, b) => a.id.localeCompare(b.id))
  }

  /** Drops every key of the list (used when its owner is permanently removed). */
  async destroy(): Promise<void> {
    const keys: string[] = []
    for await (const key of this.store.scanPrefix(this.base)) keys.push(key)
    if (keys.length > 0) await this.store.del(...keys)
  }
}
