import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes, type Context, type Link, type Span } from '@opentelemetry/api'

/**
 * OpenTelemetry tracing (docs/operations.md "Tracing"), off unless the
 * standard `OTEL_*` variables ask for it. Each process's main calls
 * startTracing before anything loads fastify or node:http, so the SDK's
 * instrumentations (http server spans, @fastify/otel's route spans) patch
 * them as they load. Off, the SDK is never loaded: @opentelemetry/api's
 * no-op tracer answers, and the helpers below return at their first line
 * (one boolean test) without allocating.
 *
 * The trace crosses the bus in W3C `traceparent`/`tracestate` message
 * headers (both buses: Kafka record headers, the memory bus's messages and
 * journal). A publish whose message carries none gets the active context's
 * (outgoingHeaders, used by both buses); a consumer that handles a batch
 * starts one span per message as a child of the context its publisher sent
 * (consumerSpan), or one span over several with the first as parent and
 * the others as links (batchSpan).
 */

/** Message headers (the bus's Headers; not imported: the buses import this module). */
type Headers = Record<string, string>

/** Instrumentation scope of the gateway's own spans. */
const TRACER_NAME = 'activity-gateway'
/** Requests that are probes, not work: no trace for each poll of a load balancer or scraper. */
const UNTRACED_PATHS = new Set(['/healthz', '/readyz', '/metrics'])

/** How long a shutting-down process waits for its last spans to leave. */
const SHUTDOWN_FLUSH_MS = 2000

let on = false
let shutdown: (() => Promise<void>) | undefined

/** True when the environment asks for traces: an OTLP endpoint or a traces exporter other than none, and the SDK not disabled. */
export function tracingRequested(env: NodeJS.ProcessEnv): boolean {
  if ((env.OTEL_SDK_DISABLED ?? '').trim().toLowerCase() === 'true') return false
  const exporters = (env.OTEL_TRACES_EXPORTER ?? '').split(',').map((s) => s.trim().toLowerCase()).filter((s) => s !== '')
  if (exporters.includes('none')) return false
  return exporters.length > 0 || nonEmpty(env.OTEL_EXPORTER_OTLP_ENDPOINT) || nonEmpty(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
}

function nonEmpty(v: string | undefined): boolean {
  return v !== undefined && v.trim() !== ''
}

/** Whether this process records traces (startTracing found them requested). */
export function tracingOn(): boolean {
  return on
}

/**
 * Starts the OpenTelemetry Node SDK when the environment asks for traces.
 * `serviceName` is the default of OTEL_SERVICE_NAME (which, like
 * service.name in OTEL_RESOURCE_ATTRIBUTES, wins when set). Everything
 * else (exporter, protocol, endpoint, sampler, batch delays, propagators)
 * is the SDK's own reading of the process's OTEL_* variables. Metrics and logs stay off
 * unless OTEL_METRICS_EXPORTER / OTEL_LOGS_EXPORTER name an exporter: the
 * gateway's metrics are Prometheus's (/metrics) and its logs pino's.
 */
export function startTracing(serviceName: string): boolean {
  const env = process.env
  if (on || !tracingRequested(env)) return on
  try {
    shutdown = startSdk(serviceName, env)
    on = true
  } catch (err) {
    // Tracing is an aid: a setting the SDK refuses leaves the service running untraced, and says so.
    process.stderr.write(`${serviceName}: tracing not started: ${(err as Error).message}\n`)
  }
  return on
}

/** Starts the SDK; returns what stops it. */
function startSdk(serviceName: string, env: NodeJS.ProcessEnv): () => Promise<void> {
  // Loaded only now: off, none of the SDK is required.
  /* eslint-disable @typescript-eslint/no-require-imports */
  const { NodeSDK } = require('@opentelemetry/sdk-node') as typeof import('@opentelemetry/sdk-node')
  const { HttpInstrumentation } = require('@opentelemetry/instrumentation-http') as typeof import('@opentelemetry/instrumentation-http')
  const { FastifyOtelInstrumentation } = require('@fastify/otel') as typeof import('@fastify/otel')
  /* eslint-enable @typescript-eslint/no-require-imports */
  const named = nonEmpty(env.OTEL_SERVICE_NAME) || /(^|,)\s*service\.name\s*=/.test(env.OTEL_RESOURCE_ATTRIBUTES ?? '')
  const sdk = new NodeSDK({
    ...(named ? {} : { serviceName }),
    ...(nonEmpty(env.OTEL_METRICS_EXPORTER) ? {} : { metricReaders: [] }),
    ...(nonEmpty(env.OTEL_LOGS_EXPORTER) ? {} : { logRecordProcessors: [] }),
    instrumentations: [
      new HttpInstrumentation({
        ignoreIncomingRequestHook: (req) => UNTRACED_PATHS.has((req.url ?? '').split('?')[0] ?? ''),
        // Outgoing requests go to customers' webhooks and CRC checks (through undici, which this
        // does not patch); a node:http request would tell a third party our trace ids.
        ignoreOutgoingRequestHook: () => true
      }),
      // One span per request (with its route), under the http server span. Not one per lifecycle hook
      // or handler: those are short and many, and are named after their plugin function, which for an
      // anonymous plugin is its source text.
      new FastifyOtelInstrumentation({ registerOnInitialization: true, instrumentHooks: false, instrumentHandler: false, ignorePaths: (route) => UNTRACED_PATHS.has(route.url) })
    ]
  })
  sdk.start()
  return () => sdk.shutdown()
}

/** Flushes the spans not yet exported and stops the SDK (at shutdown); nothing to do when tracing is off. */
export async function stopTracing(): Promise<void> {
  const stop = shutdown
  shutdown = undefined
  on = false
  if (!stop) return
  // A collector that does not answer must not hold the shutdown (the exporter's own timeout is 10 s).
  let timer: NodeJS.Timeout | undefined
  await Promise.race([stop().catch(() => undefined), new Promise<void>((resolve) => (timer = setTimeout(resolve, SHUTDOWN_FLUSH_MS)))])
  clearTimeout(timer)
}

function tracer() {
  return trace.getTracer(TRACER_NAME)
}

/**
 * A message's headers as a bus sends them: a copy of `headers` (the caller's
 * object is never changed), with the active context's trace added when
 * tracing is on and the message carries no trace of its own.
 */
export function outgoingHeaders(headers: Headers | undefined): Headers {
  const out: Headers = { ...(headers ?? {}) }
  if (on && out.traceparent === undefined) propagation.inject(context.active(), out)
  return out
}

/** The trace context a message (or a stored traceparent) carries; undefined when tracing is off or it carries none. */
export function contextOf(headers: Headers | undefined): Context | undefined {
  if (!on || headers?.traceparent === undefined) return undefined
  const ctx = propagation.extract(ROOT_CONTEXT, headers)
  return trace.getSpanContext(ctx) ? ctx : undefined
}

/** The traceparent a message carries, to be kept with what it becomes (a stored delivery); undefined when tracing is off. */
export function carriedTraceparent(headers: Headers | undefined): string | undefined {
  return on ? headers?.traceparent : undefined
}

/** The headers carrying `span`'s context to the next hop; undefined for no span. */
export function headersOf(span: Span | undefined): Headers | undefined {
  if (!span) return undefined
  const out: Headers = {}
  propagation.inject(trace.setSpan(ROOT_CONTEXT, span), out)
  return out
}

/** The W3C traceparent of `span` (kept with a stored record so a later step continues its trace). */
export function traceparentOf(span: Span | undefined): string | undefined {
  return headersOf(span)?.traceparent
}

/**
 * A span for handling one bus message, a child of the context it carries
 * (`parent`, from contextOf), or a root when it carries none. Undefined when
 * tracing is off.
 */
export function consumerSpan(name: string, parent: Context | undefined, attributes: Attributes, kind: SpanKind = SpanKind.CONSUMER): Span | undefined {
  if (!on) return undefined
  return tracer().startSpan(name, { kind, attributes }, parent ?? ROOT_CONTEXT)
}

/**
 * One span over work done for several messages: a child of the first
 * message's context (so a trace with one message shows it in line), linked
 * to the others' (each distinct span once). Undefined when tracing is off.
 */
export function batchSpan(name: string, parents: Array<Context | undefined>, attributes: Attributes, kind: SpanKind = SpanKind.INTERNAL): Span | undefined {
  if (!on) return undefined
  let parent: Context | undefined
  const links: Link[] = []
  const seen = new Set<string>()
  for (const ctx of parents) {
    const sc = ctx ? trace.getSpanContext(ctx) : undefined
    if (!ctx || !sc || seen.has(sc.spanId)) continue
    seen.add(sc.spanId)
    if (parent === undefined) parent = ctx
    else links.push({ context: sc })
  }
  return tracer().startSpan(name, { kind, attributes, links }, parent ?? ROOT_CONTEXT)
}

/** Ends `span`, marked failed with `err` when there is one. */
export function endSpan(span: Span | undefined, err?: unknown): void {
  if (!span) return
  if (err !== undefined) {
    span.recordException(err instanceof Error ? err : String(err))
    span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) })
  }
  span.end()
}

export { SpanKind }
export type { Context, Span }
