import type { Store } from '../common/store/types'

/**
 * The one piece of the webhooks service's state the activity service reads:
 * whether a webhook exists and which application owns it, through the key
 * the webhooks service documents as shared and read-only for others
 * (services/webhooks/keys.ts, docs/architecture.md "Activity and stream"):
 *
 *   webhooks:config:{webhook_id}   hash with at least the field `app_id`
 *
 * written when a webhook is registered and deleted with it.
 */

export const webhookConfigKey = (webhookId: string): string => `webhooks:config:${webhookId}`

export async function webhookOwnedBy(store: Store, webhookId: string, appId: string): Promise<boolean> {
  return (await store.hget(webhookConfigKey(webhookId), 'app_id')) === appId
}
