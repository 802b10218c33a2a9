import fs from 'node:fs'
import path from 'node:path'
import type { Test } from 'tap'
import type { Recorder } from './recorder'

/** The installed version of a client package, read from its own package.json. */
export function clientVersion(name: string): string {
  const file = path.resolve(__dirname, '..', '..', '..', 'node_modules', ...name.split('/'), 'package.json')
  return (JSON.parse(fs.readFileSync(file, 'utf8')) as { version: string }).version
}

/**
 * The per-client call count (docs/conformance.md "Calls per client"): every request the
 * client made on the wire (the recorder saw it), printed as a TAP comment.
 */
export function reportCalls(t: Test, client: string, version: string, recorder: Recorder): number {
  const calls = recorder.exchanges.length
  t.ok(calls > 0, `${client} made calls`)
  t.comment(`client ${client}@${version}: ${calls} calls`)
  return calls
}
