import fs from 'node:fs'
import type { Server } from 'node:http'
import type { Socket } from 'node:net'
import type { Readable } from 'node:stream'
import fastify, { LogController, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'
import client from 'prom-client'
import { Authenticator, registerAuthentication } from './auth/authenticate'
import { formPairs } from './auth/oauth1'
import { ClientErrorAnswers } from './client-errors'
import type { ServiceContext } from './context'
import { INVALID_FORM_BODY, notFound, renderError } from './http-errors'
import { newUuid } from './ids'
import { jsonBodyKind, jsonDepthGuard, MAX_JSON_DEPTH, measureAndDiscard } from './json-depth'
import { redactUrl } from './logger'
import { registerRateLimits } from './ratelimit'
import { registerJsonBodies } from './body'
import { registerOpenApi } from './openapi'
import type { HttpPart } from './schemas'

export { adsRequestParams, errorShapeFor, recordAdsEcho, renderError, shapeOfPath, type ErrorShape } from './http-errors'

/**
 * Builds a fastify server with what every service's HTTP side shares:
 * request ids, the form parser that keeps the raw body (OAuth signatures),
 * the schemas of `schemas/`, authentication, health and metrics routes, and
 * one error handler that answers in the shape of the interface a path
 * belongs to: v2 (Error / Problem), advertising envelope, or OAuth classic
 * (./http-errors); requests Node's parser refuses are answered by ./client-errors.
 */

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

/** A client-chosen request id worth keeping: short, and nothing a log or header could be confused by. */
const SAFE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/

export function clientRequestId(header: string | string[] | undefined): string | undefined {
  return typeof header === 'string' && SAFE_REQUEST_ID.test(header) ? header : undefined
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
  // A request without Host is refused by the route layer in its interface's shape (Node's own refusal is an empty 400).
  const https = config.tlsCert !== '' ? { key: fs.readFileSync(config.tlsKey), cert: fs.readFileSync(config.tlsCert), requireHostHeader: false } : undefined
  const clientErrors = new ClientErrorAnswers(config.problemBase)
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
    // Parser-level errors (malformed heads, oversized headers) are answered in order, after the earlier requests of their connection.
    clientErrorHandler: (err: NodeJS.ErrnoException, socket: Socket) => clientErrors.answer(err, socket),
    // Errors fastify raises before routing (malformed URL, over-long parameter) use the same rendering.
    frameworkErrors: (err, request, reply) => renderError(err, request, reply, config.problemBase, ctx.log),
    ...(https ? { https } : { http: { requireHostHeader: false } })
  }) as unknown as FastifyInstance
  // A client that half-closes after pipelining its requests (writes them, then ends its side) still
  // gets every answer; by default Node drops the requests in progress when the client's FIN arrives.
  ;(app.server as Server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true

  // Response serialization resolves $refs through these; validation uses the registry's own ajv.
  for (const schema of ctx.schemas.schemas.values()) app.addSchema(schema)
  // Bodies are JSON and must carry the schema's types; query, params and headers are text and are coerced.
  app.setValidatorCompiler(({ schema, httpPart }) => ctx.schemas.requestValidator(schema as Record<string, unknown>, httpPart as HttpPart | undefined))
  await registerOpenApi(app, ctx, options.publicUrl)

  clientErrors.watch(app.server as Server, https !== undefined)

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
    // HTTP/1.1 requires Host (RFC 9112 §3.2).
    if (request.raw.httpVersion === '1.1' && request.headers.host === undefined) {
      reply.header('connection', 'close')
      throw Object.assign(new Error('The Host header is missing.'), { statusCode: 400 })
    }
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
  // Why the instance is not ready, logged when it changes: an operator reading the log of an
  // instance that stays out of rotation sees the reason once, not one line per probe.
  let unreadyReason: string | undefined
  app.get('/readyz', async (request, reply) => {
    try {
      await ctx.store.ping()
      if (options.ready) await options.ready()
      if (unreadyReason !== undefined) request.log.info({ was: unreadyReason }, 'ready again')
      unreadyReason = undefined
      return { status: 'ready', service: ctx.serviceName, store: ctx.store.kind, bus: ctx.bus.kind }
    } catch (err) {
      const reason = (err as Error).message
      if (reason !== unreadyReason) request.log.warn({ reason }, 'not ready')
      unreadyReason = reason
      return reply.code(503).send({ status: 'unavailable', service: ctx.serviceName, reason })
    }
  })
  app.get('/metrics', async (_request, reply) => {
    reply.type(ctx.metrics.contentType)
    return ctx.metrics.metrics()
  })
  return app
}

export { client as promClient }
