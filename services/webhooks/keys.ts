import { sha256Hex } from '../common/auth/records'

/**
 * The webhooks service's keyspace (design.md: a service owns its keys).
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
 *   webhooks:crc-history:{id}       zset of CRC checks (JSON) by time: the console's CRC history
 *   webhooks:subs:{webhook_id}      set of user ids subscribed (Account Activity)
 *   webhooks:user:{user_id}         set of webhook ids the user is subscribed to (event routing)
 *   webhooks:delivery:{delivery_id} DeliveryRecord (JSON, kept WEBHOOK_LOG_RETENTION)
 *   webhooks:log:{webhook_id}       zset delivery id -> event time (ms): the delivery log
 *   webhooks:attempts:{delivery_id} zset of the delivery's attempts (JSON) by number (console)
 *   webhooks:tail:{app_id}          zset of the app's recent attempts (JSON) by time: the live tail
 *   webhooks:stats:{app_id}:{minute}:{field} counter per minute: n, ok, b{i} latency buckets (charts)
 *   webhooks:retries                zset "{webhook_id}:{delivery_id}" -> due time (ms)
 *   webhooks:claim:{delivery_id}    the process attempting the delivery right now
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
  crcHistory: (id: string) => `webhooks:crc-history:${id}`,
  subscribers: (webhookId: string) => `webhooks:subs:${webhookId}`,
  userWebhooks: (userId: string) => `webhooks:user:${userId}`,
  delivery: (deliveryId: string) => `webhooks:delivery:${deliveryId}`,
  log: (webhookId: string) => `webhooks:log:${webhookId}`,
  attempts: (deliveryId: string) => `webhooks:attempts:${deliveryId}`,
  tail: (appId: string) => `webhooks:tail:${appId}`,
  stats: (appId: string, minute: number, field: string) => `webhooks:stats:${appId}:${minute}:${field}`,
  retries: () => 'webhooks:retries',
  claim: (deliveryId: string) => `webhooks:claim:${deliveryId}`,
  replayLock: (webhookId: string) => `webhooks:replay-lock:${webhookId}`,
  replayJob: (jobId: string) => `webhooks:replay-job:${jobId}`,
  replayJobs: () => 'webhooks:replay-jobs'
}

/** Member of the retry zset: the webhook id travels with the delivery id so the scheduler needs no lookup. */
export function retryMember(webhookId: string, deliveryId: string): string {
  return `${webhookId}:${deliveryId}`
}

export function parseRetryMember(member: string): { webhookId: string; deliveryId: string } | undefined {
  const i = member.indexOf(':')
  if (i <= 0) return undefined
  return { webhookId: member.slice(0, i), deliveryId: member.slice(i + 1) }
}
