import { allValues, type CliIO, processIO, runCommand, UsageError } from './apps'
import { flag, parseArgs, type ParsedArgs } from './args'
import { operatorClient } from './client'

/**
 * `cli account <command>`: advertising accounts through the operator API
 * (/admin/ads/accounts, services/gateway/ads/campaigns/admin.ts).
 *
 *   account create --user-id ID [--name NAME] [--json]
 *   account feature list --account ID [--json]
 *   account feature grant --account ID --feature KEY[,KEY]... [--json]
 *   account feature revoke --account ID --feature KEY[,KEY]... [--json]
 *
 * Any known feature is granted here, among them the ones operations are
 * gated on: PROMOTED_MEDIA_POLLS, SHARE_AUDIENCE_OUTSIDE_BUSINESS and
 * ACCOUNT_HISTORY_ACCESS (the allowlist of the account history beta).
 * `--feature` may be repeated or given a comma list; the gateway refuses
 * unknown keys and lists the known ones.
 */

const USAGE = `usage:
  account create --user-id ID [--name NAME] [--json]
  account feature list --account ID [--json]
  account feature grant --account ID --feature KEY[,KEY]... [--json]
  account feature revoke --account ID --feature KEY[,KEY]... [--json]
`

interface FeatureView {
  account_id: string
  feature_keys: string[]
}

interface OpenedAccount {
  account: { id: string; name: string }
  funding_instrument_id: string
}

function required(args: ParsedArgs, name: string): string {
  const v = flag(args, name)
  if (v === undefined || v.trim() === '') throw new UsageError(`--${name} is required`)
  return v.trim()
}

function featuresText(view: FeatureView): string {
  return `account ${view.account_id}: ${view.feature_keys.length > 0 ? view.feature_keys.join(', ') : '(no features)'}\n`
}

async function featureCommand(argv: string[], io: CliIO): Promise<number> {
  const [sub, ...rest] = argv
  const args = parseArgs(rest)
  const json = args.flags.json === true
  const print = (view: FeatureView, text: string): void => io.out(json ? `${JSON.stringify(view, null, 2)}\n` : text)
  if (sub !== 'list' && sub !== 'grant' && sub !== 'revoke') {
    throw new UsageError(sub === undefined ? 'missing feature command (list, grant or revoke)' : `unknown feature command "${sub}"`)
  }
  const path = `/admin/ads/accounts/${encodeURIComponent(required(args, 'account'))}/features`
  const client = operatorClient(io.env)
  if (sub === 'list') {
    const { data } = await client.call<{ data: FeatureView }>('GET', path)
    print(data, featuresText(data))
    return 0
  }
  const keys = allValues(rest, 'feature')
  if (keys.length === 0) throw new UsageError('--feature is required')
  if (sub === 'grant') {
    const { data } = await client.call<{ data: FeatureView }>('POST', path, { feature_keys: keys })
    print(data, `granted ${keys.join(', ')}\n${featuresText(data)}`)
    return 0
  }
  const { data } = await client.call<{ data: FeatureView }>('DELETE', `${path}?feature_keys=${encodeURIComponent(keys.join(','))}`)
  print(data, `revoked ${keys.join(', ')}\n${featuresText(data)}`)
  return 0
}

async function command(argv: string[], io: CliIO): Promise<number> {
  const [sub, ...rest] = argv
  if (sub === 'feature') return featureCommand(rest, io)
  if (sub !== 'create') throw new UsageError(sub === undefined ? 'missing command' : `unknown command "${sub}"`)
  const args = parseArgs(rest)
  const body: Record<string, string> = { user_id: required(args, 'user-id') }
  const name = flag(args, 'name')
  if (name !== undefined) body.name = name
  const { data } = await operatorClient(io.env).call<{ data: OpenedAccount }>('POST', '/admin/ads/accounts', body)
  io.out(args.flags.json === true
    ? `${JSON.stringify(data, null, 2)}\n`
    : `opened account ${data.account.id} ("${data.account.name}")\n  funding instrument: ${data.funding_instrument_id}\n`)
  return 0
}

export async function run(argv: string[], io: CliIO = processIO): Promise<number> {
  return runCommand(argv, io, USAGE, command)
}
