import fs from 'node:fs'
import path from 'node:path'
import Ajv, { type ErrorObject, type ValidateFunction } from 'ajv'
import addFormats from 'ajv-formats'

/**
 * Every JSON Schema under `schemas/` is loaded and compiled once per process.
 * A schema's `$id` is its path below `schemas/` without `.json`
 * (`events/activity.events`, `http/webhooks`), so routes and producers refer
 * to it by that name. fastify receives the same schemas (see http.ts) for
 * request validation and response serialization.
 */

export const SCHEMA_DIR = path.resolve(__dirname, '..', '..', ...(__dirname.includes(`${path.sep}dist${path.sep}`) ? ['..'] : []), 'schemas')

export type JsonSchema = Record<string, unknown> & { $id?: string }

function listJsonFiles(dir: string): string[] {
  const out: string[] = []
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name)
    if (entry.isDirectory()) out.push(...listJsonFiles(full))
    else if (entry.name.endsWith('.json')) out.push(full)
  }
  return out.sort()
}

/** Schemas that are data files rather than JSON Schemas live under schemas/data/ and are skipped. */
function isSchemaFile(rel: string): boolean {
  return !rel.startsWith(`data${path.sep}`) && !rel.startsWith(`platform${path.sep}`)
}

/**
 * The one ajv configuration of the process. Validators differ only in type
 * coercion: JSON (event payloads, request bodies) must carry the schema's
 * types, `{"url": 5}` is not a string; query strings, path parameters and
 * headers are text on the wire, so `max_results=10` is coerced to a number
 * (and a single value to a one-element array).
 */
export type Coercion = false | 'array'

function newAjv(coerceTypes: Coercion): Ajv {
  const ajv = new Ajv({ allErrors: true, strict: false, coerceTypes, useDefaults: true, removeAdditional: false })
  addFormats(ajv)
  return ajv
}

/** The parts of a request fastify validates. */
export type HttpPart = 'body' | 'querystring' | 'params' | 'headers'

export class SchemaRegistry {
  /** Without coercion: events and request bodies. */
  readonly ajv: Ajv
  readonly schemas = new Map<string, JsonSchema>()
  private coercing: Ajv | undefined

  constructor(dir: string = SCHEMA_DIR) {
    this.ajv = newAjv(false)
    for (const file of listJsonFiles(dir)) {
      const rel = path.relative(dir, file)
      if (!isSchemaFile(rel)) continue
      const schema = JSON.parse(fs.readFileSync(file, 'utf8')) as JsonSchema
      const id = rel.replace(/\.json$/, '').split(path.sep).join('/')
      if (schema.$id !== undefined && schema.$id !== id) {
        throw new Error(`schema ${rel} has $id "${schema.$id}"; expected "${id}"`)
      }
      schema.$id = id
      this.schemas.set(id, schema)
      this.ajv.addSchema(schema)
    }
    // Compile eagerly so a broken schema stops the process at start, not at first use.
    for (const id of this.schemas.keys()) this.ajv.getSchema(id)
  }

  validator(id: string): ValidateFunction {
    const v = this.ajv.getSchema(id)
    if (!v) throw new Error(`unknown schema "${id}"`)
    return v
  }

  has(id: string): boolean {
    return this.schemas.has(id)
  }

  /**
   * The validator of one part of a request (fastify's validator compiler,
   * see http.ts): bodies without coercion, the textual parts with it. Both
   * resolve `$ref`s to every schema of `schemas/`.
   */
  requestValidator(schema: Record<string, unknown>, part: HttpPart | undefined): ValidateFunction {
    if (part === 'body' || part === undefined) return this.ajv.compile(schema)
    return this.coercingAjv().compile(schema)
  }

  private coercingAjv(): Ajv {
    if (!this.coercing) {
      const ajv = newAjv('array')
      for (const schema of this.schemas.values()) ajv.addSchema(schema)
      this.coercing = ajv
    }
    return this.coercing
  }
}

/** One readable line per ajv error: `/filter/user_id must match pattern "^[0-9]{1,19}$"`. */
export function describeErrors(errors: ErrorObject[] | null | undefined): string {
  if (!errors || errors.length === 0) return 'invalid'
  return errors
    .map((e) => {
      const where = e.instancePath === '' ? '(root)' : e.instancePath
      if (e.keyword === 'additionalProperties') return `${where} has unexpected property "${(e.params as { additionalProperty: string }).additionalProperty}"`
      if (e.keyword === 'required') return `${where} is missing "${(e.params as { missingProperty: string }).missingProperty}"`
      return `${where} ${e.message ?? 'is invalid'}`
    })
    .join('; ')
}

let shared: SchemaRegistry | undefined

/** The process-wide registry (compiled on first use). */
export function schemaRegistry(): SchemaRegistry {
  shared ??= new SchemaRegistry()
  return shared
}
