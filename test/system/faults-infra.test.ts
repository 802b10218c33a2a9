import t, { type Test } from 'tap'
import { eventually, sleep } from '../support/util'
import { startAdsLoad } from './support/ads-load'
import { LoadGenerator } from './support/load'
import { OPERATOR_TOKEN, startSystem, watchDeadLetters, type System } from './support/system'
import { setUpTenant, type Tenant } from './support/tenant'
import { expectEveryEventAccountedFor } from './support/verify'

/**
 * Fault tests of what the services depend on, one system (one
 * process per service, Redis, a 3-broker Kafka cluster) through four
 * scenarios in a row, each under a steady stream of activity events and
 * ending with published = delivered + reported missing:
 *  - a Kafka broker down and back;
 *  - Redis restarted: every service recovers without being restarted;
 *  - Redis killed with SIGKILL (AOF everysec) and down longer than the
 *    client's offline queue waits (REDIS_OUTAGE_MS), so commands fail:
 *    the gateway refuses requests (the advertiser retries them; only
 *    acknowledged posts count as published), matcher and webhooks handlers
 *    fail and their messages are redelivered; nothing acknowledged is lost;
 *  - the customer's webhook receiver down for a while: the retry schedule
 *    (shortened) delivers everything once it is back;
 *  - the receiver down for longer than the whole schedule: every delivery is
 *    reported missing on `webhook.dead-letter`, none silently dropped.
 */

/**
 * Longer than the store's Redis client keeps a command queued while it
 * reconnects (14 reconnections backing off to 1 s: about 11.5 s), so the
 * outage is seen as failed commands, not only as slow ones.
 */
const REDIS_OUTAGE_MS = 14_000

const SERVICES = [
  { name: 'gateway', instances: 1 },
  { name: 'webhooks', instances: 1 },
  { name: 'activity', instances: 1 },
  { name: 'stream', instances: 1 },
  { name: 'account-history', instances: 1 }
]

function steadyLoad(system: System, tenant: Tenant): LoadGenerator {
  return new LoadGenerator({ targets: () => system.urls('activity'), operatorToken: OPERATOR_TOKEN, users: tenant.followed, rate: 30 }).start()
}

/** No process was restarted by anyone, and each answers /readyz again. */
async function recoveredInPlace(t: Test, system: System, label: string): Promise<void> {
  const ready = await Promise.all(system.processes.map(async (p) => [p, await eventually(() => p.probe('/readyz'), 30_000, 200).then(() => true, () => false)] as const))
  for (const [p, ok] of ready) t.ok(ok && p.starts === 1, `${label}: ${p.name} is ready again without a restart`)
}

t.test('Kafka broker, Redis and webhook receiver outages lose nothing', { timeout: 235_000 }, async (t) => {
  const system = await startSystem(t, { services: SERVICES })
  const deadLetters = await watchDeadLetters(t, system)
  const tenant = await setUpTenant(t, system)

  await t.test('a Kafka broker down and back', async (t) => {
    const load = steadyLoad(system, tenant)
    t.teardown(() => load.stop(0))
    await sleep(1500)
    await system.kafka.setBrokerDown(1)
    await sleep(5000)
    await system.kafka.setBrokerUp(1)
    await sleep(1500)
    await load.stop()
    await expectEveryEventAccountedFor(t, 'broker 1 down for 5 s', { system, tenant, load, deadLetters, timeoutMs: 60_000 })
    await recoveredInPlace(t, system, 'after the broker outage')
  })

  await t.test('Redis restarted', async (t) => {
    const load = steadyLoad(system, tenant)
    t.teardown(() => load.stop(0))
    await sleep(1500)
    await system.redis.restart({ downMs: 2000 })
    await sleep(1500)
    await load.stop()
    await expectEveryEventAccountedFor(t, 'Redis down for 2 s', { system, tenant, load, deadLetters, timeoutMs: 60_000 })
    await recoveredInPlace(t, system, 'after the Redis restart')
  })

  await t.test('Redis killed with SIGKILL and down until commands fail', async (t) => {
    const load = steadyLoad(system, tenant)
    t.teardown(() => load.stop(0))
    const ads = await startAdsLoad(t, system, tenant, () => system.urls('gateway'))
    await sleep(1500)
    const postsBefore = ads.load.published.length
    const failuresBefore = Object.values(ads.load.failures).reduce((n, x) => n + x, 0)
    await system.redis.restart({ hard: true, downMs: REDIS_OUTAGE_MS })
    await sleep(2000)
    await Promise.all([load.stop(), ads.load.stop()])
    const failed = Object.values(ads.load.failures).reduce((n, x) => n + x, 0) - failuresBefore
    t.ok(failed > 0, `during the outage the gateway refused or dropped ads posts, which were retried (${failed} failed attempts: ${JSON.stringify(ads.load.failures)})`)
    t.ok(ads.load.published.length > postsBefore, 'ads posts were acknowledged again after the outage')
    await expectEveryEventAccountedFor(t, `Redis killed, down ${REDIS_OUTAGE_MS} ms`, { system, tenant, load, deadLetters, ads, timeoutMs: 90_000 })
    await recoveredInPlace(t, system, 'after Redis was killed')
  })

  await t.test('webhook receiver down for a while, then back', async (t) => {
    const load = steadyLoad(system, tenant)
    t.teardown(() => load.stop(0))
    await sleep(1000)
    await tenant.receiver.down()
    await sleep(4000)
    await tenant.receiver.up()
    await sleep(1000)
    await load.stop()
    // The retry schedule (0,200ms,500ms,1s,2s,2s,2s,2s) spans about 10 s: everything is in by then.
    await expectEveryEventAccountedFor(t, 'receiver down for 4 s', { system, tenant, load, deadLetters, timeoutMs: 30_000 })
  })

  await t.test('webhook receiver down past the whole retry schedule: everything reported missing', async (t) => {
    await tenant.receiver.down()
    const load = new LoadGenerator({ targets: () => system.urls('activity'), operatorToken: OPERATOR_TOKEN, users: tenant.followed, rate: 0 })
    await load.burst(40)
    await load.stop()
    await expectEveryEventAccountedFor(t, 'receiver down for good', { system, tenant, load, deadLetters, expectReportedMissing: 'all', timeoutMs: 45_000 })
    await tenant.receiver.up()
  })
})
