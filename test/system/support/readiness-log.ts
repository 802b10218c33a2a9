import fs from 'node:fs'
import os from 'node:os'

/**
 * What a test saw while waiting for a restarted process, told in one line:
 * CI prints only the start of a failure, so a process that did not come back
 * must be explained there (refused for how long, then unanswered or not
 * ready, and whether it got CPU at all).
 */
export class ReadinessLog {
  private readonly runs: Array<{ what: string; n: number; first: number; last: number }> = []

  /** Records one probe's outcome; consecutive equal outcomes are one run. */
  note(what: string, at = Date.now()): void {
    const run = this.runs[this.runs.length - 1]
    if (run && run.what === what) {
      run.n++
      run.last = at
    } else this.runs.push({ what, n: 1, first: at, last: at })
  }

  /** `refused ×12 21:41:55.1–21:41:58.0, no answer in 1 s ×40 …`; the oldest runs go first when over `max`. */
  summary(max = 6): string {
    const clock = (ms: number): string => new Date(ms).toISOString().slice(11, 22)
    const runs = this.runs.slice(-max).map((r) => `${r.what} ×${r.n} ${clock(r.first)}${r.n > 1 ? `–${clock(r.last)}` : ''}`)
    return `${this.runs.length > max ? '… ' : ''}${runs.join(', ') || 'no probe'}`
  }
}

/** A failed probe's outcome, short: the error code (ECONNREFUSED) or 'no answer in N ms'. */
export function probeError(err: Error, timeoutMs: number): string {
  if (err.name === 'TimeoutError' || err.name === 'AbortError') return `no answer in ${timeoutMs} ms`
  const cause = (err as Error & { cause?: { code?: string; message?: string } }).cause
  return cause?.code ?? cause?.message ?? err.message
}

/** CPU seconds a live process used and how long it has lived, from /proc (Linux); undefined elsewhere or once gone. */
export function processCpu(pid: number): { cpuSeconds: number; aliveSeconds: number } | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    // Fields after the command name (which may hold spaces) start at its closing parenthesis.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    const ticks = 100 // USER_HZ on Linux
    const utime = Number(fields[11])
    const stime = Number(fields[12])
    const start = Number(fields[19])
    const uptime = Number(fs.readFileSync('/proc/uptime', 'utf8').split(' ')[0])
    return { cpuSeconds: (utime + stime) / ticks, aliveSeconds: uptime - start / ticks }
  } catch {
    return undefined
  }
}

/** `pid 12: 0.4 CPU s in 58 s alive; load 7.9 6.1 4.0 on 2 cores`: starved, blocked or busy at a glance. */
export function cpuFacts(pid: number | undefined): string {
  const load = `load ${os
    .loadavg()
    .map((l) => l.toFixed(1))
    .join(' ')} on ${os.cpus().length} cores`
  const cpu = pid === undefined ? undefined : processCpu(pid)
  return cpu ? `pid ${pid}: ${cpu.cpuSeconds.toFixed(1)} CPU s in ${cpu.aliveSeconds.toFixed(0)} s alive; ${load}` : load
}
