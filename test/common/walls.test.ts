import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import t from 'tap'

/**
 * The walls between services hold because `make lint` runs `make walls`
 * (dependency-cruiser with .dependency-cruiser.mjs). This runs that target
 * on a copy of the repository's services/: the real tree passes; the same
 * tree with a deliberate cross-service import (type-only, the subtlest
 * kind), a service import from services/common and an import circle fails,
 * naming each breach.
 */

const root = path.resolve(__dirname, '../..')

function copyTree(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'walls-'))
  for (const f of ['Makefile', '.dependency-cruiser.mjs', 'tsconfig.json', 'package.json']) fs.copyFileSync(path.join(root, f), path.join(dir, f))
  fs.cpSync(path.join(root, 'services'), path.join(dir, 'services'), { recursive: true })
  fs.symlinkSync(path.join(root, 'node_modules'), path.join(dir, 'node_modules'), 'dir')
  return dir
}

function walls(dir: string): { status: number | null; output: string } {
  const r = spawnSync('make', ['--no-print-directory', '-s', 'walls'], { cwd: dir, encoding: 'utf8', timeout: 120_000 })
  return { status: r.status, output: `${r.stdout}${r.stderr}` }
}

const dir = copyTree()
t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))

t.test('the services as they are pass the walls', async (t) => {
  const r = walls(dir)
  t.equal(r.status, 0, r.output)
  t.match(r.output, /no dependency violations found/)
})

t.test('a cross-service import, a service imported by common, and an import circle each fail `make walls`', async (t) => {
  const write = (rel: string, text: string): void => fs.writeFileSync(path.join(dir, rel), text)
  write('services/stream/breach.ts', "import type { Subscription } from '../activity/subscriptions'\nexport type Breach = Subscription\n")
  write('services/common/breach.ts', "import { registerHistoryRoutes } from '../account-history/routes'\nexport const breach = registerHistoryRoutes\n")
  write('services/common/circle-a.ts', "import { b } from './circle-b'\nexport const a = (): number => b() + 1\n")
  write('services/common/circle-b.ts', "import { a } from './circle-a'\nexport const b = (): number => a() - 1\n")
  const r = walls(dir)
  t.not(r.status, 0, 'make walls exits non-zero')
  t.match(r.output, /not-to-other-service: services\/stream\/breach\.ts → services\/activity\/subscriptions\.ts/)
  t.match(r.output, /not-to-other-service: services\/common\/breach\.ts → services\/account-history\/routes\.ts/)
  t.match(r.output, /no-circular: services\/common\/circle-a\.ts →\s+services\/common\/circle-b\.ts →\s+services\/common\/circle-a\.ts/)
  t.match(r.output, /x 3 dependency violations/, 'the three breaches and nothing else')
})
