import { Kafka, logLevel } from 'kafkajs'

/**
 * A consumer group member in a process of its own, with a long session (30 s),
 * so a test can kill it with SIGKILL and see how soon its partitions move.
 * Prints `joined <member id>` at each join. Run by test/common/group-eviction.test.ts:
 * BROKERS GROUP TOPIC.
 */
const [brokers = '', groupId = '', topic = ''] = process.argv.slice(2)
const kafka = new Kafka({ clientId: 'group-member', brokers: brokers.split(','), logLevel: logLevel.NOTHING })
const consumer = kafka.consumer({ groupId, sessionTimeout: 30_000, heartbeatInterval: 1000, rebalanceTimeout: 60_000 })
consumer.on(consumer.events.GROUP_JOIN, (e) => process.stdout.write(`joined ${e.payload.memberId}\n`))
void consumer
  .connect()
  .then(() => consumer.subscribe({ topics: [topic], fromBeginning: true }))
  .then(() => consumer.run({ eachBatch: async () => undefined }))
  .catch((err: Error) => process.stdout.write(`crashed ${err.message}\n`))
