import { spawn } from 'node:child_process'
import path from 'node:path'
import t from 'tap'
import type { KafkaBus } from '../../services/common/bus/kafka'
import type { Assignment } from '../../services/common/bus/types'
import { kafkaBus, startKafka } from '../support/infra'
import { eventually } from '../support/util'

/**
 * A member killed with SIGKILL holds its partitions until the group notices:
 * a whole session timeout (30 s for the member here). Evicted on its behalf
 * (what the survivor that reaps a dead process does, services/common/liveness.ts),
 * its partitions move to the survivor within the rebalance the eviction starts.
 */

const MEMBER = path.join(__dirname, '..', 'support', 'processes', 'group-member.ts')
const SESSION_MS = 30_000

t.test("a dead member evicted on its behalf: its partitions move well within its session", { timeout: 90_000 }, async (t) => {
  const kafka = await startKafka(t, { brokers: 1, deployTopics: false })
  const topic = `evict-${process.pid}`
  await kafka.createTopic(topic, 4)
  const groupId = `evict-group-${process.pid}`
  const bus = (await kafkaBus(t, kafka, 'survivor', { sessionTimeoutMs: 3000, assignmentDelayMs: 300 })) as KafkaBus
  const survivor = await bus.subscribe({ groupId, topics: [topic], batchHandler: async () => undefined })
  t.teardown(() => survivor.close())
  const mine = (): number => bus.assignments().filter((a: Assignment) => a.group === groupId).reduce((n, a) => n + a.partitions.length, 0)

  const child = spawn(process.execPath, ['--import=tsx', MEMBER, kafka.brokers.join(','), groupId, topic], { stdio: ['ignore', 'pipe', 'inherit'] })
  const exited = new Promise((resolve) => child.once('exit', resolve))
  t.teardown(async () => {
    child.kill('SIGKILL')
    await exited
  })
  let out = ''
  child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()))
  await eventually(() => /joined \S+/.test(out) && mine() > 0 && mine() < 4, 60_000, 100)
  const memberId = [...out.matchAll(/joined (\S+)/g)].pop()?.[1] ?? ''
  t.ok(mine() < 4, `the member holds some partitions (the survivor ${mine()} of 4)`)

  child.kill('SIGKILL')
  await exited
  const killedAt = Date.now()
  await bus.evict(groupId, memberId)
  await eventually(() => mine() === 4, SESSION_MS - 5000, 100)
  const tookMs = Date.now() - killedAt
  t.ok(tookMs < SESSION_MS - 5000, `the survivor holds all 4 partitions ${tookMs} ms after the kill (the dead member's session: ${SESSION_MS} ms)`)
  t.comment(`take-over after eviction: ${tookMs} ms`)
  // Evicting it again (a second survivor reaping the same process) is not an error.
  await bus.evict(groupId, memberId)
})
