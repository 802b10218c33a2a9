import { randomBytes, randomUUID } from 'node:crypto'

/**
 * Numeric ids for v2 resources (webhooks, subscriptions, users, posts):
 * ^[0-9]{1,19}$, 19 digits with today's clock. Time-ordered like the public
 * platform's ids: milliseconds since a custom epoch in the high 41 bits, then
 * 22 random bits. Processes share nothing, so two of them minting in the same
 * millisecond collide only when they draw the same 22 bits (1 in 4 million per
 * pair of ids). Within a process ids only grow: an id that would not be above
 * the previous one (same millisecond, or a clock that stepped back) is the
 * previous one plus one.
 */
const EPOCH_MS = 1288834974657n
const RANDOM_BITS = 22n
let lastId = 0n

function randomLowBits(): bigint {
  return BigInt(randomBytes(3).readUIntBE(0, 3) & 0x3fffff)
}

export function newNumericId(now: number = Date.now()): string {
  const ms = BigInt(Math.max(0, Math.floor(now))) - EPOCH_MS
  const candidate = ((ms > 0n ? ms : 0n) << RANDOM_BITS) | randomLowBits()
  lastId = candidate > lastId ? candidate : lastId + 1n
  return lastId.toString()
}

const ALPHABET = '0123456789abcdefghijklmnopqrstuvwxyz'

/** Short opaque ids for advertising entities (e.g. `2iqph`, `8wku2`). */
export function newShortId(length = 6): string {
  const bytes = randomBytes(length)
  let out = ''
  for (const b of bytes) out += ALPHABET[b % ALPHABET.length]
  // An ads id never starts with 0 so it cannot be mistaken for a padded number.
  return out[0] === '0' ? `a${out.slice(1)}` : out
}

/** Random URL-safe secret of `bytes` bytes of entropy. */
export function newSecret(bytes = 32): string {
  return randomBytes(bytes).toString('base64url')
}

export function newUuid(): string {
  return randomUUID()
}
