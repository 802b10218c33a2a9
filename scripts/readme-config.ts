/**
 * Rewrites the configuration table of README.md (between the config markers)
 * from services/common/config.ts: `make readme`. A test checks they agree.
 */
import fs from 'node:fs'
import path from 'node:path'
import { configTableMarkdown } from '../services/common/config'

const README = path.resolve(__dirname, '..', ...(__dirname.includes(`${path.sep}dist${path.sep}`) ? ['..'] : []), 'README.md')
const START = '<!-- config:start -->'
const END = '<!-- config:end -->'

const text = fs.readFileSync(README, 'utf8')
const a = text.indexOf(START)
const b = text.indexOf(END)
if (a < 0 || b < a) {
  process.stderr.write(`README.md lacks the ${START} ... ${END} markers\n`)
  process.exit(1)
}
fs.writeFileSync(README, `${text.slice(0, a + START.length)}\n${configTableMarkdown()}\n${text.slice(b)}`)
process.stdout.write('README.md configuration table updated\n')
