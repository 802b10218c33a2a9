import { createHash, randomBytes } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { Problems } from '../common/errors'
import type { Store } from '../common/store/types'

/**
 * Idempotent ingest: a producer sends `Idempotency-Key: <key>` with a batch,
 * and sending the same batch again with the same key (after a timeout, a
 * lost answer, a crash) is acknowledged with the first answer, without
 * publishing anything again, for 24 hours.
 *
 *   activity:ingest-key:{caller}:{sha256(key)}   JSON, one key per record
 *     {state: 'pending', fingerprint, owner}     while the first request publishes (PENDING_TTL_MS)
 *     {state: 'done', fingerprint, answer}       after it answered 200 (RECORD_TTL_MS)
 *
 * One store key per record and only SET NX / GET / SET / DEL on it, so it
 * stays on one slot of a Redis Cluster. The first request takes the key
 * with SET NX; a duplicate arriving meanwhile waits for the first to finish
 * and gets its answer (or a 409 if it takes longer than DUPLICATE_WAIT_MS),
 * so of concurrent duplicates exactly one publishes. A batch that was refused
 * (invalid lines) or failed to publish leaves no record: its key is free for
 * the corrected or retried batch. Reusing a key with another body is a
 * producer bug and is refused (422) rather than answered with an unrelated
 * batch's answer. `caller` names who sent the key (today the operator API's
 * single identity), so two producers can never collide on a key.
 */

export const IDEMPOTENCY_HEADER = 'idempotency-key'
/** Header on an answer that repeats an earlier one. */
export const REPLAYED_HEADER = 'idempotent-replayed'
export const RECORD_TTL_MS = 24 * 60 * 60 * 1000
/** Longer than a batch takes to publish; an instance that died mid-request frees its key after this. */
const PENDING_TTL_MS = 60_000
/** How long a duplicate waits for the request that holds its key before giving up with 409. */
const DUPLICATE_WAIT_MS = 10_000
const POLL_MS = 50
const KEY_SHAPE = /^[\x20-\x7e]{1,255}$/

type IngestRecord = { state: 'pending'; fingerprint: string; owner: string } | { state: 'done'; fingerprint: string; answer: unknown }

/** The request's Idempotency-Key, undefined without one; a malformed one is a 400 naming the header. */
export function idempotencyKeyOf(headers: Record<string, string | string[] | undefined>): string | undefined {
  const raw = headers[IDEMPOTENCY_HEADER]
  if (raw === undefined) return undefined
  const key = Array.isArray(raw) ? undefined : raw.trim()
  if (key === undefined || !KEY_SHAPE.test(key)) {
    throw Problems.invalidRequest([{ message: 'The Idempotency-Key header must be one value of 1 to 255 printable ASCII characters (a UUID is a good key).', parameters: { 'Idempotency-Key': [Array.isArray(raw) ? raw.join(', ') : raw] } }])
  }
  return key
}

/** What identifies a batch: its media type and its text (parsed JSON re-serialized, NDJSON as sent). */
export function batchFingerprint(contentType: string, body: unknown): string {
  return createHash('sha256').update(contentType).update('\n').update(typeof body === 'string' ? body : JSON.stringify(body) ?? '').digest('hex')
}

export type Claim = { kind: 'first'; release: () => Promise<void>; complete: (answer: unknown) => Promise<void> } | { kind: 'replay'; answer: unknown }

export class IngestIdempotency {
  constructor(private readonly store: Store) {}

  private recordKey(caller: string, key: string): string {
    return `activity:ingest-key:${caller}:${createHash('sha256').update(key).digest('hex')}`
  }

  /**
   * Takes `key` for this batch, or returns the answer the first request with
   * it got. Throws 422 when the key came with another batch, 409 when the
   * request holding it is still running after DUPLICATE_WAIT_MS.
   */
  async claim(caller: string, key: string, fingerprint: string): Promise<Claim> {
    const recordKey = this.recordKey(caller, key)
    const owner = randomBytes(9).toString('base64url')
    const deadline = Date.now() + DUPLICATE_WAIT_MS
    for (;;) {
      const pending: IngestRecord = { state: 'pending', fingerprint, owner }
      if (await this.store.setJsonIfAbsent(recordKey, pending, PENDING_TTL_MS)) {
        return {
          kind: 'first',
          complete: async (answer) => this.store.setJson(recordKey, { state: 'done', fingerprint, answer } satisfies IngestRecord, RECORD_TTL_MS),
          release: async () => {
            // Only our own pending record: after PENDING_TTL_MS the key may be another request's.
            const current = await this.store.getJson<IngestRecord>(recordKey)
            if (current?.state === 'pending' && current.owner === owner) await this.store.del(recordKey)
          }
        }
      }
      const current = await this.store.getJson<IngestRecord>(recordKey)
      // Gone between the two calls (released, expired): try to take it again.
      if (current === undefined) continue
      if (current.fingerprint !== fingerprint) {
        throw Problems.generic(422, 'This Idempotency-Key was already used with a different batch; a key names one batch. Send a new batch with a new key.')
      }
      if (current.state === 'done') return { kind: 'replay', answer: current.answer }
      if (Date.now() >= deadline) {
        throw Problems.conflict('A request with this Idempotency-Key and the same batch is still being processed; send it again in a few seconds to get its answer.')
      }
      await sleep(POLL_MS)
    }
  }
}
