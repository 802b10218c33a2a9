import { spawn, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { projectRoot } from '../../../services/common/bus/topics'

/**
 * One service instance as its own OS process: `node --import=tsx
 * services/<name>/main.ts` (the sources, so the fault tests do not depend on
 * a build). It keeps its ports across restarts, like an instance behind a
 * load balancer, and writes stdout and stderr to a log file that failing
 * tests print the end of.
 *
 * On Linux the process is started through `setpriv --pdeathsig KILL`, so the
 * kernel kills it if the test process dies without its teardowns.
 */

const root = projectRoot()
const SETPRIV = '/usr/bin/setpriv'

export interface ServiceProcessOptions {
  /** Service folder under services/. */
  service: string
  /** Instance name (`activity-2`). */
  instance: string
  port: number
  sandboxPort: number
  env: Record<string, string>
  logDir: string
}

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

  constructor(readonly options: ServiceProcessOptions) {
    this.logFile = path.join(options.logDir, `${options.instance}.log`)
  }

  get name(): string {
    return this.options.instance
  }

  get service(): string {
    return this.options.service
  }

  get url(): string {
    return `http://127.0.0.1:${this.options.port}`
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
    const main = path.join(root, 'services', this.options.service, 'main.ts')
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
        PORT: String(this.options.port),
        SANDBOX_PORT: String(this.options.sandboxPort)
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
      if (this.printedReady() && (await this.probe('/readyz'))) return
      await new Promise((r) => setTimeout(r, 100))
    }
    throw new Error(`${this.name} not ready within ${timeoutMs} ms; log:\n${this.logTail()}`)
  }

  private printedReady(): boolean {
    try {
      const fd = fs.openSync(this.logFile, 'r')
      try {
        const size = fs.fstatSync(fd).size
        const buf = Buffer.alloc(Math.max(0, size - this.logStart))
        fs.readSync(fd, buf, 0, buf.length, this.logStart)
        return buf.toString('utf8').includes(`${this.service} ready (`)
      } finally {
        fs.closeSync(fd)
      }
    } catch {
      return false
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

  async start(timeoutMs?: number): Promise<void> {
    this.spawn()
    await this.waitReady(timeoutMs)
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
