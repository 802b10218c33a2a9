import type { OpenAPIV3_1 } from 'openapi-types'
import { shapeOfPath } from './http-errors'

/**
 * What the OpenAPI document says about every operation beyond its route
 * schema: the error answers of the interface its path belongs to (a client
 * generator or a reader of the reference page learns the error shape), and
 * an operation id derived from method and path (generators name their
 * methods after it).
 *
 * The error answers are added to the document only, never to the route
 * schemas: fastify serializes a response through its schema, and the error
 * handler's bodies (http-errors.ts) must go out whole.
 */

type Schema = OpenAPIV3_1.SchemaObject

const PROBLEM: Schema = {
  type: 'object',
  description: 'RFC 7807 Problem: `type` is a URI under the problem base (or about:blank), `title` and `detail` describe it; some types add fields.',
  required: ['type', 'title'],
  additionalProperties: true,
  properties: {
    type: { type: 'string' },
    title: { type: 'string' },
    detail: { type: 'string' },
    status: { type: 'integer' },
    errors: { type: 'array', items: { type: 'object', additionalProperties: true, properties: { message: { type: 'string' }, parameters: { type: 'object', additionalProperties: { type: 'array', items: { type: 'string' } } } } } }
  }
}

const CLASSIC_ERRORS: Schema = {
  type: 'object',
  description: 'The classic error list: numeric codes of the platform (32 could not authenticate, 88 rate limit, 89 invalid token, 215 bad authentication data, ...).',
  required: ['errors'],
  properties: {
    errors: { type: 'array', minItems: 1, items: { type: 'object', required: ['code', 'message'], properties: { code: { type: 'integer' }, message: { type: 'string' }, label: { type: 'string' } } } }
  }
}

const ADS_ERRORS: Schema = {
  type: 'object',
  description: 'The advertising envelope: each error with its code (INVALID_PARAMETER, NOT_FOUND, ...) and the parameter it is about; `request.params` echoes the path and query parameters (bounded).',
  required: ['errors', 'request'],
  properties: {
    errors: { type: 'array', minItems: 1, items: { type: 'object', required: ['code', 'message'], properties: { code: { type: 'string' }, message: { type: 'string' }, parameter: { type: 'string' } } } },
    request: { type: 'object', properties: { params: { type: 'object', additionalProperties: true } } }
  }
}

const OAUTH2_ERROR: Schema = {
  type: 'object',
  description: 'RFC 6749 §5.2 error of the token endpoints.',
  required: ['error'],
  properties: {
    error: { type: 'string', enum: ['invalid_request', 'invalid_client', 'invalid_grant', 'unauthorized_client', 'unsupported_grant_type', 'invalid_scope'] },
    error_description: { type: 'string' }
  }
}

/** Component names (no dot, unlike the shared schemas of `schemas/`, so they cannot collide). */
export const ERROR_SCHEMAS: Record<string, Schema> = { Problem: PROBLEM, ClassicErrors: CLASSIC_ERRORS, AdsErrors: ADS_ERRORS, OAuth2Error: OAUTH2_ERROR }

const json = (name: string): OpenAPIV3_1.MediaTypeObject => ({ schema: { $ref: `#/components/schemas/${name}` } })

export const ERROR_RESPONSES: Record<string, OpenAPIV3_1.ResponseObject> = {
  V2Error: {
    description: 'Refused: a Problem, or the classic error list for authentication and rate limits.',
    content: { 'application/problem+json': json('Problem'), 'application/json': json('ClassicErrors') }
  },
  AdsError: {
    description: 'Refused: the advertising error envelope (with the x-current-api-version header).',
    headers: { 'x-current-api-version': { schema: { type: 'string' }, description: 'The advertising interface version.' } },
    content: { 'application/json': json('AdsErrors') }
  },
  ClassicError: {
    description: 'Refused: the classic error list (OAuth 1.0a endpoints also answer some failures as plain text).',
    content: { 'application/json': json('ClassicErrors'), 'text/plain': { schema: { type: 'string' } } }
  },
  OAuth2Error: { description: 'Refused: an OAuth 2.0 error object.', content: { 'application/json': json('OAuth2Error') } },
  PageError: { description: 'Refused: an HTML page saying why (or a redirect to the client with `error`).', content: { 'text/html': { schema: { type: 'string' } } } }
}

/** The error answer of an operation's path (the same rule as the error handler's, plus the OAuth 2.0 endpoints with their own shapes). */
export function errorResponseOf(path: string): string {
  if (/^\/(i|2)\/oauth2\/authorize$|^\/oauth\/(authorize|authenticate)$/.test(path)) return 'PageError'
  if (/^\/2\/oauth2\/(token|revoke)$/.test(path)) return 'OAuth2Error'
  const shape = shapeOfPath(path)
  return shape === 'ads' ? 'AdsError' : shape === 'classic' ? 'ClassicError' : 'V2Error'
}

/** `GET /2/webhooks/{webhook_id}` → `get2WebhooksByWebhookId`: unique per method and path. */
export function operationIdOf(method: string, path: string): string {
  const words = path
    .split('/')
    .filter(Boolean)
    .flatMap((segment) => {
      const param = /^\{(.+)\}$/.exec(segment)
      const parts = (param ? param[1] as string : segment).split(/[^A-Za-z0-9]+/).filter(Boolean)
      const cased = parts.map((p) => p.charAt(0).toUpperCase() + p.slice(1))
      return param ? ['By', ...cased] : cased
    })
  return method.toLowerCase() + words.join('')
}

const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'options', 'head', 'trace'] as const

/** Adds each operation's error answer (when it documents no 4xx of its own) and its operation id. */
export function completeOperations(document: OpenAPIV3_1.Document): void {
  document.components ??= {}
  document.components.schemas = { ...ERROR_SCHEMAS, ...document.components.schemas }
  document.components.responses = { ...ERROR_RESPONSES, ...document.components.responses }
  for (const [path, item] of Object.entries(document.paths ?? {})) {
    for (const method of METHODS) {
      const op = item?.[method]
      if (!op) continue
      op.operationId ??= operationIdOf(method, path)
      op.responses ??= {}
      if (!Object.keys(op.responses).some((status) => /^4/.test(status))) op.responses['4XX'] = { $ref: `#/components/responses/${errorResponseOf(path)}` }
    }
  }
}
