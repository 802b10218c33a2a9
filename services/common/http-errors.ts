import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { Logger } from 'pino'
import { ADS_API_VERSION } from './ads/version'
import { InsufficientScopeError } from './auth/authenticate'
import { formPairs, OAuthHeaderError } from './auth/oauth1'
import {
  AdsError,
  adsCodeForStatus,
  ApiError,
  ClassicError,
  classicToAds,
  OAuthTextError,
  PROBLEM_DETAIL_MAX_CHARS,
  PROBLEM_MAX_ITEMS,
  problemBody,
  ProblemError,
  Problems,
  type InvalidRequestItem
} from './errors'
import { capText, ECHO_MAX_CHARS, echoValue, messageText } from './echo'
import { JsonTooDeepError } from './json-depth'
import { redactDeep, redactUrl, SECRET_KEYS } from './logger'
import { targetPath } from './request-target'
import { isStoreUnavailable } from './store/unavailable'

/**
 * Error rendering of the HTTP layer: every error answers in the shape of the
 * interface its path belongs to — v2 (Error / Problem), the advertising
 * envelope, or OAuth classic — and never grows with the input it refuses.
 * Requests Node's parser refuses are answered by ./client-errors.
 */

export type ErrorShape = 'v2' | 'ads' | 'classic'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Overrides the error shape the path prefix implies. */
    errorShape?: ErrorShape
  }
}


/** Paths of the advertising interface: a version number first, whether served (12, 5) or not (`/11/accounts`); `/2/` is v2. */
const ADS_PATH = /^\/(?!2\/)[0-9]+\//
/** The versions of the advertising interface served (`/5/` for audience permissions). */
const SERVED_ADS_VERSION = /^\/(12|5)\//

export function shapeOfPath(path: string): ErrorShape {
  if (ADS_PATH.test(path)) return 'ads'
  if (/^\/(oauth|oauth2|1\.1)\//.test(path)) return 'classic'
  return 'v2'
}

export function errorShapeFor(request: FastifyRequest): ErrorShape {
  const configured = request.routeOptions?.config?.errorShape
  if (configured) return configured
  return shapeOfPath(targetPath(request.url))
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * Query parameters this ads route takes as comma lists. They are echoed
     * as arrays in `request.params` even when the request fails before the
     * handler parsed them; lists the handler parses are recorded anyway
     * (recordAdsEcho), so declaring them only matters for early errors.
     */
    adsListParams?: readonly string[]
  }
}

/** Per request: the echo of each query parameter the ads handler has parsed (see recordAdsEcho). */
const adsEchoes = new WeakMap<FastifyRequest, Map<string, unknown>>()

/**
 * Records how a parsed query parameter is echoed in `request.params`: a comma
 * list as the array of its items, a time in its normalized form. Parameters
 * not recorded (and not declared as lists) are echoed as the strings received.
 */
export function recordAdsEcho(request: FastifyRequest, name: string, value: unknown): void {
  let echoes = adsEchoes.get(request)
  if (!echoes) adsEchoes.set(request, (echoes = new Map()))
  echoes.set(name, value)
}

function declaredAdsList(request: FastifyRequest, name: string): boolean {
  return request.routeOptions?.config?.adsListParams?.includes(name) ?? false
}

/**
 * Echo of path and query parameters for the ads envelope. Only parameters
 * the route takes as lists are arrays (always, even with one item): a free
 * text value that happens to hold a comma stays a string.
 */
export function adsRequestParams(request: FastifyRequest): Record<string, unknown> {
  const out: Record<string, unknown> = Object.create(null) as Record<string, unknown>
  const params = (request.params ?? {}) as Record<string, unknown>
  for (const [k, v] of Object.entries(params)) if (k !== '*') out[k] = v
  const echoes = adsEchoes.get(request)
  const q = request.url.indexOf('?')
  if (q >= 0) {
    try {
      for (const [k, v] of formPairs(request.url.slice(q + 1))) {
        if (k.startsWith('oauth_')) continue
        if (echoes?.has(k)) out[k] = echoes.get(k)
        else if (declaredAdsList(request, k)) out[k] = v === '' ? [] : v.split(',').map((item) => item.trim())
        else out[k] = v
      }
    } catch {
      // A malformed query is reported by validation; the echo simply omits it.
    }
  }
  return boundedParams(out)
}

/** The whole `request.params` echo stays this small, however many or long the parameters. */
const ADS_PARAMS_MAX_CHARS = 8 * 1024
/** Most items of one list parameter echoed. */
const ADS_PARAM_MAX_ITEMS = 200

function boundedParam(value: unknown): unknown {
  if (typeof value === 'string') return messageText(value, PROBLEM_DETAIL_MAX_CHARS)
  if (Array.isArray(value)) return value.slice(0, ADS_PARAM_MAX_ITEMS).map((item: unknown) => (typeof item === 'string' ? messageText(item, ECHO_MAX_CHARS) : item))
  return value
}

/** Each value capped, and parameters echoed only while the echo fits its budget. Also a plain object again (serialization and deep-equality checks expect one). */
function boundedParams(params: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  let used = 0
  for (const [name, value] of Object.entries(params)) {
    const key = messageText(name, ECHO_MAX_CHARS)
    const echoed = boundedParam(value)
    used += key.length + (JSON.stringify(echoed)?.length ?? 0) + 4
    if (used > ADS_PARAMS_MAX_CHARS) break
    out[key] = echoed
  }
  return out
}

/** Ads errors carry the interface's version like its successes (docs/conformance.md: every response). */
function sendAds(reply: FastifyReply, request: FastifyRequest, err: AdsError): FastifyReply {
  reply.header('x-current-api-version', ADS_API_VERSION)
  return reply.code(err.statusCode).type('application/json; charset=utf-8').send({ errors: err.items, request: { params: adsRequestParams(request) } })
}

function sendProblem(reply: FastifyReply, problemBase: string, err: ProblemError): FastifyReply {
  const status = err.statusCode
  return reply.code(status).type('application/problem+json').send(err.body(problemBase))
}

/** How a message names the part of the request that failed validation. */
function validationPart(context: FastifyError['validationContext']): string {
  if (context === 'body') return 'field'
  if (context === 'params') return 'path parameter'
  if (context === 'headers') return 'header'
  return 'query parameter'
}

/** The part of the request a validation error is about (fastify's validationContext). */
function validatedPart(request: FastifyRequest, context: FastifyError['validationContext']): unknown {
  if (context === 'body') return request.body
  if (context === 'params') return request.params
  if (context === 'headers') return request.headers
  return request.query
}

/** The value at a JSON pointer (ajv's instancePath), or undefined. */
function valueAt(root: unknown, instancePath: string): unknown {
  let at = root
  for (const raw of instancePath.split('/').slice(1)) {
    if (at === null || typeof at !== 'object') return undefined
    const key = raw.replace(/~1/g, '/').replace(/~0/g, '~')
    if (!Object.hasOwn(at, key)) return undefined
    at = (at as Record<string, unknown>)[key]
  }
  return at
}

/**
 * Converts fastify's ajv validation errors into the v2 invalid-request
 * Problem; `parameters` names each offending parameter with the value
 * received (bounded by the Problem), empty for a missing one.
 */
function validationToProblem(err: FastifyError, request: FastifyRequest): ProblemError {
  const part = validatedPart(request, err.validationContext)
  const all = err.validation ?? []
  // Only the items the Problem lists are rendered: a body failing 100k times costs no more than one failing 10 times.
  const items: InvalidRequestItem[] = all.slice(0, PROBLEM_MAX_ITEMS).map((v) => {
    const params = v.params as Record<string, unknown>
    const name = parameterName(v.instancePath, params)
    const value = v.keyword === 'required' ? undefined : valueAt(part, typeof params.additionalProperty === 'string' ? `${v.instancePath}/${params.additionalProperty.replace(/~/g, '~0').replace(/\//g, '~1')}` : v.instancePath)
    // A refused secret (a password too short) is named, never echoed; nor are secrets inside an echoed object.
    const echoed = value === undefined || SECRET_KEYS.has(name.toLowerCase()) ? [] : [echoValue(redactDeep(value))]
    return { message: `The \`${name}\` ${validationPart(err.validationContext)} ${v.message ?? 'is invalid'}`, parameters: { [name]: echoed } }
  })
  const more = all.length - items.length
  return Problems.invalidRequest(
    items.length > 0 ? items : [{ message: err.message, parameters: {} }],
    more > 0 ? `One or more parameters to your request was invalid. (${more} more not listed)` : undefined
  )
}

function validationToAds(err: FastifyError): AdsError {
  const items = (err.validation ?? []).slice(0, PROBLEM_MAX_ITEMS).map((v) => {
    const params = v.params as Record<string, unknown>
    const name = parameterName(v.instancePath, params)
    if (v.keyword === 'required') return { code: 'MISSING_PARAMETER' as const, message: `"${name}" is missing`, parameter: name }
    return { code: 'INVALID_PARAMETER' as const, message: `${v.message ?? 'is invalid'} for ${name}`, parameter: name }
  })
  return new AdsError(400, items.length > 0 ? items : [{ code: 'INVALID_PARAMETER', message: err.message }])
}

function parameterName(instancePath: string, params: Record<string, unknown>): string {
  if (typeof params.missingProperty === 'string') return [instancePath.replace(/^\//, '').replace(/\//g, '.'), params.missingProperty].filter(Boolean).join('.')
  if (typeof params.additionalProperty === 'string') return params.additionalProperty
  return instancePath.replace(/^\//, '').replace(/\//g, '.') || 'body'
}

/** Maps any error to the interface's shape. Client errors never become 500s. */
export function renderError(err: unknown, request: FastifyRequest, reply: FastifyReply, problemBase: string, log: Logger): FastifyReply {
  const shape = errorShapeFor(request)
  if (err instanceof OAuthHeaderError) err = new ClassicError(400, { code: 215, message: `Bad Authentication data. ${err.message}` })
  if (err instanceof OAuthTextError) return reply.code(err.statusCode).type('text/plain; charset=utf-8').send(err.message)
  if (err instanceof InsufficientScopeError) reply.header('www-authenticate', err.challenge())

  if (err instanceof ApiError) {
    if (shape === 'ads') {
      if (err instanceof AdsError) return sendAds(reply, request, err)
      if (err instanceof ClassicError) return sendAds(reply, request, classicToAds(err))
      if (err instanceof ProblemError) return sendAds(reply, request, new AdsError(err.statusCode, { code: adsCodeForStatus(err.statusCode), message: err.detail }))
    }
    if (err instanceof ProblemError) return sendProblem(reply, problemBase, err)
    if (err instanceof ClassicError) return reply.code(err.statusCode).type('application/json; charset=utf-8').send(err.body())
    if (err instanceof AdsError) {
      return reply.code(err.statusCode).type('application/problem+json').send(problemBody(problemBase, 'about:blank', err.message, err.statusCode))
    }
  }

  if (isStoreUnavailable(err)) return sendStoreUnavailable(err, shape, request, reply, problemBase, log)

  const fe = err as FastifyError
  if (fe && fe.validation) {
    if (shape === 'ads') return sendAds(reply, request, validationToAds(fe))
    const problem = validationToProblem(fe, request)
    // OAuth and v1.1 paths answer in the classic shape; its messages are the Problem's (bounded, secrets never echoed).
    if (shape === 'classic') return reply.code(400).type('application/json; charset=utf-8').send({ errors: ((problem.extras.errors ?? []) as InvalidRequestItem[]).map((e) => ({ code: 214, message: e.message })) })
    return sendProblem(reply, problemBase, problem)
  }
  if (isMalformedBody(fe) && shape === 'v2') {
    return sendProblem(reply, problemBase, Problems.invalidRequest([{ message: clientMessage(fe, 400), parameters: { body: [] } }]))
  }
  const status = typeof fe?.statusCode === 'number' && fe.statusCode >= 400 && fe.statusCode < 500 ? fe.statusCode : 500
  if (status === 500) {
    log.error({ err, reqId: request.id, url: redactUrl(request.url) }, 'unhandled error')
  }
  const message = status === 500 ? 'Internal error' : clientMessage(fe, status)
  if (shape === 'ads') return sendAds(reply, request, new AdsError(status, { code: adsCodeForStatus(status), message }))
  if (shape === 'classic') return reply.code(status).type('application/json; charset=utf-8').send({ errors: [{ code: status === 500 ? 131 : 214, message }] })
  return sendProblem(reply, problemBase, Problems.generic(status, message))
}

/** What a client is told to wait during a store outage: the client reconnects within a second or two. */
const STORE_RETRY_AFTER_SECONDS = 5
/** An outage fails every request at once: one warning per window, with the count of the others. */
const OUTAGE_WARNING_INTERVAL_MS = 30_000
const outageWarnings = new WeakMap<Logger, { at: number; suppressed: number }>()

function warnStoreUnavailable(log: Logger, err: unknown): void {
  const now = Date.now()
  const last = outageWarnings.get(log)
  if (last && now - last.at < OUTAGE_WARNING_INTERVAL_MS) {
    last.suppressed++
    return
  }
  log.warn({ error: (err as Error).message, alsoRefusedSinceLastWarning: last?.suppressed ?? 0 }, 'store unavailable; answering 503')
  outageWarnings.set(log, { at: now, suppressed: 0 })
}

/**
 * The store is unreachable (an outage, or shutting down): 503 with
 * Retry-After, in the interface's shape. v2 has no Problem type of its own
 * for it (the platform's are all client conditions): about:blank with status
 * 503; ads SERVICE_UNAVAILABLE; classic code 130 "Over capacity".
 */
function sendStoreUnavailable(err: unknown, shape: ErrorShape, request: FastifyRequest, reply: FastifyReply, problemBase: string, log: Logger): FastifyReply {
  warnStoreUnavailable(log, err)
  reply.header('retry-after', String(STORE_RETRY_AFTER_SECONDS))
  const message = 'The service is temporarily unavailable. Retry later.'
  if (shape === 'ads') return sendAds(reply, request, new AdsError(503, { code: 'SERVICE_UNAVAILABLE', message }))
  if (shape === 'classic') return reply.code(503).type('application/json; charset=utf-8').send({ errors: [{ code: 130, message: 'Over capacity' }] })
  return sendProblem(reply, problemBase, Problems.generic(503, message))
}

/** Marks errors of the form parser below, so they render like the other unparseable bodies. */
export const INVALID_FORM_BODY = 'GW_INVALID_FORM_BODY'

/**
 * A body that could not be parsed (bad JSON, too deep, empty, wrong length, bad form
 * encoding): a 400 of the request as a whole, the v2 invalid-request Problem.
 * Too large (413) and unsupported media types (415) keep their own statuses.
 */
function isMalformedBody(err: FastifyError | undefined): boolean {
  if (!err || err.statusCode !== 400) return false
  if (err instanceof JsonTooDeepError || err.code === INVALID_FORM_BODY) return true
  return typeof err.code === 'string' && err.code.startsWith('FST_ERR_CTP_')
}

/** The message of a client error, bounded: some quote the input (a Content-Type, a parser's complaint). */
function clientMessage(err: FastifyError, status: number): string {
  return capText(unboundedClientMessage(err, status), PROBLEM_DETAIL_MAX_CHARS)
}

function unboundedClientMessage(err: FastifyError, status: number): string {
  switch (err?.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE': return 'Request body is too large.'
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE': return `Unsupported Content-Type: ${err.message.replace(/^Unsupported Media Type: ?/, '')}`
    case 'FST_ERR_CTP_EMPTY_JSON_BODY': return 'Body cannot be empty when content-type is set to application/json.'
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH': return 'Request body size did not match Content-Length.'
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case undefined:
      if (err instanceof SyntaxError || err?.code === 'FST_ERR_CTP_INVALID_JSON_BODY') return 'Request body is not valid JSON.'
      return err?.message ?? `HTTP ${status}`
    default:
      return err.message
  }
}


const HTTP_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const

/**
 * The methods some route serves this path with; empty when the path is unknown, or
 * when it is served with this very method (a handler that called reply.callNotFound()).
 */
function methodsServing(app: FastifyInstance, method: string, path: string): string[] {
  const allowed = HTTP_METHODS.filter((m) => app.findRoute({ method: m, url: path }) !== null)
  return allowed.includes(method as (typeof HTTP_METHODS)[number]) ? [] : allowed
}

/**
 * Answers unknown routes in the shape of the interface the path belongs to:
 * 405 with `Allow` when the path exists under other methods (v2 and ads;
 * the classic interface answers every unknown request with code 34), 404 otherwise.
 */
export function notFound(app: FastifyInstance, request: FastifyRequest, reply: FastifyReply, problemBase: string): FastifyReply {
  const shape = errorShapeFor(request)
  const path = targetPath(request.url)
  const allowed = shape === 'classic' ? [] : methodsServing(app, request.method, path)
  if (allowed.length > 0) {
    reply.header('allow', allowed.join(', '))
    const message = `The route ${request.method} ${path} does not exist; it supports ${allowed.join(', ')}.`
    if (shape === 'ads') return sendAds(reply, request, new AdsError(405, { code: 'METHOD_NOT_ALLOWED', message }))
    return sendProblem(reply, problemBase, Problems.generic(405, message))
  }
  if (shape === 'ads' && ADS_PATH.test(path) && !SERVED_ADS_VERSION.test(path)) {
    const version = capText(path.split('/')[1] ?? '', 20)
    return sendAds(reply, request, new AdsError(404, { code: 'ROUTE_NOT_FOUND', message: `Version ${version} of the advertising interface is not served; the current version is ${ADS_API_VERSION}.` }))
  }
  if (shape === 'ads') return sendAds(reply, request, new AdsError(404, { code: 'ROUTE_NOT_FOUND', message: 'The requested resource could not be found' }))
  if (shape === 'classic') return reply.code(404).type('application/json; charset=utf-8').send({ errors: [{ code: 34, message: 'Sorry, that page does not exist.' }] })
  return sendProblem(reply, problemBase, Problems.generic(404, `The route ${request.method} ${path} does not exist.`))
}

