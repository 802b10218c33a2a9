import { BacklogFullError, IngestBacklog } from './backlog'
import type { FastifyInstance } from 'fastify'
import { TOPICS } from '../common/bus/types'
import type { ServiceContext } from '../common/context'
import { Problems, type InvalidRequestItem } from '../common/errors'
import { newNumericId } from '../common/ids'
import { operatorGuard, resolveOperatorToken } from '../common/operator'
import type { ErrorObject } from 'ajv'
import { acceptedEventTypeNames, normalizeEventType } from './event-types'
import type { ActivityEvent } from './subscription-filter'
import { batchFingerprint, type Claim, idempotencyKeyOf, IngestIdempotency, REPLAYED_HEADER } from './ingest-idempotency'
import { activityMetrics } from './metrics'

/**
 * `POST /admin/activity/events` (operator token): how operators and the
 * embedded default feed upstream activity into `activity.events`.
 *
 * Body: one event as `application/json` (an array of events is accepted
 * too), or a batch as NDJSON (`application/x-ndjson`, one event per line;
 * blank lines are ignored). `event_uuid` and `created_at` are filled in when
 * absent, deprecated PascalCase event types are stored dotted.
 *
 * A batch is all or nothing: when any line is invalid nothing is published
 * and the answer is an invalid-request Problem listing every invalid line
 * ("line 3: /payload is missing \"text\""), so a corrected file can be sent
 * again without duplicating the valid lines. Every refused event is counted
 * in `activity_events_rejected_total{reason}`.
 *
 * With an `Idempotency-Key` header, the same batch sent again within 24 h
 * gets the first answer and publishes nothing (ingest-idempotency.ts).
 */

export const INGEST_PATH = '/admin/activity/events'
export const MAX_EVENTS_PER_REQUEST = 10_000
const MAX_ERRORS_LISTED = 100
/** Who sends idempotency keys here: the operator API has one identity (the operator token). */
const OPERATOR_CALLER = 'operator'
const NDJSON_TYPES = ['application/x-ndjson', 'application/ndjson', 'application/jsonl', 'application/x-jsonlines']

export interface LineError {
  line: number
  reason: 'json' | 'event_type' | 'schema' | 'inconsistent'
  message: string
}

export interface ParsedBatch {
  events: ActivityEvent[]
  errors: LineError[]
}

type Validate = ((value: unknown) => boolean) & { errors?: ErrorObject[] | null }

/** Validates and normalises raw events; `lines[i]` is the 1-based line (or array position) of `raws[i]`. */
export function prepareEvents(raws: Array<{ line: number; value?: unknown; parseError?: string }>, validate: Validate, now = new Date()): ParsedBatch {
  const events: ActivityEvent[] = []
  const errors: LineError[] = []
  for (const raw of raws) {
    if (raw.parseError !== undefined) {
      errors.push({ line: raw.line, reason: 'json', message: `line ${raw.line}: not valid JSON (${raw.parseError})` })
      continue
    }
    const value = raw.value
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      errors.push({ line: raw.line, reason: 'schema', message: `line ${raw.line}: an event must be a JSON object` })
      continue
    }
    const event = { ...(value as Record<string, unknown>) }
    if (typeof event.event_type === 'string') {
      const dotted = normalizeEventType(event.event_type)
      if (dotted === undefined) {
        errors.push({ line: raw.line, reason: 'event_type', message: `line ${raw.line}: unknown event_type "${event.event_type}"; accepted: ${acceptedEventTypeNames().join(', ')}` })
        continue
      }
      event.event_type = dotted
    }
    event.event_uuid ??= newNumericId(now.getTime())
    event.created_at ??= now.toISOString()
    if (!validate(event)) {
      errors.push({ line: raw.line, reason: 'schema', message: `line ${raw.line}: ${describeEventErrors(validate.errors)}` })
      continue
    }
    const inconsistency = inconsistencyOf(event as unknown as ActivityEvent)
    if (inconsistency !== undefined) {
      errors.push({ line: raw.line, reason: 'inconsistent', message: `line ${raw.line}: ${inconsistency}` })
      continue
    }
    events.push(event as unknown as ActivityEvent)
  }
  return { events, errors }
}

/**
 * What a schema cannot say: the event's user_id is the user the activity is
 * about, and the matcher delivers it to that user's subscriptions. A deleted
 * post belongs to its author, so another user's id would hand the deletion
 * to the wrong subscribers.
 */
export function inconsistencyOf(event: ActivityEvent): string | undefined {
  if (event.event_type === 'post.delete') {
    const author = event.payload.author_id
    if (author !== event.user_id) return `/payload/author_id (${String(author)}) must be the event's user_id (${event.user_id}): a post is deleted by its author`
  }
  return undefined
}

/** ajv errors as one sentence, without the if/then bookkeeping errors of the per-kind dispatch. */
export function describeEventErrors(errors: ErrorObject[] | null | undefined): string {
  const useful = (errors ?? []).filter((e) => e.keyword !== 'if')
  if (useful.length === 0) return 'invalid event'
  return useful
    .map((e) => {
      const where = e.instancePath === '' ? 'the event' : e.instancePath
      const params = e.params as Record<string, unknown>
      if (e.keyword === 'required') return `${where} is missing "${String(params.missingProperty)}"`
      if (e.keyword === 'additionalProperties') return `${where} has unexpected property "${String(params.additionalProperty)}"`
      if (e.keyword === 'enum') return `${where} must be one of ${(params.allowedValues as unknown[]).join(', ')}`
      if (e.keyword === 'const') return `${where} must be ${JSON.stringify(params.allowedValue)}`
      if (e.keyword === 'not') return `${where} must not have this property set`
      return `${where} ${e.message ?? 'is invalid'}`
    })
    .join('; ')
}

/** Events in a refused body, for the metric: NDJSON's non-blank lines (counted, not parsed), an array's items, else one. */
function roughCount(body: unknown): number {
  if (Array.isArray(body)) return body.length
  const text = (body as { ndjson?: unknown } | null)?.ndjson
  if (typeof text !== 'string') return 1
  let n = 0
  let from = 0
  while (from < text.length) {
    let to = text.indexOf('\n', from)
    if (to < 0) to = text.length
    if (text.slice(from, to).trim() !== '') n++
    from = to + 1
  }
  return Math.max(1, n)
}

/** Splits an NDJSON body into parsed lines (blank lines skipped, numbering kept). */
export function parseNdjson(body: string): Array<{ line: number; value?: unknown; parseError?: string }> {
  const out: Array<{ line: number; value?: unknown; parseError?: string }> = []
  const lines = body.split('\n')
  for (let i = 0; i < lines.length; i++) {
    const text = (lines[i] as string).replace(/\r$/, '').trim()
    if (text === '') continue
    try {
      out.push({ line: i + 1, value: JSON.parse(text) as unknown })
    } catch (err) {
      out.push({ line: i + 1, parseError: (err as Error).message })
    }
  }
  return out
}

export async function registerIngestRoute(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  const metrics = activityMetrics(ctx)
  const validate = ctx.schemas.validator(`events/${TOPICS.activityEvents}`)
  const guard = operatorGuard(resolveOperatorToken(ctx.config, ctx.serviceName === 'embedded'))
  const idempotency = new IngestIdempotency(ctx.store)
  const backlog = new IngestBacklog(ctx)

  await app.register(async (scope) => {
    scope.addContentTypeParser(NDJSON_TYPES, { parseAs: 'string' }, (_request, body, done) => {
      done(null, { ndjson: body as string })
    })

    scope.post(INGEST_PATH, { preHandler: guard }, async (request, reply) => {
      // Past the backlog's bound nothing more is accepted, refused before any of it is parsed or published:
      // under overload a refusal must cost next to nothing, or refusing takes the CPU the consumers need.
      try {
        await backlog.admit()
      } catch (err) {
        if (!(err instanceof BacklogFullError)) throw err
        metrics.rejected.inc({ reason: 'backlog-full' }, roughCount(request.body))
        request.log.warn({ lag: err.lag, limit: err.limit, retry_after: err.retryAfterSeconds }, 'activity ingest batch refused: backlog full')
        void reply.header('retry-after', String(err.retryAfterSeconds))
        throw err.problem
      }

      const idempotencyKey = idempotencyKeyOf(request.headers)
      const body = request.body as unknown
      let raws: Array<{ line: number; value?: unknown; parseError?: string }>
      let text: unknown = body
      if (typeof body === 'object' && body !== null && typeof (body as { ndjson?: unknown }).ndjson === 'string' && isNdjson(request.headers['content-type'])) {
        text = (body as { ndjson: string }).ndjson
        raws = parseNdjson(text as string)
      } else if (Array.isArray(body)) {
        raws = body.map((value, i) => ({ line: i + 1, value: value as unknown }))
      } else if (body === undefined || body === null) {
        throw Problems.invalidRequest([{ message: 'The request body must be one JSON event (application/json) or NDJSON events (application/x-ndjson).', parameters: { body: [] } }])
      } else {
        raws = [{ line: 1, value: body }]
      }
      if (raws.length === 0) throw Problems.invalidRequest([{ message: 'The batch contains no events.', parameters: { body: [] } }])
      if (raws.length > MAX_EVENTS_PER_REQUEST) {
        metrics.rejected.inc({ reason: 'batch-too-large' }, raws.length)
        throw Problems.invalidRequest([{ message: `A batch holds at most ${MAX_EVENTS_PER_REQUEST} events; this one has ${raws.length}. Split it.`, parameters: { body: [] } }])
      }

      const { events, errors } = prepareEvents(raws, validate)
      if (errors.length > 0) {
        for (const e of errors) metrics.rejected.inc({ reason: e.reason })
        const listed: InvalidRequestItem[] = errors.slice(0, MAX_ERRORS_LISTED).map((e) => ({ message: e.message, parameters: { line: [String(e.line)] } }))
        if (errors.length > MAX_ERRORS_LISTED) listed.push({ message: `... and ${errors.length - MAX_ERRORS_LISTED} more invalid lines`, parameters: {} })
        request.log.warn({ invalid: errors.length, total: raws.length }, 'activity ingest batch refused')
        throw Problems.invalidRequest(listed, `${errors.length} of ${raws.length} events are invalid; none was published.`)
      }

      let claim: Claim | undefined
      if (idempotencyKey !== undefined) {
        claim = await idempotency.claim(OPERATOR_CALLER, idempotencyKey, batchFingerprint(mediaType(request.headers['content-type']), text))
        if (claim.kind === 'replay') {
          metrics.replayed.inc()
          return reply.header(REPLAYED_HEADER, 'true').send(claim.answer)
        }
      }
      // Counted against the bound until the next reading of the lag sees them (backlog.ts).
      backlog.admitted(events.length)
      try {
        await ctx.bus.publishMany(
          TOPICS.activityEvents,
          events.map((e) => ({ key: e.user_id, value: e }))
        )
      } catch (err) {
        // Not published (or not all of it): the key is free for the retry.
        if (claim?.kind === 'first') await claim.release().catch(() => undefined)
        throw err
      }
      for (const e of events) metrics.ingested.inc({ event_type: e.event_type })
      const answer = { data: { accepted: events.length, event_uuids: events.map((e) => e.event_uuid) } }
      if (claim?.kind === 'first') {
        // Published either way: the producer gets its 200. A retry meets the pending record (409) until it expires.
        await claim.complete(answer).catch((err: unknown) => request.log.error({ err }, 'activity ingest: the idempotency record was not saved'))
      }
      return answer
    })
  })
}

function mediaType(contentType: string | undefined): string {
  return (contentType ?? '').split(';')[0]?.trim().toLowerCase() ?? ''
}

function isNdjson(contentType: string | undefined): boolean {
  return NDJSON_TYPES.includes(mediaType(contentType))
}
