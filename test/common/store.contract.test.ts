import fs from 'node:fs'
import path from 'node:path'
import t, { type Test } from 'tap'
import { MemoryStore } from '../../services/common/store/memory'
import type { Store } from '../../services/common/store/types'
import { StoreUnavailableError } from '../../services/common/store/unavailable'
import { sleep, tempDir } from '../support/util'
import type { StoreOp } from '../../services/common/store/types'
import { redisClusterStore, redisStore, startRedis, startRedisCluster, type RedisServer } from '../support/infra'

/**
 * One contract, three stores: every case below runs unchanged against the
 * journaled memory store, a real redis-server and a real Redis Cluster
 * (three masters with a replica each). On the cluster a case's keys share
 * one hash tag, as keys that must change together do there (a batch is
 * atomic per hash slot); what crosses slots is its own case below.
 */


let n = 0
let tagged = false
/** A key prefix no other case uses (the stores are shared by the cases of a suite); one hash slot on the cluster. */
const ns = (): string => (tagged ? `{c${++n}}:` : `c${++n}:`)

/** Everything under a prefix, as comparable text (type, value, members, scores). */
async function dump(s: Store, prefix: string): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {}
  for (const key of await collect(s.scanPrefix(prefix))) {
    const name = key.slice(prefix.length)
    const z = await s.zrange(key, 0, -1).catch(() => undefined)
    if (z) {
      out[name] = z
      continue
    }
    const h = await s.hgetall(key).catch(() => undefined)
    if (h) {
      out[name] = h
      continue
    }
    const m = await s.smembers(key).catch(() => undefined)
    if (m) {
      out[name] = m.sort()
      continue
    }
    out[name] = [await s.get(key), (await s.pttl(key)) > 0]
  }
  return out
}

/** A random batch over a few keys of each type, as the delivery path writes them (each key keeps one type). */
function randomBatch(prefix: string, rnd: () => number): StoreOp[] {
  const ops: StoreOp[] = []
  const pick = <T,>(xs: T[]): T => xs[Math.floor(rnd() * xs.length)] as T
  for (let i = 0, len = 1 + Math.floor(rnd() * 12); i < len; i++) {
    const k = Math.floor(rnd() * 3)
    switch (pick(['set', 'setTtl', 'del', 'zadd', 'zrem', 'sadd', 'srem', 'hset', 'hdel', 'incr', 'pexpire'] as const)) {
      case 'set':
        ops.push({ op: 'set', key: `${prefix}s${k}`, value: `v${i}` })
        break
      case 'setTtl':
        ops.push({ op: 'set', key: `${prefix}s${k}`, value: `t${i}`, ttlMs: 60_000 })
        break
      case 'del':
        ops.push({ op: 'del', key: `${prefix}${pick(['s', 'z', 'h', 'e'])}${k}` })
        break
      case 'zadd':
        ops.push({ op: 'zadd', key: `${prefix}z${k}`, score: Math.floor(rnd() * 5), member: `m${Math.floor(rnd() * 4)}` })
        break
      case 'zrem':
        ops.push({ op: 'zrem', key: `${prefix}z${k}`, members: [`m${Math.floor(rnd() * 4)}`] })
        break
      case 'sadd':
        ops.push({ op: 'sadd', key: `${prefix}e${k}`, members: [`m${Math.floor(rnd() * 4)}`, `m${Math.floor(rnd() * 4)}`] })
        break
      case 'srem':
        ops.push({ op: 'srem', key: `${prefix}e${k}`, members: [`m${Math.floor(rnd() * 4)}`] })
        break
      case 'hset':
        ops.push({ op: 'hset', key: `${prefix}h${k}`, fields: { [`f${Math.floor(rnd() * 3)}`]: `v${i}` } })
        break
      case 'hdel':
        ops.push({ op: 'hdel', key: `${prefix}h${k}`, fields: [`f${Math.floor(rnd() * 3)}`] })
        break
      case 'incr':
        ops.push({ op: 'incr', key: `${prefix}n${k}`, by: 1 + Math.floor(rnd() * 3) })
        break
      case 'pexpire':
        ops.push({ op: 'pexpire', key: `${prefix}n${k}`, ttlMs: 60_000 })
        break
    }
  }
  return ops
}

async function collect(it: AsyncIterable<string>): Promise<string[]> {
  const out: string[] = []
  for await (const k of it) out.push(k)
  return out.sort()
}

function contract(suite: Test, store: () => Store): void {
  suite.test('a trusted batch leaves what the checked batch leaves (100 random batches)', async (t) => {
    const s = store()
    let seed = 7
    const rnd = (): number => ((seed = (seed * 48271) % 2147483647) / 2147483647)
    let differ = 0
    let keys = 0
    let trusted = ''
    for (let i = 0; i < 100; i++) {
      // Each batch from the same random state, on a prefix of its own: what one batch does is compared, not the end of many.
      const checked = ns()
      trusted = ns()
      const setup = randomBatch('', rnd)
      const ops = randomBatch('', rnd)
      for (const p of [checked, trusted]) await s.batch(setup.map((op) => ({ ...op, key: p + op.key })))
      await s.batch(ops.map((op) => ({ ...op, key: checked + op.key })))
      await s.batch(ops.map((op) => ({ ...op, key: trusted + op.key })), { trusted: true })
      const a = await dump(s, checked)
      keys += Object.keys(a).length
      if (JSON.stringify(await dump(s, trusted)) !== JSON.stringify(a)) {
        if (differ++ === 0) t.same(await dump(s, trusted), a, `batch ${i}: ${JSON.stringify(ops)}`)
      }
    }
    t.ok(keys > 300, `${keys} keys compared`)
    t.equal(differ, 0, 'same keys, values, members, scores and expiries after every batch')
    await s.batch([{ op: 'set', key: `${trusted}r`, value: '1' }], { replicated: true })
    t.equal(await s.get(`${trusted}r`), '1', 'a replicated batch is written')
  })

  suite.test('strings: set, get, mget, del, exists', async (t) => {
    const s = store()
    const p = ns()
    t.equal(await s.get(`${p}missing`), undefined)
    await s.set(`${p}a`, 'one')
    await s.set(`${p}b`, '')
    t.equal(await s.get(`${p}a`), 'one')
    t.equal(await s.get(`${p}b`), '', 'the empty string is a value')
    t.same(await s.mget([`${p}a`, `${p}missing`, `${p}b`]), ['one', undefined, ''])
    t.same(await s.mget([]), [])
    t.equal(await s.exists(`${p}a`), true)
    t.equal(await s.del(`${p}a`, `${p}missing`, `${p}b`), 2, 'del counts the keys that existed')
    t.equal(await s.del(), 0)
    t.equal(await s.exists(`${p}a`), false)
    await s.set(`${p}u`, 'héllo ✓ 𝄞')
    t.equal(await s.get(`${p}u`), 'héllo ✓ 𝄞', 'unicode round-trips')
  })

  suite.test('TTL: expiry, pttl, pexpire', async (t) => {
    const s = store()
    const p = ns()
    await s.set(`${p}short`, 'x', 150)
    await s.set(`${p}forever`, 'y')
    const ttl = await s.pttl(`${p}short`)
    t.ok(ttl > 0 && ttl <= 150, `pttl within the ttl (${ttl})`)
    t.equal(await s.pttl(`${p}forever`), -1, 'no expiry: -1')
    t.equal(await s.pttl(`${p}missing`), -2, 'absent: -2')
    t.equal(await s.pexpire(`${p}forever`, 150), true)
    t.equal(await s.pexpire(`${p}missing`, 150), false)
    await s.set(`${p}reset`, 'z', 150)
    await s.set(`${p}reset`, 'z2')
    t.equal(await s.pttl(`${p}reset`), -1, 'a plain set clears the expiry')
    await sleep(250)
    t.equal(await s.get(`${p}short`), undefined, 'expired')
    t.equal(await s.exists(`${p}forever`), false, 'expired after pexpire')
    t.equal(await s.pttl(`${p}short`), -2)
    t.equal(await s.get(`${p}reset`), 'z2')
  })

  suite.test('setIfAbsent: only the first writer wins, until the key expires', async (t) => {
    const s = store()
    const p = ns()
    t.equal(await s.setIfAbsent(`${p}nonce`, 'first', 150), true)
    t.equal(await s.setIfAbsent(`${p}nonce`, 'second', 150), false)
    t.equal(await s.get(`${p}nonce`), 'first')
    const ttl = await s.pttl(`${p}nonce`)
    t.ok(ttl > 0 && ttl <= 150)
    await sleep(250)
    t.equal(await s.setIfAbsent(`${p}nonce`, 'third'), true, 'free again after expiry')
    t.equal(await s.pttl(`${p}nonce`), -1)
    const racers = await Promise.all(Array.from({ length: 20 }, (_, i) => s.setIfAbsent(`${p}lock`, String(i), 5000)))
    t.equal(racers.filter(Boolean).length, 1, 'exactly one of 20 concurrent callers gets the lock')
    t.equal(await s.setJsonIfAbsent(`${p}j`, { a: 1 }), true)
    t.equal(await s.setJsonIfAbsent(`${p}j`, { a: 2 }), false)
    t.same(await s.getJson(`${p}j`), { a: 1 })
  })

  suite.test('JSON helpers', async (t) => {
    const s = store()
    const p = ns()
    const doc = { id: '1234567890123456789', nested: { list: [1, 'two', null, true] }, text: 'quote " and \\ and \n' }
    await s.setJson(`${p}doc`, doc)
    t.same(await s.getJson(`${p}doc`), doc)
    t.same(await s.mgetJson([`${p}doc`, `${p}none`]), [doc, undefined])
    t.equal(await s.getJson(`${p}none`), undefined)
    await s.setJson(`${p}tmp`, [1], 100)
    t.ok((await s.pttl(`${p}tmp`)) > 0)
  })

  suite.test('incr: atomic counters, TTL only when the key is new', async (t) => {
    const s = store()
    const p = ns()
    t.equal(await s.incr(`${p}n`), 1)
    t.equal(await s.incr(`${p}n`, 5), 6)
    t.equal(await s.incr(`${p}n`, -10), -4)
    t.equal(await s.get(`${p}n`), '-4', 'stored as a string')
    await Promise.all(Array.from({ length: 50 }, () => s.incr(`${p}parallel`)))
    t.equal(await s.get(`${p}parallel`), '50', 'no lost update among 50 concurrent increments')
    t.equal(await s.incr(`${p}window`, 1, 200), 1)
    const first = await s.pttl(`${p}window`)
    t.ok(first > 0 && first <= 200, 'a new counter gets the TTL')
    await sleep(50)
    t.equal(await s.incr(`${p}window`, 1, 10_000), 2)
    t.ok((await s.pttl(`${p}window`)) <= first, 'an existing counter keeps its expiry')
    await sleep(250)
    t.equal(await s.incr(`${p}window`, 1, 200), 1, 'a new window after expiry')
    await s.set(`${p}text`, 'abc')
    await t.rejects(s.incr(`${p}text`), 'a non-numeric value cannot be incremented')
  })

  suite.test('incr and hincr accept the same number syntax on both stores', async (t) => {
    const s = store()
    const p = ns()
    for (const bad of ['0x10', ' 5', '5 ', '+5', '05', '1.5', '', '9223372036854775807']) {
      await s.set(`${p}bad`, bad)
      await t.rejects(s.incr(`${p}bad`, 1), `integer incr of ${JSON.stringify(bad)} is refused`)
      t.equal(await s.get(`${p}bad`), bad, 'and leaves the value alone')
      await s.hset(`${p}hbad`, { f: bad })
      await t.rejects(s.hincr(`${p}hbad`, 'f', 1), `integer hincr of ${JSON.stringify(bad)} is refused`)
    }
    // (Redis's INCRBYFLOAT reads with strtold, so it takes hex and long-double ranges: not part of the contract.)
    for (const bad of [' 5', '5 ', 'abc', 'inf', '1.2.3']) {
      await s.set(`${p}fbad`, bad)
      await t.rejects(s.incr(`${p}fbad`, 0.5), `fractional incr of ${JSON.stringify(bad)} is refused`)
    }
    await s.set(`${p}good`, '-12')
    t.equal(await s.incr(`${p}good`, 2), -10)
    await s.set(`${p}float`, '1.25')
    t.equal(await s.incr(`${p}float`, 0.5), 1.75)
    await s.set(`${p}exp`, '2e2')
    t.equal(await s.incr(`${p}exp`, 0.5), 200.5, 'exponent notation is a valid float')
    await s.set(`${p}big`, '9223372036854775806')
    t.equal(await s.get(`${p}big`), '9223372036854775806')
    await s.incr(`${p}big`, 1)
    t.equal(await s.get(`${p}big`), '9223372036854775807', 'counters are 64-bit exact')
    await t.rejects(s.incr(`${p}big`, 1), 'an increment past 64 bits is refused')
    await t.rejects(s.incr(`${p}nan`, Number.NaN), 'a NaN increment is refused')
    t.equal(await s.exists(`${p}nan`), false)
    await t.rejects(s.zadd(`${p}z`, Number.NaN, 'm'), /NaN/, 'a NaN score is refused')
    t.equal(await s.exists(`${p}z`), false)
  })

  suite.test('hashes', async (t) => {
    const s = store()
    const p = ns()
    t.same(await s.hgetall(`${p}h`), {})
    t.equal(await s.hget(`${p}h`, 'f'), undefined)
    await s.hset(`${p}h`, { a: '1', b: '2' })
    await s.hset(`${p}h`, { b: 'two', c: '' })
    await s.hset(`${p}h`, {})
    t.equal(await s.hget(`${p}h`, 'b'), 'two')
    t.same(await s.hgetall(`${p}h`), { a: '1', b: 'two', c: '' })
    t.equal(await s.hincr(`${p}h`, 'count'), 1)
    t.equal(await s.hincr(`${p}h`, 'count', 4), 5)
    t.equal(await s.hdel(`${p}h`, 'a', 'zz'), 1)
    t.equal(await s.hdel(`${p}h`), 0)
    t.same(await s.hgetall(`${p}h`), { b: 'two', c: '', count: '5' })
    await s.hdel(`${p}h`, 'b', 'c', 'count')
    t.equal(await s.exists(`${p}h`), false, 'an emptied hash no longer exists')
    await s.set(`${p}str`, 'x')
    await t.rejects(s.hget(`${p}str`, 'f'), /WRONGTYPE/, 'type errors are reported')
  })

  suite.test('sets', async (t) => {
    const s = store()
    const p = ns()
    t.equal(await s.sadd(`${p}s`, 'a', 'b', 'a'), 2, 'duplicates count once')
    t.equal(await s.sadd(`${p}s`, 'b', 'c'), 1)
    t.equal(await s.sadd(`${p}s`), 0)
    t.same((await s.smembers(`${p}s`)).sort(), ['a', 'b', 'c'])
    t.equal(await s.sismember(`${p}s`, 'b'), true)
    t.equal(await s.sismember(`${p}s`, 'z'), false)
    t.equal(await s.scard(`${p}s`), 3)
    t.equal(await s.srem(`${p}s`, 'a', 'z'), 1)
    t.equal(await s.scard(`${p}none`), 0)
    t.same(await s.smembers(`${p}none`), [])
    await s.srem(`${p}s`, 'b', 'c')
    t.equal(await s.exists(`${p}s`), false, 'an emptied set no longer exists')
  })

  suite.test('sorted sets: scores, ranges by score and rank, ties by member', async (t) => {
    const s = store()
    const p = ns()
    const z = `${p}z`
    for (const [m, sc] of [['e', 5], ['a', 1], ['c', 3], ['b', 3], ['d', 4], ['neg', -2.5]] as Array<[string, number]>) await s.zadd(z, sc, m)
    t.equal(await s.zcard(z), 6)
    t.equal(await s.zscore(z, 'neg'), -2.5)
    t.equal(await s.zscore(z, 'zz'), undefined)
    await s.zadd(z, 6, 'e')
    t.equal(await s.zscore(z, 'e'), 6, 'zadd of an existing member updates its score')
    const members = (xs: Array<{ member: string }>): string[] => xs.map((x) => x.member)
    t.same(await s.zrangeByScore(z, 1, 4), [{ member: 'a', score: 1 }, { member: 'b', score: 3 }, { member: 'c', score: 3 }, { member: 'd', score: 4 }], 'inclusive bounds, ties by member')
    t.same(members(await s.zrangeByScore(z, 1, 4, { reverse: true })), ['d', 'c', 'b', 'a'])
    t.same(members(await s.zrangeByScore(z, 1, 4, { offset: 1, limit: 2 })), ['b', 'c'])
    t.same(members(await s.zrangeByScore(z, 1, 4, { reverse: true, offset: 1, limit: 2 })), ['c', 'b'])
    t.same(members(await s.zrangeByScore(z, 1, 4, { offset: 2 })), ['c', 'd'])
    t.same(await s.zrangeByScore(z, 1, 4, { limit: 0 }), [])
    t.same(members(await s.zrangeByScore(z, Number.NEGATIVE_INFINITY, Number.POSITIVE_INFINITY)), ['neg', 'a', 'b', 'c', 'd', 'e'])
    t.same(await s.zrangeByScore(z, 10, 20), [])
    t.same(await s.zrangeByScore(`${p}none`, 0, 10), [])
    t.same(members(await s.zrange(z, 0, 1)), ['neg', 'a'])
    t.same(members(await s.zrange(z, -2, -1)), ['d', 'e'])
    t.same(members(await s.zrange(z, 0, -1, { reverse: true })), ['e', 'd', 'c', 'b', 'a', 'neg'])
    t.same(members(await s.zrange(z, 4, 100)), ['d', 'e'])
    t.same(await s.zrange(z, 3, 1), [])
    t.equal(await s.zrem(z, 'a', 'zz'), 1)
    t.equal(await s.zcard(z), 5)
    await s.zadd(`${p}inf`, Number.POSITIVE_INFINITY, 'top')
    t.equal(await s.zscore(`${p}inf`, 'top'), Number.POSITIVE_INFINITY)
  })

  suite.test('zpopByScore: removes and returns due members, atomically', async (t) => {
    const s = store()
    const p = ns()
    const q = `${p}due`
    for (let i = 0; i < 40; i++) await s.zadd(q, i, `job-${String(i).padStart(2, '0')}`)
    const popped = await s.zpopByScore(q, 4, 3)
    t.same(popped.map((m) => m.member), ['job-00', 'job-01', 'job-02'], 'lowest scores first, at most limit')
    t.same(await s.zpopByScore(q, -1, 10), [], 'nothing due')
    t.same(await s.zpopByScore(q, 100, 0), [])
    // Concurrent pollers never get the same member.
    const results = await Promise.all(Array.from({ length: 8 }, () => s.zpopByScore(q, 29, 5)))
    const all = results.flat().map((m) => m.member)
    t.equal(all.length, 27, 'every due member popped once (03..29)')
    t.equal(new Set(all).size, all.length, 'no member popped twice')
    t.equal(await s.zcard(q), 10)
  })

  suite.test('scanPrefix: every key under a prefix, literal even with glob characters', async (t) => {
    const s = store()
    const p = ns()
    const keys = Array.from({ length: 1200 }, (_, i) => `${p}scan:${i}`)
    await s.batch(keys.map((key) => ({ op: 'set', key, value: '1' })))
    await s.set(`${p}other:1`, 'x')
    await s.hset(`${p}scan:hash`, { f: 'v' })
    const found = await collect(s.scanPrefix(`${p}scan:`))
    t.equal(found.length, 1201)
    t.same(found, [...keys, `${p}scan:hash`].sort())
    await s.set(`${p}g*[x]?:1`, 'a')
    await s.set(`${p}g-other`, 'b')
    t.same(await collect(s.scanPrefix(`${p}g*[x]?:`)), [`${p}g*[x]?:1`], 'glob characters are literal')
    await s.set(`${p}scan-exp:1`, 'gone', 50)
    await sleep(120)
    t.same(await collect(s.scanPrefix(`${p}scan-exp:`)), [], 'expired keys are not listed')
  })

  suite.test('batch: applied in order and atomically; a failing batch writes nothing', async (t) => {
    const s = store()
    const p = ns()
    await s.batch([
      { op: 'set', key: `${p}a`, value: '1' },
      { op: 'incr', key: `${p}n`, by: 2 },
      { op: 'incr', key: `${p}n`, by: 3 },
      { op: 'hset', key: `${p}h`, fields: { x: '1', y: '2' } },
      { op: 'hdel', key: `${p}h`, fields: ['x'] },
      { op: 'sadd', key: `${p}s`, members: ['m1', 'm2'] },
      { op: 'srem', key: `${p}s`, members: ['m1'] },
      { op: 'zadd', key: `${p}z`, score: 2, member: 'two' },
      { op: 'zadd', key: `${p}z`, score: 1, member: 'one' },
      { op: 'zrem', key: `${p}z`, members: ['two'] },
      { op: 'set', key: `${p}tmp`, value: 't', ttlMs: 5000 },
      { op: 'set', key: `${p}gone`, value: 'g' },
      { op: 'del', key: `${p}gone` },
      { op: 'pexpire', key: `${p}a`, ttlMs: 10_000 }
    ])
    await s.batch([])
    t.equal(await s.get(`${p}a`), '1')
    t.ok((await s.pttl(`${p}a`)) > 0, 'pexpire in a batch')
    t.equal(await s.get(`${p}n`), '5')
    t.same(await s.hgetall(`${p}h`), { y: '2' })
    t.same(await s.smembers(`${p}s`), ['m2'])
    t.same(await s.zrange(`${p}z`, 0, -1), [{ member: 'one', score: 1 }])
    t.ok((await s.pttl(`${p}tmp`)) > 0)
    t.equal(await s.exists(`${p}gone`), false, 'later ops see earlier ones')

    await s.set(`${p}str`, 'text')
    await t.rejects(
      s.batch([
        { op: 'set', key: `${p}first`, value: 'should not stay' },
        { op: 'incr', key: `${p}n`, by: 100 },
        { op: 'sadd', key: `${p}str`, members: ['x'] }
      ]),
      /WRONGTYPE/
    )
    t.equal(await s.get(`${p}first`), undefined, 'nothing of the failed batch was written')
    t.equal(await s.get(`${p}n`), '5')
    t.equal(await s.get(`${p}str`), 'text')

    // An increment of a value that is not a number fails the whole batch, not just its own op.
    await s.set(`${p}txt`, 'abc')
    await t.rejects(s.batch([{ op: 'set', key: `${p}early`, value: 'x' }, { op: 'incr', key: `${p}txt`, by: 1 }]), /not an integer/)
    t.equal(await s.get(`${p}early`), undefined, 'an incr of a non-numeric string refuses the whole batch')
    await t.rejects(s.batch([{ op: 'set', key: `${p}early`, value: 'x' }, { op: 'set', key: `${p}v`, value: '0x10' }, { op: 'incr', key: `${p}v`, by: 1 }]))
    await t.rejects(s.batch([{ op: 'set', key: `${p}early`, value: 'x' }, { op: 'set', key: `${p}v`, value: '7' }, { op: 'incr', key: `${p}v`, by: 0.5 }, { op: 'incr', key: `${p}v`, by: 1 }]))
    t.equal(await s.get(`${p}early`), undefined, 'a value written earlier in the batch is what the incr checks (7 + 0.5 is no integer)')
    t.equal(await s.get(`${p}v`), undefined)
    await t.rejects(s.batch([{ op: 'set', key: `${p}early`, value: 'x' }, { op: 'set', key: `${p}v`, value: '9223372036854775807' }, { op: 'incr', key: `${p}v`, by: 1 }]))
    t.equal(await s.get(`${p}early`), undefined, 'an overflowing incr refuses the whole batch')
    await t.rejects(s.batch([{ op: 'set', key: `${p}early`, value: 'x' }, { op: 'zadd', key: `${p}z2`, score: Number.NaN, member: 'm' }]), /NaN/)
    await t.rejects(s.batch([{ op: 'set', key: `${p}early`, value: 'x' }, { op: 'incr', key: `${p}n`, by: Number.NaN }]))
    await t.rejects(s.batch([{ op: 'set', key: `${p}early`, value: 'x' }, { op: 'pexpire', key: `${p}n`, ttlMs: Number.NaN }]))
    t.equal(await s.get(`${p}early`), undefined, 'NaN scores, increments and TTLs refuse the whole batch')
    t.equal(await s.get(`${p}n`), '5')
    await s.batch([{ op: 'set', key: `${p}f`, value: '1.5' }, { op: 'incr', key: `${p}f`, by: 0.5 }, { op: 'incr', key: `${p}f`, by: 1 }])
    t.equal(await s.get(`${p}f`), '3', 'a fractional incr with an integral result can be followed by an integer incr')

    // A reader running alongside never sees half a batch.
    const pairs = Array.from({ length: 30 }, (_, i) => i)
    let torn = 0
    const reader = (async () => {
      for (let i = 0; i < 60; i++) {
        const [x, y] = await s.mget([`${p}pair:x`, `${p}pair:y`])
        if (x !== y) torn++
      }
    })()
    for (const i of pairs) await s.batch([{ op: 'set', key: `${p}pair:x`, value: String(i) }, { op: 'set', key: `${p}pair:y`, value: String(i) }])
    await reader
    t.equal(torn, 0, 'no reader observed x and y from different batches')
  })
}

t.test('memory store', async (t) => {
  const dir = tempDir(t, 'gw-store-')
  const store = await MemoryStore.open(path.join(dir, 'state'))
  t.teardown(() => store.close())
  contract(t, () => store)

  t.test('state survives close and reopen of the same directory, TTLs included', async (t) => {
    const dir = tempDir(t, 'gw-reopen-')
    const first = await MemoryStore.open(dir)
    await first.set('r:str', 'v')
    await first.set('r:ttl', 'soon', 300)
    await first.set('r:long', 'later', 60_000)
    await first.set('r:expires-while-closed', 'x', 100)
    await first.hset('r:h', { a: '1' })
    await first.sadd('r:s', 'm')
    await first.zadd('r:z', 1.5, 'm')
    await first.incr('r:n', 7)
    await first.batch([{ op: 'set', key: 'r:b', value: 'batched', ttlMs: 60_000 }, { op: 'del', key: 'r:str' }])
    await first.close()
    await t.rejects(first.get('r:b'), StoreUnavailableError, 'a closed store refuses calls as unavailable (503 in every interface, not 500)')
    await t.rejects(first.get('r:b'), /closed/)
    await sleep(150)

    const second = await MemoryStore.open(dir)
    t.teardown(() => second.close())
    t.equal(await second.get('r:str'), undefined)
    t.equal(await second.get('r:b'), 'batched')
    t.same(await second.hgetall('r:h'), { a: '1' })
    t.same(await second.smembers('r:s'), ['m'])
    t.equal(await second.zscore('r:z', 'm'), 1.5)
    t.equal(await second.get('r:n'), '7')
    t.equal(await second.get('r:expires-while-closed'), undefined, 'a key that expired while closed is gone')
    const ttl = await second.pttl('r:ttl')
    t.ok(ttl > 0 && ttl <= 150, `the remaining TTL is kept, not restarted (${ttl})`)
    const long = await second.pttl('r:long')
    t.ok(long > 59_000 && long <= 60_000)
    await sleep(ttl + 50)
    t.equal(await second.get('r:ttl'), undefined, 'and it expires on time')

    // After compaction into a snapshot, the same state loads again.
    second.compact()
    await second.set('r:after-compact', '1')
    await second.close()
    const third = await MemoryStore.open(dir)
    t.teardown(() => third.close())
    t.equal(await third.get('r:b'), 'batched')
    t.equal(await third.get('r:after-compact'), '1')
    t.ok((await third.pttl('r:long')) > 59_000)
  })

  t.test('writes of one turn are journaled in one append, each call resolving after it', async (t) => {
    const dir = tempDir(t, 'gw-group-')
    const store = await MemoryStore.open(dir)
    t.teardown(() => store.close())
    const journal = path.join(dir, 'store.journal')
    const before = fs.readFileSync(journal, 'utf8')
    const writes = Array.from({ length: 100 }, (_, i) => store.set(`g:${i}`, 'v'))
    t.equal(await store.get('g:99'), 'v', 'a write is visible at once')
    t.equal(fs.readFileSync(journal, 'utf8'), before, 'but not journaled within the turn')
    await Promise.all(writes)
    const appended = fs.readFileSync(journal, 'utf8').slice(before.length)
    t.equal(appended.split('\n').filter((l) => l !== '').length, 100, 'every write has its record once they resolved')
    t.match(appended, /"g:0"[\s\S]*"g:99"/, 'in call order')
  })

  t.test('a torn last journal line is cut off, so the next write is not glued onto it', async (t) => {
    const dir = tempDir(t, 'gw-torn-')
    const first = await MemoryStore.open(dir)
    await first.set('t:kept', '1')
    await first.close()
    fs.appendFileSync(path.join(dir, 'store.journal'), '[{"op":"setAt","key":"t:torn","va')
    const second = await MemoryStore.open(dir)
    t.equal(await second.get('t:kept'), '1')
    t.equal(await second.get('t:torn'), undefined, 'the torn record was never acknowledged')
    await second.set('t:after', '2')
    await second.close()
    const third = await MemoryStore.open(dir)
    t.teardown(() => third.close())
    t.equal(await third.get('t:after'), '2', 'the first write after the crash survives the next restart')
  })
})

t.test('redis store', async (t) => {
  const redis: RedisServer = await startRedis(t)
  const store = await redisStore(t, redis)
  contract(t, () => store)

  t.test('survives a Redis restart: reconnects, queued commands complete, no crash', async (t) => {
    await store.set('restart:k', 'kept')
    await store.zadd('restart:z', 1, 'a')
    await redis.restart()
    t.equal(await store.get('restart:k'), 'kept', 'commands work after the restart (data kept by the AOF)')
    t.same(await store.zpopByScore('restart:z', 10, 5), [{ member: 'a', score: 1 }], 'Lua scripts are reloaded after the restart')

    await redis.stop()
    await t.rejects(store.ping(), /unavailable|did not answer/, 'ping fails at once while Redis is down')
    const pending = store.set('restart:during', 'queued')
    await sleep(400)
    await redis.start()
    await pending
    t.equal(await store.get('restart:during'), 'queued', 'a command issued while Redis was down completes after it is back')
    await store.ping()

    await redis.restart({ hard: true })
    t.equal(await store.incr('restart:n'), 1, 'works after a kill -9 restart too')
  })

  t.test('a trusted batch is one MULTI/EXEC of merged commands', async (t) => {
    const { callsSince, commandCalls } = await import('../support/store-rounds')
    const before = await commandCalls(redis.url)
    const ops: StoreOp[] = []
    for (let i = 0; i < 50; i++) ops.push({ op: 'set', key: `merge:rec${i}`, value: 'r' }, { op: 'zadd', key: 'merge:sched', score: i, member: `d${i}` }, { op: 'incr', key: 'merge:n', by: 1 }, { op: 'pexpire', key: 'merge:n', ttlMs: 60_000 })
    await store.batch(ops, { trusted: true })
    const calls = callsSince(before, await commandCalls(redis.url))
    t.same(Object.fromEntries([...calls].filter(([c]) => !['info', 'hello', 'client', 'select'].includes(c))), { multi: 1, mset: 1, zadd: 1, incrby: 1, pexpire: 1, exec: 1 }, '200 ops, 6 commands')
    t.equal(await store.zcard('merge:sched'), 50)
    t.equal(await store.get('merge:n'), '50')
  })

  t.test('connect fails clearly when Redis is unreachable', async (t) => {
    const { RedisStore } = await import('../../services/common/store/redis')
    const { freePort } = await import('../../scripts/local-infra')
    const { createLogger } = await import('../../services/common/logger')
    const port = await freePort()
    const started = Date.now()
    await t.rejects(RedisStore.connect(`redis://127.0.0.1:${port}`, createLogger('silent', 'x'), { connectTimeoutMs: 800 }), /cannot reach Redis at redis:\/\/127\.0\.0\.1:\d+ within 800 ms/)
    t.ok(Date.now() - started < 3000, 'within the connect timeout')
  })
})

t.test('redis cluster store', async (t) => {
  const cluster = await startRedisCluster(t)
  const store = await redisClusterStore(t, cluster)
  t.test('contract', async (t) => {
    tagged = true
    t.teardown(() => {
      tagged = false
    })
    contract(t, () => store)
  })

  t.test('across hash slots: mget, del, scan and batches split by slot', async (t) => {
    const keys = Array.from({ length: 40 }, (_, i) => `x:${i}`)
    await store.batch(keys.map((key, i) => ({ op: 'set', key, value: String(i) })))
    t.same(await store.mget(keys), keys.map((_, i) => String(i)), 'mget over 40 slots, in order')
    t.same(await collect(store.scanPrefix('x:')), [...keys].sort(), 'scan walks every master')
    await store.batch(keys.map((key) => ({ op: 'zadd', key: `${key}:z`, score: 1, member: 'm' })), { trusted: true, replicated: true })
    t.equal(await store.zcard('x:39:z'), 1, 'a trusted batch over many slots')
    t.equal(await store.del(...keys), 40, 'del over many slots counts them all')
    const masters = await cluster.masters()
    t.equal(masters.length, 3, 'three masters')
    const counts = await Promise.all(masters.map(async (port) => Number(/db0:keys=(\d+)/.exec(await cluster.info(port, 'keyspace'))?.[1] ?? 0)))
    t.ok(counts.every((c) => c > 0), `every master holds keys (${counts.join(', ')})`)
  })

  t.test('a master killed after a replicated batch: its replica takes over with the batch', async (t) => {
    const masters = await cluster.masters()
    const key = '{failover}:k'
    await store.batch([{ op: 'set', key, value: 'acknowledged' }, { op: 'zadd', key: '{failover}:z', score: 1, member: 'm' }], { trusted: true, replicated: true })
    // Which master holds the key: the one whose keyspace has it.
    let owner = 0
    for (const port of masters) if ((await cluster.info(port, 'keyspace')).includes('keys=') && (await import('node:child_process')).execFileSync('redis-cli', ['-p', String(port), 'exists', key]).toString().trim() === '1') owner = port
    t.ok(owner > 0, `the key is on master ${owner}`)
    await cluster.kill(owner)
    const started = Date.now()
    t.equal(await store.get(key), 'acknowledged', `read after the failover (${Date.now() - started} ms)`)
    t.equal(await store.zcard('{failover}:z'), 1)
    await store.set('{failover}:after', 'x')
    t.equal(await store.get('{failover}:after'), 'x', 'writes go to the new master')
    t.equal((store as import('../../services/common/store/redis').RedisStore).unreplicatedBatches, 0, 'every replicated batch was acknowledged by a replica')
  })
})
