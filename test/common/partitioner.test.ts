import { randomBytes } from 'node:crypto'
import { Partitioners } from 'kafkajs'
import t from 'tap'
import { partitionFor } from '../../services/common/bus/partitioner'

/**
 * The bus places keys itself (the memory bus, and the Kafka producer's
 * partitioner in kafka.ts) with 32-bit integer math; kafkajs's
 * DefaultPartitioner (the Java client's murmur2 on 64-bit Long emulation) is
 * the reference. They must agree on every key, or one app's deliveries would
 * land elsewhere depending on which bus carried them.
 */

t.test("our murmur2 places every key on kafkajs's DefaultPartitioner's partition", async (t) => {
  const reference = Partitioners.DefaultPartitioner()
  const keys = ['', 'a', 'ab', 'abc', 'abcd', 'alice', '1234567890123456789', '1000000000000000001:2000000001', 'clé-ünïcode-日本', '🙂🙃']
  for (let i = 0; i < 2000; i++) keys.push(randomBytes(1 + (i % 40)).toString(i % 2 === 0 ? 'hex' : 'latin1'))
  const disagreements: string[] = []
  for (const partitions of [1, 6, 12, 48]) {
    const partitionMetadata = Array.from({ length: partitions }, (_, id) => ({ partitionId: id, leader: 0, replicas: [0], isr: [0], partitionErrorCode: 0 }))
    for (const key of keys) {
      const theirs = reference({ topic: 'x', partitionMetadata, message: { key, value: null } })
      if (partitionFor(key, partitions) !== theirs) disagreements.push(`${JSON.stringify(key)} of ${partitions}`)
    }
  }
  t.same(disagreements, [], `${keys.length} keys over 1, 6, 12 and 48 partitions`)
})
