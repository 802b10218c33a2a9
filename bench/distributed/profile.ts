/**
 * Summary of V8 CPU profiles (`.cpuprofile`, from --cpu-prof): share of the
 * samples that were idle, garbage collection and program, and the functions
 * with the most self time, grouped by file (the project's own files by path,
 * dependencies by package).
 *
 *   node dist/bench/distributed/profile.js /tmp/prof/*.cpuprofile [--top 25]
 *
 * bench/distributed's BENCH_DISTRIBUTED_PROFILE=<dir> writes one profile per
 * service process (written when the process exits, so after the run).
 */
import fs from 'node:fs'
import path from 'node:path'

interface ProfileNode {
  id: number
  callFrame: { functionName: string; url: string; lineNumber: number }
  children?: number[]
}

interface Profile {
  nodes: ProfileNode[]
  samples: number[]
  timeDeltas: number[]
  startTime: number
  endTime: number
}

function where(url: string): string {
  if (url === '') return ''
  const clean = url.replace(/^file:\/\//, '')
  const nm = clean.lastIndexOf('/node_modules/')
  if (nm >= 0) {
    const rest = clean.slice(nm + '/node_modules/'.length).split('/')
    return (rest[0]?.startsWith('@') ? `${rest[0]}/${rest[1] ?? ''}` : rest[0]) ?? clean
  }
  if (clean.startsWith('node:')) return clean
  const dist = clean.indexOf('/dist/')
  return dist >= 0 ? clean.slice(dist + '/dist/'.length) : path.basename(clean)
}

export function summarise(file: string, top: number): string[] {
  const profile = JSON.parse(fs.readFileSync(file, 'utf8')) as Profile
  const byId = new Map(profile.nodes.map((n) => [n.id, n]))
  const self = new Map<number, number>()
  profile.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)))
  const total = [...self.values()].reduce((a, b) => a + b, 0)
  let idle = 0
  let gc = 0
  const fn = new Map<string, number>()
  const files = new Map<string, number>()
  for (const [id, us] of self) {
    const frame = (byId.get(id) as ProfileNode).callFrame
    if (frame.functionName === '(idle)') idle += us
    else if (frame.functionName === '(garbage collector)') gc += us
    const at = where(frame.url)
    const name = `${frame.functionName || '(anonymous)'} ${at}${at && !at.startsWith('node:') && !at.includes('/') ? '' : `:${frame.lineNumber + 1}`}`
    fn.set(name, (fn.get(name) ?? 0) + us)
    const group = at === '' ? frame.functionName : at
    files.set(group, (files.get(group) ?? 0) + us)
  }
  // Each busy sample charged to the innermost frame of a service's own code on its stack (services/<name>/...),
  // else to the innermost services/common/<area> frame, else to what ran (dependency, node, native).
  const parent = new Map<number, number>()
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id)
  const owner = new Map<number, string>()
  const ownerOf = (id: number): string => {
    const known = owner.get(id)
    if (known !== undefined) return known
    let common: string | undefined
    let result: string | undefined
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const m = /services\/([a-z-]+)\/(?:([a-z-]+)\/)?/.exec((byId.get(at) as ProfileNode).callFrame.url)
      if (!m) continue
      if (m[1] !== 'common') {
        result = `services/${m[1]}`
        break
      }
      common ??= `services/common/${m[2] ?? ''}`.replace(/\/$/, '')
    }
    const frame = (byId.get(id) as ProfileNode).callFrame
    const out = result ?? common ?? (where(frame.url) || frame.functionName)
    owner.set(id, out)
    return out
  }
  const byOwner = new Map<string, number>()
  for (const [id, us] of self) {
    const name = (byId.get(id) as ProfileNode).callFrame.functionName
    if (name === '(idle)' || name === '(garbage collector)' || name === '(program)') continue
    const o = ownerOf(id)
    byOwner.set(o, (byOwner.get(o) ?? 0) + us)
  }
  const pct = (us: number): string => `${((100 * us) / total).toFixed(1)}%`
  const busy = total - idle
  const lines = [`${path.basename(file)}: ${(total / 1e6).toFixed(1)} s sampled, idle ${pct(idle)}, GC ${pct(gc)}, busy ${(busy / 1e6).toFixed(1)} s`]
  lines.push('  busy time by the service code it ran for (innermost services/<name> frame on the stack):')
  for (const [name, us] of [...byOwner].sort((a, b) => b[1] - a[1]).slice(0, top)) lines.push(`    ${((100 * us) / busy).toFixed(1).padStart(5)}%  ${name}`)
  lines.push('  self time by file or package (share of busy time):')
  for (const [name, us] of [...files].filter(([n]) => n !== '(idle)').sort((a, b) => b[1] - a[1]).slice(0, top)) lines.push(`    ${((100 * us) / busy).toFixed(1).padStart(5)}%  ${name}`)
  lines.push('  self time by function (share of busy time):')
  for (const [name, us] of [...fn].filter(([n]) => !n.startsWith('(idle)')).sort((a, b) => b[1] - a[1]).slice(0, top)) lines.push(`    ${((100 * us) / busy).toFixed(1).padStart(5)}%  ${name}`)
  return lines
}

if (require.main === module) {
  const args = process.argv.slice(2)
  const at = args.indexOf('--top')
  const top = at >= 0 ? Number(args[at + 1]) : 20
  const files = args.filter((a, i) => a !== '--top' && i !== at + 1)
  if (files.length === 0) {
    process.stderr.write('usage: profile.js <file.cpuprofile>... [--top N]\n')
    process.exit(2)
  }
  for (const f of files) process.stdout.write(`${summarise(f, top).join('\n')}\n\n`)
}
