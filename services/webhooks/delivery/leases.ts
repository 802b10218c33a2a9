import type { Store, StoreOp } from '../../common/store/types'
import type { DeliveryRecord } from '../delivery-log'
import { WebhookKeys } from '../keys'
import { dueAt, KNOWN_KEYS, memberOf, parseMember, scheduledAt, type Scheduled } from './schedule'

/**
 * What a webhooks process holds leased ahead on the retry schedule, so that
 * when it dies the deliveries are due again as soon as its death is known
 * (services/common/liveness.ts) rather than when their lease runs out.
 *
 * A lease is written beside the schedule entry it pushes ahead, in the same
 * batch: one member per delivery in the process's own sorted set, scored
 * with the lease's end (deliveries it queued at intake, first attempts stored
 * while in flight, claims of a scheduler pass). Nothing removes a lease when
 * its attempt ends; the process trims those that ran out, and a survivor
 * releases only a delivery that still shows every sign of being held by the
 * dead process: its record pending, its schedule entry exactly at the
 * lease's end (an outcome moves it, or removes it), and no claim but the dead
 * process's. An entry leased in the future is due for nobody, so no other
 * process can claim it while the survivor releases it.
 */

/** Leases ending within this much of now are left to run out: the scheduler takes them anyway, racing it is not worth it. */
const NEAR_END_MS = 2000
/** Leases released per round of reads. */
const CHUNK = 500

export function leaseOp(processId: string, d: Scheduled, leaseUntil: number): StoreOp {
  return { op: 'zadd', key: WebhookKeys.leases(processId), score: leaseUntil, member: memberOf(d) }
}

/** Drops this process's leases that ran out (called every few seconds). */
export async function trimLeases(store: Store, processId: string, now = Date.now()): Promise<void> {
  await store.zpopByScore(WebhookKeys.leases(processId), now, 100_000)
}

/** Makes the deliveries a dead process held due now; returns how many. */
export async function releaseLeasesOf(store: Store, deadId: string, now = Date.now()): Promise<number> {
  const key = WebhookKeys.leases(deadId)
  const leases = await store.zrangeByScore(key, now + NEAR_END_MS, Number.MAX_SAFE_INTEGER)
  let released = 0
  for (let i = 0; i < leases.length; i += CHUNK) {
    const chunk = leases.slice(i, i + CHUNK).flatMap((l) => {
      const d = parseMember(l.member)
      return d ? [{ d, leaseUntil: l.score }] : []
    })
    const [records, claims, scheduled] = await Promise.all([
      store.mgetJson<DeliveryRecord>(chunk.map(({ d }) => WebhookKeys.delivery(d.deliveryId))),
      store.mget(chunk.map(({ d }) => WebhookKeys.claim(d.deliveryId))),
      Promise.all(chunk.map(({ d }) => scheduledAt(store, d)))
    ])
    const held = chunk.filter(({ leaseUntil }, j) => {
      const claim = claims[j]
      return records[j]?.status === 'pending' && scheduled[j] === leaseUntil && (claim === undefined || claim === deadId)
    })
    const ops = held.flatMap(({ d }): StoreOp[] => [dueAt(d, now), { op: 'del', key: WebhookKeys.claim(d.deliveryId) }])
    if (ops.length > 0) await store.batch(ops, KNOWN_KEYS)
    released += held.length
  }
  await store.del(key)
  return released
}
