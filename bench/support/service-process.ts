/**
 * A service's OS process for the benches (bench/pipeline, bench/store-work):
 * `node dist/services/<service>/main.js` (main.ts through tsx when a bench
 * runs from source), with the bench's settings, ready once it printed
 * "<service> ready (" on stdout.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import path from 'node:path'
import { projectRoot } from '../../services/common/bus/topics'
import { freePort } from '../../scripts/local-infra'

const root = projectRoot()
const fromSource = __filename.endsWith('.ts')
const READY_WITHIN_MS = 90_000
const STOP_GRACE_MS = 15_000

export interface ServiceChild {
  name: string
  url: string
  proc: ChildProcess
  exited: Promise<unknown>
}

export interface ServiceOptions {
  operatorToken: string
  /** Writes a V8 CPU profile of the process to dir/name when it stops. */
  cpuProfile?: { dir: string; name: string }
}

/** Starts the service on free loopback ports; `env` overrides the bench's defaults (and the caller's environment). */
export async function startService(service: string, env: Record<string, string>, options: ServiceOptions): Promise<ServiceChild> {
  const port = await freePort()
  const main = fromSource ? path.join(root, 'services', service, 'main.ts') : path.join(root, 'dist', 'services', service, 'main.js')
  const profile = options.cpuProfile ? ['--cpu-prof', `--cpu-prof-dir=${options.cpuProfile.dir}`, `--cpu-prof-name=${options.cpuProfile.name}`] : []
  const proc = spawn(process.execPath, [...process.execArgv, ...profile, main], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'inherit'],
    env: {
      ...process.env,
      LOG_LEVEL: 'warn',
      HOST: '127.0.0.1',
      PORT: String(port),
      SANDBOX_PORT: String(await freePort()),
      OPERATOR_TOKEN: options.operatorToken,
      RATE_LIMIT_DEFAULT: '10000000',
      ...env
    }
  })
  const exited = new Promise((resolve) => proc.once('exit', resolve))
  let out = ''
  const printedReady = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${service} not ready within ${READY_WITHIN_MS / 1000} s`)), READY_WITHIN_MS)
    proc.stdout?.on('data', (d: Buffer) => {
      out += d.toString()
      if (out.includes(`${service} ready (`)) {
        clearTimeout(timer)
        resolve()
      }
      if (out.length > 100_000) out = out.slice(-10_000)
    })
    void exited.then((code) => {
      clearTimeout(timer)
      reject(new Error(`${service} exited (${String(code)}) before it was ready`))
    })
  })
  const child = { name: service, url: `http://127.0.0.1:${port}`, proc, exited }
  try {
    await printedReady
  } catch (err) {
    await stopService(child)
    throw err
  }
  return child
}

/** SIGTERM, then SIGKILL if it is still running after STOP_GRACE_MS. */
export async function stopService(s: ServiceChild): Promise<void> {
  if (s.proc.exitCode !== null || s.proc.signalCode !== null) return
  s.proc.kill('SIGTERM')
  const timer = setTimeout(() => s.proc.kill('SIGKILL'), STOP_GRACE_MS)
  await s.exited
  clearTimeout(timer)
}
