/**
 * bench/audiences: what the audience uploads and keyword insights cost.
 *
 *  1. Custom-audience upload: records/s of Membership.apply for full batches
 *     (2500 operations, 2 users each, two identifiers per user), against the
 *     baseline of writing the same number of keys with one plain store batch
 *     (the floor any membership store pays).
 *  2. Keyword insights: latency of a 7-day DAY query over an ingested corpus,
 *     against the baseline of only reading the corpus' hour buckets (the
 *     floor of any scan of that window).
 *
 *   node dist/bench/audiences.js                        (after `make build`)
 *   BENCH_AUDIENCE_BATCHES=8 BENCH_INSIGHTS_POSTS=50000 node dist/bench/audiences.js
 *   REDIS_URL=redis://127.0.0.1:6379 node dist/bench/audiences.js
 *
 * Memory mode journals to a temporary data directory, as `make run` does.
 */
import { createHash } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { loadConfig } from '../services/common/config'
import { createContext } from '../services/common/context'
import { newNumericId } from '../services/common/ids'
import { MemoryStore } from '../services/common/store/memory'
import type { Store, StoreOp } from '../services/common/store/types'
import { computeInsights, ingestActivity, readInsightsQuery } from '../services/gateway/ads/audiences/insights'
import { Membership, type MembershipOperation } from '../services/gateway/ads/audiences/membership'
import { Params } from '../services/gateway/ads/conventions'

const BATCHES = Number(process.env.BENCH_AUDIENCE_BATCHES ?? 4)
const POSTS = Number(process.env.BENCH_INSIGHTS_POSTS ?? 20_000)
const HOUR = 3_600_000

const hash = (s: string): string => createHash('sha256').update(s).digest('hex')

async function openStore(dir: string): Promise<Store> {
  if (process.env.REDIS_URL) {
    const { RedisStore } = await import('../services/common/store/redis')
    const { createLogger } = await import('../services/common/logger')
    return RedisStore.connect(process.env.REDIS_URL, createLogger('silent', 'bench'))
  }
  return MemoryStore.open(path.join(dir, 'state'))
}

function uploadBatch(b: number, now: number): MembershipOperation[] {
  return Array.from({ length: 2500 }, (_, i) => ({
    type: 'Update' as const,
    users: [0, 1].map((u) => [`email:${hash(`${b}-${i}-${u}@example.com`)}`, `phone_number:${hash(`+1${b}${i}${u}`)}`]),
    effectiveAt: now,
    expiresAt: now + 86_400_000
  }))
}

async function benchUploads(store: Store): Promise<void> {
  const now = Date.now()
  const batches = Array.from({ length: BATCHES }, (_, b) => uploadBatch(b, now))
  const records = BATCHES * 2500 * 2

  // Baseline: the identifier keys alone, one plain batch per upload.
  let start = process.hrtime.bigint()
  for (const [b, ops] of batches.entries()) {
    const writes: StoreOp[] = ops.flatMap((op) => op.users.flat().map((id): StoreOp => ({ op: 'set', key: `bench:baseline:${b}:${id}`, value: '1' })))
    await store.batch(writes)
  }
  const baselineS = Number(process.hrtime.bigint() - start) / 1e9

  const membership = new Membership(store, 'custom_audience', `bench-${newNumericId()}`)
  start = process.hrtime.bigint()
  for (const ops of batches) await membership.apply(ops, now)
  const applyS = Number(process.hrtime.bigint() - start) / 1e9
  const size = (await membership.summary(now)).size

  console.log(`custom-audience upload (${BATCHES} x 2500 operations, ${records} records, store ${store.kind})`)
  console.log(`  baseline: plain batch of the identifier keys  ${Math.round(records / baselineS).toLocaleString()} records/s`)
  console.log(`  Membership.apply (merge, windows, counts)     ${Math.round(records / applyS).toLocaleString()} records/s  (audience size ${size})`)
}

async function benchInsights(store: Store, dir: string): Promise<void> {
  const config = loadConfig({ DATA_DIR: dir, LOG_LEVEL: 'silent' })
  const ctx = await createContext({ serviceName: 'bench', config, store })
  const now = Date.now()
  const start = Math.floor(now / HOUR) * HOUR - 7 * 24 * HOUR
  const vocabulary = ['cloud', 'developers', 'data', 'pipeline', 'rust', 'kafka', 'redis', 'latency', 'deploy', 'review', 'coffee', 'weekend', 'music', 'travel', 'pasta', 'garden']
  for (let i = 0; i < POSTS; i++) {
    const words = Array.from({ length: 8 }, (_, w) => vocabulary[(i * 7 + w * 3) % vocabulary.length])
    await ingestActivity(ctx, {
      event_type: 'post.create',
      user_id: '1',
      created_at: new Date(start + Math.floor((i / POSTS) * 7 * 24 * HOUR)).toISOString(),
      payload: { id: String(1_000_000 + i), text: `${words.join(' ')} #${words[0]}` }
    })
  }
  const query = readInsightsQuery(Params.of({ granularity: 'DAY', keywords: 'developers,kafka', negative_keywords: 'pasta', start_time: new Date(start).toISOString(), end_time: new Date(start + 7 * 24 * HOUR).toISOString() }))

  const runs = 5
  let t0 = process.hrtime.bigint()
  for (let r = 0; r < runs; r++) for (let h = start / HOUR; h < start / HOUR + 7 * 24; h++) await store.hgetall(`ads:insights:hour:${h}`)
  const scanMs = Number(process.hrtime.bigint() - t0) / 1e6 / runs
  t0 = process.hrtime.bigint()
  let result = await computeInsights(ctx, query)
  for (let r = 1; r < runs; r++) result = await computeInsights(ctx, query)
  const queryMs = Number(process.hrtime.bigint() - t0) / 1e6 / runs

  console.log(`keyword insights (7 days, DAY, ${POSTS.toLocaleString()} posts in the window, store ${store.kind})`)
  console.log(`  baseline: read the window's hour buckets      ${scanMs.toFixed(1)} ms`)
  console.log(`  computeInsights (match, buckets, related)     ${queryMs.toFixed(1)} ms  (volume ${result.tweet_volume.join('/')})`)
}

async function main(): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-audiences-'))
  const store = await openStore(dir)
  try {
    await benchUploads(store)
    await benchInsights(store, dir)
  } finally {
    await store.close()
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

main().catch((err) => {
  console.error(err)
  process.exit(1)
})
