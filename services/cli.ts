#!/usr/bin/env node
/**
 * Operator CLI: `node dist/services/cli.js <group> <command> [--flags]`.
 * Each group lives in services/cli/<group>.ts and talks to the running
 * gateway's operator API over HTTP, so it works against the embedded server
 * and the distributed services alike.
 */
import { parseArgs } from './cli/args'

const GROUPS: Record<string, () => Promise<{ run: (argv: string[]) => Promise<number> }>> = {
  app: () => import('./cli/apps'),
  user: () => import('./cli/users'),
  oauth2: () => import('./cli/oauth2'),
  webhooks: () => import('./cli/webhooks'),
  events: () => import('./cli/events'),
  topics: () => import('./cli/ops').then((m) => ({ run: m.runTopics })),
  lag: () => import('./cli/ops').then((m) => ({ run: m.runLag })),
  account: () => import('./cli/accounts'),
  console: () => import('./cli/console')
}

async function main(): Promise<number> {
  const [group, ...rest] = process.argv.slice(2)
  // Own keys only: `cli constructor` is an unknown group, not Object's constructor.
  const load = group === undefined || !Object.hasOwn(GROUPS, group) ? undefined : GROUPS[group]
  if (!load) {
    process.stderr.write(`usage: cli <${Object.keys(GROUPS).join('|')}> ...\n`)
    return 2
  }
  const module = await load()
  return module.run(rest)
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`error: ${(err as Error).message}\n`)
    process.exit(1)
  }
)

export { parseArgs }
