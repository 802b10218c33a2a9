/**
 * Counter arithmetic of the memory store, with Redis's acceptance rules so
 * both stores accept and refuse the same values:
 *  - an integer increment (INCRBY, HINCRBY) needs the stored value to be a
 *    canonical 64-bit integer: `0`, `-12`, `42`; not `0x10`, ` 5`, `+5`,
 *    `05` or `1.5`; the result must stay within 64 bits;
 *  - a fractional increment (INCRBYFLOAT, HINCRBYFLOAT) needs a decimal
 *    number without surrounding blanks (`1.5`, `-2`, `3e2`), and a finite result.
 * The Redis batch script (redis.ts) applies the same rules before writing.
 */

const INT64_MIN = -(2n ** 63n)
const INT64_MAX = 2n ** 63n - 1n
const CANONICAL_INT = /^(0|-?[1-9][0-9]*)$/
const DECIMAL = /^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$/

export class NotANumberError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'NotANumberError'
  }
}

/** True when Redis would run INCRBY (not INCRBYFLOAT) for this increment. */
export function isIntegerIncrement(by: number): boolean {
  return Number.isSafeInteger(by)
}

/** Refuses NaN and infinities before anything is written. */
export function assertFiniteNumber(value: number, what: string): void {
  if (!Number.isFinite(value)) throw new TypeError(`${what} must be a finite number, got ${value}`)
}

function asInt64(raw: string, where: string): bigint {
  const value = CANONICAL_INT.test(raw) ? BigInt(raw) : undefined
  if (value === undefined || value < INT64_MIN || value > INT64_MAX) throw new NotANumberError(`ERR value of ${where} is not an integer or out of range`)
  return value
}

/** The stored string after adding `by` to `current` (undefined: absent, counts as 0); throws when Redis would refuse. */
export function incremented(current: string | undefined, by: number, where: string): string {
  assertFiniteNumber(by, 'increment')
  if (isIntegerIncrement(by)) {
    const next = asInt64(current ?? '0', where) + BigInt(by)
    if (next < INT64_MIN || next > INT64_MAX) throw new NotANumberError(`ERR increment of ${where} would overflow`)
    return next.toString()
  }
  const raw = current ?? '0'
  const value = DECIMAL.test(raw) ? Number(raw) : Number.NaN
  if (!Number.isFinite(value)) throw new NotANumberError(`ERR value of ${where} is not a valid float`)
  const next = value + by
  if (!Number.isFinite(next)) throw new NotANumberError(`ERR increment of ${where} would produce NaN or Infinity`)
  return String(next)
}
