import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'

/**
 * The repository explains itself: no tracked file of the code, schemas,
 * docs, tests, benchmarks, scripts or deployment points a reader to a
 * document outside the repository (the contract lives in docs/contract.md)
 * or to an issue number of a tracker the reader does not have. A file scan,
 * no server.
 *
 * The patterns are assembled from pieces, so this file's own text does not
 * match them.
 */

const ROOT = path.resolve(__dirname, '..', '..')
const SCANNED = ['services', 'schemas', 'docs', 'test', 'bench', 'scripts', 'deploy', 'README.md', 'Makefile']
const BINARY = /\.(png|jpe?g|gif|webp|ico|mp4|pdf|woff2?)$/

const SPEC = ['service', 'spec'].join('-')
const FACTS = ['platform', 'facts'].join('-')
const OPENAPI = ['openapi', '2\\.166'].join('-')
const DESIGN = ['design', 'md'].join('\\.')
const SHARED = ['sha', 'red'].join('')

/** In-repository forms of the public OpenAPI copy's name, removed from a line before the check. */
const REPO_OPENAPI = [
  new RegExp(`schemas/platform/${OPENAPI}-subset\\.json`, 'g'),
  new RegExp(`'platform', '${OPENAPI}-subset\\.json'`, 'g')
]

const PATTERNS: ReadonlyArray<readonly [string, RegExp]> = [
  ['the contract document outside the repository', new RegExp(SPEC, 'i')],
  ['the platform notes outside the repository', new RegExp(FACTS, 'i')],
  ['the design document outside the repository (docs/architecture.md is the repository\'s)', new RegExp(`(?<!docs/)\\b${DESIGN}\\b`, 'i')],
  ['the public OpenAPI outside the repository (schemas/platform/ holds the copy)', new RegExp(OPENAPI, 'i')],
  ['a shared folder outside the repository', new RegExp([`\\.\\./${SHARED}/`, `/work/${SHARED}`, `\\b${SHARED}/spec\\b`].join('|'))],
  ['an issue number', new RegExp(['\\biss', 'ues?\\s+#?\\d+'].join(''), 'i')],
  ['an issue number', new RegExp(['\\(#', '\\d+\\)'].join(''))]
]

export interface Finding {
  where: string
  what: string
  line: string
}

/** Every outside reference of one file's text, as `file:line`. */
export function scan(file: string, text: string): Finding[] {
  const out: Finding[] = []
  text.split('\n').forEach((raw, i) => {
    const line = REPO_OPENAPI.reduce((l, re) => l.replace(re, ''), raw)
    for (const [what, re] of PATTERNS) {
      if (!re.test(line)) continue
      out.push({ where: `${file}:${i + 1}`, what, line: raw.trim().slice(0, 160) })
      break
    }
  })
  return out
}

function trackedFiles(): string[] {
  const listed = execFileSync('git', ['ls-files', '-z', '--', ...SCANNED], { cwd: ROOT, encoding: 'utf8' })
  return listed.split('\0').filter((f) => f !== '' && !BINARY.test(f) && fs.existsSync(path.join(ROOT, f)))
}

t.test('the scan finds each kind of outside reference, with file and line', async (t) => {
  const planted = [
    'fine line',
    `// see ${SPEC}.md, Limits`,
    `the ${FACTS} say so`,
    `(${['design', 'md'].join('.')} "Topics")`,
    `from /work/${'shared'}/spec/x.json`,
    `built for ${['iss', 'ue'].join('')} 26`,
    `fixed in ${['iss', 'ue'].join('')} #12`,
    `a change (#${'123'})`,
    `the public ${['openapi', '2.166'].join('-')} says`
  ].join('\n')
  const found = scan('planted.ts', planted)
  t.same(found.map((f) => f.where), [2, 3, 4, 5, 6, 7, 8, 9].map((n) => `planted.ts:${n}`))
  const allowed = [
    `docs/${['design', 'md'].join('.')}`,
    `schemas/platform/${['openapi', '2.166'].join('-')}-subset.json`,
    `path.join(dir, 'platform', '${['openapi', '2.166'].join('-')}-subset.json')`,
    'kafkajs#1147, 3 issues',
    'a colour (#fff)'
  ].join('\n')
  t.same(scan('allowed.ts', allowed), [], 'in-repository paths and upstream library issues pass')
})

t.test('no tracked file refers to a document outside the repository or to an issue number', async (t) => {
  const files = trackedFiles()
  t.ok(files.length > 300, `scanned ${files.length} files`)
  const found = files.flatMap((f) => scan(f, fs.readFileSync(path.join(ROOT, f), 'utf8')))
  t.same(found.map((f) => `${f.where}: ${f.what}: ${f.line}`), [], 'outside references (say it in docs/ instead)')
})
