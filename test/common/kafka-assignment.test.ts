import { spawn } from 'node:child_process'
import path from 'node:path'
import t from 'tap'
import { kafkaBus, startKafka } from '../support/infra'
import { eventually } from '../support/util'

/**
 * librdkafka's mock cluster (tests, `make up`) refuses a follower's SyncGroup
 * that arrives after the leader's with INVALID_REQUEST: kafkajs stops that
 * consumer. A member whose event loop is busy when the JoinGroup answers
 * come (a process just restarted) lost that race to an idle leader time after
 * time: a killed matcher was not back in its group a minute later. With
 * KAFKA_ASSIGNMENT_DELAY the leader hands in its assignment later, and the
 * busy follower gets in. (With the delay at 0 this follower crashes.)
 */

const FOLLOWER = path.join(__dirname, '..', 'support', 'processes', 'slow-follower.ts')

t.test('a follower 300 ms late with its SyncGroup joins a group whose leader delays its assignment', async (t) => {
  const kafka = await startKafka(t, { brokers: 1, deployTopics: false })
  const topic = `assign-${process.pid}`
  await kafka.createTopic(topic, 4)
  const groupId = `assign-group-${process.pid}`
  // The leader: first in the group, idle, with make up's delay.
  const bus = await kafkaBus(t, kafka, 'assign-leader', { assignmentDelayMs: 1000 })
  const leader = await bus.subscribe({ groupId, topics: [topic], batchHandler: async () => undefined })
  t.teardown(() => leader.close())

  const child = spawn(process.execPath, ['--import=tsx', FOLLOWER, kafka.brokers.join(','), groupId, topic, '300'], { stdio: ['pipe', 'pipe', 'inherit'] })
  const exited = new Promise((resolve) => child.once('exit', resolve))
  t.teardown(async () => {
    child.stdin.end()
    const timer = setTimeout(() => child.kill('SIGKILL'), 5000)
    await exited
    clearTimeout(timer)
  })
  let out = ''
  child.stdout.on('data', (chunk: Buffer) => {
    out += chunk.toString()
  })
  await eventually(() => out.includes('joined') || out.includes('crashed'), 30_000, 50)
  t.notMatch(out, /crashed/, `the busy follower was not refused (${out.trim()})`)
  t.match(out, /joined/, 'the busy follower is in the group')
})
