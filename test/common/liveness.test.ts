import path from 'node:path'
import pino from 'pino'
import t from 'tap'
import { Liveness, LivenessKeys } from '../../services/common/liveness'
import { MemoryStore } from '../../services/common/store/memory'
import { eventually, tempDir } from '../support/util'

const log = pino({ level: 'silent' })
const OPTIONS = { beatMs: 50, ttlMs: 200 }

/** A process that died: announced, noted, and its beat gone (as after SIGKILL once the key expired). */
async function deadProcess(store: MemoryStore, id: string, notes: Record<string, string>): Promise<void> {
  await store.sadd(LivenessKeys.processes, id)
  await store.hset(LivenessKeys.notes(id), notes)
}

t.test('a dead process is reaped once, by one survivor, with its notes; the living are left alone', async (t) => {
  const store = await MemoryStore.open(path.join(tempDir(t), 'state'))
  const a = new Liveness(store, log, OPTIONS)
  const b = new Liveness(store, log, OPTIONS)
  const reaped: Array<[string, string, Record<string, string>]> = []
  a.addReaper('test', async (id, notes) => void reaped.push(['a', id, notes]))
  b.addReaper('test', async (id, notes) => void reaped.push(['b', id, notes]))
  await a.start()
  await b.start()
  t.teardown(async () => {
    await a.close()
    await b.close()
  })
  await deadProcess(store, 'dead-1', { 'kafka:g1': 'member-1' })
  await eventually(() => reaped.length > 0, 3000)
  await new Promise((r) => setTimeout(r, 300))
  t.equal(reaped.length, 1, `reaped once (${JSON.stringify(reaped)})`)
  t.same(reaped[0]?.slice(1), ['dead-1', { 'kafka:g1': 'member-1' }], 'with what it noted')
  // A minute later it is forgotten (the other kinds of survivors have had their beats).
  await a.reapDead(Date.now() + 61_000)
  t.same(await store.smembers(LivenessKeys.processes).then((m) => m.sort()), [a.id, b.id].sort(), 'forgotten a minute after; the living stay')
  t.same(await store.hgetall(LivenessKeys.notes('dead-1')), {}, 'its notes are gone')
})

t.test('a reaper that fails is tried again at a later beat', async (t) => {
  const store = await MemoryStore.open(path.join(tempDir(t), 'state'))
  const a = new Liveness(store, log, OPTIONS)
  let calls = 0
  a.addReaper('flaky', async () => {
    calls++
    if (calls === 1) throw new Error('store hiccup')
  })
  await a.start()
  t.teardown(() => a.close())
  await deadProcess(store, 'dead-2', {})
  await eventually(() => calls >= 2, 3000)
  await new Promise((r) => setTimeout(r, 300))
  t.equal(calls, 2, 'called again after the failure, and not after the success')
})

t.test('each kind of reaper runs once per dead process, wherever it is registered', async (t) => {
  const store = await MemoryStore.open(path.join(tempDir(t), 'state'))
  // A gateway-like process (Kafka groups only) and a webhooks-like one (Kafka groups and webhook leases).
  const gateway = new Liveness(store, log, OPTIONS)
  const webhooks = new Liveness(store, log, OPTIONS)
  const runs: string[] = []
  gateway.addReaper('kafka groups', async () => void runs.push('kafka groups'))
  webhooks.addReaper('kafka groups', async () => void runs.push('kafka groups'))
  webhooks.addReaper('webhook leases', async () => void runs.push('webhook leases'))
  await deadProcess(store, 'dead-3', {})
  // The gateway notices first and reaps what it can; the webhooks process still releases the leases.
  await gateway.reapDead()
  await webhooks.reapDead()
  t.same(runs.sort(), ['kafka groups', 'webhook leases'], `each reaper once (${runs.join(', ')})`)
})

t.test('a process that closes is reaped by the others (what it left is released); one that beats is not', async (t) => {
  const store = await MemoryStore.open(path.join(tempDir(t), 'state'))
  const survivor = new Liveness(store, log, OPTIONS)
  const leaving = new Liveness(store, log, OPTIONS)
  const beating = new Liveness(store, log, OPTIONS)
  const reaped: string[] = []
  survivor.addReaper('test', async (id) => void reaped.push(id))
  await Promise.all([survivor.start(), leaving.start(), beating.start()])
  t.teardown(async () => {
    await survivor.close()
    await beating.close()
  })
  await new Promise((r) => setTimeout(r, 500))
  t.same(reaped, [], 'nobody reaped while all beat (ten beats)')
  await leaving.note('kafka:g', 'm')
  await leaving.close()
  await eventually(() => reaped.length > 0, 3000)
  t.same(reaped, [leaving.id], 'the closed one is reaped, the beating one is not')
})
