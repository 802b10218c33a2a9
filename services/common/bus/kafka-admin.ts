import { KafkaJSError, type Admin } from 'kafkajs'
import type { Logger } from 'pino'
import type { GroupOffsets } from './types'

/**
 * Committed offset, end offset and lag of each group on each topic it
 * committed to. `groups` default: every group the cluster lists.
 */
export async function fetchGroupOffsets(admin: Admin, groups: string[], topicsOf: (group: string) => string[] | undefined = () => undefined): Promise<GroupOffsets[]> {
  const out: GroupOffsets[] = []
  const ends = new Map<string, Map<number, number>>()
  let topicList: string[] | undefined
  const allTopics = async (): Promise<string[]> => {
    topicList ??= (await admin.listTopics()).filter((t) => !t.startsWith('__')).sort()
    return topicList
  }
  const endOf = async (topic: string): Promise<Map<number, number>> => {
    let m = ends.get(topic)
    if (!m) {
      m = new Map((await admin.fetchTopicOffsets(topic)).map((p) => [p.partition, Number(p.high)]))
      ends.set(topic, m)
    }
    return m
  }
  for (const group of groups) {
    // With the group's topics known, partitions it never committed show up too (committed -1).
    // Otherwise every topic is asked (some brokers, the mock cluster among them, answer nothing
    // to "all topics") and only those the group committed on are kept.
    const known = topicsOf(group)
    const topics = known ?? (await allTopics())
    const fetched = topics.length === 0 ? [] : await admin.fetchOffsets({ groupId: group, topics })
    for (const { topic, partitions } of fetched) {
      if (!known && !partitions.some((p) => Number(p.offset) >= 0)) continue
      const end = await endOf(topic)
      for (const p of partitions) {
        const committed = Number(p.offset)
        const high = end.get(p.partition) ?? 0
        out.push({ group, topic, partition: p.partition, committed, end: high, lag: committed < 0 ? high : Math.max(0, high - committed) })
      }
    }
  }
  return out.sort((a, b) => a.group.localeCompare(b.group) || a.topic.localeCompare(b.topic) || a.partition - b.partition)
}

/** Every consumer group the cluster knows; undefined when the broker lacks ListGroups (the mock cluster). */
export async function listGroups(admin: Admin): Promise<string[] | undefined> {
  try {
    return (await admin.listGroups()).groups.map((g) => g.groupId).sort()
  } catch (err) {
    if (err instanceof KafkaJSError && /does not support|not\s+implemented|UNSUPPORTED_VERSION/i.test(err.message)) return undefined
    throw err
  }
}

/** The parts of kafkajs's internal cluster that eviction uses. */
interface InternalCluster {
  connect(): Promise<void>
  disconnect(): Promise<void>
  findGroupCoordinator(params: { groupId: string }): Promise<{ leaveGroup(params: { groupId: string; memberId: string }): Promise<unknown> }>
}

/**
 * Removes `memberId` from `groupId` with a LeaveGroup request sent on its
 * behalf: the coordinator rebalances the group at once, instead of waiting
 * for the dead member's session to time out. kafkajs has no static
 * membership and no public call for this, so its own cluster client (the
 * one its consumers use, created by its private factory) sends the request
 * with kafkajs's own encoder. A member the coordinator no longer knows
 * (UNKNOWN_MEMBER_ID: its session already ended, or it left) is not an error.
 */
export async function evictMember(kafka: object, groupId: string, memberId: string, log: Logger): Promise<void> {
  const factory = Object.getOwnPropertySymbols(kafka).find((s) => s.description === 'private:Kafka:createCluster')
  const create = factory === undefined ? undefined : (kafka as Record<symbol, unknown>)[factory]
  if (typeof create !== 'function') throw new Error('this kafkajs version has no cluster factory to evict a member with')
  const cluster = (create as (options: { allowAutoTopicCreation: boolean }) => InternalCluster)({ allowAutoTopicCreation: false })
  await cluster.connect()
  try {
    const coordinator = await cluster.findGroupCoordinator({ groupId })
    await coordinator.leaveGroup({ groupId, memberId })
    log.info({ group: groupId, member_id: memberId }, 'evicted a dead process from its consumer group')
  } catch (err) {
    if ((err as { type?: string }).type !== 'UNKNOWN_MEMBER_ID') throw err
  } finally {
    await cluster.disconnect().catch(() => undefined)
  }
}
