import { consumerSpan, contextOf, endSpan, SpanKind, type Span } from '../../common/tracing'
import type { DeliveryRecord } from '../delivery-log'
import type { HttpOutcome } from '../http-client'

/**
 * The span of one webhook delivery attempt (docs/operations.md "Tracing"):
 * a child of the span that matched the delivery (its stored traceparent),
 * so every attempt, the first and each retry, is in the event's trace.
 * Its attributes say which delivery, webhook and attempt it is and how it
 * ended: the receiver's HTTP status, the failure class of a POST that got
 * no answer, or why no POST was made. Never the URL, the body or a header.
 */

/** Why an attempt made no POST. */
export type SkippedAttempt = 'webhook_deleted' | 'app_deleted' | 'webhook_disabled' | 'webhook_invalid'

/** Starts the attempt's span (undefined when tracing is off). `first`: made before the delivery was stored. */
export function startAttemptSpan(record: DeliveryRecord, first: boolean): Span | undefined {
  return consumerSpan(
    'webhook.attempt',
    contextOf(record.traceparent !== undefined ? { traceparent: record.traceparent } : undefined),
    {
      'gateway.delivery_id': record.delivery_id,
      'gateway.webhook_id': record.webhook_id,
      'gateway.app_id': record.app_id,
      // The attempt this is (1 for the first), as the retry schedule counts them.
      'gateway.attempt': record.attempts + 1,
      'gateway.first_attempt': first,
      'gateway.source': record.source
    },
    SpanKind.CLIENT
  )
}

/** Ends the span with the POST's outcome, or with why none was made. */
export function endAttemptSpan(span: Span | undefined, outcome: HttpOutcome | SkippedAttempt): void {
  if (!span) return
  if (typeof outcome === 'string') {
    span.setAttribute('gateway.skipped', outcome)
    endSpan(span, new Error(`no POST: ${outcome.replace('_', ' ')}`))
    return
  }
  if (outcome.kind === 'response') {
    span.setAttribute('http.response.status_code', outcome.status)
    endSpan(span, outcome.status >= 200 && outcome.status < 300 ? undefined : new Error(`the webhook answered ${outcome.status}`))
    return
  }
  span.setAttribute('error.type', outcome.failure)
  endSpan(span, new Error(`no answer: ${outcome.failure}`))
}
