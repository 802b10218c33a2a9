import { randomBytes } from 'node:crypto'
import os from 'node:os'
import type { Config } from '../common/config'

/**
 * The stream node's identity and backfill budgets (declared and validated in
 * services/common/config.ts). The node id names the node's consumer group
 * (`stream-<node id>`) and its entries in the connection registry. A stable
 * id means a restarted node finds its group's committed offsets and resumes
 * where it stopped (the deliveries it missed fill its backfill buffer), and
 * no new group is left behind at every start. Default: `<hostname>-<PORT>`,
 * stable for a node that keeps its address; with PORT=0 (an ephemeral port,
 * as in tests) there is no stable address, so the id is random.
 */

export interface StreamNodeSettings {
  nodeId: string
  /** Backfill bytes over every application on this node. */
  backfillMaxBytes: number
  /** Backfill bytes of one application on this node. */
  backfillMaxBytesPerApp: number
}

export function defaultNodeId(port: number, hostname = os.hostname()): string {
  if (port === 0) return `ephemeral-${randomBytes(6).toString('hex')}`
  const host = hostname.replace(/[^A-Za-z0-9._-]/g, '-').slice(0, 80) || 'host'
  return `${host}-${port}`
}

export function streamNodeSettings(config: Config): StreamNodeSettings {
  return {
    nodeId: config.streamNodeId === '' ? defaultNodeId(config.port) : config.streamNodeId,
    backfillMaxBytes: config.streamBackfillMaxBytes,
    backfillMaxBytesPerApp: config.streamBackfillMaxBytesPerApp
  }
}
