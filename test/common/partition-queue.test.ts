import type { Logger } from 'pino'
import t from 'tap'
import { batchPlan, FailureCounter } from '../../services/common/bus/batch'
import { PartitionQueue, type Entry, type QueueDeps } from '../../services/common/bus/partition-queue'
import type { BusMessage } from '../../services/common/bus/types'
import { createLogger } from '../../services/common/logger'
import { eventually, sleep } from '../support/util'

/**
 * A partition revoked from this process and assigned back to it while the
 * revoked queue's drain still has a chunk in hand
 * (services/common/bus/partition-queue.ts, wired in kafka-consumer.ts): the
 * new queue starts from the committed offset, so it holds the same records
 * again, and must not hand them to the handler beside the old chunk.
 */

function entries(from: number, to: number): Entry[] {
  const out: Entry[] = []
  for (let n = from; n < to; n++) {
    const message: BusMessage = { topic: 't', partition: 0, offset: String(n), key: 'k', value: { n }, headers: {}, timestamp: Date.now() }
    out.push({ offset: String(n), message })
  }
  return out
}

/** A queue's dependencies for group `g`: commits and dead letters that always succeed. */
function queueDeps(handler: (messages: BusMessage[]) => Promise<void>, maxBatch: number, log: Logger, gone: QueueDeps['gone'] = () => undefined): QueueDeps {
  return {
    plan: batchPlan({ groupId: 'g', topics: ['t'], batchHandler: handler, maxBatch }),
    groupId: 'g',
    log,
    failures: new FailureCounter(),
    retryMinMs: 10,
    retryMaxMs: 100,
    commitIntervalMs: 1000,
    commit: async () => undefined,
    deadLetter: async () => true,
    stopping: () => false,
    gone
  }
}

t.test('a queue for a partition that came back waits for the revoked queue’s chunk in hand', async (t) => {
  const events: string[] = []
  let release: () => void = () => undefined
  const held = new Promise<void>((resolve) => (release = resolve))
  t.teardown(() => release())
  let calls = 0
  const handler = async (messages: BusMessage[]): Promise<void> => {
    const call = ++calls
    events.push(`start ${call}: ${messages.map((m) => m.offset).join(',')}`)
    if (call === 1) await held
    events.push(`end ${call}`)
  }
  const deps = queueDeps(handler, 10, createLogger('silent', 'test'))
  const old = new PartitionQueue('t', 0, deps)
  old.add(entries(0, 5))
  await eventually(() => calls === 1, 2000)
  // The rebalance takes the partition, then gives it back: a new queue, fed again from the commit (nothing committed).
  old.revoke()
  const fresh = new PartitionQueue('t', 0, deps, old.idle())
  fresh.add(entries(0, 5))
  await sleep(200)
  t.same(events, ['start 1: 0,1,2,3,4'], 'the new queue has not started while the old chunk runs')
  release()
  await eventually(() => calls === 2 && events.length === 4, 2000)
  t.same(events, ['start 1: 0,1,2,3,4', 'end 1', 'start 2: 0,1,2,3,4', 'end 2'], 'it starts once the old chunk ended: at least once, and never two chunks of one partition at a time')
  await fresh.idle()
})

t.test('records gone before the group read them (retention) are said and counted', async (t) => {
  const lines: Array<Record<string, unknown>> = []
  const log = createLogger('error', 'test', { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) })
  const handled: string[] = []
  const counted: Array<[string, number, number]> = []
  const deps = queueDeps(async (messages) => void handled.push(...messages.map((m) => m.offset)), 100, log, (topic, partition, count) => void counted.push([topic, partition, count]))
  const q = new PartitionQueue('t', 3, deps)
  q.add(entries(0, 5))
  q.add(entries(3, 8)) // a refetch overlapping what is queued: no gap
  q.add(entries(120, 125)) // 8..119 were dropped by the broker
  await eventually(() => handled.length === 13, 5000)
  await q.idle()
  t.same(handled, ['0', '1', '2', '3', '4', '5', '6', '7', '120', '121', '122', '123', '124'])
  const gaps = lines.filter((l) => typeof l.msg === 'string' && l.msg.startsWith('messages gone from the partition'))
  t.equal(gaps.length, 1, 'one error line for the one gap')
  t.match(gaps[0], { group: 'g', topic: 't', partition: 3, from: '8', to: '119', lost: 112 })
  t.same(counted, [['t', 3, 112]], 'and counted once, for the consumer to report (make lag, /metrics)')
})
