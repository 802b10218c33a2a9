import { Counter } from 'prom-client'
import { type BusMessage, TOPICS } from '../common/bus/types'
import type { ServiceContext } from '../common/context'
import { describeErrors } from '../common/schemas'
import type { Worker } from '../common/service'
import type { EntityChange } from '../common/ads/entity-changes'
import { entryFromMessage, recordEntry } from './history'

/**
 * The history recorder: its own consumer group on `ads.entity-changes`.
 * The handler resolves once the entry is written to the store, so the
 * group's offset moves only past changes that are durably recorded; after
 * a restart (or a crash) the group resumes from its committed offset and a
 * change delivered twice is stored once (entries are keyed by change_id).
 */

export const HISTORY_GROUP = 'account-history'

export async function startHistoryConsumer(ctx: ServiceContext): Promise<Worker> {
  const validate = ctx.schemas.validator(`events/${TOPICS.adsEntityChanges}`)
  const recorded = new Counter({ name: 'account_history_entries_recorded_total', help: 'Entity changes recorded by account history', labelNames: ['entity_type', 'change_type'] as const, registers: [ctx.metrics] })
  const malformed = new Counter({ name: 'account_history_malformed_total', help: 'Messages on ads.entity-changes that did not match the topic schema and were skipped', registers: [ctx.metrics] })

  const handler = async (message: BusMessage): Promise<void> => {
    if (!validate(message.value)) {
      // Producers validate before publishing; retrying a message that still fails cannot fix it.
      malformed.inc()
      ctx.log.warn({ topic: message.topic, partition: message.partition, offset: message.offset, problem: describeErrors(validate.errors) }, 'skipping malformed entity change')
      return
    }
    const change = message.value as EntityChange
    await recordEntry(ctx.store, entryFromMessage(change, message))
    recorded.inc({ entity_type: change.entity_type, change_type: change.change_type })
  }

  const consumer = await ctx.bus.subscribe({ groupId: HISTORY_GROUP, topics: [TOPICS.adsEntityChanges], handler, fromBeginning: true, background: true })
  return { name: 'account-history-recorder', close: () => consumer.close() }
}
