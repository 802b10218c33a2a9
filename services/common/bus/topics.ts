import fs from 'node:fs'
import path from 'node:path'
import { TOPICS } from './types'

/**
 * deploy/topics.json: partitions, retention and key of every topic. The test
 * harness and `make up` create these topics on the mock cluster, `make topics`
 * lists (and on a real cluster creates) them, and the deploy manifests read
 * the same file, so a topic is described once.
 */

export interface TopicSpec {
  name: string
  partitions: number
  retentionMs: number
  /** The field whose value is the message key (per-key order). */
  key: string
  description: string
}

export interface TopicsFile {
  replicationFactor: number
  topics: TopicSpec[]
}

/** The checkout root (the directory holding package.json), from source or from dist/. */
export function projectRoot(from: string = __dirname): string {
  let dir = from
  for (;;) {
    if (fs.existsSync(path.join(dir, 'package.json')) && fs.existsSync(path.join(dir, 'deploy'))) return dir
    const parent = path.dirname(dir)
    if (parent === dir) throw new Error(`cannot find the project root above ${from}`)
    dir = parent
  }
}

export function topicsFilePath(): string {
  return path.join(projectRoot(), 'deploy', 'topics.json')
}

function fail(file: string, message: string): never {
  throw new Error(`${file}: ${message}`)
}

/** Reads and checks deploy/topics.json: well-formed entries, and every topic of TOPICS present. */
export function loadTopics(file: string = topicsFilePath()): TopicsFile {
  let raw: unknown
  try {
    raw = JSON.parse(fs.readFileSync(file, 'utf8'))
  } catch (err) {
    fail(file, `unreadable: ${(err as Error).message}`)
  }
  const doc = raw as Partial<TopicsFile>
  const replicationFactor = doc.replicationFactor ?? 1
  if (!Number.isInteger(replicationFactor) || replicationFactor < 1) fail(file, 'replicationFactor must be a positive integer')
  if (!Array.isArray(doc.topics)) fail(file, '"topics" must be an array')
  const seen = new Set<string>()
  for (const t of doc.topics) {
    if (typeof t.name !== 'string' || !/^[a-zA-Z0-9._-]{1,249}$/.test(t.name)) fail(file, `invalid topic name ${JSON.stringify(t.name)}`)
    if (seen.has(t.name)) fail(file, `topic ${t.name} is listed twice`)
    seen.add(t.name)
    if (!Number.isInteger(t.partitions) || t.partitions < 1 || t.partitions > 1000) fail(file, `${t.name}: partitions must be 1..1000`)
    if (!Number.isInteger(t.retentionMs) || t.retentionMs < 24 * 3_600_000) fail(file, `${t.name}: retentionMs must be at least 24 h (replay window)`)
    if (typeof t.key !== 'string' || t.key === '') fail(file, `${t.name}: key must name the keying field`)
  }
  for (const name of Object.values(TOPICS)) if (!seen.has(name)) fail(file, `topic ${name} (services/common/bus/types.ts TOPICS) is missing`)
  return { replicationFactor, topics: doc.topics.map((t) => ({ ...t, description: t.description ?? '' })) }
}
