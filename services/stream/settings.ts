import { randomBytes } from 'node:crypto'
import os from 'node:os'
import type { Config } from '../common/config'

/**
 * The stream node's own settings. They belong in services/common/config.ts
 * (STREAM_NODE_ID, STREAM_BACKFILL_MAX_BYTES, STREAM_BACKFILL_MAX_BYTES_PER_APP);
 * until the shared configuration declares them they are read here, from the
 * config when it has them, else from the environment, with the same
 * validation and defaults.
 *
 * The node id names the node's consumer group (`stream-<node id>`) and its
 * entries in the connection registry. A stable id means a restarted node
 * finds its group's committed offsets and resumes where it stopped (the
 * deliveries it missed fill its backfill buffer), and no new group is left
 * behind at every start. Default: `<hostname>-<PORT>`, stable for a node
 * that keeps its address; with PORT=0 (an ephemeral port, as in tests) there
 * is no stable address, so the id is random.
 */

export interface StreamNodeSettings {
  nodeId: string
  /** Backfill bytes over every application on this node. */
  backfillMaxBytes: number
  /** Backfill bytes of one application on this node. */
  backfillMaxBytesPerApp: number
}

export const DEFAULT_BACKFILL_MAX_BYTES = 256 * 1024 * 1024
export const DEFAULT_BACKFILL_MAX_BYTES_PER_APP = 32 * 1024 * 1024
const NODE_ID = /^[A-Za-z0-9._-]{1,100}$/

export class StreamSettingError extends Error {}

type Env = Record<string, string | undefined>

/** What config.ts already declares wins over the environment (the settings move there). */
function declared(config: Config, key: string): unknown {
  return (config as unknown as Record<string, unknown>)[key]
}

function text(config: Config, env: Env, key: string, name: string): string | undefined {
  const fromConfig = declared(config, key)
  if (typeof fromConfig === 'string' && fromConfig !== '') return fromConfig
  const raw = env[name]?.trim()
  return raw === undefined || raw === '' ? undefined : raw
}

function bytes(config: Config, env: Env, key: string, name: string, fallback: number): number {
  const fromConfig = declared(config, key)
  if (typeof fromConfig === 'number') return fromConfig
  const raw = text(config, env, key, name)
  if (raw === undefined) return fallback
  if (!/^\d{1,15}$/.test(raw) || Number(raw) < 1024) throw new StreamSettingError(`${name} must be a number of bytes, at least 1024 (got "${raw}")`)
  return Number(raw)
}

export function defaultNodeId(port: number, hostname = os.hostname()): string {
  if (port === 0) return `ephemeral-${randomBytes(6).toString('hex')}`
  const host = hostname.replace(/[^A-Za-z0-9._-]/g, '-').slice(0, 80) || 'host'
  return `${host}-${port}`
}

export function streamNodeSettings(config: Config, env: Env = process.env): StreamNodeSettings {
  const nodeId = text(config, env, 'streamNodeId', 'STREAM_NODE_ID') ?? defaultNodeId(config.port)
  if (!NODE_ID.test(nodeId)) throw new StreamSettingError(`STREAM_NODE_ID must be 1 to 100 of A-Z a-z 0-9 . _ - (got "${nodeId}")`)
  return {
    nodeId,
    backfillMaxBytes: bytes(config, env, 'streamBackfillMaxBytes', 'STREAM_BACKFILL_MAX_BYTES', DEFAULT_BACKFILL_MAX_BYTES),
    backfillMaxBytesPerApp: bytes(config, env, 'streamBackfillMaxBytesPerApp', 'STREAM_BACKFILL_MAX_BYTES_PER_APP', DEFAULT_BACKFILL_MAX_BYTES_PER_APP)
  }
}
