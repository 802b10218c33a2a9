import { randomBytes, randomUUID } from 'node:crypto'

/**
 * 19-digit numeric ids for v2 resources (webhooks, subscriptions, users,
 * posts). Time-ordered like the public platform's ids: milliseconds since a
 * custom epoch in the high bits, then a per-process sequence and random bits,
 * so ids sort by creation and collide only with negligible probability.
 */
const EPOCH_MS = 1288834974657n
let sequence = 0n
let lastMs = 0n

export function newNumericId(now: number = Date.now()): string {
  let ms = BigInt(now) - EPOCH_MS
  if (ms <= lastMs) {
    sequence = (sequence + 1n) & 0xfffn
    if (sequence === 0n) ms = lastMs + 1n
    else ms = lastMs
  } else {
    sequence = 0n
  }
  lastMs = ms
  const machine = BigInt(randomBytes(2).readUInt16BE(0) & 0x3ff)
  const id = (ms << 22n) | (machine << 12n) | sequence
  // Pad to 19 digits so every id matches ^[0-9]{19}$ regardless of the clock.
  return id.toString().padStart(19, '1').slice(-19)
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
