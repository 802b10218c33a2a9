import { sha256Hex } from '../common/auth/records'

/**
 * The webhooks service's keyspace (docs/architecture.md: a service owns its keys).
 *
 *   webhooks:config:{id}            hash: id, app_id, url, valid, created_at, CRC state
 *                                   (shared, read-only for others: the activity service checks a
 *                                   subscription's webhook_id exists and belongs to the app)
 *   webhooks:app:{app_id}           set of the app's webhook ids
 *   webhooks:all                    set of every webhook id
 *   webhooks:url:{app_id}:{sha256}  webhook id registered for that URL (duplicate check)
 *   webhooks:limit-lock:{app_id}    held around "count the app's webhooks, insert one"
 *   webhooks:subs-lock:{app_id}     held around "count the app's subscriptions, add one"
 *   webhooks:crc-schedule           zset webhook id -> next periodic CRC (ms)
 *   webhooks:crc-lock:{id}          one periodic CRC at a time per webhook across processes
 *   webhooks:signing-lock:{id}      held around a change of the webhook's Standard Webhooks secrets
 *   webhooks:crc-history:{id}       zset of CRC checks (JSON) by time: the console's CRC history
 *   webhooks:subs:{webhook_id}      set of user ids subscribed (Account Activity)
 *   webhooks:user:{user_id}         set of webhook ids the user is subscribed to (event routing)
 *   webhooks:delivery:{tag}:{delivery_id} DeliveryRecord (JSON, kept WEBHOOK_LOG_RETENTION)
 *   webhooks:log:{webhook_id}       zset delivery id -> event time (ms): the delivery log
 *   webhooks:attempts:{tag}:{delivery_id} zset of a delivery's attempts (JSON) by number: only
 *                                   read, for records written before records kept their attempts
 *   webhooks:tail:{app_id}          zset of the app's recent attempts (JSON) by time: the live tail
 *   webhooks:stats:{app_id}:{minute}:{field} counter per minute: n, ok, b{i} latency buckets (charts)
 *   webhooks:retries:{tag}          zset "{webhook_id}:{delivery_id}" -> due time (ms): one shard of
 *                                   the retry schedule (delivery/schedule.ts owns these keys)
 *   webhooks:claim:{tag}:{delivery_id} the process attempting the delivery right now
 *   webhooks:leases:{process_id}    zset delivery -> lease end: what that process holds ahead on the schedule
 *
 * {tag} is a Redis Cluster hash tag: one of DELIVERY_TAGS, picked by the
 * delivery id, so everything one delivery writes (record, attempts, claim,
 * schedule entry) lands in one hash slot and is written atomically there,
 * while a webhook's deliveries spread over every master
 * (docs/operations.md "Redis Cluster").
 *   webhooks:replay-lock:{id}       job id of the webhook's running replay (one at a time)
 *   webhooks:replay-job:{job_id}    ReplayJob (JSON)
 *   webhooks:replay-jobs            set of running job ids
 */
export const WebhookKeys = {
  config: (id: string) => `webhooks:config:${id}`,
  byApp: (appId: string) => `webhooks:app:${appId}`,
  all: () => 'webhooks:all',
  url: (appId: string, normalizedUrl: string) => `webhooks:url:${appId}:${sha256Hex(normalizedUrl)}`,
  limitLock: (appId: string) => `webhooks:limit-lock:${appId}`,
  subscriptionLock: (appId: string) => `webhooks:subs-lock:${appId}`,
  crcSchedule: () => 'webhooks:crc-schedule',
  crcLock: (id: string) => `webhooks:crc-lock:${id}`,
  signingLock: (id: string) => `webhooks:signing-lock:${id}`,
  crcHistory: (id: string) => `webhooks:crc-history:${id}`,
  subscribers: (webhookId: string) => `webhooks:subs:${webhookId}`,
  userWebhooks: (userId: string) => `webhooks:user:${userId}`,
  delivery: (deliveryId: string) => `webhooks:delivery:{${deliveryTag(deliveryId)}}:${deliveryId}`,
  log: (webhookId: string) => `webhooks:log:${webhookId}`,
  attempts: (deliveryId: string) => `webhooks:attempts:{${deliveryTag(deliveryId)}}:${deliveryId}`,
  tail: (appId: string) => `webhooks:tail:${appId}`,
  stats: (appId: string, minute: number, field: string) => `webhooks:stats:${appId}:${minute}:${field}`,
  /** The deliveries a webhooks process holds leased ahead on the schedule (delivery/leases.ts). */
  leases: (processId: string) => `webhooks:leases:${processId}`,
  claim: (deliveryId: string) => `webhooks:claim:{${deliveryTag(deliveryId)}}:${deliveryId}`,
  replayLock: (webhookId: string) => `webhooks:replay-lock:${webhookId}`,
  replayJob: (jobId: string) => `webhooks:replay-job:${jobId}`,
  replayJobs: () => 'webhooks:replay-jobs'
}

/**
 * The delivery path's hash tags: twelve, each chosen so its hash slot sits in
 * the middle of its twelfth of the 16,384 slots. A cluster whose masters own
 * equal ranges (as `redis-cli --cluster create` makes them) then holds the
 * same number of tags on each master for 1, 2, 3, 4, 6 or 12 masters.
 * Fixed, not a setting: a delivery's keys are named by its tag, so changing
 * the set would orphan the records and schedule entries already stored.
 * test/webhooks/schedule.test.ts checks the slots.
 */
export const DELIVERY_TAGS = ['d04o', 'd1av', 'd2oq', 'd32p', 'd4xg', 'd516', 'd6ap', 'd7nc', 'd85', 'd9ew', 'da5m', 'dbey'] as const

/** The tag of a delivery's keys: FNV-1a of its id over the twelve tags. */
export function deliveryTag(deliveryId: string): string {
  let h = 0x811c9dc5
  for (let i = 0; i < deliveryId.length; i++) {
    h ^= deliveryId.charCodeAt(i)
    h = Math.imul(h, 0x01000193)
  }
  return DELIVERY_TAGS[(h >>> 0) % DELIVERY_TAGS.length] as string
}
