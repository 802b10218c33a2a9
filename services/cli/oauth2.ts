import { flag, parseArgs, type ParsedArgs } from './args'
import { operatorClient, OperatorApiError, type OperatorClient } from './client'

/**
 * `cli oauth2 <command> --app <app_id> [...]`: OAuth 2.0 client settings of
 * an application, through the operator API (/admin/apps/:id/oauth2).
 *
 *   show           --app ID                       client id, type, secret, redirect URIs
 *   enable         --app ID --redirect-uris U1,U2 [--public]
 *                                                 turn OAuth 2.0 on (confidential unless --public)
 *   set            --app ID [--redirect-uris U1,U2] [--public | --confidential]
 *   rotate-secret  --app ID                       new client secret; the old one stops working
 *   disable        --app ID                       turn OAuth 2.0 off and revoke every token issued
 *
 * Every command prints the client as text, or as JSON with --json.
 */

const USAGE = `usage: cli oauth2 <show|enable|set|rotate-secret|disable> --app <app_id> [--redirect-uris <url,url>] [--public|--confidential] [--json]\n`

interface ClientView {
  app_id: string
  name: string
  enabled: boolean
  client_id?: string
  client_type?: string
  client_secret?: string
  redirect_uris?: string[]
}

class UsageError extends Error {}

function appId(args: ParsedArgs): string {
  const id = flag(args, 'app')
  if (id === undefined || !/^[0-9]{1,19}$/.test(id)) throw new UsageError('--app <app_id> (digits) is required')
  return id
}

function redirectUris(args: ParsedArgs): string[] | undefined {
  const raw = flag(args, 'redirect-uris') ?? flag(args, 'redirect-uri')
  if (raw === undefined) return undefined
  return raw.split(',').map((u) => u.trim()).filter((u) => u !== '')
}

function clientType(args: ParsedArgs): 'public' | 'confidential' | undefined {
  const pub = args.flags.public === true
  const conf = args.flags.confidential === true
  if (pub && conf) throw new UsageError('--public and --confidential are mutually exclusive')
  return pub ? 'public' : conf ? 'confidential' : undefined
}

export function formatClient(view: ClientView): string {
  if (!view.enabled) return `app ${view.app_id} (${view.name}): OAuth 2.0 is off\n`
  const lines = [
    `app ${view.app_id} (${view.name}): OAuth 2.0 ${view.client_type} client`,
    `  client id:      ${view.client_id ?? ''}`,
    ...(view.client_secret !== undefined ? [`  client secret:  ${view.client_secret}`] : []),
    `  redirect URIs:  ${(view.redirect_uris ?? []).join(', ') || '(none: authorization requests will be refused)'}`
  ]
  return `${lines.join('\n')}\n`
}

async function execute(client: OperatorClient, command: string, args: ParsedArgs): Promise<ClientView> {
  const id = appId(args)
  const path = `/admin/apps/${id}/oauth2`
  switch (command) {
    case 'show':
      return (await client.call<{ data: ClientView }>('GET', path)).data
    case 'enable':
    case 'set': {
      const body: Record<string, unknown> = {}
      const uris = redirectUris(args)
      const type = clientType(args)
      if (uris !== undefined) body.redirect_uris = uris
      if (type !== undefined) body.client_type = type
      else if (command === 'enable') body.client_type = 'confidential'
      if (command === 'enable' && uris === undefined) throw new UsageError('enable needs --redirect-uris <url,url>')
      return (await client.call<{ data: ClientView }>('PUT', path, body)).data
    }
    case 'rotate-secret':
      return (await client.call<{ data: ClientView }>('POST', `${path}/rotate-secret`)).data
    case 'disable':
      return (await client.call<{ data: ClientView }>('DELETE', path)).data
    default:
      throw new UsageError(`unknown command "${command}"`)
  }
}

/** Runs one command; `out`/`err` are injectable so tests read what an operator sees. */
export async function run(argv: string[], env: NodeJS.ProcessEnv = process.env, out: (s: string) => void = (s) => process.stdout.write(s), err: (s: string) => void = (s) => process.stderr.write(s)): Promise<number> {
  const args = parseArgs(argv)
  const command = args.positional[0]
  if (command === undefined || args.flags.help === true) {
    err(USAGE)
    return 2
  }
  try {
    const view = await execute(operatorClient(env), command, args)
    out(args.flags.json === true ? `${JSON.stringify(view, null, 2)}\n` : formatClient(view))
    return 0
  } catch (e) {
    if (e instanceof UsageError) {
      err(`${e.message}\n${USAGE}`)
      return 2
    }
    if (e instanceof OperatorApiError) {
      err(`${describeApiError(e)}\n`)
      return 1
    }
    throw e
  }
}

function describeApiError(e: OperatorApiError): string {
  try {
    const body = JSON.parse(e.body) as { detail?: string; errors?: Array<{ message?: string }> }
    const detail = body.errors?.[0]?.message ?? body.detail
    if (detail) return `error (${e.status}): ${detail}`
  } catch {
    // Not JSON: show the raw answer.
  }
  return e.message
}
