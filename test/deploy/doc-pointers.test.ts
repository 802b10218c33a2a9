import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import t from 'tap'

/**
 * Pointers into the repository's own documents lead somewhere: a comment or
 * a document that sends the reader to a file of docs/ followed by a quoted
 * section names a file that exists and a heading of it holding those words,
 * and one that cites an entry of bench/PROFILES.md the same way names a
 * heading or a bold entry label of that file. A file scan, no server. The
 * sample pointers below are assembled from pieces, so this file has none.
 */

const ROOT = path.resolve(__dirname, '..', '..')
const SCANNED = ['services', 'schemas', 'docs', 'test', 'bench', 'scripts', 'deploy', 'README.md', 'Makefile']
const BINARY = /\.(png|jpe?g|gif|webp|ico|mp4|pdf|woff2?)$/
/** A docs/ file or bench/PROFILES.md, an optional comma, then the section in double quotes; the quote may wrap onto the next comment line. */
const POINTER = /((?:docs\/[a-z-]+|bench\/PROFILES)\.md),? "([^"]+)"/g

export interface Pointer {
  where: string
  file: string
  section: string
}

/** Every pointer of one file's text (comment markers and line breaks inside a quote are folded to spaces). */
export function pointersOf(name: string, text: string): Pointer[] {
  const lines = text.split('\n')
  const folded = lines.map((l) => l.replace(/^\s*(\/\/|\*|#)\s?/, '')).join(' ')
  const starts: number[] = []
  let offset = 0
  for (const l of lines) {
    starts.push(offset)
    offset += l.replace(/^\s*(\/\/|\*|#)\s?/, '').length + 1
  }
  const out: Pointer[] = []
  for (const m of folded.matchAll(POINTER)) {
    const at = m.index ?? 0
    let line = starts.findIndex((s) => s > at)
    if (line < 0) line = lines.length
    out.push({ where: `${name}:${line}`, file: m[1] as string, section: (m[2] as string).replace(/\s+/g, ' ') })
  }
  return out
}

/** The headings of a Markdown text and its bold labels (`**Label**`), backticks removed, lowercased. */
export function anchorsOf(markdown: string): string[] {
  const heads = [...markdown.matchAll(/^#{1,6} (.+)$/gm)].map((m) => m[1] as string)
  const bold = [...markdown.matchAll(/\*\*([^*]+)\*\*/g)].map((m) => m[1] as string)
  return [...heads, ...bold].map((s) => s.replace(/`/g, '').replace(/\s+/g, ' ').trim().toLowerCase())
}

export function resolves(pointer: Pointer, anchors: string[]): boolean {
  const want = pointer.section.replace(/`/g, '').trim().toLowerCase()
  // A heading that starts with the words, or an entry labelled "<context>: <words>".
  return anchors.some((a) => a.startsWith(want) || a.includes(`: ${want}`))
}

function trackedFiles(): string[] {
  const listed = execFileSync('git', ['ls-files', '-z', '--', ...SCANNED], { cwd: ROOT, encoding: 'utf8' })
  return listed.split('\0').filter((f) => f !== '' && !BINARY.test(f) && fs.existsSync(path.join(ROOT, f)))
}

t.test('pointer reading', async (t) => {
  const [doc, profiles] = [['docs', 'contract.md'].join('/'), ['bench', 'PROFILES.md'].join('/')]
  const text = ['/**', ` * Rules of ${doc} "Bid strategy`, ` * rules"; timings: ${profiles} "Webhook burst".`, ' */'].join('\n')
  const found = pointersOf('x.ts', text)
  t.same(found.map((p) => [p.file, p.section]), [['docs/contract.md', 'Bid strategy rules'], ['bench/PROFILES.md', 'Webhook burst']])
  t.ok(resolves({ where: '', file: '', section: 'Bid strategy rules' }, anchorsOf('#### Bid strategy rules\n')))
  t.notOk(resolves({ where: '', file: '', section: 'Catalog management' }, anchorsOf('## Envelope\n**Products**')))
})

t.test('every docs/ and bench/PROFILES.md pointer names an existing file and section', async (t) => {
  const anchors = new Map<string, string[] | undefined>()
  const anchorsFor = (file: string): string[] | undefined => {
    if (!anchors.has(file)) {
      const full = path.join(ROOT, file)
      anchors.set(file, fs.existsSync(full) ? anchorsOf(fs.readFileSync(full, 'utf8')) : undefined)
    }
    return anchors.get(file)
  }
  const pointers = trackedFiles().flatMap((f) => pointersOf(f, fs.readFileSync(path.join(ROOT, f), 'utf8')))
  t.ok(pointers.length > 20, `${pointers.length} pointers`)
  const broken = pointers.filter((p) => {
    const a = anchorsFor(p.file)
    return a === undefined || !resolves(p, a)
  })
  t.same(broken.map((p) => `${p.where}: ${p.file} "${p.section}"`), [], 'pointers to a file or section that does not exist')
})
