import t from 'tap'
import { newNumericId, newShortId } from '../../services/common/ids'

const EPOCH_MS = 1288834974657n
const LOW_BITS = (1n << 22n) - 1n

t.test('numeric ids: 19 digits, unique and strictly increasing within a process', async (t) => {
  const before = BigInt(Date.now())
  const n = 200_000
  const ids: string[] = new Array<string>(n)
  for (let i = 0; i < n; i++) ids[i] = newNumericId()
  const after = BigInt(Date.now())
  t.equal(new Set(ids).size, n, `${n} ids, no duplicate`)
  t.ok(ids.every((id) => /^[0-9]{19}$/.test(id)), 'every id is 19 digits (so ^[0-9]{1,19}$)')
  let increasing = true
  for (let i = 1; i < n && increasing; i++) increasing = BigInt(ids[i] as string) > BigInt(ids[i - 1] as string)
  t.ok(increasing, 'each id is above the previous one')
  const first = (BigInt(ids[0] as string) >> 22n) + EPOCH_MS
  t.ok(first >= before && first <= after, 'the high bits are the creation millisecond')
})

t.test('numeric ids: a clock that steps back still gives a larger id', async (t) => {
  const now = Date.now()
  const a = BigInt(newNumericId(now + 5000))
  const b = BigInt(newNumericId(now - 60_000))
  t.ok(b > a, 'monotonic across a clock step back')
})

t.test('numeric ids: the low 22 bits are random, so processes minting in the same millisecond rarely meet', async (t) => {
  // Distinct milliseconds ahead of anything minted so far: every id is a fresh draw.
  const start = Date.now() + 3_600_000
  const draws = 1000
  const low = new Set<bigint>()
  for (let i = 0; i < draws; i++) low.add(BigInt(newNumericId(start + i)) & LOW_BITS)
  // 1000 draws among 4,194,304 values: about 0.1 collisions expected; 10 random bits would give ~400.
  t.ok(low.size >= draws - 5, `${low.size} distinct low parts out of ${draws}`)
})

t.test('short ids: lowercase base-36, never a leading zero', async (t) => {
  const ids = Array.from({ length: 2000 }, () => newShortId())
  t.ok(ids.every((id) => /^[a-z1-9][a-z0-9]{5}$/.test(id)))
})
