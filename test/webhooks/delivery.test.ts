import t from 'tap'
import { runDeliveryCases } from './delivery-cases'
import { startWebhooks } from './support'

/**
 * The delivery rules in embedded mode (memory bus, journaled memory store).
 * kafka.test.ts runs the same cases with the bus on Kafka and the store on Redis.
 */
void runDeliveryCases(t, { start: (tt, env = {}) => startWebhooks(tt, { env }) })
