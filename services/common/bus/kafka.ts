// Placeholder replaced by the Kafka implementation (kafkajs) in this same change set.
import type { Logger } from 'pino'
import type { Bus } from './types'
export const KafkaBus = {
  async connect(_options: { brokers: string[]; clientId: string; log: Logger }): Promise<Bus> {
    throw new Error('KafkaBus is being written')
  }
}
