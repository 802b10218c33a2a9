import t from 'tap'
import { eventually, sleep } from '../support/util'
import { LoadGenerator } from './support/load'
import { StreamClient } from './support/stream-client'
import { OPERATOR_TOKEN, startSystem, watchDeadLetters } from './support/system'
import { setUpTenant } from './support/tenant'
import { expectEveryEventAccountedFor } from './support/verify'

/**
 * Fault test (issue 9): the system as `make up` runs it (one OS process per
 * service instance, two matchers, two stream nodes, Redis, a 3-broker Kafka
 * cluster), a steady stream of activity events, and every service process
 * killed with SIGKILL in turn and started again while the events flow. No
 * event may be lost on the webhook (activity subscription and Account
 * Activity) nor for a stream consumer that reconnects with backfill;
 * duplicates are counted and reported.
 *
 * Of two instances (the matchers, the stream nodes), the first is restarted
 * at once, as an orchestrator restarts a crashed container; when the second
 * is killed, the first must take all of its work over before the second is
 * back. That check found matchers whose consumer kafkajs had stopped for
 * good (a rebalance error after a quick restart) while the process still
 * answered /readyz.
 */

t.test('kill -9 of each service process in turn under load loses nothing', { timeout: 225_000 }, async (t) => {
  const startedAt = Date.now()
  const system = await startSystem(t)
  t.comment(`${system.processes.length} service processes ready in ${Date.now() - startedAt} ms`)
  const deadLetters = await watchDeadLetters(t, system)
  const tenant = await setUpTenant(t, system)
  const stream = new StreamClient(() => system.urls('stream'), tenant.bearer)
  t.teardown(() => stream.close())
  await stream.start()

  const load = new LoadGenerator({ targets: () => system.urls('activity'), operatorToken: OPERATOR_TOKEN, users: tenant.followed, rate: 30 }).start()
  t.teardown(() => load.stop(0))
  await sleep(1500)

  for (const p of system.processes) {
    const before = load.published.size
    await p.kill9()
    const siblings = system.instances(p.service).filter((x) => x !== p)
    if (siblings.length > 0 && siblings.every((x) => x.starts > 1)) {
      // Its siblings were killed and restarted earlier (quickly, while their dead selves were
      // still members of the consumer group). Now they must take its work over: what was
      // published up to a second after the kill, some of it in the dead process's hands,
      // arrives before it is back.
      await sleep(1000)
      const snapshot = [...load.published.keys()]
      const delivered = (): boolean => snapshot.every((uuid) => tenant.receiver.has('activity', uuid) && stream.received.has(uuid))
      const waitedFrom = Date.now()
      const tookOver = await eventually(delivered, 30_000, 200).then(() => true, () => false)
      t.ok(tookOver, `with ${p.name} down, ${siblings.map((x) => x.name).join(', ')} delivered what was published before, after ${Date.now() - waitedFrom} ms (${snapshot.filter((uuid) => !tenant.receiver.has('activity', uuid)).length} webhook and ${snapshot.filter((uuid) => !stream.received.has(uuid)).length} stream events missing)`)
    } else await sleep(750)
    const restartedAt = Date.now()
    await p.start(90_000)
    t.ok(await p.probe('/readyz'), `${p.name} killed with SIGKILL and ready again in ${Date.now() - restartedAt} ms (${load.published.size - before} events published meanwhile)`)
    await sleep(750)
  }
  await load.stop()
  await expectEveryEventAccountedFor(t, 'kill -9 of every process', { system, tenant, load, deadLetters, stream, timeoutMs: 90_000 })
  t.ok(stream.connections >= 2, `the stream consumer reconnected after its node was killed (${stream.connections} connections: ${stream.ends.join(', ')})`)
})
