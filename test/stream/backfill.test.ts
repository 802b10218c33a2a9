import t from 'tap'
import { Deque, ENTRY_OVERHEAD_BYTES, RecentBuffer } from '../../services/stream/backfill'
import { defaultNodeId, streamNodeSettings } from '../../services/stream/settings'
import { loadConfig } from '../../services/common/config'
import { testConfig } from '../support/runtime'

/** The backfill buffer's bounds (time, lines and bytes per app, bytes per node) and the stream node settings. */

const WINDOW = 60_000
const line = (n: number, size = 100): string => `{"n":${n}}`.padEnd(size, ' ')
const cost = (size = 100): number => size + ENTRY_OVERHEAD_BYTES

t.test('Deque: a ring buffer that grows, shifts and indexes from the head', async (t) => {
  const d = new Deque<number>(2)
  for (let i = 0; i < 5; i++) d.push(i)
  t.equal(d.shift(), 0)
  t.equal(d.shift(), 1)
  for (let i = 5; i < 40; i++) d.push(i) // wraps around and grows twice
  t.equal(d.length, 38)
  t.same(Array.from({ length: d.length }, (_, i) => d.at(i)), Array.from({ length: 38 }, (_, i) => i + 2))
  t.equal(d.at(38), undefined)
  t.equal(d.at(-1), undefined)
  d.retain((n) => n % 2 === 0)
  t.same(Array.from({ length: d.length }, (_, i) => d.at(i)), Array.from({ length: 19 }, (_, i) => 2 + i * 2))
  while (d.length > 0) d.shift()
  t.equal(d.shift(), undefined)
  t.equal(d.peek(), undefined)
})

t.test('lines within the window, oldest first, per application', async (t) => {
  const b = new RecentBuffer({ windowMs: WINDOW, maxEventsPerApp: 100, maxBytesPerApp: 1e9, maxBytes: 1e9 })
  const now = 1_000_000
  b.push('a', line(1), now - 50_000)
  b.push('b', line(2), now - 40_000)
  b.push('a', line(3), now - 10_000)
  t.same(b.since('a', now - WINDOW), [line(1), line(3)])
  t.same(b.since('a', now - 20_000), [line(3)])
  t.same(b.since('b', now - WINDOW), [line(2)])
  t.same(b.since('c', 0), [])
  b.trim(now + 15_000) // the window now starts at now - 45 s: line 1 goes
  t.same(b.since('a', 0), [line(3)])
  t.equal(b.size(), 2)
  t.equal(b.bytes(), 2 * cost())
  b.trim(now + WINDOW)
  t.equal(b.size(), 0)
  t.equal(b.bytes(), 0)
  // A time going backwards (another producer's clock) is kept in order rather than lost to the search.
  b.push('a', line(4), now)
  b.push('a', line(5), now - 5)
  t.same(b.since('a', now), [line(4), line(5)])
})

t.test('per-application caps: lines and bytes, the oldest go first', async (t) => {
  const byCount = new RecentBuffer({ windowMs: WINDOW, maxEventsPerApp: 3, maxBytesPerApp: 1e9, maxBytes: 1e9 })
  for (let i = 1; i <= 5; i++) byCount.push('a', line(i), i)
  byCount.push('b', line(9), 6)
  t.same(byCount.since('a', 0), [line(3), line(4), line(5)])
  t.same(byCount.since('b', 0), [line(9)], 'another app keeps its own lines')

  const byBytes = new RecentBuffer({ windowMs: WINDOW, maxEventsPerApp: 1000, maxBytesPerApp: cost() * 2, maxBytes: 1e9 })
  for (let i = 1; i <= 4; i++) byBytes.push('a', line(i), i)
  t.same(byBytes.since('a', 0), [line(3), line(4)])
  t.equal(byBytes.bytes(), cost() * 2)
  byBytes.push('a', line(9, cost() * 3), 5)
  t.same(byBytes.since('a', 0), [line(3), line(4)], 'a line larger than the app\'s whole budget is not kept')
})

t.test('the node budget spans every application and evicts the node\'s oldest line', async (t) => {
  const b = new RecentBuffer({ windowMs: WINDOW, maxEventsPerApp: 1000, maxBytesPerApp: 1e9, maxBytes: cost() * 4 })
  b.push('a', line(1), 1)
  b.push('b', line(2), 2)
  b.push('a', line(3), 3)
  b.push('c', line(4), 4)
  t.equal(b.bytes(), cost() * 4)
  b.push('b', line(5), 5)
  t.same(b.since('a', 0), [line(3)], 'a\'s oldest line was the node\'s oldest')
  b.push('c', line(6), 6)
  t.same(b.since('b', 0), [line(5)])
  t.same(b.since('c', 0), [line(4), line(6)])
  t.equal(b.bytes(), cost() * 4, 'never above the budget')
  t.equal(b.size(), 4)
})

t.test('memory stays bounded under a long run of one noisy and many quiet applications', async (t) => {
  const maxBytes = cost() * 500
  const b = new RecentBuffer({ windowMs: WINDOW, maxEventsPerApp: 50, maxBytesPerApp: 1e9, maxBytes })
  let peak = 0
  for (let i = 0; i < 200_000; i++) {
    b.push('noisy', line(i), i)
    if (i % 10 === 0) b.push(`quiet-${i % 1000}`, line(i), i)
    peak = Math.max(peak, b.bytes())
  }
  t.ok(peak <= maxBytes, `peak ${peak} bytes within the ${maxBytes} budget`)
  t.equal(b.since('noisy', 0).length, 50, 'the per-app cap holds')
  t.ok(b.size() <= 500)
  // The node-wide order must not keep evicted entries around without bound (it is compacted).
  const arrival = (b as unknown as { arrival: Deque<unknown> }).arrival
  t.ok(arrival.length <= Math.max(1024, b.size() * 2), `arrival order holds ${arrival.length} entries for ${b.size()} live ones`)
})

t.test('a push costs the same however full the buffer is (no O(n) splice)', async (t) => {
  // Counting operations rather than timing them: the ring buffer never moves the entries it keeps.
  const b = new RecentBuffer({ windowMs: WINDOW, maxEventsPerApp: 100_000, maxBytesPerApp: 1e12, maxBytes: 1e12 })
  for (let i = 0; i < 100_000; i++) b.push('a', line(i, 20), i)
  const entries = (b as unknown as { byApp: Map<string, { entries: Deque<unknown> }> }).byApp.get('a')?.entries as Deque<unknown>
  const before = entries.at(1)
  b.push('a', line(100_000, 20), 100_000)
  t.equal(entries.length, 100_000)
  t.equal(entries.at(0), before, 'the oldest was dropped at the head; the rest did not move')
})

t.test('stream node settings: a stable id from the environment or the address; validated byte budgets', async (t) => {
  const config = testConfig(t, { PORT: '8443' })
  t.same(streamNodeSettings(testConfig(t, { PORT: '8443', STREAM_NODE_ID: 'stream-1' })).nodeId, 'stream-1')
  t.equal(streamNodeSettings(config).nodeId, streamNodeSettings(config).nodeId, 'the default is stable across starts')
  t.match(streamNodeSettings(config).nodeId, /-8443$/)
  t.equal(defaultNodeId(8443, 'node a.example'), 'node-a.example-8443')
  t.not(defaultNodeId(0), defaultNodeId(0), 'an ephemeral port gives no stable address: a random id')
  t.throws(() => loadConfig({ STREAM_NODE_ID: 'a b' }), /STREAM_NODE_ID/)
  t.throws(() => loadConfig({ STREAM_BACKFILL_MAX_BYTES: '12kb' }), /STREAM_BACKFILL_MAX_BYTES/)
  t.throws(() => loadConfig({ STREAM_BACKFILL_MAX_BYTES_PER_APP: '10' }), /between 1024/)
  t.match(streamNodeSettings(testConfig(t, { STREAM_BACKFILL_MAX_BYTES: '1048576', STREAM_BACKFILL_MAX_BYTES_PER_APP: '65536' })), { backfillMaxBytes: 1048576, backfillMaxBytesPerApp: 65536 })
})
