import type { Store } from '../common/store/types'
import type { CrcCheck, CrcTrigger } from './crc'
import { WebhookKeys } from './keys'

/**
 * The history of a webhook's CRC checks, from the one that registered it
 * (and the one of each URL change, passing or not), newest last: when, why,
 * the result, the answer's status code and the time it took. The console shows it; the last
 * HISTORY_KEEP checks are kept.
 */

export interface CrcHistoryEntry {
  at: string
  trigger: CrcTrigger | 'console' | 'edit'
  result: CrcCheck['result']
  reason?: string
  status?: number
  ms: number
}

const HISTORY_KEEP = 50

export class CrcHistory {
  constructor(private readonly store: Store) {}

  async record(webhookId: string, trigger: CrcHistoryEntry['trigger'], check: CrcCheck, now = Date.now()): Promise<void> {
    const entry: CrcHistoryEntry = { at: new Date(now).toISOString(), trigger, result: check.result, ms: check.ms }
    if (check.result !== 'pass') entry.reason = check.reason
    if (check.status !== undefined) entry.status = check.status
    const key = WebhookKeys.crcHistory(webhookId)
    await this.store.zadd(key, now, JSON.stringify(entry))
    const size = await this.store.zcard(key)
    if (size > HISTORY_KEEP) {
      const old = await this.store.zrange(key, 0, size - HISTORY_KEEP - 1)
      if (old.length > 0) await this.store.zrem(key, ...old.map((m) => m.member))
    }
  }

  /** Newest first. */
  async list(webhookId: string, limit = HISTORY_KEEP): Promise<CrcHistoryEntry[]> {
    const members = await this.store.zrange(WebhookKeys.crcHistory(webhookId), 0, limit - 1, { reverse: true })
    return members.map((m) => JSON.parse(m.member) as CrcHistoryEntry)
  }
}
