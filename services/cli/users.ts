import fs from 'node:fs'
import { type CliIO, processIO, runCommand, UsageError } from './apps'
import { flag, parseArgs } from './args'
import { operatorClient } from './client'

/**
 * `cli user <command>`: users through the operator API.
 *
 *   user create --screen-name NAME (--password PW | --password-env VAR | --password-stdin) [--json]
 *   user list [--json]
 *
 * `--password-env` and `--password-stdin` keep the password out of the
 * process list (`make user` uses --password-env).
 */

const USAGE = `usage:
  user create --screen-name NAME (--password PASSWORD | --password-env VAR | --password-stdin) [--json]
  user list [--json]
`

interface UserView {
  id: string
  screen_name: string
  created_at: string
}

function password(argv: string[], io: CliIO): string {
  const args = parseArgs(argv)
  const direct = flag(args, 'password')
  const fromEnv = flag(args, 'password-env')
  const sources = [direct !== undefined, fromEnv !== undefined, args.flags['password-stdin'] === true].filter(Boolean).length
  if (sources !== 1) throw new UsageError('give the password once: --password, --password-env or --password-stdin')
  if (direct !== undefined) return direct
  if (fromEnv !== undefined) {
    const value = io.env[fromEnv]
    if (value === undefined || value === '') throw new UsageError(`environment variable ${fromEnv} is empty`)
    return value
  }
  return fs.readFileSync(0, 'utf8').replace(/\r?\n$/, '')
}

async function command(argv: string[], io: CliIO): Promise<number> {
  const [sub, ...rest] = argv
  const args = parseArgs(rest)
  const json = args.flags.json === true
  const client = operatorClient(io.env)
  switch (sub) {
    case 'create': {
      const screenName = flag(args, 'screen-name')
      if (!screenName) throw new UsageError('--screen-name is required')
      const { data } = await client.call<{ data: UserView }>('POST', '/admin/users', { screen_name: screenName, password: password(rest, io) })
      io.out(json ? `${JSON.stringify(data, null, 2)}\n` : `created user @${data.screen_name}\n  id:      ${data.id}\n  created: ${data.created_at}\n`)
      return 0
    }
    case 'list': {
      const { data } = await client.call<{ data: UserView[] }>('GET', '/admin/users')
      if (json) io.out(`${JSON.stringify(data, null, 2)}\n`)
      else io.out(data.length === 0 ? 'no users\n' : `${data.map((u) => `${u.id}  @${u.screen_name}  ${u.created_at}`).join('\n')}\n`)
      return 0
    }
    default:
      throw new UsageError(sub === undefined ? 'missing command' : `unknown command "${sub}"`)
  }
}

export async function run(argv: string[], io: CliIO = processIO): Promise<number> {
  return runCommand(argv, io, USAGE, command)
}
