import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { describeMockGroups, mockGroups } from './support/mock-groups'

// Lines as librdkafka 2.0's mock cluster writes them with debug=mock.
const LOG = [
  '%7|1795721275.248|MOCK|rdkafka#producer-1| [thrd:mock]: Mock consumer group activity-matcher with 1 member(s) changing state Empty -> Joining: member join',
  '%7|1795721278.248|MOCK|rdkafka#producer-1| [thrd:mock]: Mock consumer group activity-matcher FSM timeout in state Joining',
  '%7|1795721278.248|MOCK|rdkafka#producer-1| [thrd:mock]: Consumer group activity-matcher with 2 member(s) is rebalancing: elected leader is 0x7fb61c00cad0, generation id 2',
  '%7|1795721278.248|MOCK|rdkafka#producer-1| [thrd:mock]: Mock consumer group activity-matcher with 2 member(s) changing state Joining -> Syncing: leader elected, waiting for all members to sync',
  '%7|1795721278.258|MOCK|rdkafka#producer-1| [thrd:mock]: Mock consumer group activity-matcher: awaiting 2/2 syncing members in state Syncing',
  '%7|1795721278.258|MOCK|rdkafka#producer-1| [thrd:mock]: Mock consumer group activity-matcher with 2 member(s) changing state Syncing -> Up: all members synced',
  '%7|1795721280.000|MOCK|rdkafka#producer-1| [thrd:mock]: Broker 1: Received FetchRequestV11 from 127.0.0.1:40000',
  '%7|1795721290.000|MOCK|rdkafka#producer-1| [thrd:mock]: Mock consumer group webhooks-delivery with 2 member(s) changing state Up -> Joining: member join',
  '%7|1795721291.500|MOCK|rdkafka#producer-1| [thrd:mock]: Member 0x7fb61c0127d0 session timed out for group webhooks-delivery'
].join('\n')

t.test('reads the groups and their last transitions from the mock cluster log', async (t) => {
  const groups = mockGroups(LOG)
  t.same([...groups.keys()], ['activity-matcher', 'webhooks-delivery'])
  t.equal(groups.get('activity-matcher')?.state, 'Up')
  t.equal(groups.get('webhooks-delivery')?.state, 'Joining')
  t.match(groups.get('activity-matcher')?.events.join('; '), /leader 0x7fb61c00cad0, generation 2, 2 members.*2\/2 synced.*Syncing -> Up/)
})

t.test('describes the groups not Up and those of the named service', async (t) => {
  const dir = fs.mkdtempSync(path.join(process.env.TMPDIR ?? '/tmp', 'gw-mock-groups-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const file = path.join(dir, 'kafka.log')
  fs.writeFileSync(file, LOG)
  const now = 1795721300_000
  const stuck = describeMockGroups(file, { now })
  t.match(stuck, /^mock group webhooks-delivery: Joining for 10\.0 s; .*member 0x7fb61c0127d0 session timed out$/)
  t.notMatch(stuck, /activity-matcher/)
  t.match(describeMockGroups(file, { now, prefix: 'activity' }), /mock group activity-matcher: Up for 21\.7 s/)
  fs.writeFileSync(file, 'nothing from the mock\n')
  t.match(describeMockGroups(file), /no group lines/)
  t.match(describeMockGroups(path.join(dir, 'missing.log')), /missing/)
})
