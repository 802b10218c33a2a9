import type { Test } from 'tap'
import type { Bus, BusMessage } from '../../services/common/bus/types'
import { TOPICS } from '../../services/common/bus/types'
import type { Store } from '../../services/common/store/types'
import type { EntityChange } from '../../services/gateway/ads/entities'
import { OUTBOX_PARTITIONS, OutboxKeys } from '../../services/gateway/outbox'

/**
 * Entity-change helpers shared by the tests of the writers that commit
 * their changes through the gateway outbox: collecting the changes from a
 * bus, checking that they chain (nothing lost in between), and buses and
 * stores that fail in the ways a broker outage or a crash would.
 */

/** Collects every entity change from the bus with a consumer group of its own. */
export async function collectChanges(t: Test, bus: Bus, group: string): Promise<EntityChange[]> {
  const seen: EntityChange[] = []
  const consumer = await bus.subscribe({ groupId: group, topics: [TOPICS.adsEntityChanges], handler: async (m: BusMessage) => void seen.push(m.value as EntityChange) })
  t.teardown(() => consumer.close())
  return seen
}

/**
 * Each change's old values are the previous change's snapshot, and the
 * previous snapshot with the diff applied is the new snapshot: no change of
 * the entity was lost or reordered in between.
 */
export function checkChain(t: Test, changes: EntityChange[]): void {
  for (let i = 1; i < changes.length; i++) {
    const prev = (changes[i - 1] as EntityChange).entity_data
    const cur = changes[i] as EntityChange
    for (const [field, diff] of Object.entries(cur.changes)) {
      if (JSON.stringify(diff.old) !== JSON.stringify(prev[field] ?? null)) {
        t.fail(`change ${i}: ${field}.old is ${JSON.stringify(diff.old)}, the previous snapshot has ${JSON.stringify(prev[field])}`)
        return
      }
    }
    const { updated_at: _a, ...was } = prev
    const { updated_at: _b, ...now } = cur.entity_data
    const applied = { ...was, ...Object.fromEntries(Object.entries(cur.changes).map(([k, d]) => [k, d.new])) }
    const normal = (o: Record<string, unknown>): string => JSON.stringify(Object.entries(o).filter(([, v]) => v !== null && v !== undefined).sort(([a], [b]) => (a < b ? -1 : 1)))
    if (normal(applied) !== normal(now)) {
      t.fail(`change ${i}: the previous snapshot plus the diff is not the new snapshot`)
      return
    }
  }
  t.pass(`${changes.length} changes chain: every diff starts from the previous snapshot`)
}

/** Outbox records committed and not yet published. */
export async function outboxDepth(store: Store): Promise<number> {
  let depth = 0
  for (let p = 0; p < OUTBOX_PARTITIONS; p++) depth += await store.zcard(OutboxKeys.queue(p))
  return depth
}

/**
 * A bus whose publishes fail while `down` (an unreachable broker, or a
 * process that dies before publishing); subscriptions go to the real bus.
 */
export function switchableBus(bus: Bus): Bus & { down: boolean } {
  const refuse = async (): Promise<never> => {
    throw new Error('broker unreachable')
  }
  const out = {
    down: true,
    get kind() {
      return bus.kind
    },
    publish: (...args: Parameters<Bus['publish']>) => (out.down ? refuse() : bus.publish(...args)),
    publishMany: (...args: Parameters<Bus['publishMany']>) => (out.down ? refuse() : bus.publishMany(...args)),
    subscribe: (options: Parameters<Bus['subscribe']>[0]) => bus.subscribe(options),
    close: async () => undefined
  }
  return out
}

/**
 * A store whose atomic batches fail while they carry an outbox record and
 * `failing` is set: the commit of an entity change fails as a crash or a
 * lost connection at that moment would. Everything else reaches the store.
 */
export function outboxFailingStore(store: Store): Store & { failing: boolean } {
  const state = { failing: true }
  const carriesOutbox = (ops: Parameters<Store['batch']>[0]): boolean => ops.some((op) => op.key.startsWith('ads:outbox:') && op.op === 'zadd')
  return new Proxy(store, {
    get(target, prop, receiver) {
      if (prop === 'failing') return state.failing
      if (prop === 'close') return async () => undefined
      if (prop === 'batch') {
        return async (ops: Parameters<Store['batch']>[0]) => {
          if (state.failing && carriesOutbox(ops)) throw new Error('store connection lost during the commit')
          return target.batch(ops)
        }
      }
      const v = Reflect.get(target, prop, receiver) as unknown
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v
    },
    set(_target, prop, value) {
      if (prop !== 'failing') return false
      state.failing = value as boolean
      return true
    }
  }) as Store & { failing: boolean }
}
