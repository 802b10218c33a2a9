import t from 'tap'
import { compactCounters, WriteCoalescer } from '../../services/common/store/coalescer'
import { MemoryStore } from '../../services/common/store/memory'
import type { StoreOp } from '../../services/common/store/types'

/** A real memory store whose batches are counted (and can be made to fail). */
async function countedStore(): Promise<{ store: MemoryStore; batches: StoreOp[][]; failNext: (err: Error) => void }> {
  const store = await MemoryStore.open()
  const batches: StoreOp[][] = []
  let failure: Error | undefined
  const batch = store.batch.bind(store)
  store.batch = async (ops: StoreOp[]): Promise<void> => {
    batches.push(ops)
    if (failure) {
      const err = failure
      failure = undefined
      throw err
    }
    return batch(ops)
  }
  return { store, batches, failNext: (err) => (failure = err) }
}

const incr = (key: string): StoreOp => ({ op: 'incr', key, by: 1 })

t.test('writes handed in during one turn go in one batch, in order; each caller resolves with it', async (t) => {
  const { store, batches } = await countedStore()
  const writer = new WriteCoalescer(store)
  await Promise.all(Array.from({ length: 50 }, (_, i) => writer.write([incr('n'), { op: 'set', key: `k${i}`, value: String(i) }])))
  t.equal(batches.length, 1, 'fifty callers, one store batch')
  t.equal(batches[0]?.length, 51, "the fifty increments of 'n' are one increment of 50 (compactCounters)")
  t.equal(await store.get('n'), '50')
  t.equal(await store.get('k49'), '49')
  // A later turn is a batch of its own.
  await writer.write([incr('n')])
  t.equal(batches.length, 2)
  t.equal(await store.get('n'), '51')
  // Nothing to write is not a batch.
  await writer.write([])
  t.equal(batches.length, 2)
})

t.test('past maxOps a batch starts at once; a failed batch rejects each of its callers and no other', async (t) => {
  const { store, batches, failNext } = await countedStore()
  const writer = new WriteCoalescer(store, 10)
  // Distinct keys: increments of one key would be compacted into one op (compactCounters).
  await Promise.all(Array.from({ length: 25 }, (_, i) => writer.write([{ op: 'set', key: `s${i}`, value: String(i) }])))
  t.same(batches.map((b) => b.length), [10, 10, 5], 'batches of at most 10 ops')
  t.equal(await store.get('s24'), '24')

  failNext(new Error('store unreachable'))
  const first = Array.from({ length: 3 }, () => writer.write([incr('m')]))
  const outcomes = await Promise.allSettled(first)
  t.same(outcomes.map((o) => o.status), ['rejected', 'rejected', 'rejected'], 'every caller of the failed batch sees the failure')
  t.match((outcomes[0] as PromiseRejectedResult).reason, { message: 'store unreachable' })
  await writer.write([incr('m')])
  t.equal(await store.get('m'), '1', 'the next batch is written')
})

t.test('drain sends what waits and resolves once it is written', async (t) => {
  const { store, batches } = await countedStore()
  const writer = new WriteCoalescer(store)
  const pending = writer.write([incr('d')])
  await writer.drain()
  t.equal(batches.length, 1)
  t.equal(await store.get('d'), '1')
  await pending
})

/** A small deterministic generator: the same run every time, so a failure can be replayed. */
function random(seed: number): () => number {
  let s = seed >>> 0
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0
    return s / 2 ** 32
  }
}

/** What a key holds and roughly how long it lives (-2 none, -1 no expiry, else ms rounded to seconds). */
async function stateOf(store: MemoryStore, keys: string[]): Promise<string[]> {
  return Promise.all(keys.map(async (k) => {
    const ttl = await store.pttl(k)
    return `${k}=${(await store.get(k)) ?? '(none)'} ttl ${ttl < 0 ? ttl : Math.round(ttl / 1000)}`
  }))
}

t.test('compactCounters: fewer commands, and every key ends as the full list leaves it', async (t) => {
  const rnd = random(27112026)
  const keys = ['a', 'b', 'c', 'd']
  let compactedAway = 0
  for (let round = 0; round < 200; round++) {
    const ops: StoreOp[] = []
    for (let i = 0; i < 4 + Math.floor(rnd() * 20); i++) {
      const key = keys[Math.floor(rnd() * keys.length)] as string
      const roll = rnd()
      // Mostly counters; now and then a key is also set or deleted, which must keep its ops as they are.
      if (roll < 0.5) ops.push({ op: 'incr', key, by: 1 + Math.floor(rnd() * 3) })
      else if (roll < 0.85) ops.push({ op: 'pexpire', key, ttlMs: rnd() < 0.5 ? 60_000 : 120_000 })
      else if (roll < 0.93) ops.push({ op: 'set', key, value: String(Math.floor(rnd() * 10)) })
      else ops.push({ op: 'del', key })
    }
    const full = await MemoryStore.open()
    const compact = await MemoryStore.open()
    // Some keys exist before the batch, with and without an expiry.
    for (const s of [full, compact]) await s.batch([{ op: 'set', key: 'a', value: '5' }, { op: 'set', key: 'b', value: '7', ttlMs: 30_000 }])
    const fewer = compactCounters(ops)
    compactedAway += ops.length - fewer.length
    await full.batch(ops)
    await compact.batch(fewer)
    const [want, got] = [await stateOf(full, keys), await stateOf(compact, keys)]
    if (JSON.stringify(want) !== JSON.stringify(got)) t.same(got, want, `round ${round}: ${JSON.stringify(ops)}`)
    await Promise.all([full.close(), compact.close()])
  }
  t.ok(compactedAway > 200, `${compactedAway} commands fewer over 200 random batches, with the same end state every time`)
})

t.test("compactCounters: thirty attempts' per-minute counters are six commands", async (t) => {
  const ops: StoreOp[] = []
  for (let i = 0; i < 30; i++) {
    ops.push({ op: 'set', key: `record:${i}`, value: 'x' })
    for (const f of ['n', 'b3', 'ok']) ops.push({ op: 'incr', key: `stats:${f}`, by: 1 }, { op: 'pexpire', key: `stats:${f}`, ttlMs: 90_000 })
  }
  const fewer = compactCounters(ops)
  t.equal(fewer.filter((op) => op.op === 'set').length, 30, 'every other write stays')
  t.same(fewer.filter((op) => op.key.startsWith('stats:')), [
    { op: 'incr', key: 'stats:n', by: 30 },
    { op: 'incr', key: 'stats:b3', by: 30 },
    { op: 'incr', key: 'stats:ok', by: 30 },
    { op: 'pexpire', key: 'stats:n', ttlMs: 90_000 },
    { op: 'pexpire', key: 'stats:b3', ttlMs: 90_000 },
    { op: 'pexpire', key: 'stats:ok', ttlMs: 90_000 }
  ])
})
