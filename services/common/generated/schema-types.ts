/* Generated from schemas/ by scripts/gen-types.ts (make types). Do not edit. */

/**
 * Upstream user activity (key: user_id). Producers: the ingest route POST /admin/activity/events (operators, `make publish`), the gateway (post.create for posts made through the advertising interface), any upstream producer. Consumer: the activity matcher (group activity-matcher). The payload of each event_type is described by schemas/events/activity/<event_type>.json.
 *
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "EventsActivityEvents".
 */
export type EventsActivityEvents = EventsActivityEvents1

/**
 * One message per (event, matching subscription) (key: `app_id:user_id`, the application and the subscription filter's user: one application spreads over the partitions, one user's deliveries to one application keep their order). Producer: the activity matcher. Consumers: every stream node (group stream-<node id>: all deliveries, to the app's open streams) and the webhooks service (deliveries with webhook_id, to that webhook). The envelope is sent byte-for-byte the same (JSON.stringify(envelope)) on stream and webhook. delivery_id is derived from (event_uuid, subscription_id), so a redelivered match keeps its id.
 *
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "EventsActivityDeliveries".
 */
export interface EventsActivityDeliveries {
  delivery_id: string
  app_id: string
  subscription_id: string
  webhook_id?: string
  created_at: string
  envelope: {
    data: {
      event_uuid: string
      filter: {
        user_id: string
        keyword?: string
        direction?: 'sent' | 'received'
      }
      event_type:
        | 'post.create'
        | 'post.delete'
        | 'dm.sent'
        | 'dm.received'
        | 'dm.read'
        | 'dm.indicate_typing'
        | 'spaces.start'
        | 'spaces.end'
        | 'profile.update.bio'
        | 'profile.update.profile_picture'
        | 'profile.update.banner_picture'
        | 'profile.update.geo'
        | 'profile.update.url'
        | 'profile.update.screenname'
        | 'profile.update.verified'
        | 'profile.update.affiliate'
      tag?: string
      payload: Record<string, unknown>
      includes: Record<string, unknown>
    }
  }
}
export interface EventsActivityEvents1 {
  /**
   * Unique id of the activity (numeric string, as the platform's event ids); receivers dedupe on it.
   */
  event_uuid: string
  /**
   * Dotted lowercase name (deprecated PascalCase names are normalised by the ingest route, never published).
   */
  event_type:
    | 'post.create'
    | 'post.delete'
    | 'dm.sent'
    | 'dm.received'
    | 'dm.read'
    | 'dm.indicate_typing'
    | 'spaces.start'
    | 'spaces.end'
    | 'profile.update.bio'
    | 'profile.update.profile_picture'
    | 'profile.update.banner_picture'
    | 'profile.update.geo'
    | 'profile.update.url'
    | 'profile.update.screenname'
    | 'profile.update.verified'
    | 'profile.update.affiliate'
  /**
   * The user the activity belongs to: subscriptions with filter.user_id equal to it are candidates.
   */
  user_id: string
  created_at: string
  payload: Record<string, unknown>
  /**
   * Expanded objects (users, tweets, ...) copied into the envelope.
   */
  includes?: {
    users?: Record<string, unknown>[]
    tweets?: Record<string, unknown>[]
    media?: Record<string, unknown>[]
    places?: Record<string, unknown>[]
    polls?: Record<string, unknown>[]
    topics?: Record<string, unknown>[]
  }
  /**
   * Optional producer name (ingest, ads, ...), for tracing.
   */
  source?: string
}
/**
 * sender_id is typing a message to target.recipient_id. Direction is 'sent' when sender_id is the filtered user, else 'received'.
 *
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "EventsActivityDmIndicateTyping".
 */
export interface EventsActivityDmIndicateTyping {
  /**
   * @minItems 1
   */
  direct_message_indicate_typing_events: [
    {
      created_timestamp: string
      sender_id: string
      target: {
        recipient_id: string
      }
    },
    ...{
      created_timestamp: string
      sender_id: string
      target: {
        recipient_id: string
      }
    }[]
  ]
  users?: Record<string, unknown>
}
/**
 * A read receipt: sender_id read the messages of target.recipient_id up to last_read_event_id. Direction is 'sent' when sender_id is the filtered user (they read), else 'received'.
 *
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "EventsActivityDmRead".
 */
export interface EventsActivityDmRead {
  /**
   * @minItems 1
   */
  direct_message_mark_read_events: [
    {
      created_timestamp: string
      sender_id: string
      target: {
        recipient_id: string
      }
      last_read_event_id: string
    },
    ...{
      created_timestamp: string
      sender_id: string
      target: {
        recipient_id: string
      }
      last_read_event_id: string
    }[]
  ]
  users?: Record<string, unknown>
}
/**
 * A direct message received by the filtered user. Direction is 'sent' when message_create.sender_id is the filtered user, else 'received'. Keyword filters search message_data.text.
 *
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "EventsActivityDmReceived".
 */
export interface EventsActivityDmReceived {
  /**
   * @minItems 1
   */
  direct_message_events: [
    {
      type: 'message_create'
      id: string
      created_timestamp: string
      message_create: {
        target: {
          recipient_id: string
        }
        sender_id: string
        message_data: {
          text: string
          entities?: Record<string, unknown>
        }
      }
    },
    ...{
      type: 'message_create'
      id: string
      created_timestamp: string
      message_create: {
        target: {
          recipient_id: string
        }
        sender_id: string
        message_data: {
          text: string
          entities?: Record<string, unknown>
        }
      }
    }[]
  ]
  /**
   * Users by id, each {data: User}.
   */
  users?: Record<string, unknown>
}
/**
 * A direct message sent by the filtered user. Direction is 'sent' when message_create.sender_id is the filtered user, else 'received'. Keyword filters search message_data.text.
 *
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "EventsActivityDmSent".
 */
export interface EventsActivityDmSent {
  /**
   * @minItems 1
   */
  direct_message_events: [
    {
      type: 'message_create'
      id: string
      created_timestamp: string
      message_create: {
        target: {
          recipient_id: string
        }
        sender_id: string
        message_data: {
          text: string
          entities?: Record<string, unknown>
        }
      }
    },
    ...{
      type: 'message_create'
      id: string
      created_timestamp: string
      message_create: {
        target: {
          recipient_id: string
        }
        sender_id: string
        message_data: {
          text: string
          entities?: Record<string, unknown>
        }
      }
    }[]
  ]
  /**
   * Users by id, each {data: User}.
   */
  users?: Record<string, unknown>
}
/**
 * A post object (v2 Tweet shape). Keyword filters search text and note_tweet.text. Posts created through the advertising interface are published with this payload by the gateway.
 *
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "EventsActivityPostCreate".
 */
export interface EventsActivityPostCreate {
  id: string
  text: string
  author_id?: string
  created_at?: string
  conversation_id?: string
  lang?: string
  edit_history_tweet_ids?: string[]
  note_tweet?: {
    text?: string
  }
  entities?: Record<string, unknown>
  public_metrics?: Record<string, unknown>
  referenced_tweets?: {
    type: string
    id: string
  }[]
  [k: string]: unknown | undefined
}
/**
 * The identity of a deleted post.
 *
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "EventsActivityPostDelete".
 */
export interface EventsActivityPostDelete {
  id: string
  author_id: string
}
/**
 * The user's affiliate badge changed (before/after describe the badge, empty when none). Keyword filters search before and after.
 *
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "EventsActivityProfileUpdateAffiliate".
 */
export interface EventsActivityProfileUpdateAffiliate {
  before: string
  after: string
}
/**
 * The user's profile banner changed (deprecated alias ProfileBannerUpdate). before/after are image URLs. Keyword filters search before and after.
 *
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "EventsActivityProfileUpdateBannerPicture".
 */
export interface EventsActivityProfileUpdateBannerPicture {
  before: string
  after: string
}
/**
 * The user's profile bio changed. Keyword filters search before and after.
 *
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "EventsActivityProfileUpdateBio".
 */
export interface EventsActivityProfileUpdateBio {
  before: string
  after: string
}
/**
 * The user's profile location changed (deprecated alias ProfileGeoUpdate). Keyword filters search before and after.
 *
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "EventsActivityProfileUpdateGeo".
 */
export interface EventsActivityProfileUpdateGeo {
  before: string
  after: string
}
/**
 * The user's profile picture changed (deprecated alias ProfilePictureUpdate). before/after are image URLs. Keyword filters search before and after.
 *
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "EventsActivityProfileUpdateProfilePicture".
 */
export interface EventsActivityProfileUpdateProfilePicture {
  before: string
  after: string
}
/**
 * The user's handle changed. Keyword filters search before and after.
 *
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "EventsActivityProfileUpdateScreenname".
 */
export interface EventsActivityProfileUpdateScreenname {
  before: string
  after: string
}
/**
 * The user's profile website URL changed (deprecated alias ProfileUrlUpdate). Keyword filters search before and after.
 *
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "EventsActivityProfileUpdateUrl".
 */
export interface EventsActivityProfileUpdateUrl {
  before: string
  after: string
}
/**
 * The user's verification status changed (e.g. "none" -> "blue"). Keyword filters search before and after.
 *
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "EventsActivityProfileUpdateVerified".
 */
export interface EventsActivityProfileUpdateVerified {
  before: string
  after: string
}
/**
 * A Space hosted by the filtered user started or ended. Keyword filters search title.
 *
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "EventsActivitySpacesEnd".
 */
export interface EventsActivitySpacesEnd {
  /**
   * The host: {data: User}.
   */
  user: {
    data: {
      id: string
    }
  }
  broadcast_id: string
  event_type: 'spaces_end'
  title?: string
}
/**
 * A Space hosted by the filtered user started or ended. Keyword filters search title.
 *
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "EventsActivitySpacesStart".
 */
export interface EventsActivitySpacesStart {
  /**
   * The host: {data: User}.
   */
  user: {
    data: {
      id: string
    }
  }
  broadcast_id: string
  event_type: 'spaces_start'
  title?: string
}
/**
 * Published by the gateway on every create, update and delete of an advertising entity; consumed by account history. Key: account id.
 *
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "EventsAdsEntityChanges".
 */
export interface EventsAdsEntityChanges {
  change_id: string
  account_id: string
  entity_type: string
  entity_id: string
  change_type: 'CREATE' | 'UPDATE' | 'DELETE'
  changed_at: string
  changed_by: {
    user_id: string
    platform: string
  }
  changes: {
    [k: string]:
      | {
          old: unknown
          new: unknown
        }
      | undefined
  }
  entity_data: Record<string, unknown>
}
/**
 * Produced by the bus itself (key: the original message's key) when a group's handler failed on a message maxAttempts times in a row (10 by default) for a reason other than an outage. The group moves past it; operators inspect it here (and may publish its value again).
 *
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "EventsBusDeadLetter".
 */
export interface EventsBusDeadLetter {
  /**
   * The consumer group whose handler failed
   */
  group: string
  topic: string
  partition: number
  offset: string
  key: string
  /**
   * The message's value as it was consumed
   */
  value: {
    [k: string]: unknown | undefined
  }
  headers: {
    [k: string]: string | undefined
  }
  published_at: string
  /**
   * The last failure's message
   */
  error: string
  attempts: number
  dead_at: string
}
/**
 * Produced by the webhooks service (key: webhook id) when a delivery exhausted WEBHOOK_RETRY_SCHEDULE or the webhook answered 410 Gone. The delivery also stays in the delivery log as `failed`, where an operator can re-send it.
 *
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "EventsWebhookDeadLetter".
 */
export interface EventsWebhookDeadLetter {
  delivery_id: string
  webhook_id: string
  app_id: string
  /**
   * activity: a match of an activity subscription; account-activity: an Account Activity user subscription
   */
  source: 'activity' | 'account-activity'
  event_uuid?: string
  for_user_id?: string
  /**
   * exhausted: every attempt of the retry schedule failed; gone: the webhook answered 410
   */
  reason: 'exhausted' | 'gone'
  attempts: number
  last_status?: number
  last_error: string
  created_at: string
  dead_at: string
  /**
   * The exact request body the webhook was sent (and its signature covers)
   */
  body: string
}
/**
 * Request shapes of the activity service. event_type is checked by the route against the list of event kinds and the deprecated PascalCase aliases, and direction against the event kind, so their errors can name the accepted values.
 *
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "HttpActivitySubscriptions".
 */
export interface HttpActivitySubscriptions {
  [k: string]: unknown | undefined
}
/**
 * This interface was referenced by `HttpActivitySubscriptions`'s JSON-Schema
 * via the `definition` "Filter".
 */
export interface Filter {
  user_id: string
  keyword?: string
  /**
   * sent|received (also outbound|inbound); only for dm events.
   */
  direction?: string
}
/**
 * This interface was referenced by `HttpUsageTweets`'s JSON-Schema
 * via the `definition` "UsageDay".
 */
export interface UsageDay {
  date: string
  usage: number
}
/**
 * This interface was referenced by `HttpUsageTweets`'s JSON-Schema
 * via the `definition` "ClientAppUsage".
 */
export interface ClientAppUsage {
  client_app_id: string
  /**
   * @minItems 1
   */
  usage: [UsageDay, ...UsageDay[]]
  usage_result_count: number
}
/**
 * This interface was referenced by `HttpUsageTweets`'s JSON-Schema
 * via the `definition` "Usage".
 */
export interface Usage {
  cap_reset_day?: number
  daily_client_app_usage?: ClientAppUsage[]
  daily_project_usage?: {
    project_id: string
    usage: UsageDay[]
  }
  project_cap?: number
  project_id?: string
  project_usage?: number
}
/**
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "HttpWebhooksAdminReplayRequest".
 */
export interface HttpWebhooksAdminReplayRequest {
  from_date: string
  to_date: string
}
/**
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "HttpWebhooksCreateRequest".
 */
export interface HttpWebhooksCreateRequest {
  url: string
  standard_webhooks?: boolean
}
/**
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "HttpWebhooksReplayRequest".
 */
export interface HttpWebhooksReplayRequest {
  webhook_id: string
  from_date: string
  to_date: string
}
/**
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "HttpWebhooksResendRequest".
 */
export interface HttpWebhooksResendRequest {
  since: string
  status?: 'failed' | 'delivered' | 'cancelled'
}
/**
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "HttpWebhooksRotateRequest".
 */
export interface HttpWebhooksRotateRequest {
  overlap_seconds?: number
}
/**
 * This interface was referenced by `SchemaTypesRoot`'s JSON-Schema
 * via the `definition` "HttpWebhooksUpdateRequest".
 */
export interface HttpWebhooksUpdateRequest {
  standard_webhooks: boolean
}
