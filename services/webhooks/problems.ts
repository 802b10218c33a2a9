import type { FastifySchemaValidationError } from 'fastify'
import { echoValue } from '../common/echo'
import { type ProblemError, Problems } from '../common/errors'

/**
 * Failures of the webhook and Account Activity routes: invalid-request
 * Problems whose message starts with the public platform's reason
 * (docs/webhooks.md), e.g. `CrcValidationFailed: Invalid response_token`,
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

// The bounded echo lives with the other error helpers; re-exported for this service's callers.
export { ECHO_MAX_CHARS, echoValue } from '../common/echo'

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
