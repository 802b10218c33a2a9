import t from 'tap'
import { WriteCoalescer } from '../../services/common/store/coalescer'
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
  t.equal(batches[0]?.length, 100)
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
  await Promise.all(Array.from({ length: 25 }, () => writer.write([incr('n')])))
  t.same(batches.map((b) => b.length), [10, 10, 5], 'batches of at most 10 ops')
  t.equal(await store.get('n'), '25')

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
