import { scheduledAt } from '../../services/webhooks/delivery/schedule'
import t from 'tap'
import { MemoryStore } from '../../services/common/store/memory'
import { AttemptLog } from '../../services/webhooks/delivery/attempt-log'
import { DeliveryLog, type DeliveryRecord } from '../../services/webhooks/delivery-log'
import type { HttpOutcome } from '../../services/webhooks/http-client'
import { WebhookKeys } from '../../services/webhooks/keys'
import { resend, saveOp } from '../../services/webhooks/delivery/rescheduling'
import { tempDir } from '../support/util'

/**
 * A re-send starts a delivery's attempts and retry schedule over, but the
 * console's attempts go on from the ones made before it: three failed
 * attempts, a re-send, two more, then another re-send and one more are
 * attempts 1 to 6, never two attempts numbered 1.
 */

const RETENTION = 3_600_000
const failed: HttpOutcome = { kind: 'response', status: 500, headers: {}, body: 'no', ms: 3 }
const delivered: HttpOutcome = { kind: 'response', status: 200, headers: {}, body: 'ok', ms: 2 }

t.test('attempts are numbered across re-sends', async (t) => {
  const store = await MemoryStore.open(tempDir(t, 'gw-resend-'))
  t.teardown(() => store.close())
  const log = new DeliveryLog(store, RETENTION)
  const attemptLog = new AttemptLog(store, RETENTION)
  const deps = { store, deliveryLog: log, nodeId: 'test', leaseMs: 30_000, retentionMs: RETENTION }
  const now = Date.now()
  let record: DeliveryRecord = { delivery_id: 'd1', webhook_id: 'w1', app_id: 'a1', source: 'activity', body: '{"data":{"event_type":"post.create"}}', event_time: now, created_at: new Date(now).toISOString(), status: 'pending', attempts: 0, next_attempt_at: now }
  await store.batch([saveOp(record, RETENTION), { op: 'zadd', key: WebhookKeys.log('w1'), score: now, member: 'd1' }])

  /** One attempt as the runner records it: the console's entry, then the record counts it. */
  const attempt = async (out: HttpOutcome, status: DeliveryRecord['status']): Promise<void> => {
    attemptLog.note(record, out)
    record = { ...record, attempts: record.attempts + 1, status }
    await store.batch([saveOp(record, RETENTION)])
  }
  const resendAll = async (): Promise<void> => {
    t.equal(await resend(deps, 'w1', { since: 0, deliveryId: 'd1' }), 1, 're-sent')
    record = (await log.get('d1')) as DeliveryRecord
  }

  await attempt(failed, 'pending')
  await attempt(failed, 'pending')
  await attempt(failed, 'failed')
  await resendAll()
  t.equal(record.attempts, 0, 'a re-send starts the retry schedule over')
  t.equal(record.attempts_before_resend, 3, 'and keeps the count of the attempts before it')
  t.not(await scheduledAt(store, { webhookId: 'w1', deliveryId: 'd1' }), undefined, 'the delivery is on the schedule again')
  await attempt(failed, 'pending')
  await attempt(failed, 'failed')
  await resendAll()
  t.equal(record.attempts_before_resend, 5, 'a second re-send adds its attempts')
  await attempt(delivered, 'delivered')

  const numbers = (await attemptLog.attempts('d1')).map((a) => a.n)
  t.same(numbers, [1, 2, 3, 4, 5, 6], 'six attempts, numbered 1 to 6 in order')
  t.same((await attemptLog.attempts('d1')).map((a) => a.status), [500, 500, 500, 500, 500, 200], 'each with its own answer')
})
