import t from 'tap'
import { runDeliveryCases } from '../support/fixtures/webhook-delivery-cases'
import { startWebhooks } from '../support/fixtures/webhooks'

/**
 * The delivery rules in embedded mode (memory bus, journaled memory store).
 * kafka.test.ts runs the same cases with the bus on Kafka and the store on Redis.
 */
void runDeliveryCases(t, { start: (tt, env = {}) => startWebhooks(tt, { env }) })
