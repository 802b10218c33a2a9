import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { printedPorts } from '../../../scripts/up'
import { projectRoot } from '../../../services/common/bus/topics'

/**
 * One service instance as its own OS process: `node --import=tsx
 * services/<name>/main.ts` (the sources, so the fault tests do not depend on
 * a build), or another script (the reverse proxy). It writes stdout and
 * stderr to a log file that failing tests print the end of.
 *
 * Ports: the first start listens on port 0 and the port the kernel gave is
 * read from the process's own startup lines (a port probed free and handed
 * over could be taken before the child binds it). Restarts keep that port,
 * like an instance behind a load balancer (the proxy's upstream list names
 * it); when something else holds it meanwhile (EADDRINUSE) the start is
 * retried until it is free again.
 *
 * On Linux the process is started through `setpriv --pdeathsig KILL`, so the
 * kernel kills it if the test process dies without its teardowns.
 */

const root = projectRoot()
const SETPRIV = '/usr/bin/setpriv'

export interface ServiceProcessOptions {
  /** Service folder under services/ (or, with `script`, a name for the process kind). */
  service: string
  /** Instance name (`activity-2`). */
  instance: string
  env: Record<string, string>
  logDir: string
  /** Script to run instead of services/<service>/main.ts (relative to the project root). */
  script?: string
  /** The startup line that says the process is ready; default `<service> ready (`. */
  readyLine?: string
  /** Readiness also needs /readyz to answer 200 (default true; the proxy forwards it, so not there). */
  probeReadyz?: boolean
}

/** How long a restart keeps trying for its old port while something else holds it. */
const PORT_BUSY_RETRY_MS = 20_000

export type ExitStatus = { code: number | null; signal: NodeJS.Signals | null }

export class ServiceProcess {
  readonly logFile: string
  private child: ChildProcess | undefined
  private exited: Promise<ExitStatus> = Promise.resolve({ code: 0, signal: null })
  /** How many times this instance was started. */
  starts = 0
  /** Exits nobody asked for (a crash), with their status. */
  readonly crashes: ExitStatus[] = []
  private expectingExit = false
  /** Size of the log when the current run started: its `ready` line is looked for after it. */
  private logStart = 0
  /** Ports learnt from the first start's output (0 until then). */
  private port = 0
  private sandboxPort = 0

  constructor(readonly options: ServiceProcessOptions) {
    this.logFile = path.join(options.logDir, `${options.instance}.log`)
  }

  get name(): string {
    return this.options.instance
  }

  get service(): string {
    return this.options.service
  }

  /** Base URL; empty until the first start printed its port. */
  get url(): string {
    return this.port === 0 ? '' : `http://127.0.0.1:${this.port}`
  }

  get sandboxUrl(): string {
    return this.sandboxPort === 0 ? '' : `http://127.0.0.1:${this.sandboxPort}`
  }

  get pid(): number | undefined {
    return this.child?.pid
  }

  get running(): boolean {
    return this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null
  }

  /** Spawns the process (no wait: see `waitReady`). */
  spawn(): void {
    if (this.running) throw new Error(`${this.name} is already running`)
    const main = path.join(root, this.options.script ?? path.join('services', this.options.service, 'main.ts'))
    const log = fs.openSync(this.logFile, 'a')
    fs.writeSync(log, `\n----- start ${this.starts + 1} at ${new Date().toISOString()}\n`)
    this.logStart = fs.fstatSync(log).size
    const nodeArgs = ['--import=tsx', main]
    const useSetpriv = process.platform === 'linux' && fs.existsSync(SETPRIV)
    const [command, args] = useSetpriv ? [SETPRIV, ['--pdeathsig', 'KILL', '--', process.execPath, ...nodeArgs]] : [process.execPath, nodeArgs]
    const child = spawn(command, args, {
      cwd: root,
      stdio: ['ignore', log, log],
      env: {
        ...process.env,
        ...this.options.env,
        HOST: '127.0.0.1',
        PORT: String(this.port),
        SANDBOX_PORT: String(this.sandboxPort)
      }
    })
    fs.closeSync(log)
    this.child = child
    this.starts++
    this.expectingExit = false
    this.exited = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        const status = { code, signal }
        if (!this.expectingExit) this.crashes.push(status)
        resolve(status)
      })
    })
  }

  /**
   * Resolves once the process printed its `ready` line (routes served and
   * workers started: its consumers joined their groups) and /readyz answers
   * 200 (its store is reachable).
   */
  async waitReady(timeoutMs = 60_000): Promise<void> {
    const deadline = Date.now() + timeoutMs
    while (Date.now() < deadline) {
      if (!this.running) throw new Error(`${this.name} exited before it was ready; log:\n${this.logTail()}`)
      if (this.printedReady() && (this.options.probeReadyz === false || (await this.probe('/readyz')))) return
      await new Promise((r) => setTimeout(r, 100))
    }
    throw new Error(`${this.name} not ready within ${timeoutMs} ms; log:\n${this.logTail()}`)
  }

  /** Whether this run printed its ready line; the first time, the ports it printed are learnt. */
  private printedReady(): boolean {
    const output = this.currentOutput()
    if (!output.includes(this.options.readyLine ?? `${this.service} ready (`)) return false
    const printed = printedPorts(output)
    if (this.port === 0 && printed.port === undefined) throw new Error(`${this.name} printed no port; log:\n${this.logTail()}`)
    this.port ||= printed.port ?? 0
    this.sandboxPort ||= printed.sandboxPort ?? 0
    return true
  }

  /** What the current run wrote to the log so far. */
  private currentOutput(): string {
    try {
      const fd = fs.openSync(this.logFile, 'r')
      try {
        const size = fs.fstatSync(fd).size
        const buf = Buffer.alloc(Math.max(0, size - this.logStart))
        fs.readSync(fd, buf, 0, buf.length, this.logStart)
        return buf.toString('utf8')
      } finally {
        fs.closeSync(fd)
      }
    } catch {
      return ''
    }
  }

  /** True when `path` answers 200 within a second. */
  async probe(pathname: string): Promise<boolean> {
    try {
      const res = await fetch(`${this.url}${pathname}`, { signal: AbortSignal.timeout(1000) })
      await res.arrayBuffer()
      return res.status === 200
    } catch {
      return false
    }
  }

  /**
   * Spawns and waits until ready. A restart whose port another socket holds
   * (the process exits with EADDRINUSE) is spawned again after a pause.
   */
  async start(timeoutMs?: number): Promise<void> {
    const busyUntil = Date.now() + PORT_BUSY_RETRY_MS
    for (;;) {
      this.spawn()
      try {
        await this.waitReady(timeoutMs)
        return
      } catch (err) {
        const portBusy = !this.running && this.currentOutput().includes('EADDRINUSE')
        if (!portBusy || Date.now() > busyUntil) throw err
        // Not a crash: the process never came up.
        this.crashes.pop()
        await new Promise((r) => setTimeout(r, 250))
      }
    }
  }

  /** `kill -9`: no shutdown code runs, nothing is flushed or committed. */
  async kill9(): Promise<void> {
    if (!this.running) return
    this.expectingExit = true
    this.child?.kill('SIGKILL')
    await this.exited
  }

  /** SIGTERM and wait for the graceful shutdown (SIGKILL after `graceMs`). */
  async stop(graceMs = 15_000): Promise<void> {
    if (!this.running) return
    this.expectingExit = true
    this.child?.kill('SIGTERM')
    const timer = setTimeout(() => this.child?.kill('SIGKILL'), graceMs)
    await this.exited
    clearTimeout(timer)
  }

  /** The last `lines` lines of the process's log. */
  logTail(lines = 40): string {
    try {
      const text = fs.readFileSync(this.logFile, 'utf8')
      return text.split('\n').slice(-lines).join('\n')
    } catch {
      return '(no log)'
    }
  }
}
