import type { ScoredMember } from './types'

/** Members kept sorted by (score, member) for range queries; a map gives O(1) score lookup. */
export class SortedSet {
  readonly scores = new Map<string, number>()
  private sorted: ScoredMember[] = []

  get size(): number {
    return this.scores.size
  }

  add(member: string, score: number): void {
    if (this.scores.has(member)) this.remove(member)
    this.scores.set(member, score)
    const i = this.indexFor(score, member)
    this.sorted.splice(i, 0, { member, score })
  }

  remove(member: string): boolean {
    const score = this.scores.get(member)
    if (score === undefined) return false
    this.scores.delete(member)
    const i = this.indexFor(score, member)
    if (this.sorted[i]?.member === member) this.sorted.splice(i, 1)
    else this.sorted = this.sorted.filter((m) => m.member !== member)
    return true
  }

  all(): ScoredMember[] {
    return this.sorted
  }

  /** First index whose (score, member) is >= the given pair. */
  indexFor(score: number, member: string): number {
    let lo = 0
    let hi = this.sorted.length
    while (lo < hi) {
      const mid = (lo + hi) >> 1
      const m = this.sorted[mid] as ScoredMember
      if (m.score < score || (m.score === score && m.member < member)) lo = mid + 1
      else hi = mid
    }
    return lo
  }

  lowerBound(score: number): number {
    return this.indexFor(score, '')
  }
}
