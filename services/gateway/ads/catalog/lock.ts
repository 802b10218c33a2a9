import { AdsError } from '../../../common/errors'
import { newUuid } from '../../../common/ids'
import type { Store } from '../../../common/store/types'

/**
 * A short exclusive lease in the store, so read-modify-write sequences on one
 * catalog or one audience stay consistent across gateway processes. The
 * lease expires by itself if its holder dies; a caller that cannot get it
 * within `waitMs` gets 423 LOCK_ACQUISITION_TIMEOUT (the public platform's
 * code for the same situation) and may retry.
 */
export async function withLock<T>(store: Store, key: string, fn: () => Promise<T>, options: { leaseMs?: number; waitMs?: number } = {}): Promise<T> {
  const leaseMs = options.leaseMs ?? 30_000
  const deadline = Date.now() + (options.waitMs ?? 10_000)
  const token = newUuid()
  let delay = 5
  while (!(await store.setIfAbsent(key, token, leaseMs))) {
    if (Date.now() > deadline) {
      throw new AdsError(423, { code: 'LOCK_ACQUISITION_TIMEOUT', message: 'The resource is being changed by another request; retry shortly' })
    }
    await new Promise((r) => setTimeout(r, delay))
    delay = Math.min(delay * 2, 100)
  }
  try {
    return await fn()
  } finally {
    // Only release our own lease: an expired one may have been taken over.
    if ((await store.get(key)) === token) await store.del(key)
  }
}
