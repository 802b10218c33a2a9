import t from 'tap'
import { SortedSet } from '../../services/common/store/sorted-set'
import type { ScoredMember } from '../../services/common/store/types'

/**
 * The memory store's sorted set against the plainest model of Redis's order
 * (an array sorted by score, then member), under random adds, re-scores and
 * removals. Chunks of 4 make every split, merge and emptied chunk happen
 * many times over; the production size differs only in how often.
 */

function model(entries: Map<string, number>): ScoredMember[] {
  return [...entries].map(([member, score]) => ({ member, score })).sort((a, b) => a.score - b.score || (a.member < b.member ? -1 : a.member > b.member ? 1 : 0))
}

/** A small deterministic generator: the same run every time, so a failure can be replayed. */
function random(seed: number): () => number {
  let s = seed >>> 0
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0
    return s / 2 ** 32
  }
}

t.test('adds, re-scores and removals keep the order and every range Redis would give', async (t) => {
  const rnd = random(20261127)
  const set = new SortedSet(4)
  const truth = new Map<string, number>()
  let mismatches = 0
  for (let step = 0; step < 6000; step++) {
    const member = `m${Math.floor(rnd() * 300)}`
    const roll = rnd()
    // Few distinct scores, so ties ordered by member are common; a phase of mostly removals drains it.
    const removing = step % 2000 > 1500 ? 0.8 : 0.3
    if (roll < removing) {
      if (set.remove(member) !== truth.delete(member)) mismatches++
    } else {
      const score = Math.floor(rnd() * 50)
      set.add(member, score)
      truth.set(member, score)
    }
    if (step % 50 !== 0) continue
    const want = model(truth)
    if (JSON.stringify(set.toArray()) !== JSON.stringify(want)) mismatches++
    const min = Math.floor(rnd() * 50)
    const max = min + Math.floor(rnd() * 20) - 5
    const offset = Math.floor(rnd() * 4)
    const limit = Math.floor(rnd() * 30)
    const inRange = want.filter((e) => e.score >= min && e.score <= max)
    t.same(set.rangeByScore(min, max, offset, limit), inRange.slice(offset, offset + limit), `scores ${min}..${max} offset ${offset} limit ${limit}`)
    t.same(set.rangeByScore(min, max, offset, limit, true), [...inRange].reverse().slice(offset, offset + limit), `reversed scores ${max}..${min}`)
    t.same(set.rangeByScore(-Infinity, max), want.filter((e) => e.score <= max), `everything up to ${max}`)
    const n = want.length
    const start = Math.floor(rnd() * (n + 2))
    const stop = Math.min(n - 1, start + Math.floor(rnd() * 10))
    t.same(set.rangeByRank(start, stop), want.slice(start, stop + 1), `ranks ${start}..${stop}`)
    t.same(set.rangeByRank(start, stop, true), [...want].reverse().slice(start, stop + 1), `reversed ranks ${start}..${stop}`)
    t.equal(set.size, n)
  }
  t.equal(mismatches, 0, 'every removal said what the model said, and the whole order matched the model at every check')
})

t.test('a schedule used as the webhooks use it: taken from the front, put back at the end', async (t) => {
  const set = new SortedSet(8)
  for (let i = 0; i < 1000; i++) set.add(`d${i}`, 1000 + i)
  let now = 2000
  for (let round = 0; round < 50; round++) {
    const due = set.rangeByScore(-Infinity, now, 0, 20)
    for (const d of due) set.add(d.member, now + 500 + round)
    now += 10
  }
  const all = set.toArray()
  t.equal(all.length, 1000, 'nothing lost or doubled')
  t.ok(all.every((e, i) => i === 0 || (all[i - 1] as ScoredMember).score <= e.score), 'still in order')
})
