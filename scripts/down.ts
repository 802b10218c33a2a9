import fs from 'node:fs'
import { isOurs, NAME_WIDTH, type ProcessRecord, readState, type RunState, say, stateFile, waitFor } from './run-state'
import { programStatus } from './supervisor'

/**
 * `make down`: stops exactly the processes RUN_DIR/state.json records
 * (run-state.ts), each checked by its command line before it is signalled:
 * supervisord first (it stops nginx, then the services, each with its
 * grace, DOWN_GRACE_MS), whatever it left behind, then Kafka, then Redis.
 */

function signal(pid: number, sig: NodeJS.Signals, group: boolean): void {
  try {
    process.kill(group ? -pid : pid, sig)
  } catch {
    try {
      process.kill(pid, sig)
    } catch {
      // already gone
    }
  }
}

export async function stopProcess(p: ProcessRecord, graceMs: number, group: boolean): Promise<'stopped' | 'killed' | 'gone'> {
  if (!isOurs(p)) return 'gone'
  signal(p.pid, 'SIGTERM', group)
  if (await waitFor(() => !isOurs(p), graceMs)) return 'stopped'
  signal(p.pid, 'SIGKILL', group)
  await waitFor(() => !isOurs(p), 2000)
  return 'killed'
}

/**
 * supervisord stops its programs (nginx first, then the services, each with
 * its grace) and exits on SIGTERM. Whatever it left behind, found by the
 * pids supervisorctl reported before, is killed.
 */
async function stopSupervised(state: RunState, grace: number): Promise<void> {
  const supervisor = state.processes.find((p) => p.kind === 'supervisor')
  const supervised = state.processes.filter((p) => p.supervised)
  if (!supervisor || !state.supervisor || !isOurs(supervisor)) {
    for (const p of supervised) say(`${p.name.padEnd(NAME_WIDTH)}${p.pid && isOurs(p) ? await stopProcess(p, grace, false) : 'was not running'}`)
    if (supervisor) say(`${'supervisord'.padEnd(NAME_WIDTH)}was not running (pid ${supervisor.pid})`)
    return
  }
  const before = new Map((await programStatus(state.supervisor)).map((s) => [s.name, s]))
  for (const p of supervised) if (before.get(p.name)?.pid) p.pid = before.get(p.name)?.pid as number
  const result = await stopProcess(supervisor, grace + 10_000, false)
  say(`${'supervisord'.padEnd(NAME_WIDTH)}${result} (pid ${supervisor.pid})`)
  for (const p of supervised) {
    const was = before.get(p.name)
    if (was?.state !== 'RUNNING') say(`${p.name.padEnd(NAME_WIDTH)}was not running (${was?.state ?? 'unknown to supervisord'})`)
    else say(`${p.name.padEnd(NAME_WIDTH)}${isOurs(p) ? `left behind: ${await stopProcess(p, 2000, false)}` : 'stopped'} (pid ${p.pid})`)
  }
}

export async function down(): Promise<number> {
  const state = readState()
  if (!state) {
    say('nothing to stop (no state file)')
    return 0
  }
  const grace = Number(process.env.DOWN_GRACE_MS ?? 15_000)
  // nginx and the services first (they finish in-flight messages and commit), then Kafka, then Redis.
  await stopSupervised(state, grace)
  let left = state.processes.filter((p) => p.supervised && p.pid && isOurs(p)).length
  for (const kind of ['kafka', 'redis'] as const) {
    for (const p of state.processes.filter((x) => x.kind === kind)) {
      const result = await stopProcess(p, grace, true)
      say(`${p.name.padEnd(NAME_WIDTH)}${result === 'gone' ? 'was not running' : result} (pid ${p.pid})`)
      if (isOurs(p)) left++
    }
  }
  const supervisor = state.processes.find((p) => p.kind === 'supervisor')
  if (supervisor && isOurs(supervisor)) left++
  if (left > 0) {
    say(`${left} process(es) could not be stopped; state kept in ${stateFile}`)
    return 1
  }
  fs.rmSync(stateFile, { force: true })
  return 0
}
