import { STATUS_CODES } from 'node:http'
import { capText, ECHO_MAX_CHARS, echoValue, messageText } from './echo'

/**
 * Every error the gateway can answer with, defined in one place.
 *
 * Three wire shapes exist (docs/contract.md "Errors"):
 *  - v2 classic Error: `{"errors":[{"code":int,"message":str}]}` as application/json;
 *  - v2 Problem (RFC 7807) as application/problem+json, its `type` under {problem_base};
 *  - the advertising envelope `{"errors":[{code,message,parameter?}],"request":{"params":{}}}`.
 * Route code throws one of the classes below; the interface's error handler
 * (see http.ts) renders it, translating between shapes where a shared
 * mechanism (authentication, rate limiting) threw the "other" one.
 */

export abstract class ApiError extends Error {
  abstract readonly statusCode: number
}

// ---------------------------------------------------------------- classic codes

export interface ClassicErrorItem {
  code: number
  message: string
  label?: string
}

export class ClassicError extends ApiError {
  readonly statusCode: number
  readonly items: ClassicErrorItem[]
  constructor(statusCode: number, items: ClassicErrorItem[] | ClassicErrorItem) {
    // Bounded like Problems: a message quoting the input never grows with it.
    const list = (Array.isArray(items) ? items : [items]).slice(0, PROBLEM_MAX_ITEMS).map((i) => ({ ...i, message: messageText(i.message, PROBLEM_DETAIL_MAX_CHARS) }))
    super(list.map((i) => i.message).join('; '))
    this.statusCode = statusCode
    this.items = list
  }
  body(): { errors: ClassicErrorItem[] } {
    return { errors: this.items }
  }
}

/** The classic codes of docs/conformance.md, each with its status and message. */
export const Classic = {
  couldNotAuthenticate: (detail?: string) =>
    new ClassicError(401, { code: 32, message: detail ? `Could not authenticate you. ${detail}` : 'Could not authenticate you.' }),
  rateLimited: () => new ClassicError(429, { code: 88, message: 'Rate limit exceeded' }),
  invalidToken: () => new ClassicError(401, { code: 89, message: 'Invalid or expired token.' }),
  dmPermission: () =>
    new ClassicError(403, { code: 93, message: 'This application is not allowed to access or delete your direct messages.' }),
  unableToVerify: () =>
    new ClassicError(403, { code: 99, message: 'Unable to verify your credentials', label: 'authenticity_token_error' }),
  timestampOutOfBounds: () => new ClassicError(401, { code: 135, message: 'Timestamp out of bounds.' }),
  badAuthData: (detail?: string) =>
    new ClassicError(400, { code: 215, message: detail ? `Bad Authentication data. ${detail}` : 'Bad Authentication data.' }),
  forbidden: () => new ClassicError(403, { code: 220, message: 'Your credentials do not allow access to this resource.' }),
  callbackNotApproved: () =>
    new ClassicError(403, { code: 415, message: 'Callback URL not approved for this client application. Approved callback URLs can be adjusted in your application settings' }),
  desktopMustUseOob: () =>
    new ClassicError(401, { code: 417, message: 'Desktop applications only support the oauth_callback value \'oob\'' })
}

/** Plain-text OAuth endpoint failures (the public platform answers these as text). */
export class OAuthTextError extends ApiError {
  readonly statusCode: number
  constructor(statusCode: number, message: string) {
    super(messageText(message, PROBLEM_DETAIL_MAX_CHARS))
    this.statusCode = statusCode
  }
}

// ---------------------------------------------------------------- problems

export type ProblemSuffix =
  | 'about:blank'
  | 'client-disconnected'
  | 'client-forbidden'
  | 'conflict'
  | 'disallowed-resource'
  | 'duplicate-rules'
  | 'invalid-request'
  | 'invalid-rules'
  | 'noncompliant-rules'
  | 'not-authorized-for-field'
  | 'not-authorized-for-resource'
  | 'operational-disconnect'
  | 'resource-not-found'
  | 'resource-unavailable'
  | 'rule-cap'
  | 'streaming-connection'
  | 'unsupported-authentication'
  | 'usage-capped'

export const PROBLEM_TITLES: Record<ProblemSuffix, string> = {
  'about:blank': 'Generic Problem',
  'client-disconnected': 'Client Disconnected',
  'client-forbidden': 'Client Forbidden',
  conflict: 'Conflict',
  'disallowed-resource': 'Disallowed Resource',
  'duplicate-rules': 'Duplicate Rules',
  'invalid-request': 'Invalid Request',
  'invalid-rules': 'Invalid Rules',
  'noncompliant-rules': 'Noncompliant Rules',
  'not-authorized-for-field': 'Field Unauthorized',
  'not-authorized-for-resource': 'Forbidden',
  'operational-disconnect': 'Operational Disconnect',
  'resource-not-found': 'Not Found Error',
  'resource-unavailable': 'Resource Unavailable',
  'rule-cap': 'Rule Cap',
  'streaming-connection': 'ConnectionException',
  'unsupported-authentication': 'Unsupported Authentication',
  // The platform's own title ("Usage cap exceeded: Monthly product cap" is its detail).
  'usage-capped': 'UsageCapExceeded'
}

export interface InvalidRequestItem {
  message: string
  parameters: Record<string, string[]>
}

export type DisconnectType =
  | 'OperationalDisconnect'
  | 'UpstreamOperationalDisconnect'
  | 'ForceDisconnect'
  | 'UpstreamUncleanDisconnect'
  | 'SlowReader'
  | 'InternalError'
  | 'ClientApplicationStateDegraded'
  | 'InvalidRules'

export type ConnectionIssue = 'TooManyConnections' | 'ProvisioningSubscription' | 'RuleConfigurationIssue' | 'RulesInvalidIssue'

export type ProblemExtras = Record<string, unknown>

/** `resource_type` of the resource Problems (docs/contract.md "v2 shapes"). */
export type ResourceType = 'user' | 'tweet' | 'media' | 'list' | 'space'
/**
 * The product's own resources that a v2 path names: webhooks
 * (`/2/webhooks/{webhook_id}`) and activity subscriptions
 * (`/2/activity/subscriptions/{subscription_id}`, Account Activity
 * `.../subscriptions/{user_id}/all`). The public OpenAPI enum of
 * resource-not-found lists only the platform's read resources; an unknown
 * webhook or subscription still answers resource-not-found, with
 * these two values as the documented deviation (docs/architecture.md, "v2 Problems").
 */
export type ProductResourceType = 'webhook' | 'subscription'
/** resource-not-found also names places and polls, and the product's own resources. */
export type NotFoundResourceType = ResourceType | 'place' | 'poll' | ProductResourceType
/** Where in a response the resource would have been. */
export type ResponseSection = 'data' | 'includes'

export interface DisallowedResourceFields {
  resource_id: string
  resource_type: ResourceType
  section: ResponseSection
}

export interface FieldUnauthorizedFields {
  resource_type: ResourceType
  field: string
  section: ResponseSection
}

export interface ResourceUnavailableFields {
  /** The request parameter that named the resource (at least one character). */
  parameter: string
  resource_id: string
  resource_type: ResourceType
}

export interface ResourceUnauthorizedFields {
  value: string
  resource_id: string
  resource_type: ResourceType
  section: ResponseSection
  parameter: string
}

/**
 * resource-not-found. The v2 resource types are the typed overload; the
 * loose one remains for the operator API (/admin: apps, accounts), which is
 * not part of the v2 interface. v2 routes must use a NotFoundResourceType.
 */
function resourceNotFound(parameter: string, value: string, resourceType: NotFoundResourceType, detail?: string): ProblemError
/** @deprecated Not a v2 resource type: only for operator (/admin) paths. */
function resourceNotFound(parameter: string, value: string, resourceType: string, detail?: string): ProblemError
function resourceNotFound(parameter: string, value: string, resourceType: string, detail?: string): ProblemError {
  if (parameter === '') throw new TypeError('resource-not-found needs the parameter that named the resource')
  const echoed = echoValue(value)
  return new ProblemError(404, 'resource-not-found', detail ?? `Could not find ${resourceType} with ${parameter}: [${echoed}].`, {
    parameter,
    resource_id: echoed,
    resource_type: resourceType,
    value: echoed
  })
}

/** Longest `detail` (and invalid-request message) a Problem carries: error bodies never grow with the input. */
export const PROBLEM_DETAIL_MAX_CHARS = 1024
/** Most invalid-request items one Problem lists; the detail counts the rest. */
export const PROBLEM_MAX_ITEMS = 10
/** Most values one `parameters` entry lists, each bounded by echoValue. */
const PARAMETER_MAX_VALUES = 10

export class ProblemError extends ApiError {
  readonly statusCode: number
  readonly detail: string
  constructor(
    statusCode: number,
    readonly suffix: ProblemSuffix,
    detail: string,
    readonly extras: ProblemExtras = {}
  ) {
    const bounded = messageText(detail, PROBLEM_DETAIL_MAX_CHARS)
    super(bounded)
    this.detail = bounded
    this.statusCode = statusCode
  }

  /** The Problem object with `type` resolved against {problem_base}. */
  body(problemBase: string): Record<string, unknown> {
    return problemBody(problemBase, this.suffix, this.detail, this.statusCode, this.extras)
  }
}

export function problemBody(
  problemBase: string,
  suffix: ProblemSuffix,
  detail: string,
  status: number | undefined,
  extras: ProblemExtras = {}
): Record<string, unknown> {
  const type = suffix === 'about:blank' ? 'about:blank' : `${problemBase}/${suffix}`
  // RFC 7807 §4.2: with about:blank the title is the HTTP status phrase ("Unauthorized", "Not Found").
  const title = suffix === 'about:blank' && status !== undefined ? (STATUS_CODES[status] ?? PROBLEM_TITLES[suffix]) : PROBLEM_TITLES[suffix]
  const body: Record<string, unknown> = { ...extras, title, detail, type }
  if (status !== undefined) body.status = status
  return body
}

/**
 * The `errors` of an invalid-request Problem, bounded: at most
 * PROBLEM_MAX_ITEMS items (a body failing one rule a million times still gets
 * a small answer), each message and echoed value capped, never an empty list
 * (the schema wants at least one item).
 */
function boundedItems(errors: InvalidRequestItem[], detail: string): { errors: InvalidRequestItem[]; detail: string } {
  const items = errors.length > 0 ? errors : [{ message: detail, parameters: {} }]
  const shown = items.slice(0, PROBLEM_MAX_ITEMS).map((item) => {
    const parameters: Record<string, string[]> = {}
    let names = 0
    for (const [name, values] of Object.entries(item.parameters)) {
      if (names++ >= PARAMETER_MAX_VALUES) break
      parameters[capText(name, ECHO_MAX_CHARS)] = values.slice(0, PARAMETER_MAX_VALUES).map((v) => echoValue(v))
    }
    return { message: messageText(item.message, PROBLEM_DETAIL_MAX_CHARS), parameters }
  })
  const more = items.length - shown.length
  return { errors: shown, detail: more > 0 ? `${detail} (${more} more not listed)` : detail }
}

export const Problems = {
  invalidRequest: (errors: InvalidRequestItem[], detail = 'One or more parameters to your request was invalid.') => {
    const bounded = boundedItems(errors, detail)
    return new ProblemError(400, 'invalid-request', bounded.detail, { errors: bounded.errors })
  },
  /** One invalid parameter: `parameters` names it with the offending value. */
  invalidParameter: (parameter: string, value: string, message: string) =>
    Problems.invalidRequest([{ message, parameters: { [parameter]: [value] } }]),
  resourceNotFound,
  conflict: (detail: string) => new ProblemError(409, 'conflict', detail),
  unsupportedAuthentication: (used: string, supported: string[]) =>
    new ProblemError(
      403,
      'unsupported-authentication',
      `Authenticating with ${used} is forbidden for this endpoint.  Supported authentication types are [${supported.join(', ')}].`
    ),
  notAuthorizedForResource: (detail: string, extras: ResourceUnauthorizedFields) =>
    new ProblemError(403, 'not-authorized-for-resource', detail, { ...extras }),
  disallowedResource: (detail: string, extras: DisallowedResourceFields) => new ProblemError(403, 'disallowed-resource', detail, { ...extras }),
  notAuthorizedForField: (detail: string, extras: FieldUnauthorizedFields) => new ProblemError(403, 'not-authorized-for-field', detail, { ...extras }),
  resourceUnavailable: (detail: string, extras: ResourceUnavailableFields) => {
    if (extras.parameter === '') throw new TypeError('resource-unavailable needs the parameter that named the resource')
    return new ProblemError(403, 'resource-unavailable', detail, { ...extras })
  },
  /** The client went away (a stream's reader); logged and counted rather than sent, as nobody is listening. */
  clientDisconnected: (detail = 'The client disconnected.') => new ProblemError(499, 'client-disconnected', detail),
  /** A submitted rule that duplicates an existing one: its id and value, when known. */
  duplicateRules: (detail: string, rule: { id?: string; value?: string } = {}) => new ProblemError(400, 'duplicate-rules', detail, { ...rule }),
  invalidRules: (detail: string) => new ProblemError(400, 'invalid-rules', detail),
  noncompliantRules: (detail: string) => new ProblemError(400, 'noncompliant-rules', detail),
  clientForbidden: (detail: string, reason: 'official-client-forbidden' | 'client-not-enrolled', registrationUrl?: string) =>
    new ProblemError(403, 'client-forbidden', detail, { reason, ...(registrationUrl !== undefined ? { registration_url: registrationUrl } : {}) }),
  tooManyConnections: (detail = 'This stream has reached its connection limit.') =>
    new ProblemError(429, 'streaming-connection', detail, { connection_issue: 'TooManyConnections' satisfies ConnectionIssue }),
  operationalDisconnect: (disconnectType: DisconnectType, detail: string) =>
    new ProblemError(200, 'operational-disconnect', detail, { disconnect_type: disconnectType }),
  generic: (status: number, detail: string) => new ProblemError(status, 'about:blank', detail),
  usageCapped: (detail: string, period: 'Daily' | 'Monthly', scope: 'Account' | 'Product') =>
    new ProblemError(429, 'usage-capped', detail, { period, scope }),
  ruleCap: (detail: string) => new ProblemError(400, 'rule-cap', detail)
}

// ---------------------------------------------------------------- ads envelope

export type AdsErrorCode =
  | 'INVALID_PARAMETER'
  | 'MISSING_PARAMETER'
  | 'EXCLUSIVE_PARAMETERS'
  | 'INCLUSIVE_PARAMETERS'
  | 'UNAUTHORIZED_ACCESS'
  | 'UNAUTHORIZED_CLIENT_APPLICATION'
  | 'ACCOUNT_NOT_FOUND'
  | 'NOT_FOUND'
  | 'ROUTE_NOT_FOUND'
  | 'METHOD_NOT_ALLOWED'
  | 'TOO_MANY_REQUESTS'
  | 'INTERNAL_ERROR'
  | 'SERVICE_UNAVAILABLE'
  | 'PAYLOAD_TOO_LARGE'
  | 'UNSUPPORTED_MEDIA_TYPE'
  | 'FEATURE_NOT_ENABLED'
  | 'DUPLICATE'
  | 'ACTION_NOT_ALLOWED'
  | 'LOCK_ACQUISITION_TIMEOUT'
  | `${string}_NOT_FOUND`

export interface AdsErrorItem {
  code: AdsErrorCode
  message: string
  parameter?: string
}

export class AdsError extends ApiError {
  readonly statusCode: number
  readonly items: AdsErrorItem[]
  constructor(statusCode: number, items: AdsErrorItem[] | AdsErrorItem) {
    // Bounded like Problems: a body failing one rule many times still gets a small answer.
    const list = (Array.isArray(items) ? items : [items])
      .slice(0, PROBLEM_MAX_ITEMS)
      .map((i) => ({ ...i, message: messageText(i.message, PROBLEM_DETAIL_MAX_CHARS), ...(i.parameter !== undefined ? { parameter: messageText(i.parameter, ECHO_MAX_CHARS) } : {}) }))
    super(list.map((i) => i.message).join('; '))
    this.statusCode = statusCode
    this.items = list
  }
}

export const Ads = {
  invalid: (parameter: string, message: string) => new AdsError(400, { code: 'INVALID_PARAMETER', message, parameter }),
  missing: (parameter: string) =>
    new AdsError(400, { code: 'MISSING_PARAMETER', message: `"${parameter}" is missing`, parameter }),
  exclusive: (a: string, b: string) =>
    new AdsError(400, { code: 'EXCLUSIVE_PARAMETERS', message: `"${a}" and "${b}" are mutually exclusive`, parameter: a }),
  inclusive: (a: string, b: string) =>
    new AdsError(400, { code: 'INCLUSIVE_PARAMETERS', message: `"${a}" requires "${b}"`, parameter: a }),
  unauthorized: () => new AdsError(401, { code: 'UNAUTHORIZED_ACCESS', message: 'This request is not properly authenticated' }),
  clientNotAllowed: (message = 'The client application making this request does not have access to the Ads API') =>
    new AdsError(403, { code: 'UNAUTHORIZED_CLIENT_APPLICATION', message }),
  accountNotFound: (accountId: string) =>
    new AdsError(403, { code: 'ACCOUNT_NOT_FOUND', message: `User does not have access to account: ${accountId}`, parameter: 'account_id' }),
  notFound: (entity = 'NOT_FOUND', message = 'The requested resource was not found') =>
    new AdsError(404, { code: entity as AdsErrorCode, message }),
  routeNotFound: () => new AdsError(404, { code: 'ROUTE_NOT_FOUND', message: 'The requested resource could not be found' }),
  tooManyRequests: () => new AdsError(429, { code: 'TOO_MANY_REQUESTS', message: 'Rate limit exceeded' }),
  featureNotEnabled: (feature: string) =>
    new AdsError(403, { code: 'FEATURE_NOT_ENABLED', message: `The account does not have the ${feature} feature` })
}

/** Maps a classic (authentication / rate-limit) error onto the ads envelope. */
export function classicToAds(err: ClassicError): AdsError {
  if (err.statusCode === 429) return Ads.tooManyRequests()
  if (err.statusCode === 401) return new AdsError(401, { code: 'UNAUTHORIZED_ACCESS', message: err.items[0]?.message ?? 'This request is not properly authenticated' })
  if (err.statusCode === 400) return Ads.invalid('authorization', err.items[0]?.message ?? 'Bad Authentication data.')
  return new AdsError(err.statusCode, { code: 'UNAUTHORIZED_CLIENT_APPLICATION', message: err.items[0]?.message ?? 'Forbidden' })
}

export function adsCodeForStatus(status: number): AdsErrorCode {
  switch (status) {
    case 400: return 'INVALID_PARAMETER'
    case 401: return 'UNAUTHORIZED_ACCESS'
    case 403: return 'UNAUTHORIZED_CLIENT_APPLICATION'
    case 404: return 'NOT_FOUND'
    case 405: return 'METHOD_NOT_ALLOWED'
    case 413: return 'PAYLOAD_TOO_LARGE'
    case 415: return 'UNSUPPORTED_MEDIA_TYPE'
    case 429: return 'TOO_MANY_REQUESTS'
    case 503: return 'SERVICE_UNAVAILABLE'
    default: return status >= 500 ? 'INTERNAL_ERROR' : 'INVALID_PARAMETER'
  }
}
