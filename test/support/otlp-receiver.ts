import http from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Test } from 'tap'

/**
 * An OTLP/HTTP trace receiver on loopback for the tracing tests: it accepts
 * `POST /v1/traces` in OTLP's JSON encoding (what the SDK's exporter sends
 * with OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json) and keeps every span
 * with the service.name of its resource. Anything else it counts as refused
 * (answered 415/404), so a test sees an exporter that sent protobuf or hit
 * the wrong path instead of waiting for spans that never come.
 */

export interface ReceivedSpan {
  service: string
  traceId: string
  spanId: string
  /** Undefined for a root span. */
  parentSpanId: string | undefined
  name: string
  kind: number
  attributes: Record<string, string | number | boolean>
  links: Array<{ traceId: string; spanId: string }>
  /** SpanStatusCode: 0 unset, 1 ok, 2 error. */
  status: number
}

export interface OtlpReceiver {
  /** The base to give OTEL_EXPORTER_OTLP_ENDPOINT (the exporter appends /v1/traces). */
  readonly url: string
  readonly spans: ReceivedSpan[]
  /** Requests it could not use: `<status> <method> <path> <content-type>`. */
  readonly refused: string[]
  close(): Promise<void>
}

interface JsonValue {
  stringValue?: string
  intValue?: number | string
  doubleValue?: number
  boolValue?: boolean
}

interface JsonSpan {
  traceId: string
  spanId: string
  parentSpanId?: string
  name: string
  kind?: number
  attributes?: Array<{ key: string; value: JsonValue }>
  links?: Array<{ traceId: string; spanId: string }>
  status?: { code?: number }
}

interface JsonExport {
  resourceSpans?: Array<{ resource?: { attributes?: Array<{ key: string; value: JsonValue }> }; scopeSpans?: Array<{ spans?: JsonSpan[] }> }>
}

function scalar(v: JsonValue): string | number | boolean {
  if (v.stringValue !== undefined) return v.stringValue
  if (v.intValue !== undefined) return Number(v.intValue)
  if (v.doubleValue !== undefined) return v.doubleValue
  if (v.boolValue !== undefined) return v.boolValue
  return JSON.stringify(v)
}

function attributes(list: Array<{ key: string; value: JsonValue }> | undefined): Record<string, string | number | boolean> {
  return Object.fromEntries((list ?? []).map((a) => [a.key, scalar(a.value)]))
}

/** The spans of one export request. */
export function spansOf(body: JsonExport): ReceivedSpan[] {
  const out: ReceivedSpan[] = []
  for (const rs of body.resourceSpans ?? []) {
    const service = String(attributes(rs.resource?.attributes)['service.name'] ?? '')
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        out.push({
          service,
          traceId: s.traceId,
          spanId: s.spanId,
          parentSpanId: s.parentSpanId ? s.parentSpanId : undefined,
          name: s.name,
          kind: s.kind ?? 0,
          attributes: attributes(s.attributes),
          links: (s.links ?? []).map((l) => ({ traceId: l.traceId, spanId: l.spanId })),
          status: s.status?.code ?? 0
        })
      }
    }
  }
  return out
}

export async function startOtlpReceiver(t: Test): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = []
  const refused: string[] = []
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const type = req.headers['content-type'] ?? ''
      const answer = (status: number, body: string): void => {
        if (status !== 200) refused.push(`${status} ${req.method} ${req.url} ${type}`)
        res.writeHead(status, { 'content-type': 'application/json' }).end(body)
      }
      if (req.method !== 'POST' || req.url !== '/v1/traces') return answer(404, '{}')
      if (!type.startsWith('application/json')) return answer(415, '{}')
      try {
        spans.push(...spansOf(JSON.parse(Buffer.concat(chunks).toString('utf8')) as JsonExport))
      } catch {
        return answer(400, '{}')
      }
      answer(200, '{"partialSuccess":{}}')
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const close = (): Promise<void> =>
    new Promise((resolve) => {
      server.closeAllConnections()
      server.close(() => resolve())
    })
  t.teardown(close)
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, spans, refused, close }
}
