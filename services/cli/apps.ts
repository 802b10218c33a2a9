import { flag, parseArgs, type ParsedArgs } from './args'
import { operatorClient, OperatorApiError } from './client'

/**
 * `cli app <command>`: applications through the operator API.
 *
 *   app create --name NAME [--callback URL]... [--access read|read-write|read-write-dm] [--no-sign-in-with] [--json]
 *   app list [--json]
 *   app show --id ID [--json]
 *   app update --id ID [--name NAME] [--callback URL]... [--access LEVEL] [--sign-in-with true|false] [--json]
 *   app rotate-secret --id ID [--json]
 *   app usage --id ID [--json]
 *   app caps --id ID [--daily N|default] [--monthly N|default] [--json]
 *
 * Caps count posts consumed (webhook deliveries and stream events): 0 means
 * no cap for this app, `default` returns to USAGE_CAP_DAILY / USAGE_CAP_MONTHLY.
 * `--callback` may be repeated or given a comma list.
 */

/** Where a command writes and which environment it reads (tests pass their own). */
export interface CliIO {
  env: NodeJS.ProcessEnv
  out: (text: string) => void
  err: (text: string) => void
}

export const processIO: CliIO = {
  env: process.env,
  out: (text) => process.stdout.write(text),
  err: (text) => process.stderr.write(text)
}

export interface AppView {
  id: string
  name: string
  consumer_key: string
  consumer_secret?: string
  access_level: string
  callback_urls: string[]
  sign_in_with: boolean
  created_at: string
}

const USAGE = `usage:
  app create --name NAME [--callback URL]... [--access read|read-write|read-write-dm] [--no-sign-in-with] [--json]
  app list [--json]
  app show --id ID [--json]
  app update --id ID [--name NAME] [--callback URL]... [--access LEVEL] [--sign-in-with true|false] [--json]
  app rotate-secret --id ID [--json]
  app usage --id ID [--json]
  app caps --id ID [--daily N|default] [--monthly N|default] [--json]
`

export class UsageError extends Error {}

/** Every value of a repeatable flag (`--callback a --callback b,c`). */
export function allValues(argv: string[], name: string): string[] {
  const out: string[] = []
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] as string
    let value: string | undefined
    if (a === `--${name}`) value = argv[++i]
    else if (a.startsWith(`--${name}=`)) value = a.slice(name.length + 3)
    else continue
    if (value === undefined || value.startsWith('--')) throw new UsageError(`--${name} needs a value`)
    out.push(...value.split(',').map((v) => v.trim()).filter((v) => v !== ''))
  }
  return out
}

function required(args: ParsedArgs, name: string): string {
  const v = flag(args, name)
  if (v === undefined || v.trim() === '') throw new UsageError(`--${name} is required`)
  return v
}

function describe(app: AppView): string {
  const lines = [
    `  id:              ${app.id}`,
    `  name:            ${app.name}`,
    `  consumer key:    ${app.consumer_key}`
  ]
  if (app.consumer_secret !== undefined) lines.push(`  consumer secret: ${app.consumer_secret}   (shown only now: store it safely)`)
  lines.push(
    `  access level:    ${app.access_level}`,
    `  callback URLs:   ${app.callback_urls.length > 0 ? app.callback_urls.join(', ') : '(none: PIN-based oob only)'}`,
    `  sign in with:    ${app.sign_in_with ? 'on' : 'off'}`,
    `  created:         ${app.created_at}`
  )
  return `${lines.join('\n')}\n`
}

function table(apps: AppView[]): string {
  if (apps.length === 0) return 'no applications\n'
  const rows = [['ID', 'NAME', 'CONSUMER KEY', 'ACCESS', 'CALLBACKS'], ...apps.map((a) => [a.id, a.name, a.consumer_key, a.access_level, String(a.callback_urls.length)])]
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] as string).length)))
  return rows.map((r) => r.map((c, i) => c.padEnd(widths[i] as number)).join('  ').trimEnd()).join('\n') + '\n'
}

export interface AppUsageView {
  app_id: string
  caps: { daily: number; monthly: number }
  own: { daily?: number; monthly?: number }
  today: number
  cycle: number
  cycle_start: string
  capped?: { period: string; scope: string }
}

function describeUsage(u: AppUsageView): string {
  const cap = (n: number, own: number | undefined): string => `${n === 0 ? 'none' : String(n)}${own === undefined ? ' (default)' : ''}`
  return [
    `  app:             ${u.app_id}`,
    `  daily cap:       ${cap(u.caps.daily, u.own.daily)}`,
    `  monthly cap:     ${cap(u.caps.monthly, u.own.monthly)}`,
    `  today (UTC):     ${u.today}`,
    `  this cycle:      ${u.cycle} (since ${u.cycle_start})`,
    `  capped:          ${u.capped ? `yes, ${u.capped.period} ${u.capped.scope.toLowerCase()} cap` : 'no'}`
  ].join('\n') + '\n'
}

/** A cap flag: a whole number (0: none), `default` (null: the configured default), or absent. */
function capFlag(args: ParsedArgs, name: string): number | null | undefined {
  const v = flag(args, name)
  if (v === undefined) return undefined
  if (v === 'default') return null
  if (!/^\d{1,15}$/.test(v)) throw new UsageError(`--${name} must be a whole number (0: no cap) or "default"`)
  return Number(v)
}

function parseBool(value: string, name: string): boolean {
  if (['true', 'on', 'yes', '1'].includes(value)) return true
  if (['false', 'off', 'no', '0'].includes(value)) return false
  throw new UsageError(`--${name} must be true or false`)
}

async function command(argv: string[], io: CliIO): Promise<number> {
  const [sub, ...rest] = argv
  const args = parseArgs(rest)
  const json = args.flags.json === true
  const client = operatorClient(io.env)
  const print = (data: unknown, text: string): void => io.out(json ? `${JSON.stringify(data, null, 2)}\n` : text)

  switch (sub) {
    case 'create': {
      const body: Record<string, unknown> = { name: required(args, 'name'), callback_urls: allValues(rest, 'callback') }
      const access = flag(args, 'access')
      if (access !== undefined) body.access_level = access
      if (args.flags['no-sign-in-with'] === true) body.sign_in_with = false
      const { data } = await client.call<{ data: AppView }>('POST', '/admin/apps', body)
      print(data, `created application "${data.name}"\n${describe(data)}`)
      return 0
    }
    case 'list': {
      const { data } = await client.call<{ data: AppView[] }>('GET', '/admin/apps')
      print(data, table(data))
      return 0
    }
    case 'show': {
      const id = required(args, 'id')
      const { data } = await client.call<{ data: AppView }>('GET', `/admin/apps/${encodeURIComponent(id)}`)
      print(data, describe(data))
      return 0
    }
    case 'update': {
      const id = required(args, 'id')
      const body: Record<string, unknown> = {}
      const name = flag(args, 'name')
      if (name !== undefined) body.name = name
      const callbacks = allValues(rest, 'callback')
      if (callbacks.length > 0) body.callback_urls = callbacks
      const access = flag(args, 'access')
      if (access !== undefined) body.access_level = access
      const signIn = flag(args, 'sign-in-with')
      if (signIn !== undefined) body.sign_in_with = parseBool(signIn, 'sign-in-with')
      if (Object.keys(body).length === 0) throw new UsageError('nothing to update: give --name, --callback, --access or --sign-in-with')
      const { data } = await client.call<{ data: AppView }>('PATCH', `/admin/apps/${encodeURIComponent(id)}`, body)
      print(data, `updated application "${data.name}"\n${describe(data)}`)
      return 0
    }
    case 'rotate-secret': {
      const id = required(args, 'id')
      const { data } = await client.call<{ data: AppView }>('POST', `/admin/apps/${encodeURIComponent(id)}/rotate-secret`)
      print(data, `new consumer secret for "${data.name}" (the old one and the app's bearer token no longer work)\n${describe(data)}`)
      return 0
    }
    case 'usage': {
      const id = required(args, 'id')
      const { data } = await client.call<{ data: AppUsageView }>('GET', `/admin/apps/${encodeURIComponent(id)}/usage`)
      print(data, describeUsage(data))
      return 0
    }
    case 'caps': {
      const id = required(args, 'id')
      const body: Record<string, unknown> = {}
      for (const name of ['daily', 'monthly'] as const) {
        const v = capFlag(args, name)
        if (v !== undefined) body[name] = v
      }
      if (Object.keys(body).length === 0) throw new UsageError('nothing to change: give --daily and/or --monthly')
      const { data } = await client.call<{ data: AppUsageView }>('PUT', `/admin/apps/${encodeURIComponent(id)}/usage-caps`, body)
      print(data, `usage caps of application ${data.app_id} set\n${describeUsage(data)}`)
      return 0
    }
    default:
      throw new UsageError(sub === undefined ? 'missing command' : `unknown command "${sub}"`)
  }
}

/** Runs a command group with usage and API errors turned into messages and exit codes (2 usage, 1 failure). */
export async function runCommand(argv: string[], io: CliIO, usage: string, fn: (argv: string[], io: CliIO) => Promise<number>): Promise<number> {
  try {
    return await fn(argv, io)
  } catch (err) {
    if (err instanceof UsageError) {
      io.err(`${err.message}\n${usage}`)
      return 2
    }
    if (err instanceof OperatorApiError) {
      io.err(`error: ${apiMessage(err)}\n`)
      return 1
    }
    io.err(`error: ${(err as Error).message}\n`)
    return 1
  }
}

/** The human part of an operator API error (a Problem's detail and parameter messages). */
function apiMessage(err: OperatorApiError): string {
  try {
    const body = JSON.parse(err.body) as { detail?: string; errors?: Array<{ message?: string }> }
    const details = (body.errors ?? []).map((e) => e.message).filter(Boolean)
    return `${err.status} ${details.length > 0 ? details.join('; ') : (body.detail ?? err.body)}`
  } catch {
    return `${err.status} ${err.body}`
  }
}

export async function run(argv: string[], io: CliIO = processIO): Promise<number> {
  return runCommand(argv, io, USAGE, command)
}
