import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'

/**
 * docs/webhooks.md's module tables against services/webhooks: every module
 * of the service (and of its delivery/ folder) is named in a table row, and
 * every module a row names exists, so the map a reader starts from cannot
 * drift from the code.
 */

const ROOT = path.resolve(__dirname, '..', '..')
const SERVICE = path.join(ROOT, 'services', 'webhooks')

function modules(dir: string, prefix = ''): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    if (e.isDirectory()) return e.name === 'console-views' ? [] : modules(path.join(dir, e.name), `${prefix}${e.name}/`)
    return e.name.endsWith('.ts') ? [`${prefix}${e.name}`] : []
  })
}

/** Module names in the first column of the document's table rows. */
function named(doc: string): Set<string> {
  const out = new Set<string>()
  for (const line of doc.split('\n')) {
    const cell = /^\| ([^|]+) \|/.exec(line)?.[1]
    if (!cell) continue
    for (const m of cell.matchAll(/`([a-z0-9/-]+\.ts)`/g)) out.add(m[1] as string)
  }
  return out
}

t.test('every module of services/webhooks is in docs/webhooks.md, and every row names a module', async (t) => {
  const doc = fs.readFileSync(path.join(ROOT, 'docs', 'webhooks.md'), 'utf8')
  const inDoc = named(doc)
  const inCode = modules(SERVICE)
  t.ok(inCode.length > 20, `found ${inCode.length} modules`)
  t.same(inCode.filter((m) => !inDoc.has(m)), [], 'modules missing from the tables')
  t.same([...inDoc].filter((m) => !inCode.includes(m)), [], 'rows naming a module that does not exist')
})
