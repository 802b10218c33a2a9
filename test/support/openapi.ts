import fs from 'node:fs'
import path from 'node:path'
import Ajv, { type ValidateFunction } from 'ajv'
import addFormats from 'ajv-formats'

/**
 * Validators of the public platform's OpenAPI (3.0) component schemas
 * (schemas/platform/openapi-2.166-subset.json), compiled with ajv. The
 * document's `discriminator` is ignored (strict off) and its number formats are
 * declared. `patch` may adjust the component schemas first, for documented
 * deviations where docs/conformance.md wins over the OpenAPI description.
 */

export const OPENAPI_FILE = path.resolve(__dirname, '..', '..', 'schemas', 'platform', 'openapi-2.166-subset.json')

export type ComponentSchemas = Record<string, Record<string, unknown>>

export interface OpenApiValidators {
  validator(name: string): ValidateFunction
  /** undefined when `value` matches the component schema, else ajv's description of why not. */
  errors(name: string, value: unknown): string | undefined
}

export function openApiValidators(patch?: (schemas: ComponentSchemas) => void): OpenApiValidators {
  let ajv: Ajv | undefined
  const compiled = (): Ajv => {
    if (!ajv) {
      const doc = JSON.parse(fs.readFileSync(OPENAPI_FILE, 'utf8')) as { components: { schemas: ComponentSchemas } }
      patch?.(doc.components.schemas)
      ajv = new Ajv({ strict: false, allErrors: true })
      addFormats(ajv)
      for (const f of ['int32', 'int64', 'binary']) ajv.addFormat(f, true)
      ajv.addSchema({ $id: 'openapi', components: doc.components })
    }
    return ajv
  }
  const validator = (name: string): ValidateFunction => {
    const v = compiled().getSchema(`openapi#/components/schemas/${name}`)
    if (!v) throw new Error(`no OpenAPI schema ${name}`)
    return v
  }
  return {
    validator,
    errors: (name, value) => {
      const v = validator(name)
      return v(value) ? undefined : compiled().errorsText(v.errors)
    }
  }
}

/**
 * The documented deviation of resource-not-found (services/common/errors.ts,
 * ProductResourceType): an unknown webhook or subscription answers it with
 * `resource_type` `webhook` or `subscription`, two values the public enum,
 * which lists only the platform's read resources, does not have.
 */
export function productResourceTypes(schemas: ComponentSchemas): void {
  const problem = schemas.ResourceNotFoundProblem as { allOf: Array<{ properties?: { resource_type?: { enum: string[] } } }> }
  for (const part of problem.allOf) part.properties?.resource_type?.enum.push('webhook', 'subscription')
}
