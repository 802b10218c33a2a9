import fs from 'node:fs'
import { STATUS_CODES } from 'node:http'
import type { Socket } from 'node:net'
import type { Readable } from 'node:stream'
import fastify, { LogController, type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'
import client from 'prom-client'
import type { Logger } from 'pino'
import { ADS_API_VERSION } from './ads/version'
import { Authenticator, InsufficientScopeError, registerAuthentication } from './auth/authenticate'
import { formPairs, OAuthHeaderError } from './auth/oauth1'
import type { ServiceContext } from './context'
import {
  AdsError,
  adsCodeForStatus,
  ApiError,
  ClassicError,
  classicToAds,
  OAuthTextError,
  problemBody,
  ProblemError,
  Problems,
  type InvalidRequestItem
} from './errors'
import { echoValue } from './echo'
import { newUuid } from './ids'
import { jsonBodyKind, jsonDepthGuard, JsonTooDeepError, MAX_JSON_DEPTH, measureAndDiscard } from './json-depth'
import { redactDeep, redactUrl, SECRET_KEYS } from './logger'
import { registerRateLimits } from './ratelimit'
import { targetPath } from './request-target'
import { isStoreUnavailable } from './store/unavailable'
import { registerJsonBodies } from './body'
import { registerOpenApi } from './openapi'
import type { HttpPart } from './schemas'

/**
 * Builds a fastify server with what every service's HTTP side shares:
 * request ids, the form parser that keeps the raw body (OAuth signatures),
 * the schemas of `schemas/`, authentication, health and metrics routes, and
 * one error handler that answers in the shape of the interface a path
 * belongs to: v2 (Error / Problem), advertising envelope, or OAuth classic.
 */

export type ErrorShape = 'v2' | 'ads' | 'classic'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Overrides the error shape the path prefix implies. */
    errorShape?: ErrorShape
  }
}

/** A route as registered, for tools that walk every route (fuzzing, route-table checks). */
export interface RouteEntry {
  method: string
  url: string
  auth: boolean
}

declare module 'fastify' {
  interface FastifyInstance {
    routeTable: RouteEntry[]
  }
}

export interface ServerOptions {
  /** Public base URL requests are signed against; empty: the request's Host. */
  publicUrl: string
  /** Extra readiness check (e.g. a consumer is connected). */
  ready?: () => Promise<void>
}

export function shapeOfPath(path: string): ErrorShape {
  if (/^\/(12|5)\//.test(path)) return 'ads'
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
  // A plain object again: JSON serialization and deep-equality checks expect one.
  return { ...out }
}

/** Ads errors carry the interface's version like its successes (platform-facts §7: every response). */
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
  const items: InvalidRequestItem[] = (err.validation ?? []).map((v) => {
    const params = v.params as Record<string, unknown>
    const name = parameterName(v.instancePath, params)
    const value = v.keyword === 'required' ? undefined : valueAt(part, typeof params.additionalProperty === 'string' ? `${v.instancePath}/${params.additionalProperty.replace(/~/g, '~0').replace(/\//g, '~1')}` : v.instancePath)
    // A refused secret (a password too short) is named, never echoed; nor are secrets inside an echoed object.
    const echoed = value === undefined || SECRET_KEYS.has(name.toLowerCase()) ? [] : [echoValue(redactDeep(value))]
    return { message: `The \`${name}\` ${validationPart(err.validationContext)} ${v.message ?? 'is invalid'}`, parameters: { [name]: echoed } }
  })
  return Problems.invalidRequest(items.length > 0 ? items : [{ message: err.message, parameters: {} }])
}

function validationToAds(err: FastifyError): AdsError {
  const items = (err.validation ?? []).map((v) => {
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
    return sendProblem(reply, problemBase, validationToProblem(fe, request))
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
 * for it (the spec's are all client conditions): about:blank with status
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
const INVALID_FORM_BODY = 'GW_INVALID_FORM_BODY'

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

function clientMessage(err: FastifyError, status: number): string {
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

/** A client-chosen request id worth keeping: short, and nothing a log or header could be confused by. */
const SAFE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/

export function clientRequestId(header: string | string[] | undefined): string | undefined {
  return typeof header === 'string' && SAFE_REQUEST_ID.test(header) ? header : undefined
}

const LAST_HEAD = Symbol('lastRequestHead')

function looksLikeRequestHead(chunk: Buffer | undefined): chunk is Buffer {
  // An uppercase method token first: GET, POST, PUT, DELETE...
  return chunk !== undefined && chunk.length > 4 && (chunk[0] as number) >= 65 && (chunk[0] as number) <= 90
}

/** Remembers (by reference, no copy) the last chunk that began a request on each connection. */
function trackRequestHeads(socket: Socket): void {
  socket.on('data', (chunk: Buffer) => {
    if (looksLikeRequestHead(chunk)) (socket as Socket & { [LAST_HEAD]?: Buffer })[LAST_HEAD] = chunk.subarray(0, 256)
  })
}

/**
 * Requests Node's HTTP parser rejects (oversized headers or query strings,
 * malformed request lines) never reach a route; they still get a Problem.
 */
function answerClientError(err: NodeJS.ErrnoException & { rawPacket?: Buffer }, socket: Socket, problemBase: string): void {
  if (err.code === 'ECONNRESET' || !socket.writable) {
    socket.destroy()
    return
  }
  const status = err.code === 'HPE_HEADER_OVERFLOW' ? 431 : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400
  const detail = status === 431 ? 'Request headers (or the query string) are too large.' : status === 408 ? 'Request timed out.' : 'Malformed HTTP request.'
  // The request line, when it was received, still tells which interface the client spoke to.
  const head = looksLikeRequestHead(err.rawPacket) ? err.rawPacket : (socket as Socket & { [LAST_HEAD]?: Buffer })[LAST_HEAD]
  const requestLine = head?.toString('latin1', 0, 256).split('\r\n', 1)[0] ?? ''
  const shape = shapeOfPath(targetPath(requestLine.split(' ')[1] ?? '/'))
  const body = JSON.stringify(
    shape === 'ads'
      ? { errors: [{ code: adsCodeForStatus(status), message: detail }], request: { params: {} } }
      : shape === 'classic'
        ? { errors: [{ code: 214, message: detail }] }
        : problemBody(problemBase, 'about:blank', detail, status)
  )
  const type = shape === 'v2' ? 'application/problem+json' : 'application/json; charset=utf-8'
  const version = shape === 'ads' ? `x-current-api-version: ${ADS_API_VERSION}\r\n` : ''
  socket.end(`HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\ncontent-type: ${type}\r\n${version}content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`)
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
function notFound(app: FastifyInstance, request: FastifyRequest, reply: FastifyReply, problemBase: string): FastifyReply {
  const shape = errorShapeFor(request)
  const path = targetPath(request.url)
  const allowed = shape === 'classic' ? [] : methodsServing(app, request.method, path)
  if (allowed.length > 0) {
    reply.header('allow', allowed.join(', '))
    const message = `The route ${request.method} ${path} does not exist; it supports ${allowed.join(', ')}.`
    if (shape === 'ads') return sendAds(reply, request, new AdsError(405, { code: 'METHOD_NOT_ALLOWED', message }))
    return sendProblem(reply, problemBase, Problems.generic(405, message))
  }
  if (shape === 'ads') return sendAds(reply, request, new AdsError(404, { code: 'ROUTE_NOT_FOUND', message: 'The requested resource could not be found' }))
  if (shape === 'classic') return reply.code(404).type('application/json; charset=utf-8').send({ errors: [{ code: 34, message: 'Sorry, that page does not exist.' }] })
  return sendProblem(reply, problemBase, Problems.generic(404, `The route ${request.method} ${path} does not exist.`))
}

/** Methods whose body fastify never hands to a parser (nothing reads the stream preParsing returns). */
const UNPARSED_BODY_METHODS = new Set(['GET', 'HEAD', 'TRACE'])

/**
 * The preParsing depth guard. A body that is parsed is measured as the parser
 * reads it; one that is not (GET, HEAD) is measured and discarded here, so a
 * too-deep body is the same 400 whatever the method. The guard stream's error
 * always has a listener: when no parser reads the guard (the reply was already
 * decided: 413 by Content-Length, 415), its failure must not become an uncaught
 * exception, and what is left of the body is drained off the connection.
 */
async function guardJsonDepth(request: FastifyRequest, reply: FastifyReply, payload: Readable): Promise<Readable> {
  const kind = jsonBodyKind(request.headers['content-type'])
  if (kind === undefined) return payload
  const perLine = kind === 'ndjson'
  if (UNPARSED_BODY_METHODS.has(request.method)) {
    try {
      await measureAndDiscard(payload, MAX_JSON_DEPTH, perLine)
    } catch (err) {
      // The rest of the body is still in flight: do not keep the connection for a next request.
      reply.header('connection', 'close')
      throw err
    }
    return payload
  }
  const guard = jsonDepthGuard(MAX_JSON_DEPTH, perLine)
  // A parser reading the guard sees the error through its own listener; this one only keeps it from being uncaught.
  guard.on('error', () => payload.resume())
  // Answered without the guard being read to its end (415: no parser for the type): drain the rest.
  reply.raw.once('finish', () => {
    if (payload.readableEnded) return
    payload.unpipe(guard)
    payload.resume()
  })
  // pipe, not pipeline: a refused body must not destroy the socket the answer goes out on.
  return payload.pipe(guard)
}

export async function buildServer(ctx: ServiceContext, options: ServerOptions): Promise<FastifyInstance> {
  const { config } = ctx
  const https = config.tlsCert !== '' ? { key: fs.readFileSync(config.tlsKey), cert: fs.readFileSync(config.tlsCert) } : undefined
  const app = fastify({
    loggerInstance: ctx.log,
    bodyLimit: config.bodyLimit,
    // The client's X-Request-Id is adopted only when it is a short token (it reaches logs and headers).
    requestIdHeader: false,
    genReqId: (req) => clientRequestId(req.headers['x-request-id']) ?? newUuid(),
    // One structured line per request is written by the onResponse hook below (with the URL's secrets redacted).
    logController: new LogController({ disableRequestLogging: true }),
    routerOptions: { maxParamLength: 500 },
    return503OnClosing: true,
    trustProxy: config.trustProxy,
    clientErrorHandler: (err: NodeJS.ErrnoException, socket: Socket) => answerClientError(err, socket, config.problemBase),
    // Errors fastify raises before routing (malformed URL, over-long parameter) use the same rendering.
    frameworkErrors: (err, request, reply) => renderError(err, request, reply, config.problemBase, ctx.log),
    ...(https ? { https } : {})
  }) as unknown as FastifyInstance

  // Response serialization resolves $refs through these; validation uses the registry's own ajv.
  for (const schema of ctx.schemas.schemas.values()) app.addSchema(schema)
  // Bodies are JSON and must carry the schema's types; query, params and headers are text and are coerced.
  app.setValidatorCompiler(({ schema, httpPart }) => ctx.schemas.requestValidator(schema as Record<string, unknown>, httpPart as HttpPart | undefined))
  await registerOpenApi(app, ctx)

  app.server.on(https ? 'secureConnection' : 'connection', trackRequestHeads)

  const routeTable: RouteEntry[] = []
  app.decorate('routeTable', routeTable)
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method]
    for (const method of methods) if (method !== 'HEAD') routeTable.push({ method, url: route.url, auth: route.config?.auth !== undefined })
  })

  // Keep the raw form body: OAuth 1.0a signs the form parameters exactly as sent.
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (request, body, done) => {
    const raw = body as string
    request.rawForm = raw
    try {
      const out: Record<string, string | string[]> = {}
      for (const [k, v] of formPairs(raw)) {
        const prev = out[k]
        out[k] = prev === undefined ? v : Array.isArray(prev) ? [...prev, v] : [prev, v]
      }
      done(null, out)
    } catch (err) {
      // A body problem, not an OAuth header one: it renders as a malformed body in every interface.
      const detail = (err as Error).message.replace(/^malformed /, '')
      done(Object.assign(new Error(`Request body is not valid form encoding: ${detail}.`), { statusCode: 400, code: INVALID_FORM_BODY }), undefined)
    }
  })

  registerJsonBodies(app)

  // JSON and NDJSON bodies are measured while they stream in: too deep is refused before parsing.
  app.addHook('preParsing', guardJsonDepth)

  app.addHook('onRequest', async (request, reply) => {
    reply.header('x-request-id', request.id)
  })
  app.addHook('onResponse', async (request, reply) => {
    const route = request.routeOptions.url ?? 'unknown'
    ctx.httpMetrics.observe({ method: request.method, route, status: String(reply.statusCode) }, reply.elapsedTime / 1000)
    // 503 is an outage or a shutdown, already warned about once: not one error line per request.
    const level = reply.statusCode === 503 ? 'warn' : reply.statusCode >= 500 ? 'error' : 'info'
    // request.log is a child logger that already carries reqId.
    request.log[level]({ method: request.method, url: redactUrl(request.url), status: reply.statusCode, ms: Math.round(reply.elapsedTime) }, 'request')
  })

  registerAuthentication(app, new Authenticator(ctx.store, config), options.publicUrl)
  // After authentication: limits are counted per authenticated caller.
  registerRateLimits(app, ctx)

  app.setErrorHandler((err, request, reply) => renderError(err, request, reply, config.problemBase, ctx.log))
  app.setNotFoundHandler((request, reply) => notFound(app, request, reply, config.problemBase))

  app.get('/healthz', async () => ({ status: 'ok', service: ctx.serviceName }))
  app.get('/readyz', async (_request, reply) => {
    try {
      await ctx.store.ping()
      if (options.ready) await options.ready()
      return { status: 'ready', service: ctx.serviceName, store: ctx.store.kind, bus: ctx.bus.kind }
    } catch (err) {
      return reply.code(503).send({ status: 'unavailable', service: ctx.serviceName, reason: (err as Error).message })
    }
  })
  app.get('/metrics', async (_request, reply) => {
    reply.type(ctx.metrics.contentType)
    return ctx.metrics.metrics()
  })
  return app
}

export { client as promClient }
