import { flag, parseArgs } from './args'
import { OperatorApiError, operatorClient } from './client'

/**
 * `cli webhooks ...`: the operator side of the webhooks service, over its
 * operator API (/admin/webhooks). Behind `make webhooks`, `make deliveries`,
 * `make resend` and `make replay`.
 */

export interface CliIo {
  env: NodeJS.ProcessEnv
  out: (line: string) => void
  err: (line: string) => void
}

const defaultIo: CliIo = {
  env: process.env,
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`)
}

const USAGE = [
  'usage: cli webhooks <command>',
  '  list [--json]                                              every webhook of every app',
  '  deliveries --webhook ID [--status S] [--limit N] [--json]  the delivery log, newest first',
  '                                                             (S: pending, delivered, failed, cancelled)',
  '  resend --webhook ID --since ISO-TIME [--status S]          put logged deliveries back on the schedule',
  '                                                             (default status: failed)',
  '  replay --webhook ID --from yyyymmddhhmm --to yyyymmddhhmm  re-deliver a window of the last 24 h (UTC)'
].join('\n')

class UsageError extends Error {}

function required(args: ReturnType<typeof parseArgs>, name: string): string {
  const v = flag(args, name)
  if (v === undefined || v === '') throw new UsageError(`--${name} is required`)
  return v
}

/** Fixed-width columns; the last column is not padded. */
function table(rows: string[][]): string[] {
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length))) ?? []
  return rows.map((r) => r.map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i] ?? 0))).join('  ').trimEnd())
}

interface WebhookRow {
  id: string
  app_id: string
  url: string
  valid: boolean
  created_at: string
  last_crc_at?: string
  invalid_reason?: string
  subscriptions: number
}

interface DeliveryRow {
  delivery_id: string
  status: string
  attempts: number
  event_time: number
  last_status?: number
  last_error?: string
  next_attempt_at?: number
  source: string
}

export async function run(argv: string[], io: CliIo = defaultIo): Promise<number> {
  const args = parseArgs(argv)
  const [command] = args.positional
  if (command === undefined || command === 'help' || args.flags.help === true) {
    io.out(USAGE)
    return command === undefined ? 2 : 0
  }
  const client = operatorClient(io.env)
  const json = args.flags.json === true
  try {
    switch (command) {
      case 'list': {
        const { data } = await client.call<{ data: WebhookRow[] }>('GET', '/admin/webhooks')
        if (json) return print(io, data)
        if (data.length === 0) {
          io.out('no webhooks registered')
          return 0
        }
        const rows = [['ID', 'APP', 'VALID', 'SUBS', 'LAST CRC', 'URL']]
        for (const w of data) rows.push([w.id, w.app_id, w.valid ? 'yes' : `no (${w.invalid_reason ?? 'invalid'})`, String(w.subscriptions), w.last_crc_at ?? '-', w.url])
        for (const line of table(rows)) io.out(line)
        return 0
      }
      case 'deliveries': {
        const webhook = required(args, 'webhook')
        const query = new URLSearchParams()
        const status = flag(args, 'status')
        if (status) query.set('status', status)
        const limit = flag(args, 'limit')
        if (limit) query.set('limit', limit)
        const qs = query.toString()
        const { data } = await client.call<{ data: DeliveryRow[] }>('GET', `/admin/webhooks/${encodeURIComponent(webhook)}/deliveries${qs ? `?${qs}` : ''}`)
        if (json) return print(io, data)
        if (data.length === 0) {
          io.out(`no deliveries${status ? ` with status ${status}` : ''} for webhook ${webhook}`)
          return 0
        }
        const rows = [['DELIVERY', 'STATUS', 'ATTEMPTS', 'HTTP', 'EVENT TIME', 'NEXT ATTEMPT', 'LAST ERROR']]
        for (const d of data) {
          const next = d.status === 'pending' && d.next_attempt_at ? new Date(d.next_attempt_at).toISOString() : '-'
          rows.push([d.delivery_id, d.status, String(d.attempts), d.last_status ? String(d.last_status) : '-', new Date(d.event_time).toISOString(), next, d.last_error ?? '-'])
        }
        for (const line of table(rows)) io.out(line)
        io.out(`${data.length} deliver${data.length === 1 ? 'y' : 'ies'}`)
        return 0
      }
      case 'resend': {
        const webhook = required(args, 'webhook')
        const since = required(args, 'since')
        const status = flag(args, 'status')
        const body: Record<string, string> = { since }
        if (status) body.status = status
        const { data } = await client.call<{ data: { resent: number } }>('POST', `/admin/webhooks/${encodeURIComponent(webhook)}/resend`, body)
        if (json) return print(io, data)
        io.out(`re-sent ${data.resent} ${status ?? 'failed'} deliver${data.resent === 1 ? 'y' : 'ies'} of webhook ${webhook} since ${since}`)
        return 0
      }
      case 'replay': {
        const webhook = required(args, 'webhook')
        const from = required(args, 'from')
        const to = required(args, 'to')
        const { data } = await client.call<{ data: { job_id: string; created_at: string } }>('POST', `/admin/webhooks/${encodeURIComponent(webhook)}/replay`, { from_date: from, to_date: to })
        if (json) return print(io, data)
        io.out(`replay job ${data.job_id} started for webhook ${webhook} (${from} to ${to}, UTC); the webhook receives replay_job_status when it ends`)
        return 0
      }
      default:
        throw new UsageError(`unknown command "${command}"`)
    }
  } catch (err) {
    if (err instanceof UsageError) {
      io.err(`error: ${err.message}`)
      io.err(USAGE)
      return 2
    }
    if (err instanceof OperatorApiError) {
      io.err(`error: ${describeApiError(err)}`)
      return 1
    }
    throw err
  }
}

function print(io: CliIo, value: unknown): number {
  io.out(JSON.stringify(value, null, 2))
  return 0
}

/** The most useful line of an operator API failure (a Problem's message or detail). */
function describeApiError(err: OperatorApiError): string {
  try {
    const body = JSON.parse(err.body) as { detail?: string; errors?: Array<{ message?: string }> }
    const message = body.errors?.[0]?.message ?? body.detail
    if (message) return `${message} (HTTP ${err.status})`
  } catch {
    // Not JSON: fall through to the raw text.
  }
  return err.message
}
