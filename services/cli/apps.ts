// Placeholder: the 'apps' command group is being written in this change set.
export async function run(_argv: string[]): Promise<number> {
  process.stderr.write('the apps commands are not available yet\n')
  return 2
}
