import type { Store } from './types'

type StringOps = Pick<Store, 'get' | 'mget' | 'set' | 'setIfAbsent'>

/**
 * The JSON helpers of the Store contract, written once over the string
 * operations every implementation provides.
 */
export abstract class JsonValues implements Pick<Store, 'getJson' | 'mgetJson' | 'setJson' | 'setJsonIfAbsent'> {
  abstract get(key: string): ReturnType<StringOps['get']>
  abstract mget(keys: string[]): ReturnType<StringOps['mget']>
  abstract set(key: string, value: string, ttlMs?: number): ReturnType<StringOps['set']>
  abstract setIfAbsent(key: string, value: string, ttlMs?: number): ReturnType<StringOps['setIfAbsent']>

  async getJson<T>(key: string): Promise<T | undefined> {
    return parse<T>(await this.get(key))
  }

  async mgetJson<T>(keys: string[]): Promise<Array<T | undefined>> {
    return (await this.mget(keys)).map((raw) => parse<T>(raw))
  }

  async setJson(key: string, value: unknown, ttlMs?: number): Promise<void> {
    await this.set(key, JSON.stringify(value), ttlMs)
  }

  async setJsonIfAbsent(key: string, value: unknown, ttlMs?: number): Promise<boolean> {
    return this.setIfAbsent(key, JSON.stringify(value), ttlMs)
  }
}

function parse<T>(raw: string | undefined): T | undefined {
  return raw === undefined ? undefined : (JSON.parse(raw) as T)
}
