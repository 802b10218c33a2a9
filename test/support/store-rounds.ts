import type { Socket } from 'node:net'
import Redis from 'ioredis'
import type { Store, StoreOp } from '../../services/common/store/types'

/**
 * Counting store round trips, for the tests that promise "one round trip per
 * batch" (the matcher's candidate lookups, the webhooks intake).
 *
 * In memory: `roundCountingStore` wraps a Store the way a pipelining network
 * client behaves. Every call issued in one event-loop turn joins one round;
 * the round is sent (to the wrapped store) and answered on the next turn
 * (setImmediate). Calls issued in one turn share a round; calls that await
 * each other land in separate rounds, so a sequential loop of awaits shows
 * as one round per call.
 *
 * On Redis: `redisWrites` counts the socket writes of a RedisStore's ioredis
 * client (one auto-pipeline is one write) and `commandCalls` reads Redis's
 * own INFO commandstats, so the server confirms how many commands came.
 */

export interface StoreCall {
  method: string
  /** The keys the call names (a batch: the keys of its ops). */
  keys: string[]
  /** A batch's ops. */
  ops?: StoreOp[]
}

export interface RoundCounter {
  readonly store: Store
  /** Every round so far, oldest first. */
  readonly rounds: StoreCall[][]
}

function keysOf(method: string, args: unknown[]): { keys: string[]; ops?: StoreOp[] } {
  const first = args[0]
  if (method === 'batch') {
    const ops = first as StoreOp[]
    return { keys: ops.map((op) => op.key), ops }
  }
  if (Array.isArray(first)) return { keys: first.map(String) }
  if (method === 'del' || method === 'exists') return { keys: args.map(String) }
  return { keys: typeof first === 'string' ? [first] : [] }
}

export function roundCountingStore(inner: Store): RoundCounter {
  const rounds: StoreCall[][] = []
  let open: { calls: StoreCall[]; run: Array<() => void> } | undefined
  const flush = (): void => {
    const round = open
    open = undefined
    for (const run of round?.run ?? []) run()
  }
  const store = new Proxy(inner, {
    get(target, prop, receiver) {
      const value: unknown = Reflect.get(target, prop, receiver)
      if (typeof value !== 'function' || typeof prop !== 'string' || prop === 'close' || prop === 'scanPrefix') {
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value
      }
      return (...args: unknown[]): Promise<unknown> => {
        if (!open) {
          open = { calls: [], run: [] }
          rounds.push(open.calls)
          setImmediate(flush)
        }
        open.calls.push({ method: prop, ...keysOf(prop, args) })
        return new Promise((resolve, reject) => {
          open?.run.push(() => {
            ;(value as (...a: unknown[]) => Promise<unknown>).apply(target, args).then(resolve, reject)
          })
        })
      }
    }
  })
  return { store, rounds }
}

/** Socket writes of the ioredis client under a RedisStore: one auto-pipelined turn is one write. */
export interface WriteCounter {
  /** Each write's RESP text since the last reset. */
  readonly writes: string[]
  reset(): void
  /** Writes carrying `command` (e.g. HGETALL), and how many times it appears in each. */
  carrying(command: string): number[]
  restore(): void
}

export function redisWrites(store: Store): WriteCounter {
  const client = (store as unknown as { redis: { stream: Socket } }).redis
  const stream = client.stream
  const original = stream.write.bind(stream) as (...a: unknown[]) => boolean
  const writes: string[] = []
  ;(stream as unknown as { write: (...a: unknown[]) => boolean }).write = (...args: unknown[]) => {
    const data = args[0]
    writes.push(Buffer.isBuffer(data) ? data.toString('latin1') : String(data))
    return original(...args)
  }
  const count = (text: string, command: string): number => text.split(`\r\n${command}\r\n`).length - 1
  return {
    writes,
    reset: () => void writes.splice(0),
    carrying: (command) => writes.map((w) => count(w, command.toUpperCase()) + count(w, command.toLowerCase())).filter((n) => n > 0),
    restore: () => {
      ;(stream as unknown as { write: unknown }).write = original
    }
  }
}

/** `calls` of each command in Redis's INFO commandstats (read on a connection of its own). */
export async function commandCalls(url: string): Promise<Map<string, number>> {
  const admin = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 })
  try {
    await admin.connect()
    const text = await admin.info('commandstats')
    const out = new Map<string, number>()
    for (const m of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) out.set(m[1] as string, Number(m[2]))
    return out
  } finally {
    admin.disconnect()
  }
}

/** Increase of each command's calls between two commandstats readings. */
export function callsSince(before: Map<string, number>, after: Map<string, number>): Map<string, number> {
  const out = new Map<string, number>()
  for (const [cmd, n] of after) if (n - (before.get(cmd) ?? 0) > 0) out.set(cmd, n - (before.get(cmd) ?? 0))
  return out
}
