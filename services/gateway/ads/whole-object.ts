import type { FastifyRequest } from 'fastify'
import { Ads } from '../../common/errors'
import { parseIsoTime } from '../../common/ads/times'

/**
 * Whole-object updates, as the official ads SDKs send them. The Python SDK's
 * `entity.save()` after a load sends every loaded property back as query
 * parameters: read-only ones (`id`, `created_at`, `updated_at`, `deleted`,
 * `currency`), server-computed ones (`servable`, `effective_status`,
 * `reasons_not_servable`), and writable ones the caller did not touch. The
 * platform takes such a PUT as the change it really is, so here:
 *
 *  - a parameter that merely repeats the stored value is no change, and is
 *    taken out of the query the route reads (a writable value the route
 *    would refuse on an update, like a create-only default, passes too);
 *  - server-computed fields (and `updated_at`) are never the client's to set:
 *    whatever is sent for them is dropped;
 *  - a read-only field sent with another value is a real change: the
 *    INVALID_PARAMETER ads error naming it.
 *
 * "Repeats" is read the way a client serializes what it loaded: times to
 * the second (the Python SDK formats them without milliseconds), booleans in
 * any case or as 1/0, numbers as text, lists comma-joined or as repeated
 * keys in any order, `''` for null. Only the route's query is rewritten; the
 * `request.params` echo still shows what the client sent.
 */

export interface WholeObjectRules {
  /** Fields a client cannot change: sent with another value, they are refused. */
  readOnly: readonly string[]
  /** Fields the server computes: always dropped. */
  computed: readonly string[]
}

/** Fields every ads entity has: id and creation are fixed, updated_at is the server's. */
const BASE_READ_ONLY = ['id', 'created_at', 'deleted']
const BASE_COMPUTED = ['updated_at']

function items(sent: string | string[]): string[] {
  const all = Array.isArray(sent) ? sent : [sent]
  return all.flatMap((s) => s.split(',')).map((s) => s.trim()).filter((s) => s !== '')
}

function sameTime(sent: string, stored: string): boolean {
  const a = parseIsoTime(sent)
  const b = parseIsoTime(stored)
  if (a === undefined || b === undefined) return false
  // A client that drops the milliseconds (or a stored value without them) still names the same second.
  return Math.floor(a / 1000) === Math.floor(b / 1000)
}

/** Whether the text a client sent names the value stored. */
export function repeatsStored(sent: string | string[], stored: unknown): boolean {
  if (Array.isArray(stored)) {
    if (!stored.every((s) => typeof s === 'string' || typeof s === 'number')) return false
    const want = new Set(stored.map(String))
    const got = new Set(items(sent))
    return want.size === got.size && [...got].every((s) => want.has(s))
  }
  if (Array.isArray(sent)) return sent.length === 1 && repeatsStored(sent[0] as string, stored)
  if (stored === null || stored === undefined) return sent === ''
  if (typeof stored === 'boolean') {
    const v = sent.trim().toLowerCase()
    return stored ? v === 'true' || v === '1' : v === 'false' || v === '0'
  }
  if (typeof stored === 'number') return /^-?\d+(\.\d+)?$/.test(sent.trim()) && Number(sent) === stored
  if (typeof stored === 'string') return sent === stored || sameTime(sent, stored)
  return false
}

function describe(value: unknown): string {
  const text = typeof value === 'string' ? value : JSON.stringify(value)
  return (text ?? 'null').slice(0, 100)
}

/**
 * Reduces the query of a PUT to the client's real changes against `stored`
 * (see above); throws INVALID_PARAMETER for a read-only field sent with
 * another value. Call it after the entity was found, before the route reads
 * `Params.query(request)`.
 */
export function keepChangesOnly(request: FastifyRequest, stored: object, rules: WholeObjectRules): void {
  const query = request.query as Record<string, string | string[]> | undefined
  if (!query || typeof query !== 'object') return
  const record = stored as Record<string, unknown>
  const readOnly = new Set([...BASE_READ_ONLY, ...rules.readOnly])
  const computed = new Set([...BASE_COMPUTED, ...rules.computed])
  for (const name of Object.keys(query)) {
    if (name.startsWith('oauth_')) continue
    const sent = query[name] as string | string[]
    if (computed.has(name)) {
      delete query[name]
      continue
    }
    if (Object.hasOwn(record, name) && repeatsStored(sent, record[name])) {
      delete query[name]
      continue
    }
    if (readOnly.has(name)) {
      const stored = Object.hasOwn(record, name) ? record[name] : null
      throw Ads.invalid(name, `${name} is read-only and cannot be changed (it is ${describe(stored)}, the request sent ${describe(sent)})`)
    }
  }
}
