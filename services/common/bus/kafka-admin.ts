import { KafkaJSError, type Admin } from 'kafkajs'
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
