import fs from 'node:fs'
import type { Test } from 'tap'
import { OPENAPI_FILE, openApiValidators, productResourceTypes, type ComponentSchemas } from '../../support/openapi'
import type { EventType } from '../../../services/activity/event-types'
import { OPENAPI_PAYLOADS } from '../../activity/support'
import type { Exchange } from './recorder'

/**
 * The response audit: every `/2/` response body a client receives is
 * checked against the operation of the public OpenAPI document
 * (schemas/platform/openapi-2.166-subset.json, the public platform's
 * description cut down to the paths served) it answers: the operation's 200
 * schema for a 200, its `default` schema (Error for application/json,
 * Problem for application/problem+json) otherwise; a stream is checked line
 * by line. Paths the subset does not describe (the OAuth 2.0 token routes)
 * are listed, not checked.
 *
 * DEVIATIONS are the deliberate differences, each listed with its reason in
 * docs/conformance.md; they patch the document's schemas before compiling,
 * so everything else is checked as published.
 */

/** The platform wraps this answer in `data`, as every other v2 answer; the document's 200 schema is the bare object. */
function wrappedInData(name: string): (schemas: ComponentSchemas) => void {
  return (schemas) => {
    schemas[name] = { type: 'object', required: ['data'], properties: { data: schemas[name] } }
  }
}

export const DEVIATIONS: Array<{ schema: string; why: string; patch: (schemas: ComponentSchemas) => void }> = [
  {
    schema: 'Error',
    why: 'docs/conformance.md: an application/json failure is {"errors":[{"code","message"}]}, the OpenAPI default names the bare Error',
    patch: (schemas) => {
      const error = schemas.Error as Record<string, unknown>
      schemas.Error = {
        anyOf: [error, { type: 'object', required: ['errors'], properties: { errors: { type: 'array', minItems: 1, items: error } } }]
      }
    }
  },
  {
    schema: 'ResourceNotFoundProblem',
    why: 'resource_type names webhook and subscription, which the public enum lacks (docs/architecture.md, v2 Problems)',
    patch: productResourceTypes
  },
  {
    schema: 'WebhookConfigCreateResponse',
    why: 'docs/conformance.md: POST /2/webhooks answers {"data":{id,url,valid,created_at}}; the OpenAPI 200 schema is the bare object',
    patch: wrappedInData('WebhookConfigCreateResponse')
  },
  {
    schema: 'Get2WebhooksResponse',
    why: 'docs/conformance.md: an application without webhooks lists "data":[]; the OpenAPI data array has minItems 1',
    patch: (schemas) => {
      const list = schemas.Get2WebhooksResponse as { properties: { data: { minItems?: number } } }
      delete list.properties.data.minItems
    }
  },
  {
    schema: 'ReplayJobCreateResponse',
    why: 'docs/conformance.md: POST /2/webhooks/replay answers {"data":{job_id,created_at}}; the OpenAPI 200 schema is the bare object',
    patch: wrappedInData('ReplayJobCreateResponse')
  },
  {
    schema: 'MediaUploadResponse, MediaUploadAppendResponse',
    why: 'both require a `meta` property the document never defines; the platform\'s media upload answers (docs.x.com quickstart examples) carry `data` only, as the product does',
    patch: (schemas) => {
      for (const name of ['MediaUploadResponse', 'MediaUploadAppendResponse']) {
        const schema = schemas[name] as { required?: string[] }
        schema.required = (schema.required ?? []).filter((r) => r !== 'meta')
        if (schema.required.length === 0) delete schema.required
      }
    }
  },
  {
    schema: 'ActivityStreamingResponse',
    why: 'the payload is a oneOf that several event kinds satisfy at once (or none exactly): the envelope is checked with the payload open, and the payload against the schema of its event kind',
    patch: (schemas) => {
      const envelope = JSON.parse(JSON.stringify(schemas.ActivityStreamingResponse)) as { properties: { data: { properties: Record<string, unknown> } } }
      envelope.properties.data.properties.payload = { type: 'object' }
      schemas.ActivityStreamingResponse = envelope as unknown as Record<string, unknown>
    }
  }
]

interface Operation {
  method: string
  template: string
  pattern: RegExp
  ok: string
  default: Record<string, string>
}

function refName(ref: unknown): string {
  return String(ref).replace('#/components/schemas/', '')
}

function loadOperations(): Operation[] {
  const doc = JSON.parse(fs.readFileSync(OPENAPI_FILE, 'utf8')) as {
    paths: Record<string, Record<string, { responses?: Record<string, { content?: Record<string, { schema?: { $ref?: string } }> }> }>>
  }
  const out: Operation[] = []
  for (const [template, ops] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(ops)) {
      if (!op.responses) continue
      const ok = op.responses['200']?.content?.['application/json']?.schema?.$ref
      const defaults: Record<string, string> = {}
      for (const [type, c] of Object.entries(op.responses.default?.content ?? {})) defaults[type] = refName(c.schema?.$ref)
      const pattern = new RegExp(`^${template.replace(/\{[^}]+\}/g, '[^/]+')}$`)
      out.push({ method: method.toUpperCase(), template, pattern, ok: refName(ok), default: defaults })
    }
  }
  // Literal segments first: /2/webhooks/replay before /2/webhooks/{webhook_id}.
  const params = (o: Operation): number => o.template.split('{').length
  return out.sort((a, b) => params(a) - params(b))
}

/** The Problems of a body: the body itself when it is one, else the items of its `errors` array that are. */
function problemsIn(schema: string, value: unknown): Array<Record<string, unknown>> {
  if (value === null || typeof value !== 'object') return []
  const v = value as Record<string, unknown>
  if (schema === 'Problem') return [v]
  return Array.isArray(v.errors) ? (v.errors as unknown[]).filter((e): e is Record<string, unknown> => e !== null && typeof e === 'object' && 'type' in e) : []
}

export interface AuditResult {
  /** Responses checked, by operation (`METHOD /template`). */
  checked: Map<string, number>
  /** Operations with at least one 200 response that validated. */
  passed: Set<string>
  /** `/2/` paths the document does not describe. */
  undescribed: Set<string>
  failures: string[]
}

export class OpenApiAudit {
  private readonly operations = loadOperations()
  private readonly validators = openApiValidators((schemas) => {
    for (const d of DEVIATIONS) d.patch(schemas)
  })

  /** Problem type URI → the schema its discriminator selects (ajv ignores discriminators). */
  private readonly problemSchemas: Record<string, string> = (() => {
    const doc = JSON.parse(fs.readFileSync(OPENAPI_FILE, 'utf8')) as { components: { schemas: { Problem: { discriminator: { mapping: Record<string, string> } } } } }
    return Object.fromEntries(Object.entries(doc.components.schemas.Problem.discriminator.mapping).map(([type, ref]) => [type, refName(ref)]))
  })()

  private operationFor(method: string, path: string): Operation | undefined {
    return this.operations.find((o) => o.method === method && o.pattern.test(path))
  }

  audit(exchanges: readonly Exchange[]): AuditResult {
    const result: AuditResult = { checked: new Map(), passed: new Set(), undescribed: new Set(), failures: [] }
    for (const e of exchanges) {
      const path = e.url.split('?')[0] as string
      if (!path.startsWith('/2/')) continue
      const op = this.operationFor(e.method, path)
      if (!op) {
        result.undescribed.add(`${e.method} ${path.replace(/\/\d{5,}(?=\/|$)/g, '/{id}')}`)
        continue
      }
      const type = e.contentType.split(';')[0]?.trim() ?? ''
      const schema = e.status === 200 ? op.ok : op.default[type]
      const where = `${e.method} ${e.url} → ${e.status} ${type}`
      if (!schema) {
        result.failures.push(`${where}: no schema for this status and content type`)
        continue
      }
      const failuresBefore = result.failures.length
      const bodies = op.template === '/2/activity/stream' && e.status === 200 ? e.body.split(/\r?\n/).filter((l) => l.trim() !== '') : [e.body]
      for (const text of bodies) {
        let value: unknown
        try {
          value = JSON.parse(text)
        } catch {
          result.failures.push(`${where}: body is not JSON: ${text.slice(0, 120)}`)
          continue
        }
        const errors = this.validators.errors(schema, value)
        if (errors !== undefined) result.failures.push(`${where}: not a ${schema}: ${errors} in ${text.slice(0, 300)}`)
        for (const problem of problemsIn(schema, value)) {
          const subtype = this.problemSchemas[String(problem.type)]
          const subErrors = subtype === undefined ? undefined : this.validators.errors(subtype, problem)
          if (subErrors !== undefined) result.failures.push(`${where}: not a ${subtype}: ${subErrors}`)
        }
        const event = (value as { data?: { event_type?: string; payload?: unknown } }).data
        const payloadSchema = schema === 'ActivityStreamingResponse' ? OPENAPI_PAYLOADS[event?.event_type as EventType] : undefined
        if (payloadSchema !== undefined) {
          const payloadErrors = this.validators.errors(payloadSchema, event?.payload)
          if (payloadErrors !== undefined) result.failures.push(`${where}: payload not a ${payloadSchema}: ${payloadErrors}`)
        }
      }
      const key = `${op.method} ${op.template}`
      result.checked.set(key, (result.checked.get(key) ?? 0) + 1)
      if (e.status === 200 && result.failures.length === failuresBefore) result.passed.add(key)
    }
    return result
  }

  /** Every operation of the public subset, as `METHOD /template`, computed from the document. */
  operationKeys(): string[] {
    return this.operations.map((o) => `${o.method} ${o.template}`).sort()
  }

  /**
   * Asserts that `result` audited a successful (200) answer of every
   * operation of the public subset: an operation no client drives fails here.
   */
  assertCoversSubset(t: Test, result: AuditResult, label: string): void {
    const missing = this.operationKeys().filter((k) => !result.passed.has(k))
    t.same(missing, [], `${label}: a 200 answer of every one of the subset's ${this.operationKeys().length} operations passed the audit`)
  }

  /** Asserts that every `/2/` body of `exchanges` validates; comments what was checked. */
  check(t: Test, exchanges: readonly Exchange[], label: string): AuditResult {
    const result = this.audit(exchanges)
    const total = [...result.checked.values()].reduce((a, b) => a + b, 0)
    t.same(result.failures, [], `${label}: every /2/ response body matches the OpenAPI document (${total} checked)`)
    t.comment(`${label}: OpenAPI operations checked: ${[...result.checked].map(([k, n]) => `${k} ×${n}`).join(', ')}`)
    if (result.undescribed.size > 0) t.comment(`${label}: /2/ paths outside the OpenAPI subset: ${[...result.undescribed].join(', ')}`)
    return result
  }
}
