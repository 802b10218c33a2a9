import type { ScoredMember } from './types'

/** Is entry `a` ordered before (score, member)? Redis's order: by score, then by member. */
function before(a: ScoredMember, score: number, member: string): boolean {
  return a.score < score || (a.score === score && a.member < member)
}

/** The first of 0..n-1 for which `below(i)` is false, where it is true for a prefix (n when it holds throughout). */
function firstNotBelow(n: number, below: (i: number) => boolean): number {
  let lo = 0
  let hi = n
  while (lo < hi) {
    const mid = (lo + hi) >> 1
    if (below(mid)) lo = mid + 1
    else hi = mid
  }
  return lo
}

/** First index in a sorted chunk whose entry is >= (score, member). */
function indexIn(chunk: ScoredMember[], score: number, member: string): number {
  return firstNotBelow(chunk.length, (i) => before(chunk[i] as ScoredMember, score, member))
}

/** First index in a sorted chunk whose score is > max. */
function indexAbove(chunk: ScoredMember[], max: number): number {
  return firstNotBelow(chunk.length, (i) => (chunk[i] as ScoredMember).score <= max)
}

/** The last entry of a chunk (chunks are never empty). */
function lastOf(chunk: ScoredMember[]): ScoredMember {
  return chunk[chunk.length - 1] as ScoredMember
}

/**
 * Members kept sorted by (score, member) for range queries, in chunks of a
 * few hundred (a map gives O(1) score lookup).
 *
 * Why chunks: the retry schedule of a webhook that has fallen behind holds
 * tens of thousands of entries, taken from the front and put back near the
 * end. One sorted array moved every entry on each such change (it led the
 * embedded profile under load: bench/PROFILES.md "the memory store's sorted
 * set"), and each due read scanned every due entry before applying its
 * limit. Here a change moves at most one chunk, and a range read costs its
 * position plus what it returns.
 */
export class SortedSet {
  readonly scores = new Map<string, number>()
  private chunks: ScoredMember[][] = []

  /** @param load a chunk splits at twice this and merges with its neighbour below half of it. */
  constructor(private readonly load = 256) {}

  get size(): number {
    return this.scores.size
  }

  add(member: string, score: number): void {
    const old = this.scores.get(member)
    if (old === score) return
    if (old !== undefined) this.removeEntry(member, old)
    this.scores.set(member, score)
    const entry = { member, score }
    if (this.chunks.length === 0) {
      this.chunks.push([entry])
      return
    }
    const c = Math.min(this.chunkFor(score, member), this.chunks.length - 1)
    const chunk = this.chunks[c] as ScoredMember[]
    chunk.splice(indexIn(chunk, score, member), 0, entry)
    if (chunk.length > 2 * this.load) this.chunks.splice(c + 1, 0, chunk.splice(this.load))
  }

  remove(member: string): boolean {
    const score = this.scores.get(member)
    if (score === undefined) return false
    this.scores.delete(member)
    this.removeEntry(member, score)
    return true
  }

  /** Every entry in order (a copy). */
  toArray(): ScoredMember[] {
    return this.chunks.flat()
  }

  /**
   * Entries with min <= score <= max, lowest first (reverse: highest first),
   * skipping `offset` of them and returning at most `limit`: Redis's
   * ZRANGEBYSCORE / ZREVRANGEBYSCORE with LIMIT.
   */
  rangeByScore(min: number, max: number, offset = 0, limit = Infinity, reverse = false): ScoredMember[] {
    const out: ScoredMember[] = []
    if (limit <= 0) return out
    let skip = offset
    if (!reverse) {
      const first = this.chunkFor(min, '')
      for (let c = first; c < this.chunks.length; c++) {
        const chunk = this.chunks[c] as ScoredMember[]
        for (let i = c === first ? indexIn(chunk, min, '') : 0; i < chunk.length; i++) {
          const e = chunk[i] as ScoredMember
          if (e.score > max) return out
          if (skip > 0) skip--
          else if (out.push(e) >= limit) return out
        }
      }
      return out
    }
    for (let c = Math.min(this.chunkAbove(max), this.chunks.length - 1); c >= 0; c--) {
      const chunk = this.chunks[c] as ScoredMember[]
      for (let i = indexAbove(chunk, max) - 1; i >= 0; i--) {
        const e = chunk[i] as ScoredMember
        if (e.score < min) return out
        if (skip > 0) skip--
        else if (out.push(e) >= limit) return out
      }
    }
    return out
  }

  /** Entries at ranks start..stop inclusive (0 = lowest; reverse: 0 = highest), both already within 0..size-1. */
  rangeByRank(start: number, stop: number, reverse = false): ScoredMember[] {
    if (start > stop) return []
    const n = this.size
    const from = reverse ? n - 1 - stop : start
    const count = stop - start + 1
    const out: ScoredMember[] = []
    let passed = 0
    for (const chunk of this.chunks) {
      if (passed + chunk.length <= from) {
        passed += chunk.length
        continue
      }
      for (let i = Math.max(0, from - passed); i < chunk.length && out.length < count; i++) out.push(chunk[i] as ScoredMember)
      passed += chunk.length
      if (out.length >= count) break
    }
    return reverse ? out.reverse() : out
  }

  /** First chunk whose last entry is >= (score, member); chunks.length when none is. */
  private chunkFor(score: number, member: string): number {
    return firstNotBelow(this.chunks.length, (c) => before(lastOf(this.chunks[c] as ScoredMember[]), score, member))
  }

  /** First chunk whose last entry's score is > max; chunks.length when none is. */
  private chunkAbove(max: number): number {
    return firstNotBelow(this.chunks.length, (c) => lastOf(this.chunks[c] as ScoredMember[]).score <= max)
  }

  private removeEntry(member: string, score: number): void {
    const c = this.chunkFor(score, member)
    const chunk = this.chunks[c]
    if (!chunk) return
    const i = indexIn(chunk, score, member)
    if (chunk[i]?.member !== member) return
    chunk.splice(i, 1)
    if (chunk.length === 0) {
      this.chunks.splice(c, 1)
      return
    }
    // Keep chunks from thinning out under scattered removals: merge a small one into its successor.
    const next = this.chunks[c + 1]
    if (chunk.length < this.load / 2 && next && chunk.length + next.length <= 2 * this.load) {
      this.chunks[c] = chunk.concat(next)
      this.chunks.splice(c + 1, 1)
    }
  }
}
