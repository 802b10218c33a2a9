import type { FastifySchemaValidationError } from 'fastify'
import { type ProblemError, Problems } from '../common/errors'

/**
 * Failures of the webhook and Account Activity routes: invalid-request
 * Problems whose message starts with the public platform's reason
 * (platform-facts §2), e.g. `CrcValidationFailed: Invalid response_token`,
 * with `parameters` naming the offending input.
 */

export type Reason =
  | 'CrcValidationFailed'
  | 'UrlValidationFailed'
  | 'DuplicateUrlFailed'
  | 'WebhookLimitExceeded'
  | 'WebhookIdInvalid'
  | 'DuplicateSubscriptionFailed'
  | 'SubscriptionLimitExceeded'
  | 'SubscriptionNotFound'
  | 'UserIdInvalid'
  | 'QueryParamInvalid'

export function failure(reason: Reason, parameter: string, value: string, text: string): ProblemError {
  return Problems.invalidParameter(parameter, value, `${reason}: ${text}`)
}

const ID_PATTERN = /^[0-9]{1,19}$/

/** The path's webhook id, or the WebhookIdInvalid Problem. */
export function webhookIdParam(value: unknown, parameter = 'webhook_id'): string {
  const id = typeof value === 'string' ? value : ''
  if (!ID_PATTERN.test(id)) throw failure('WebhookIdInvalid', parameter, id, `The \`${parameter}\` value [${id}] does not match ^[0-9]{1,19}$.`)
  return id
}

export function userIdParam(value: unknown): string {
  const id = typeof value === 'string' ? value : ''
  if (!ID_PATTERN.test(id)) throw failure('UserIdInvalid', 'user_id', id, `The \`user_id\` value [${id}] does not match ^[0-9]{1,19}$.`)
  return id
}

/**
 * An unknown webhook id (or one of another app): the platform's invalid-request
 * Problem with the WebhookIdInvalid reason, never resource-not-found (whose
 * resource_type has no value for a webhook).
 */
export function webhookNotFound(id: string, parameter = 'webhook_id', scope = 'for this application'): ProblemError {
  return failure('WebhookIdInvalid', parameter, id, `No webhook with id [${id}] is registered ${scope}.`)
}

/** Longest echo of an input value in a Problem; longer ones end with `…`. */
export const ECHO_MAX_CHARS = 256
/** Nesting shown in an echo; deeper arrays and objects appear as `[…]` / `{…}`. */
const ECHO_MAX_DEPTH = 8

/**
 * A body value as the Problem's `parameters` echo it: strings as they are,
 * anything else in a JSON-like form. Bounded in length and depth, so a huge
 * or deeply nested value (String() of a 5000-deep array overflows the stack)
 * still gets its 400, never a 500. The walk stops as soon as the budget is
 * spent, whatever the size of the value.
 */
export function echoValue(value: unknown, maxChars = ECHO_MAX_CHARS): string {
  if (typeof value === 'string') return capped(value, maxChars)
  const parts: string[] = []
  let used = 0
  /** Appends `text`; false once the budget is spent (the walk then stops). */
  const emit = (text: string): boolean => {
    parts.push(text)
    used += text.length
    return used < maxChars
  }
  const walk = (v: unknown, depth: number): boolean => {
    if (typeof v === 'string') return emit(JSON.stringify(capped(v, maxChars)))
    if (v === null || typeof v !== 'object') return emit(String(v))
    if (depth >= ECHO_MAX_DEPTH) return emit(Array.isArray(v) ? '[…]' : '{…}')
    if (Array.isArray(v)) {
      if (!emit('[')) return false
      for (let i = 0; i < v.length; i++) if ((i > 0 && !emit(',')) || !walk(v[i], depth + 1)) return false
      return emit(']')
    }
    if (!emit('{')) return false
    let first = true
    for (const key in v) {
      if (!Object.hasOwn(v, key)) continue
      if ((!first && !emit(',')) || !emit(`${JSON.stringify(capped(key, maxChars))}:`) || !walk((v as Record<string, unknown>)[key], depth + 1)) return false
      first = false
    }
    return emit('}')
  }
  walk(value, 0)
  return capped(parts.join(''), maxChars)
}

function capped(text: string, maxChars: number): string {
  return text.length > maxChars ? `${text.slice(0, maxChars)}…` : text
}

/** What fastify attaches to `request.validationError` with `attachValidation`. */
export interface ValidationFailure extends Error {
  validation?: FastifySchemaValidationError[]
}

/** Turns a body's schema violations into one invalid-request Problem, each message prefixed by `reasonFor(field)`. */
export function bodyValidationProblem(err: ValidationFailure, body: unknown, reasonFor: (field: string) => Reason): ProblemError {
  const items = (err.validation ?? []).map((v) => {
    const params = v.params as Record<string, unknown>
    const field =
      typeof params.missingProperty === 'string'
        ? params.missingProperty
        : typeof params.additionalProperty === 'string'
          ? params.additionalProperty
          : v.instancePath.replace(/^\//, '').replace(/\//g, '.') || 'body'
    const value = body !== null && typeof body === 'object' ? (body as Record<string, unknown>)[field] : undefined
    let text: string
    if (v.keyword === 'required') text = `The \`${field}\` field is required.`
    else if (v.keyword === 'additionalProperties') text = `The \`${field}\` field is not allowed.`
    else if (field === 'body') text = 'The request body must be a JSON object.'
    else text = `The \`${field}\` field ${v.message ?? 'is invalid'}.`
    return { message: `${reasonFor(field)}: ${text}`, parameters: { [field]: value === undefined ? [] : [echoValue(value)] } }
  })
  return Problems.invalidRequest(items.length > 0 ? items : [{ message: `${reasonFor('body')}: ${err.message}`, parameters: {} }])
}
