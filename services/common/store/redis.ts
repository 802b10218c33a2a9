// Placeholder replaced by the Redis implementation (ioredis) in this same change set.
import type { Logger } from 'pino'
import type { Store } from './types'
export const RedisStore = {
  async connect(_url: string, _log: Logger): Promise<Store> {
    throw new Error('RedisStore is being written')
  }
}
