import fs from 'node:fs'
import path from 'node:path'
import Ajv from 'ajv'
import addFormats from 'ajv-formats'
import t from 'tap'
import { plainRequest } from '../support/http'
import { startTestRuntime } from '../support/runtime'

/**
 * GET /openapi.json: the OpenAPI 3 document @fastify/swagger generates from
 * the route schemas. The embedded runtime serves every route, so its
 * document is the product's. Checked for being well formed (every $ref
 * resolves, every schema compiles, path templates and path parameters agree,
 * security names exist) and against the public platform's description
 * (schemas/platform/openapi-2.166-subset.json) on the `/2/` operations both
 * have: the public parameters are accepted (name, place, required-ness,
 * compatible schema) and success is 200 with the same media types.
 */

type Json = Record<string, unknown>
type Doc = Json & { paths: Record<string, Record<string, Json>>; components?: Json }

const METHODS = ['get', 'put', 'post', 'delete', 'patch', 'options', 'head', 'trace'] as const
const PUBLIC = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'schemas', 'platform', 'openapi-2.166-subset.json'), 'utf8')) as Doc

/** The public `/2/` operations the product does not serve. */
const EXPECTED_NOT_SERVED: string[] = []
/**
 * The product's `/2/` operations the public subset does not describe (OAuth 2.0, usage and the stream's browser tickets
 * are outside the subset; Standard Webhooks signing is the product's extension of webhooks).
 */
const EXPECTED_NOT_IN_PUBLIC = [
  'GET /2/oauth2/authorize',
  'GET /2/usage/tweets',
  'PATCH /2/webhooks/{webhook_id}',
  'POST /2/activity/stream/ticket',
  'POST /2/oauth2/authorize',
  'POST /2/oauth2/revoke',
  'POST /2/oauth2/token',
  'POST /2/webhooks/{webhook_id}/standard_webhooks/rotate'
]
/**
 * Where the product accepts less than the public description. The stream
 * serves live activity and backfill_minutes only: a time window is refused
 * (docs/conformance.md). Pagination tokens are the product's own (base32,
 * 16 to 64 characters): a token another server issued means nothing here.
 */
const EXPECTED_NARROWER = [
  'GET /2/activity/stream: query end_time is not accepted',
  'GET /2/activity/stream: query start_time is not accepted',
  'GET /2/activity/subscriptions: query pagination_token maxLength 64 where the public has none',
  'GET /2/activity/subscriptions: query pagination_token pattern ^[a-z2-7]+$ where the public has none'
]

function pointer(doc: unknown, ref: string): unknown {
  if (!ref.startsWith('#')) return undefined
  let at: unknown = doc
  for (const raw of ref.slice(1).split('/').slice(1)) {
    const key = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~')
    if (at === null || typeof at !== 'object' || !Object.hasOwn(at, key)) return undefined
    at = (at as Json)[key]
  }
  return at
}

/** Follows `$ref`s (local to `doc`) until a node without one. */
function deref<T = Json>(doc: unknown, node: unknown): T {
  let at = node
  for (let i = 0; i < 20 && at !== null && typeof at === 'object' && typeof (at as Json).$ref === 'string'; i++) at = pointer(doc, (at as Json).$ref as string)
  return at as T
}

function allRefs(node: unknown, out: string[] = []): string[] {
  if (Array.isArray(node)) for (const item of node) allRefs(item, out)
  else if (node !== null && typeof node === 'object') {
    for (const [k, v] of Object.entries(node)) {
      if (k === '$ref' && typeof v === 'string') out.push(v)
      else allRefs(v, out)
    }
  }
  return out
}

function operations(doc: Doc, prefix = ''): Map<string, Json & { pathParams: Json[] }> {
  const out = new Map<string, Json & { pathParams: Json[] }>()
  for (const [p, item] of Object.entries(doc.paths)) {
    if (!p.startsWith(prefix)) continue
    for (const m of METHODS) {
      const op = item[m]
      if (op) out.set(`${m.toUpperCase()} ${p}`, { ...op, pathParams: (item.parameters as Json[] | undefined) ?? [] })
    }
  }
  return out
}

interface Parameter {
  name: string
  in: string
  required?: boolean
  explode?: boolean
  schema?: Json
}

function parametersOf(doc: Doc, op: Json & { pathParams: Json[] }): Map<string, Parameter> {
  const out = new Map<string, Parameter>()
  for (const raw of [...op.pathParams, ...((op.parameters as Json[] | undefined) ?? [])]) {
    const p = deref<Parameter>(doc, raw)
    out.set(`${p.in} ${p.name}`, p)
  }
  return out
}

/** What in `ours` refuses a value `pub` allows (empty: ours accepts at least what the public accepts). */
function narrower(pub: Json, ours: Json, where: string): string[] {
  const out: string[] = []
  const pubType = pub.type as string | undefined
  const ourType = ours.type as string | undefined
  if (ourType !== undefined && ourType !== pubType && !(ourType === 'number' && pubType === 'integer')) out.push(`${where} type ${ourType} where the public has ${pubType ?? 'none'}`)
  if (ours.pattern !== undefined && ours.pattern !== pub.pattern) out.push(`${where} pattern ${String(ours.pattern)} where the public has ${pub.pattern === undefined ? 'none' : String(pub.pattern)}`)
  if (ours.format !== undefined && ours.format !== pub.format) out.push(`${where} format ${String(ours.format)} where the public has ${String(pub.format ?? 'none')}`)
  if (Array.isArray(ours.enum) && !(Array.isArray(pub.enum) && pub.enum.every((v) => (ours.enum as unknown[]).includes(v)))) out.push(`${where} enum narrower than the public's`)
  for (const k of ['minimum', 'minLength', 'minItems'] as const) {
    if (typeof ours[k] === 'number' && !(typeof pub[k] === 'number' && pub[k] >= ours[k])) out.push(`${where} ${k} ${ours[k]} where the public has ${String(pub[k] ?? 'none')}`)
  }
  for (const k of ['maximum', 'maxLength', 'maxItems'] as const) {
    if (typeof ours[k] === 'number' && !(typeof pub[k] === 'number' && pub[k] <= ours[k])) out.push(`${where} ${k} ${ours[k]} where the public has ${String(pub[k] ?? 'none')}`)
  }
  if (pubType === 'array' && ourType === 'array' && pub.items && ours.items) out.push(...narrower(pub.items as Json, ours.items as Json, `${where} items`))
  return out
}

/** A parameter of the public description against ours: differences that refuse what the public allows. */
function compareParameter(pubDoc: Doc, ourDoc: Doc, pub: Parameter, ours: Parameter | undefined, where: string): string[] {
  if (!ours) return [`${where} is not accepted`]
  const out: string[] = []
  if ((pub.required ?? false) !== (ours.required ?? false)) out.push(`${where} required ${String(ours.required ?? false)} where the public has ${String(pub.required ?? false)}`)
  const pubSchema = deref(pubDoc, pub.schema ?? {})
  const ourSchema = deref(ourDoc, ours.schema ?? {})
  // A comma-separated list (form, explode false) is one string on the wire: ours may read it as a string.
  if (pubSchema.type === 'array' && pub.explode === false && ourSchema.type === 'string') {
    if (ourSchema.pattern !== undefined || ourSchema.enum !== undefined) out.push(`${where} a constrained string where the public has a list`)
    return out
  }
  if (pubSchema.type === 'array' && ourSchema.type === 'array' && pub.explode === false && ours.explode !== false) out.push(`${where} not a comma-separated list`)
  const pubFlat = { ...pubSchema, ...(pubSchema.items ? { items: deref(pubDoc, pubSchema.items) } : {}) }
  const ourFlat = { ...ourSchema, ...(ourSchema.items ? { items: deref(ourDoc, ourSchema.items) } : {}) }
  out.push(...narrower(pubFlat, ourFlat, where))
  return out
}

t.test('GET /openapi.json serves a well-formed OpenAPI 3.1 document of every route', async (t) => {
  const rt = await startTestRuntime(t)
  const res = await plainRequest('GET', `${rt.baseUrl}/openapi.json`)
  t.equal(res.status, 200)
  t.match(res.headers.get('content-type'), /^application\/json/)
  const doc = res.json<Doc>()

  t.match(doc.openapi, /^3\.1\.\d+$/, 'OpenAPI 3.1')
  t.ok(typeof (doc.info as Json | undefined)?.title === 'string' && typeof (doc.info as Json).version === 'string', 'info has title and version')

  // Every $ref resolves inside the document.
  const refs = allRefs(doc)
  t.ok(refs.length > 0, `${refs.length} $refs`)
  t.same(refs.filter((r) => pointer(doc, r) === undefined), [], 'every $ref resolves')

  // Every component schema compiles (with the others resolvable through the document).
  const ajv = new Ajv({ strict: false, allErrors: true })
  addFormats(ajv)
  ajv.addSchema({ ...doc, $id: 'openapi' } as Json, 'openapi')
  const broken: string[] = []
  for (const name of Object.keys((doc.components?.schemas as Json | undefined) ?? {})) {
    try {
      ajv.compile({ $ref: `openapi#/components/schemas/${name}` })
    } catch (err) {
      broken.push(`${name}: ${(err as Error).message}`)
    }
    if (!/^[A-Za-z0-9._-]+$/.test(name)) broken.push(`${name}: not a valid component name`)
  }
  t.same(broken, [], 'every component schema compiles and is well named')
  t.same(allRefs(doc).filter((r) => /\/(definitions|\$defs)\//.test(r)), [], 'no definitions left inside schemas')

  // Operations: responses, path parameters matching the template, known security schemes, unique operation ids.
  const schemes = new Set(Object.keys((doc.components?.securitySchemes as Json | undefined) ?? {}))
  t.ok(['BearerToken', 'UserToken', 'OAuth2UserToken'].every((s) => schemes.has(s)), 'the public security schemes are declared')
  const problems: string[] = []
  const ops = operations(doc)
  for (const [key, op] of ops) {
    const template = key.split(' ')[1] as string
    if (!op.responses || Object.keys(op.responses).length === 0) problems.push(`${key}: no responses`)
    const inPath = [...template.matchAll(/\{([^}]+)\}/g)].map((m) => m[1] as string).sort()
    const params = [...parametersOf(doc, op).values()]
    const declared = params.filter((p) => p.in === 'path').map((p) => p.name).sort()
    if (JSON.stringify(inPath) !== JSON.stringify(declared)) problems.push(`${key}: path parameters ${declared.join(',')} for ${inPath.join(',')}`)
    for (const p of params) if (p.in === 'path' && p.required !== true) problems.push(`${key}: path parameter ${p.name} not required`)
    for (const req of (op.security as Json[] | undefined) ?? []) for (const name of Object.keys(req)) if (!schemes.has(name)) problems.push(`${key}: unknown security scheme ${name}`)
  }
  t.same(problems, [], `${ops.size} operations are well formed`)
  const ids = [...ops.values()].map((op) => op.operationId).filter((id) => id !== undefined)
  t.equal(new Set(ids).size, ids.length, 'operation ids are unique')

  // Plumbing and the console are left out; operator routes are tagged.
  for (const p of ['/healthz', '/readyz', '/metrics', '/openapi.json']) t.notOk(doc.paths[p], `${p} is not documented`)
  t.notOk(Object.keys(doc.paths).some((p) => p.startsWith('/console')), 'the web console is not documented')
  t.same((doc.paths['/admin/apps']?.get as Json | undefined)?.tags, ['operator'], 'operator routes are tagged operator')
  t.same((doc.paths['/admin/apps']?.get as Json | undefined)?.security, [{ OperatorToken: [] }], 'with the operator token')
})

t.test('the /2/ operations agree with the public description', async (t) => {
  const rt = await startTestRuntime(t)
  const ours = (await plainRequest('GET', `${rt.baseUrl}/openapi.json`)).json<Doc>()
  const pubOps = operations(PUBLIC, '/2/')
  const ourOps = operations(ours, '/2/')

  const notServed = [...pubOps.keys()].filter((k) => !ourOps.has(k)).sort()
  const notInPublic = [...ourOps.keys()].filter((k) => !pubOps.has(k)).sort()
  t.comment(`public /2/ operations not served: ${notServed.join(', ') || 'none'}`)
  t.comment(`served /2/ operations not in the public subset: ${notInPublic.join(', ') || 'none'}`)
  t.same(notServed, EXPECTED_NOT_SERVED, 'public operations not served')
  t.same(notInPublic, EXPECTED_NOT_IN_PUBLIC, 'served operations outside the public subset')

  const narrowerFound: string[] = []
  const disagreements: string[] = []
  for (const [key, pubOp] of pubOps) {
    const ourOp = ourOps.get(key)
    if (!ourOp) continue
    const pubParams = parametersOf(PUBLIC, pubOp)
    const ourParams = parametersOf(ours, ourOp)
    for (const [id, p] of pubParams) narrowerFound.push(...compareParameter(PUBLIC, ours, p, ourParams.get(id), `${key}: ${id}`))
    // Ours must not require what the public does not have.
    for (const [id, p] of ourParams) if (p.required && !pubParams.has(id)) narrowerFound.push(`${key}: ${id} is required but not in the public description`)

    // Success: the public's 2xx statuses, each with the same media types.
    const pubResponses = pubOp.responses as Record<string, Json>
    const ourResponses = (ourOp.responses ?? {}) as Record<string, Json>
    for (const status of Object.keys(pubResponses).filter((s) => /^2/.test(s))) {
      const ourResponse = ourResponses[status]
      if (!ourResponse) {
        disagreements.push(`${key}: no ${status} response`)
        continue
      }
      const pubTypes = Object.keys(deref(PUBLIC, pubResponses[status]).content ?? {}).sort()
      const ourTypes = Object.keys(deref(ours, ourResponse).content ?? {}).sort()
      if (JSON.stringify(pubTypes) !== JSON.stringify(ourTypes)) disagreements.push(`${key}: ${status} as ${ourTypes.join(',') || 'nothing'} where the public has ${pubTypes.join(',')}`)
      for (const type of ourTypes) {
        const schema = deref(ours, (deref(ours, ourResponse).content as Record<string, Json>)[type]?.schema ?? {})
        if (schema.type === undefined) disagreements.push(`${key}: ${status} ${type} without a schema`)
      }
    }
    for (const status of Object.keys(ourResponses).filter((s) => /^2/.test(s))) {
      if (!pubResponses[status]) disagreements.push(`${key}: answers ${status}, which the public does not`)
    }
  }
  narrowerFound.sort()
  for (const line of narrowerFound) t.comment(`narrower: ${line}`)
  t.same(narrowerFound, EXPECTED_NARROWER, 'parameters of the public description are accepted, except the documented ones')
  t.same(disagreements, [], 'success statuses and media types agree')
})
