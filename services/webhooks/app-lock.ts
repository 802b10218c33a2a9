import { newUuid } from '../common/ids'
import type { Store } from '../common/store/types'

/**
 * A short lock across processes, for the limits that are counted and then
 * acted on (webhooks per app, subscriptions per app): without it two
 * processes (or two requests of one) both read "one below the limit" and
 * both insert. The lock is a key set only when absent, with a TTL so a
 * process that dies holding it cannot block the app for long. It is held
 * around the count and the write only (a few store round trips), never
 * around network calls such as the CRC.
 */

export class LockBusyError extends Error {
  constructor(readonly key: string) {
    super(`The lock ${key} stayed taken; try again.`)
    this.name = 'LockBusyError'
  }
}

export interface LockOptions {
  /** Lifetime of the key: far longer than the critical section, short enough to recover from a crash. */
  ttlMs?: number
  /** How long to wait for another holder before giving up with LockBusyError. */
  waitMs?: number
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** Runs `fn` holding the lock `key`. */
export async function withLock<T>(store: Store, key: string, fn: () => Promise<T>, options: LockOptions = {}): Promise<T> {
  const ttlMs = options.ttlMs ?? 10_000
  const deadline = Date.now() + (options.waitMs ?? 5_000)
  const token = newUuid()
  // Back-off from 2 ms to 50 ms: holders keep the lock for a few milliseconds.
  for (let pause = 2; !(await store.setIfAbsent(key, token, ttlMs)); pause = Math.min(pause * 2, 50)) {
    if (Date.now() >= deadline) throw new LockBusyError(key)
    await sleep(pause)
  }
  try {
    return await fn()
  } finally {
    // Only our own lock: one that outlived its TTL may belong to someone else by now.
    if ((await store.get(key)) === token) await store.del(key)
  }
}
