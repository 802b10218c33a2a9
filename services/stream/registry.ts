import type { Store } from '../common/store/types'

/**
 * The connection registry shared by every stream node, enforcing
 * STREAM_CONNECTIONS_PER_APP across nodes:
 *
 *   stream:conns:{app_id}   sorted set, member `{node_id}:{connection_id}`,
 *                           score = the entry's expiry (ms since the epoch)
 *
 * A node renews its entries every third of STREAM_REGISTRY_TTL; the entries of
 * a node that died stop counting once they expire, and are swept by the next
 * connection attempt of that app.
 */

export const StreamKeys = {
  conns: (appId: string) => `stream:conns:${appId}`
}

export interface Lease {
  appId: string
  member: string
}

export class ConnectionRegistry {
  constructor(
    private readonly store: Store,
    private readonly nodeId: string,
    private readonly limitPerApp: number,
    private readonly ttlMs: number
  ) {}

  member(connectionId: string): string {
    return `${this.nodeId}:${connectionId}`
  }

  /**
   * Takes a place for a new connection; false when the app is at its limit.
   * The place is added before counting, so two concurrent attempts for the
   * last place can both lose but never both win.
   */
  async acquire(appId: string, connectionId: string, now = Date.now()): Promise<Lease | undefined> {
    const key = StreamKeys.conns(appId)
    await this.sweep(key, now)
    const member = this.member(connectionId)
    await this.store.batch([
      { op: 'zadd', key, score: now + this.ttlMs, member },
      { op: 'pexpire', key, ttlMs: this.ttlMs * 2 }
    ])
    // Expired entries were just swept, so the cardinality is the live count (an entry expiring meanwhile still counts: the safe side).
    const live = await this.store.zcard(key)
    if (live > this.limitPerApp) {
      await this.store.zrem(key, member)
      return undefined
    }
    return { appId, member }
  }

  async release(lease: Lease): Promise<void> {
    await this.store.zrem(StreamKeys.conns(lease.appId), lease.member)
  }

  /** Extends the expiry of this node's live connections. */
  async renew(leases: Lease[], now = Date.now()): Promise<void> {
    if (leases.length === 0) return
    const keys = new Set<string>()
    const ops = leases.map((l) => {
      const key = StreamKeys.conns(l.appId)
      keys.add(key)
      return { op: 'zadd' as const, key, score: now + this.ttlMs, member: l.member }
    })
    await this.store.batch([...ops, ...[...keys].map((key) => ({ op: 'pexpire' as const, key, ttlMs: this.ttlMs * 2 }))])
  }

  /** Live connections of `appId` across every node. */
  async count(appId: string, now = Date.now()): Promise<number> {
    return (await this.store.zrangeByScore(StreamKeys.conns(appId), now, Number.MAX_SAFE_INTEGER)).length
  }

  private async sweep(key: string, now: number): Promise<void> {
    const expired = await this.store.zrangeByScore(key, 0, now - 1)
    if (expired.length > 0) await this.store.zrem(key, ...expired.map((m) => m.member))
  }
}
