import t from 'tap'
import { runCommand } from '../../scripts/local-infra'
import { sleep } from '../support/util'
import { LoadGenerator } from './support/load'
import { StreamClient } from './support/stream-client'
import { OPERATOR_TOKEN, watchDeadLetters } from './support/system'
import { setUpTenant } from './support/tenant'
import { startUpSystem } from './support/up-system'
import { expectEveryEventAccountedFor } from './support/verify'

/**
 * `make up REDIS=cluster`: the services on a real Redis Cluster (six Debian
 * redis-server nodes, three masters with a replica each, cluster-node-timeout
 * 5 s, make up's default), events published through nginx at RATE/s, and one master killed with
 * SIGKILL in the middle. Its replica takes over (nobody restarts anything);
 * meanwhile the commands for its slots wait in the clients or fail and their
 * Kafka messages are handled again. Every event must reach the webhook (or
 * be reported on the dead letter topic: none is expected) and the stream,
 * and publishers see no error. Duplicates are allowed (at least once) and
 * counted: a batch whose store writes failed when the master died is
 * redelivered, and its deliveries that had already been POSTed are POSTed
 * again.
 */

const RATE = Number(process.env.REDIS_FAILOVER_RATE ?? 1000)
const SECONDS = Number(process.env.REDIS_FAILOVER_SECONDS ?? 8)
const SETTLE_MS = Number(process.env.REDIS_FAILOVER_SETTLE_MS ?? 90_000)
const COUNTS = { GATEWAY: '1', ACTIVITY: '1', STREAM: '1', WEBHOOKS: '1', ACCOUNT_HISTORY: '1' }

/** The cluster's masters as one node sees them (port of each, and whether it is failing). */
async function masters(port: number): Promise<number[]> {
  const text = await runCommand('redis-cli', ['-p', String(port), 'cluster', 'nodes'], 5000)
  return text
    .split('\n')
    .filter((l) => l.split(' ')[2]?.split(',').includes('master') && !l.includes('fail') && /\d+-\d+/.test(l))
    .map((l) => Number(/:(\d+)@/.exec(l)?.[1]))
}

t.test('kill -9 of a Redis Cluster master under load: its replica takes over, nothing is lost', { timeout: 200_000 + SETTLE_MS }, async (t) => {
  const startedAt = Date.now()
  const system = await startUpSystem(t, { ...COUNTS, REDIS: 'cluster', KAFKA_SESSION_TIMEOUT: '10s' })
  const nodes = system.state.processes.filter((p) => p.kind === 'redis')
  t.equal(nodes.length, 6, `make up started six Redis nodes (${nodes.map((n) => n.port).join(', ')}), each in the run state`)
  t.comment(`make up REDIS=cluster ready in ${Date.now() - startedAt} ms`)
  const deadLetters = await watchDeadLetters(t, system)
  const tenant = await setUpTenant(t, system, { fanOut: 0 })
  const stream = new StreamClient(() => [system.proxyUrl], tenant.bearer)
  t.teardown(() => stream.close())
  await stream.start()

  const load = new LoadGenerator({ targets: () => [system.proxyUrl], operatorToken: OPERATOR_TOKEN, users: tenant.followed, rate: RATE, requestTimeoutMs: 20_000 }).start()
  t.teardown(() => load.stop(0))
  await sleep((SECONDS * 1000) / 2)
  const before = await masters(nodes[0]?.port as number)
  t.equal(before.length, 3, `three masters: ${before.join(', ')}`)
  const victim = nodes.find((n) => n.port === before[0])
  if (!victim) throw new Error('no master to kill')
  process.kill(victim.pid, 'SIGKILL')
  const killedAt = Date.now()
  const alive = nodes.find((n) => n.port !== victim.port) as (typeof nodes)[number]
  let after: number[] = []
  while (Date.now() - killedAt < 30_000) {
    after = await masters(alive.port as number).catch(() => [])
    if (after.length === 3 && !after.includes(victim.port as number)) break
    await sleep(200)
  }
  t.ok(after.length === 3 && !after.includes(victim.port as number), `master ${victim.port} killed: a replica took over its slots in ${Date.now() - killedAt} ms (masters now ${after.join(', ')})`)
  await sleep((SECONDS * 1000) / 2)
  await load.stop()

  await expectEveryEventAccountedFor(t, 'a Redis Cluster master killed', { system, tenant, load, deadLetters, stream, timeoutMs: SETTLE_MS })
  t.same(load.failures, {}, `event publishers saw no error (${load.published.size} events at ${RATE}/s; failed attempts ${JSON.stringify(load.failures)}, slowest answer ${load.slowestMs} ms)`)
  t.same(system.crashes(), [], 'no service exited on its own')
  t.comment(`whole scenario: ${Date.now() - startedAt} ms`)
})
