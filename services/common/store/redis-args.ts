import type { ScoredMember } from './types'

/**
 * Arguments and replies of Redis commands in the Store's terms: scores
 * (infinities as `+inf`/`-inf`, NaN refused), TTLs, WITHSCORES replies, and
 * literal prefixes for SCAN MATCH.
 */

/** Redis score syntax (Infinity is `+inf`). */
export function scoreArg(score: number): string {
  if (score === Number.POSITIVE_INFINITY) return '+inf'
  if (score === Number.NEGATIVE_INFINITY) return '-inf'
  if (Number.isNaN(score)) throw new TypeError('score must be a number, got NaN')
  return String(score)
}

export function parseScore(raw: string): number {
  if (raw === 'inf' || raw === '+inf') return Number.POSITIVE_INFINITY
  if (raw === '-inf') return Number.NEGATIVE_INFINITY
  return Number(raw)
}

export function pairs(flat: string[]): ScoredMember[] {
  const out: ScoredMember[] = []
  for (let i = 0; i + 1 < flat.length; i += 2) out.push({ member: flat[i] as string, score: parseScore(flat[i + 1] as string) })
  return out
}

/** Redis wants a positive integer number of milliseconds. */
export function ttlArg(ttlMs: number): string {
  if (!Number.isFinite(ttlMs)) throw new TypeError(`ttl must be a finite number of ms, got ${ttlMs}`)
  return String(Math.max(1, Math.round(ttlMs)))
}

/** Glob-escapes a literal prefix for SCAN MATCH. */
export function globEscape(prefix: string): string {
  return prefix.replace(/[*?[\]\\]/g, (c) => `\\${c}`)
}
