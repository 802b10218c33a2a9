import type { InvalidRequestItem } from '../common/errors'
import { acceptedEventTypeNames, type EventType, normalizeDirection, normalizeEventType, supportsDirection, supportsKeyword } from './event-types'
import type { SubscriptionFilter } from './subscriptions'

/**
 * The checks of a new subscription's event type and filter, shared by
 * POST /2/activity/subscriptions and the console's create form: the
 * normalized event type and filter, and every problem found.
 */

export interface NewSubscriptionInput {
  event_type: string
  filter: { user_id: string; keyword?: string; direction?: string }
}

export function checkNewSubscription(body: NewSubscriptionInput): { eventType: EventType | undefined; filter: SubscriptionFilter; problems: InvalidRequestItem[] } {
  const problems: InvalidRequestItem[] = []
  const eventType = normalizeEventType(body.event_type)
  if (eventType === undefined) {
    problems.push({ message: `The \`event_type\` field must be one of: ${acceptedEventTypeNames().join(', ')}`, parameters: { event_type: [body.event_type] } })
  }
  const filter: SubscriptionFilter = { user_id: body.filter.user_id }
  if (body.filter.keyword !== undefined) {
    if (body.filter.keyword.trim() === '') {
      problems.push({ message: 'The `filter.keyword` field must contain a word', parameters: { 'filter.keyword': [body.filter.keyword] } })
    } else if (eventType !== undefined && !supportsKeyword(eventType)) {
      problems.push({ message: `The \`filter.keyword\` field applies only to events with text, not to ${eventType}`, parameters: { 'filter.keyword': [body.filter.keyword] } })
    } else {
      filter.keyword = body.filter.keyword
    }
  }
  if (body.filter.direction !== undefined) {
    const direction = normalizeDirection(body.filter.direction)
    if (direction === undefined) {
      problems.push({ message: 'The `filter.direction` field must be one of: sent, received (or outbound, inbound)', parameters: { 'filter.direction': [body.filter.direction] } })
    } else if (eventType !== undefined && !supportsDirection(eventType)) {
      problems.push({ message: `The \`filter.direction\` field applies only to direct-message events, not to ${eventType}`, parameters: { 'filter.direction': [body.filter.direction] } })
    } else {
      filter.direction = direction
    }
  }
  return { eventType, filter, problems }
}
