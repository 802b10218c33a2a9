import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'
import { startTestRuntime } from '../support/runtime'

/**
 * docs/contract.md's index of route families against the routes the
 * product serves: the embedded runtime (every service, the API host and the
 * sandbox host) is started and fastify's route tree read back, each route
 * is reduced to its family, and every family must be a row of the index
 * (and every row a family that is served), so a route added without saying
 * what it promises fails here. Each row names the section that describes
 * the family, which must be a heading of the document.
 */

const ROOT = path.resolve(__dirname, '..', '..')
const DOC = path.join(ROOT, 'docs', 'contract.md')

/** Version roots: a family there is three static segments deep (`/12/accounts/:account_id/cards`), elsewhere two (`/oauth/authorize`). */
const VERSIONED = new Set(['2', '12', '5', '1.1', 'i'])

/**
 * Full paths from `printRoutes({ commonPrefix: false })`: one node per line,
 * its depth given by its indentation, its path its ancestors' labels and its own.
 */
export function pathsOfTree(tree: string): string[] {
  const stack: string[] = []
  const out: string[] = []
  for (const line of tree.split('\n')) {
    const m = /^([│ ]*)[├└]── (.*?) \(([A-Z, ]+)\)$/.exec(line)
    if (!m) continue
    const depth = (m[1] as string).length / 4
    stack.length = depth
    stack.push(m[2] as string)
    out.push(stack.join(''))
  }
  return out
}

/** The family of a route: its path up to its second static segment (third under a version root), parameters kept, `.json` dropped. */
export function familyOf(route: string): string | undefined {
  const segments = route.split('/').filter((s) => s !== '' && s !== '*')
  const depth = VERSIONED.has(segments[0] ?? '') ? 3 : 2
  const kept: string[] = []
  let statics = 0
  let lastStatic = 0
  for (const s of segments) {
    if (statics === depth) break
    kept.push(s.startsWith(':') || kept.length === 0 ? s : s.replace(/\.json$/, ''))
    if (!s.startsWith(':')) {
      statics++
      lastStatic = kept.length
    }
  }
  if (lastStatic === 0) return undefined
  return `/${kept.slice(0, lastStatic).join('/')}`
}

/** Parameter names do not matter (`{id}`, `:id`, and the router's merged `:app_id|:id` are all one parameter). */
export function normalize(prefix: string): string {
  return prefix
    .split('/')
    .map((s) => (s.startsWith(':') || /^\{[^}]+\}$/.test(s) ? ':' : s))
    .join('/')
}

interface IndexRow {
  prefixes: string[]
  section: string
}

/** The rows of the table under the document's "Route families" heading: backticked prefixes in the first column, the section in the last. */
export function indexRows(doc: string): IndexRow[] {
  const start = doc.indexOf('\n## Route families')
  if (start < 0) throw new Error('docs/contract.md has no "Route families" section')
  const end = doc.indexOf('\n## ', start + 1)
  const rows: IndexRow[] = []
  for (const line of doc.slice(start, end < 0 ? undefined : end).split('\n')) {
    if (!line.startsWith('| `')) continue
    const cells = line.split('|').slice(1, -1).map((c) => c.trim())
    const prefixes = [...(cells[0] ?? '').matchAll(/`([^`]+)`/g)].map((m) => m[1] as string)
    const section = /\[([^\]]+)\]\(#[^)]+\)/.exec(cells[cells.length - 1] ?? '')?.[1] ?? cells[cells.length - 1] ?? ''
    rows.push({ prefixes, section })
  }
  return rows
}

/** The document's headings, as written (backticks removed). */
function headings(doc: string): Set<string> {
  return new Set([...doc.matchAll(/^#{2,4} (.+)$/gm)].map((m) => (m[1] as string).replace(/`/g, '').trim()))
}

t.test('family reduction', async (t) => {
  t.equal(familyOf('/12/accounts/:account_id/cards/poll/:card_id'), '/12/accounts/:account_id/cards')
  t.equal(familyOf('/12/accounts/:account_id'), '/12/accounts')
  t.equal(familyOf('/2/webhooks/:webhook_id/standard_webhooks/rotate'), '/2/webhooks/:webhook_id/standard_webhooks')
  t.equal(familyOf('/1.1/oauth/invalidate_token.json'), '/1.1/oauth/invalidate_token')
  t.equal(familyOf('/console/webhooks/apps/:app_id/webhooks.json'), '/console/webhooks')
  t.equal(familyOf('/console/*'), '/console')
  t.equal(familyOf('/media/:file'), '/media')
  t.equal(familyOf('/openapi.json'), '/openapi.json')
  t.same(pathsOfTree('├── /2/webhooks (POST)\n│   ├── /replay (POST)\n│   └── /:id (PUT)\n└── /metrics (GET)'), ['/2/webhooks', '/2/webhooks/replay', '/2/webhooks/:id', '/metrics'])
})

t.test('every route family the services register is in docs/contract.md, and every row is served', async (t) => {
  const runtime = await startTestRuntime(t)
  const trees = [runtime.app, runtime.sandbox].map((s) => s?.printRoutes({ commonPrefix: false }) ?? '')
  const routes = trees.flatMap(pathsOfTree)
  t.ok(routes.length > 150, `${routes.length} routes on the API and sandbox hosts`)
  const served = new Set(routes.map(familyOf).filter((f): f is string => f !== undefined).map(normalize))

  const doc = fs.readFileSync(DOC, 'utf8')
  const rows = indexRows(doc)
  const listed = new Set(rows.flatMap((r) => r.prefixes.map(normalize)))
  t.same([...served].filter((f) => !listed.has(f)).sort(), [], 'families served but not in the index of docs/contract.md')
  t.same([...listed].filter((f) => !served.has(f)).sort(), [], 'rows of the index that no route serves')

  const known = headings(doc)
  t.same(rows.filter((r) => !known.has(r.section)).map((r) => `${r.prefixes.join(', ')} -> ${r.section}`), [], 'index rows naming a section the document does not have')
})
