import t, { type Test } from 'tap'
import { eventually, sleep } from '../support/util'
import { startAdsLoad } from './support/ads-load'
import { LoadGenerator } from './support/load'
import type { ServiceProcess } from './support/processes'
import { StreamClient } from './support/stream-client'
import { OPERATOR_TOKEN, startSystem, watchDeadLetters, type System } from './support/system'
import { setUpTenant, type Tenant } from './support/tenant'
import { expectEveryEventAccountedFor } from './support/verify'

/**
 * Fault test (issue 9): the system as `make up` runs it (one OS process per
 * service instance, two matchers, two stream nodes, the reverse proxy in
 * front, Redis, a 3-broker Kafka cluster), events flowing, and every service
 * process killed with SIGKILL in turn and started again. No event may be
 * lost on the webhook (activity subscription and Account Activity) nor for
 * a stream consumer that reconnects with backfill; duplicates are counted
 * and reported. Producers and the stream consumer go through the proxy, so
 * the proxy's failover is under fault too.
 *
 * A kill must land while the victim holds work nobody else has finished,
 * or it proves nothing (a consumer that committed offsets before its
 * handler finished would pass a test that kills idle processes). So the
 * consumers are killed in the middle of a burst of BURST events, spread
 * over users that cover every partition of activity.events, each event
 * fanning out to 1 + FAN_OUT deliveries (another application subscribes to
 * the same users), so a matcher always has deliveries left to publish:
 *  - a matcher, once its own counter of produced deliveries grew by a
 *    share of the burst's (it is working through its part of the burst);
 *  - webhooks and the stream nodes, once the burst is flowing on
 *    activity.deliveries and before all of it arrived. For the webhooks kill
 *    the receiver answers 503 from the burst on, so deliveries also sit in
 *    the retry schedule and in flight when the process dies.
 * The gateway and account-history kills matter through a second producer:
 * an advertiser posting through the ads interface (each post must reach the
 * webhook, the stream and account history).
 *
 * Of two instances (the matchers, the stream nodes), the first is restarted
 * at once, as an orchestrator restarts a crashed container; when the second
 * is killed, the first must take all of its work over (the whole burst)
 * before the second is back.
 */

const BURST = Number(process.env.FAULT_BURST ?? 800)
/** Extra (stream-only, another app's) subscriptions per followed user: each event makes 1 + FAN_OUT deliveries. */
const FAN_OUT = Number(process.env.FAULT_FAN_OUT ?? 10)
/** Share of a burst the stream must have seen before webhooks or a stream node is killed. */
const FLOWING = 0.05

/** Sum of every sample of a counter on a process's /metrics. */
async function counter(p: ServiceProcess, name: string): Promise<number> {
  try {
    const res = await fetch(`${p.url}/metrics`, { signal: AbortSignal.timeout(2000) })
    const text = await res.text()
    let sum = 0
    for (const line of text.split('\n')) if (line.startsWith(`${name} `) || line.startsWith(`${name}{`)) sum += Number(line.slice(line.lastIndexOf(' ') + 1))
    return sum
  } catch {
    return Number.NaN
  }
}

/** Total lag of a consumer group (undefined when the test's bus cannot tell). */
async function groupLag(system: System, group: string): Promise<number | undefined> {
  const source = system.bus as Partial<{ groupOffsets(groups?: string[]): Promise<Array<{ lag: number }>> }>
  if (!source.groupOffsets) return undefined
  const offsets = await source.groupOffsets([group]).catch(() => undefined)
  return offsets?.reduce((n, o) => n + o.lag, 0)
}

const GROUP_OF: Record<string, string> = { activity: 'activity-matcher', webhooks: 'webhooks-delivery' }

interface Scene {
  system: System
  tenant: Tenant
  load: LoadGenerator
  stream: StreamClient
}

/**
 * Sends a burst and kills `p` while it is working on it (see the file
 * comment); returns the burst's event_uuids. Asserts that the kill landed
 * with part of the burst still undelivered.
 */
async function killMidBurst(t: Test, scene: Scene, p: ServiceProcess): Promise<string[]> {
  const { system, tenant, load, stream } = scene
  if (p.service === 'webhooks') tenant.receiver.postStatus = 503
  const burst = await load.burst(BURST)
  // Measured once the burst is in: from here the steady load alone adds little, the burst's share a lot.
  const produced = p.service === 'activity' ? await counter(p, 'activity_deliveries_produced_total') : 0
  const seen = (): number => burst.filter((uuid) => stream.received.has(uuid)).length
  const burstShare = BURST * FLOWING * (1 + FAN_OUT)
  const working = async (): Promise<boolean> => (p.service === 'activity' ? (await counter(p, 'activity_deliveries_produced_total')) - produced >= burstShare : seen() >= BURST * FLOWING)
  const busy = await eventually(working, 30_000, 10).then(() => true, () => false)
  const onStream = seen()
  const onWebhook = burst.filter((uuid) => tenant.receiver.has('activity', uuid)).length
  const group = GROUP_OF[p.service]
  const lag = group ? await groupLag(system, group) : undefined
  await p.kill9()
  tenant.receiver.postStatus = 200
  t.ok(busy && (onStream < burst.length || onWebhook < burst.length), `${p.name} killed mid-burst: ${onStream} of ${burst.length} on the stream, ${onWebhook} on the webhook${lag === undefined ? '' : `, ${group} lag ${lag}`}`)
  return burst
}

t.test('kill -9 of each service process in turn, mid-burst, loses nothing', { timeout: 235_000 }, async (t) => {
  const startedAt = Date.now()
  const system = await startSystem(t, { proxy: true })
  const proxy = system.proxy as ServiceProcess
  t.comment(`${system.processes.length} service processes and the proxy ready in ${Date.now() - startedAt} ms`)
  const deadLetters = await watchDeadLetters(t, system)
  const tenant = await setUpTenant(t, system, { fanOut: FAN_OUT })
  const stream = new StreamClient(() => [proxy.url], tenant.bearer)
  t.teardown(() => stream.close())
  await stream.start()

  const { load: ads, accountId } = await startAdsLoad(t, system, tenant, () => [proxy.url])
  const load = new LoadGenerator({ targets: () => [proxy.url], operatorToken: OPERATOR_TOKEN, users: tenant.followed, rate: 30 }).start()
  t.teardown(() => load.stop(0))
  const scene: Scene = { system, tenant, load, stream }
  await sleep(1000)

  // A killed process is restarted in the background while the next one is killed (as an
  // orchestrator would), except that an instance is killed only once its siblings are back.
  const restarts = new Map<ServiceProcess, Promise<void>>()
  const restart = (p: ServiceProcess, publishedBefore: number, postsBefore: number): void => {
    const restartedAt = Date.now()
    const done = p.start(90_000).then(async () => {
      t.ok(await p.probe('/readyz'), `${p.name} killed with SIGKILL and ready again in ${Date.now() - restartedAt} ms (${load.published.size - publishedBefore} events and ${ads.published.length - postsBefore} ads posts published meanwhile)`)
    })
    restarts.set(p, done)
  }

  for (const p of system.processes) {
    const siblings = system.instances(p.service).filter((x) => x !== p)
    await Promise.all(siblings.map((x) => restarts.get(x)))
    const publishedBefore = load.published.size
    const postsBefore = ads.published.length
    const consumesEvents = ['activity', 'webhooks', 'stream'].includes(p.service)
    const burst = consumesEvents ? await killMidBurst(t, scene, p) : []
    if (!consumesEvents) await p.kill9()
    if (siblings.length > 0 && siblings.every((x) => x.starts > 1)) {
      // Its siblings were killed and restarted earlier (quickly, while their dead selves were
      // still members of the consumer group). Now they must take its work over: the burst it
      // was working on, and what was published since this round began, arrives before it is back.
      const snapshot = [...burst, ...[...load.published.keys()].slice(publishedBefore)]
      const delivered = (): boolean => snapshot.every((uuid) => tenant.receiver.has('activity', uuid) && stream.received.has(uuid))
      const waitedFrom = Date.now()
      const tookOver = await eventually(delivered, 30_000, 200).then(() => true, () => false)
      t.ok(tookOver, `with ${p.name} down, ${siblings.map((x) => x.name).join(', ')} delivered what was published before, after ${Date.now() - waitedFrom} ms (${snapshot.filter((uuid) => !tenant.receiver.has('activity', uuid)).length} webhook and ${snapshot.filter((uuid) => !stream.received.has(uuid)).length} stream events missing)`)
    } else await sleep(500)
    restart(p, publishedBefore, postsBefore)
  }
  await Promise.all(restarts.values())
  await sleep(500)
  await Promise.all([load.stop(), ads.stop()])
  await expectEveryEventAccountedFor(t, 'kill -9 of every process', { system, tenant, load, deadLetters, stream, ads: { load: ads, accountId }, timeoutMs: 90_000 })
  t.ok(stream.connections >= 2, `the stream consumer reconnected after its node was killed (${stream.connections} connections: ${stream.ends.join(', ')})`)
})
