import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { Test } from 'tap'

/**
 * Small helpers every kind of test uses. They live apart from runtime.ts on
 * purpose: that module loads every service, which costs seconds per test file
 * that only needs a bus or a store.
 */

export function tempDir(t: Test, prefix = 'gw-'): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix))
  // KEEP_TMP=1 keeps the directory (logs of a failed system test) for a look afterwards.
  t.teardown(() => {
    if (!process.env.KEEP_TMP) fs.rmSync(dir, { recursive: true, force: true })
  })
  return dir
}

/** A self-signed P-256 certificate for `/CN=${cn}` and `subjectAltName=${altNames}`, made in `dir` by the openssl CLI. */
export function selfSignedCert(dir: string, cn: string, altNames: string): { cert: string; key: string } {
  const cert = path.join(dir, 'cert.pem')
  const key = path.join(dir, 'key.pem')
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1', '-subj', `/CN=${cn}`,
    '-addext', `subjectAltName=${altNames}`, '-keyout', key, '-out', cert], { stdio: 'ignore', timeout: 20_000 })
  return { cert, key }
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

/**
 * Polls `check` until it returns a truthy value or `timeoutMs` passes (then throws with the last error).
 * Every falsy value, 0 and '' included, is "not yet".
 */
export async function eventually<T>(check: () => Promise<T | undefined | false> | T | undefined | false, timeoutMs = 5000, intervalMs = 25): Promise<T> {
  const deadline = Date.now() + timeoutMs
  let last: unknown
  for (;;) {
    try {
      const v = await check()
      if (v) return v
    } catch (err) {
      last = err
    }
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms${last ? `: ${(last as Error).message}` : ''}`)
    await sleep(intervalMs)
  }
}

/** Whether a process with this pid exists (signal 0: nothing is sent). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}
