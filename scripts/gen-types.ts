/**
 * Generates TypeScript types from the JSON Schemas in schemas/ (one way
 * throughout: the JSON files are the source, types follow them).
 *
 *   node dist/scripts/gen-types.js          writes services/common/generated/schema-types.ts
 *   node dist/scripts/gen-types.js --check  exits 1 when the file is out of date
 *
 * All schemas are compiled as definitions of one root document so a schema
 * referenced by several others (by its `$id`, e.g. "events/post.create") becomes
 * one shared type instead of several copies.
 */
import fs from 'node:fs'
import path from 'node:path'
import { compile, type JSONSchema } from 'json-schema-to-typescript'
import { SchemaRegistry, SCHEMA_DIR } from '../services/common/schemas'

export const OUTPUT = path.resolve(SCHEMA_DIR, '..', 'services', 'common', 'generated', 'schema-types.ts')

/** `events/activity.events` -> `EventsActivityEvents`. */
export function typeName(id: string): string {
  return id
    .split(/[^A-Za-z0-9]+/)
    .filter(Boolean)
    .map((w) => w[0]!.toUpperCase() + w.slice(1))
    .join('')
}

const BASE = 'https://schemas.invalid/'

/** A `$ref` resolved against the id of the schema it appears in, as ajv resolves it. */
function resolveRef(ref: string, baseId: string): { id: string; pointer: string } {
  const [target, pointer = ''] = ref.split('#') as [string, string | undefined]
  if (target === '') return { id: '', pointer }
  const resolved = new URL(target, BASE + baseId).href
  return { id: resolved.startsWith(BASE) ? resolved.slice(BASE.length) : target, pointer }
}

/** Rewrites `$ref: "<id>#/pointer"` (absolute or relative) to the root document's definitions. */
function rewriteRefs(node: unknown, ids: Set<string>, baseId: string): unknown {
  if (Array.isArray(node)) return node.map((n) => rewriteRefs(n, ids, baseId))
  if (node === null || typeof node !== 'object') return node
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(node as Record<string, unknown>)) {
    if (k === '$ref' && typeof v === 'string') {
      const { id, pointer } = resolveRef(v, baseId)
      if (id === '') {
        // A local pointer: it now lives inside this schema's definition in the root document.
        out[k] = `#/definitions/${typeName(baseId)}${pointer}`
        continue
      }
      if (ids.has(id)) {
        out[k] = `#/definitions/${typeName(id)}${pointer}`
        continue
      }
      throw new Error(`schema ${baseId}: $ref "${v}" names no schema under schemas/`)
    }
    if (k === '$id') continue
    out[k] = rewriteRefs(v, ids, baseId)
  }
  return out
}

export async function generate(): Promise<string> {
  const registry = new SchemaRegistry()
  const ids = new Set(registry.schemas.keys())
  const definitions: Record<string, unknown> = {}
  for (const [id, schema] of registry.schemas) {
    const rewritten = rewriteRefs(schema, ids, id) as Record<string, unknown>
    definitions[typeName(id)] = { ...rewritten, title: typeName(id) }
  }
  const root = { title: 'SchemaTypesRoot', type: 'object', additionalProperties: false, properties: {}, definitions } as JSONSchema
  const ts = await compile(root, 'SchemaTypesRoot', {
    bannerComment: '/* Generated from schemas/ by scripts/gen-types.ts (make types). Do not edit. */',
    unreachableDefinitions: true,
    additionalProperties: false,
    strictIndexSignatures: true,
    format: true,
    style: { singleQuote: true, semi: false, printWidth: 120 }
  })
  // An empty interface (the root, or a schema file that only holds definitions) carries no information;
  // an open object schema means "some object", not `{}`.
  return ts
    .replace(/(\/\*\*\n(?: \*.*\n)* \*\/\n)?export interface \w+ \{\}\n\n?/g, '')
    .replace(/: \{\}(\[\])?(?=\s*[\n|;])/g, ': Record<string, unknown>$1')
}

async function main(): Promise<void> {
  const check = process.argv.includes('--check')
  const ts = await generate()
  const current = fs.existsSync(OUTPUT) ? fs.readFileSync(OUTPUT, 'utf8') : ''
  if (check) {
    if (current !== ts) {
      process.stderr.write('services/common/generated/schema-types.ts is out of date: run `make types`\n')
      process.exit(1)
    }
    return
  }
  fs.mkdirSync(path.dirname(OUTPUT), { recursive: true })
  fs.writeFileSync(OUTPUT, ts)
  process.stdout.write(`wrote ${path.relative(process.cwd(), OUTPUT)} (${ids(ts)} types)\n`)
}

function ids(ts: string): number {
  return (ts.match(/^export (interface|type) /gm) ?? []).length
}

if (require.main === module) {
  main().catch((err: unknown) => {
    process.stderr.write(`${(err as Error).stack ?? String(err)}\n`)
    process.exit(1)
  })
}
