import t from 'tap'
import { MemoryStore } from '../../services/common/store/memory'
import { AttemptLog, type StatsPoint } from '../../services/webhooks/delivery/attempt-log'
import type { DeliveryRecord } from '../../services/webhooks/delivery-log'
import type { HttpOutcome } from '../../services/webhooks/http-client'

/**
 * The figures behind the console's charts (AttemptLog.stats, served by
 * GET /console/webhooks/apps/:app_id/stats): deliveries per minute, success
 * rate and latency p50/p99 over the last hour (one-minute points) and the
 * last day (ten-minute points), from attempts recorded at known times with
 * known outcomes and latencies.
 */

const MINUTE = 60_000
const HOUR = 60 * MINUTE
// 12:00:30 UTC: the last whole minute is 12:00.
const NOW = Date.UTC(2025, 0, 31, 12, 0, 30)

function record(appId: string): DeliveryRecord {
  return {
    delivery_id: 'd1',
    webhook_id: 'w1',
    app_id: appId,
    source: 'activity',
    body: JSON.stringify({ data: { event_type: 'post.create' } }),
    event_time: NOW,
    created_at: new Date(NOW).toISOString(),
    status: 'pending',
    attempts: 0,
    next_attempt_at: NOW
  } as DeliveryRecord
}

const answered = (status: number, ms: number): HttpOutcome => ({ kind: 'response', status, headers: {}, body: '', ms })
const unreachable = (ms: number): HttpOutcome => ({ kind: 'error', failure: 'timeout', message: 'timed out', ms })

const empty = (p: StatsPoint): boolean => p.count === 0 && p.per_minute === 0 && p.success_pct === null && p.p50_ms === null && p.p99_ms === null

t.test('stats: deliveries per minute, success rate and p50/p99 over the last hour and day', async (t) => {
  const store = await MemoryStore.open()
  t.teardown(() => store.close())
  const log = new AttemptLog(store, 24 * HOUR)
  const app = '1001'
  // 5 minutes ago (11:55): two 200s in 20 ms, a 500 in 300 ms.
  for (const out of [answered(200, 20), answered(204, 20), answered(500, 300)]) await log.record(record(app), out, NOW - 5 * MINUTE)
  // 30 minutes ago (11:30): a timeout after 3 s.
  await log.record(record(app), unreachable(3000), NOW - 30 * MINUTE)
  // 3 hours ago (09:00): two 200s in 7 ms.
  for (const out of [answered(200, 7), answered(200, 7)]) await log.record(record(app), out, NOW - 3 * HOUR)
  // 25 hours ago: outside both ranges. Another app's attempt: never counted.
  await log.record(record(app), answered(200, 1), NOW - 25 * HOUR)
  await log.record(record('2002'), answered(200, 1), NOW - 5 * MINUTE)

  const hour = await log.stats(app, HOUR, MINUTE, NOW)
  t.equal(hour.points.length, 60, 'last hour: 60 one-minute points')
  t.equal(hour.points[0]?.t, NOW - 30_000 - 59 * MINUTE, 'from 11:01')
  t.equal(hour.points[59]?.t, NOW - 30_000, 'to 12:00')
  t.equal(hour.total, 4, 'four attempts in the last hour')
  const at = (points: StatsPoint[], ms: number): StatsPoint | undefined => points.find((p) => p.t === ms)
  t.same(at(hour.points, NOW - 30_000 - 5 * MINUTE), { t: NOW - 30_000 - 5 * MINUTE, count: 3, per_minute: 3, success_pct: 66.7, p50_ms: 21, p99_ms: 492 },
    '11:55: 3 per minute, 2 of 3 succeeded, p50 21 ms and p99 492 ms (interpolated in the histogram buckets 10-25 ms and 250-500 ms)')
  t.same(at(hour.points, NOW - 30_000 - 30 * MINUTE), { t: NOW - 30_000 - 30 * MINUTE, count: 1, per_minute: 1, success_pct: 0, p50_ms: 3750, p99_ms: 4975 },
    '11:30: the timeout counts as a failed attempt with its latency')
  t.equal(hour.points.filter((p) => !empty(p)).length, 2, 'every other minute is empty (no rate, no success rate, no latency)')

  const day = await log.stats(app, 24 * HOUR, 10 * MINUTE, NOW)
  t.equal(day.points.length, 144, 'last day: 144 ten-minute points')
  t.equal(day.total, 6, 'six attempts in the last day (not the one 25 hours ago)')
  const first = NOW - 30_000 - 24 * HOUR + MINUTE
  const bucket = (ms: number): StatsPoint | undefined => day.points[Math.floor((ms - first) / (10 * MINUTE))]
  t.same(bucket(NOW - 5 * MINUTE), { t: first + 143 * 10 * MINUTE, count: 3, per_minute: 0.3, success_pct: 66.7, p50_ms: 21, p99_ms: 492 }, 'the last ten minutes: 0.3 per minute')
  t.same(bucket(NOW - 30 * MINUTE), { t: first + 140 * 10 * MINUTE, count: 1, per_minute: 0.1, success_pct: 0, p50_ms: 3750, p99_ms: 4975 }, 'the timeout\'s ten minutes')
  t.same(bucket(NOW - 3 * HOUR), { t: first + 125 * 10 * MINUTE, count: 2, per_minute: 0.2, success_pct: 100, p50_ms: 8, p99_ms: 10 }, 'three hours ago: 0.2 per minute, all succeeded, 5-10 ms')
  t.equal(day.points.filter((p) => !empty(p)).length, 3, 'every other ten minutes is empty')

  const other = await log.stats('2002', HOUR, MINUTE, NOW)
  t.equal(other.total, 1, "the other app's attempt is counted for that app only")
})
