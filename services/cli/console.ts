import { spawn } from 'node:child_process'
import { type CliIO, processIO, runCommand, UsageError } from './apps'
import { flag, parseArgs } from './args'
import { operatorClient } from './client'

/**
 * `cli console link [--app ID] [--open] [--json]`: a single-use sign-in link
 * to the web console (CONSOLE_LINK_TTL). With --app, the portal link of that
 * app's developer, who then sees only that app (`make console-link APP=..`);
 * without, an operator's link (`make console`, which also opens it).
 */

const USAGE = `usage:
  console link [--app APP_ID] [--open] [--json]
`

interface LinkView {
  url: string
  role: 'operator' | 'developer'
  app_id?: string
  expires_at: string
}

/** Opens the URL in the desktop's browser when there is one; the URL is printed either way. */
function openInBrowser(url: string, io: CliIO): void {
  const opener = process.platform === 'darwin' ? 'open' : 'xdg-open'
  const child = spawn(opener, [url], { detached: true, stdio: 'ignore' })
  child.on('error', () => io.err(`(could not start a browser with ${opener}: open the URL above yourself)\n`))
  child.unref()
}

async function command(argv: string[], io: CliIO): Promise<number> {
  const [sub, ...rest] = argv
  if (sub !== 'link') throw new UsageError(sub === undefined ? 'missing command' : `unknown command "${sub}"`)
  const args = parseArgs(rest)
  const appId = flag(args, 'app')
  if (appId !== undefined && !/^[0-9]{1,19}$/.test(appId)) throw new UsageError('--app must be an app id (digits)')
  const { data } = await operatorClient(io.env).call<{ data: LinkView }>('POST', '/admin/console/links', appId === undefined ? {} : { app_id: appId })
  if (args.flags.json === true) io.out(`${JSON.stringify(data, null, 2)}\n`)
  else io.out(`${data.role === 'operator' ? 'operator sign-in link' : `portal link for app ${data.app_id ?? ''}`} (single use, expires ${data.expires_at}):\n  ${data.url}\n`)
  if (args.flags.open === true) openInBrowser(data.url, io)
  return 0
}

export async function run(argv: string[], io: CliIO = processIO): Promise<number> {
  return runCommand(argv, io, USAGE, command)
}
