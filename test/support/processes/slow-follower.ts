import { Kafka, logLevel } from 'kafkajs'

/**
 * A consumer group member whose event loop is busy for BUSY_MS right after
 * each JoinGroup answer, as a process just started or in the middle of a
 * batch is: its SyncGroup goes out that much later. Prints `joined` when it
 * is in the group and `crashed <message>` when kafkajs gave up on it.
 * Run by test/common/kafka-assignment.test.ts: BROKERS GROUP TOPIC BUSY_MS.
 */
const [brokers = '', groupId = '', topic = '', busy = '300'] = process.argv.slice(2)
const kafka = new Kafka({ clientId: 'slow-follower', brokers: brokers.split(','), logLevel: logLevel.NOTHING })
const consumer = kafka.consumer({ groupId, sessionTimeout: 3000, heartbeatInterval: 500, rebalanceTimeout: 6000, retry: { retries: 0, restartOnFailure: async () => false } })
consumer.on(consumer.events.REQUEST, (e) => {
  // Emitted synchronously as the answer resolves: the SyncGroup that follows waits for this loop.
  if (e.payload.apiName !== 'JoinGroup') return
  const until = Date.now() + Number(busy)
  while (Date.now() < until) {
    // busy, like a starting process compiling its code
  }
})
consumer.on(consumer.events.GROUP_JOIN, () => process.stdout.write('joined\n'))
consumer.on(consumer.events.CRASH, (e) => process.stdout.write(`crashed ${e.payload.error.message}\n`))
process.stdin.on('end', () => void consumer.disconnect().finally(() => process.exit(0)))
process.stdin.resume()
void consumer
  .connect()
  .then(() => consumer.subscribe({ topics: [topic], fromBeginning: true }))
  .then(() => consumer.run({ eachBatch: async () => undefined }))
  .catch((err: Error) => process.stdout.write(`crashed ${err.message}\n`))
