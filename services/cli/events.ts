import fs from 'node:fs'
import readline from 'node:readline'
import { loadConfig } from '../common/config'
import { operatorTokenFile } from '../common/operator'
import { flag, parseArgs } from './args'

/**
 * `events publish --file F [--batch N] [--from-line L]`: sends an NDJSON file
 * of activity events to the operator ingest route (POST /admin/activity/events)
 * in batches, printing progress. The route refuses a batch with any invalid
 * line as a whole, so on a refusal this stops, lists the invalid lines with
 * their line numbers in the file, and says how to resume once they are fixed.
 */

const USAGE = 'usage: events publish --file events.ndjson [--batch 1000] [--from-line 1]\n'
const DEFAULT_BATCH = 1000
const MAX_BATCH = 10_000

interface Line {
  number: number
  text: string
}

interface Target {
  baseUrl: string
  token: string
}

function target(env: NodeJS.ProcessEnv): Target {
  const config = loadConfig(env)
  const baseUrl = (env.GATEWAY_URL ?? `http://127.0.0.1:${config.port}`).replace(/\/+$/, '')
  let token = config.operatorToken
  if (token === '' && fs.existsSync(operatorTokenFile(config))) token = fs.readFileSync(operatorTokenFile(config), 'utf8').trim()
  return { baseUrl, token }
}

interface Refusal {
  detail?: string
  errors?: Array<{ message: string; parameters?: { line?: string[] } }>
}

async function send(t: Target, batch: Line[]): Promise<{ ok: true; accepted: number } | { ok: false; status: number; body: string }> {
  let res: Response
  try {
    res = await fetch(`${t.baseUrl}/admin/activity/events`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.token}`, 'content-type': 'application/x-ndjson' },
      body: batch.map((l) => l.text).join('\n') + '\n'
    })
  } catch (err) {
    throw new Error(`cannot reach the gateway at ${t.baseUrl} (is it running? set GATEWAY_URL): ${(err as Error).message}`, { cause: err })
  }
  const body = await res.text()
  if (!res.ok) return { ok: false, status: res.status, body }
  const accepted = (JSON.parse(body) as { data?: { accepted?: number } }).data?.accepted ?? 0
  return { ok: true, accepted }
}

/** Server line numbers count the lines of the batch; map them back to the file. */
function describeRefusal(body: string, batch: Line[]): string[] {
  let parsed: Refusal
  try {
    parsed = JSON.parse(body) as Refusal
  } catch {
    return [body]
  }
  const out: string[] = []
  if (parsed.detail) out.push(parsed.detail)
  for (const e of parsed.errors ?? []) {
    const n = Number(e.parameters?.line?.[0])
    const fileLine = Number.isInteger(n) ? batch[n - 1]?.number : undefined
    out.push(fileLine === undefined ? `  ${e.message}` : `  ${e.message.replace(/^line \d+:/, `line ${fileLine}:`)}`)
  }
  return out
}

export async function publish(file: string, batchSize: number, fromLine: number, env: NodeJS.ProcessEnv = process.env, out: NodeJS.WritableStream = process.stdout, err: NodeJS.WritableStream = process.stderr): Promise<number> {
  if (!fs.existsSync(file)) {
    err.write(`events: no such file: ${file}\n`)
    return 2
  }
  const t = target(env)
  const input = readline.createInterface({ input: fs.createReadStream(file, 'utf8'), crlfDelay: Infinity })
  let number = 0
  let published = 0
  let batch: Line[] = []
  const started = Date.now()

  const flush = async (): Promise<boolean> => {
    if (batch.length === 0) return true
    const result = await send(t, batch)
    const first = batch[0]?.number ?? 0
    const last = batch[batch.length - 1]?.number ?? 0
    if (!result.ok) {
      err.write(`events: lines ${first}..${last} refused (HTTP ${result.status}); ${published} events published before them\n`)
      for (const line of describeRefusal(result.body, batch)) err.write(`${line}\n`)
      err.write(`events: fix the lines above and resume with --from-line ${first}\n`)
      return false
    }
    published += result.accepted
    const seconds = Math.max(0.001, (Date.now() - started) / 1000)
    out.write(`published ${published} events (through line ${last}, ${Math.round(published / seconds)} events/s)\n`)
    batch = []
    return true
  }

  for await (const text of input) {
    number++
    if (number < fromLine || text.trim() === '') continue
    batch.push({ number, text })
    if (batch.length >= batchSize && !(await flush())) {
      input.close()
      return 1
    }
  }
  if (!(await flush())) return 1
  out.write(`done: ${published} events published from ${file}\n`)
  return 0
}

export async function run(argv: string[]): Promise<number> {
  const args = parseArgs(argv)
  const [command] = args.positional
  if (command !== 'publish') {
    process.stderr.write(USAGE)
    return 2
  }
  const file = flag(args, 'file')
  if (!file) {
    process.stderr.write(`events publish: --file is required\n${USAGE}`)
    return 2
  }
  const batch = Number(flag(args, 'batch') ?? DEFAULT_BATCH)
  const fromLine = Number(flag(args, 'from-line') ?? 1)
  if (!Number.isInteger(batch) || batch < 1 || batch > MAX_BATCH) {
    process.stderr.write(`events publish: --batch must be an integer from 1 to ${MAX_BATCH}\n`)
    return 2
  }
  if (!Number.isInteger(fromLine) || fromLine < 1) {
    process.stderr.write('events publish: --from-line must be a positive integer\n')
    return 2
  }
  return publish(file, batch, fromLine)
}
