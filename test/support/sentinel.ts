import { spawn } from 'node:child_process'

/**
 * Runs `command` once process `pid` is gone, from a detached shell that
 * outlives it: what a test starts detached on purpose (make up's supervisord
 * and everything under it) is stopped even when the test process is killed
 * (a tap timeout) before its teardown could run. Returns a function that
 * cancels it (the teardown ran).
 */
export function whenGone(pid: number, command: string[], env: NodeJS.ProcessEnv = process.env): () => void {
  const [file, ...args] = command
  if (file === undefined) throw new Error('whenGone: empty command')
  const sentinel = spawn('sh', ['-c', 'while kill -0 "$0" 2>/dev/null; do sleep 0.5; done; exec "$@"', String(pid), file, ...args], {
    detached: true,
    stdio: 'ignore',
    env
  })
  sentinel.unref()
  return () => {
    try {
      if (sentinel.pid !== undefined) process.kill(sentinel.pid, 'SIGKILL')
    } catch {
      // already gone
    }
  }
}
