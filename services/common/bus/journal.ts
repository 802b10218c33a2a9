import fs from 'node:fs'
import path from 'node:path'
import type { BusMessage, Headers } from './types'

/**
 * The memory bus's files (DATA_DIR/bus), so accepted-but-unconsumed events
 * survive a restart, a SIGTERM or a kill -9, as they would on Kafka:
 *
 *  - `meta.json`: the partition count the files were written with;
 *  - `<topic>.log`: one JSON line per message, appended (write, no fsync, like
 *    the memory store's journal: it survives a process crash) before publish
 *    resolves. `{"base":n,"p":p}` lines, written at compaction, record that
 *    partition p's messages below offset n are gone, so offsets never restart;
 *  - `offsets.log`: one line per commit `{"g","t","p","o"}` (next offset to read).
 *
 * A topic file is rewritten (tmp + rename) once most of its lines are trimmed
 * messages; the offsets file once most of its lines are superseded. A torn
 * last line (a crash mid-write) is cut off at open.
 */

export interface StoredPartition {
  /** Offset of the first message still kept (or the next offset when none is). */
  base: number
  messages: BusMessage[]
}

export interface Commit {
  group: string
  topic: string
  partition: number
  offset: number
}

const OFFSETS_FILE = 'offsets.log'
const META_FILE = 'meta.json'
const LOG_SUFFIX = '.log'

/** Topic names become file names: anything but [A-Za-z0-9._-] is percent-encoded. */
function fileOf(topic: string): string {
  return `${encodeURIComponent(topic).replace(/\*/g, '%2A')}${LOG_SUFFIX}`
}

/** Cuts a torn last line, then returns the complete lines. */
function readLines(file: string): string[] {
  if (!fs.existsSync(file)) return []
  const text = fs.readFileSync(file, 'utf8')
  const end = text.lastIndexOf('\n') + 1
  if (end < text.length) fs.truncateSync(file, Buffer.byteLength(text.slice(0, end)))
  return text.slice(0, end).split('\n').filter((l) => l !== '')
}

function parseLine(line: string): Record<string, unknown> | undefined {
  try {
    return JSON.parse(line) as Record<string, unknown>
  } catch {
    return undefined
  }
}

/** One journal line; `json` is the value's JSON text when the caller has it already. */
export function encodeMessage(m: BusMessage, json: string = JSON.stringify(m.value)): string {
  return `{"p":${m.partition},"o":${m.offset},"ts":${m.timestamp},"k":${JSON.stringify(m.key)},"h":${JSON.stringify(m.headers)},"v":${json}}\n`
}

export class BusJournal {
  private readonly fds = new Map<string, number>()
  private offsetsFd: number | undefined
  private offsetLines = 0

  constructor(
    readonly dir: string,
    private readonly partitions: number
  ) {
    fs.mkdirSync(dir, { recursive: true })
    const meta = path.join(dir, META_FILE)
    if (fs.existsSync(meta)) {
      const written = (JSON.parse(fs.readFileSync(meta, 'utf8')) as { partitions?: unknown }).partitions
      if (written !== partitions) {
        throw new Error(`${dir} holds a bus written with ${String(written)} partitions per topic, not ${partitions}: set BUS_PARTITIONS=${String(written)} or move the directory away`)
      }
    } else fs.writeFileSync(meta, JSON.stringify({ partitions }))
  }

  /** Every topic's partitions as journaled. */
  loadTopics(): Map<string, StoredPartition[]> {
    const out = new Map<string, StoredPartition[]>()
    for (const name of fs.readdirSync(this.dir)) {
      if (!name.endsWith(LOG_SUFFIX) || name === OFFSETS_FILE) continue
      const topic = decodeURIComponent(name.slice(0, -LOG_SUFFIX.length))
      out.set(topic, this.loadTopic(topic, path.join(this.dir, name)))
    }
    return out
  }

  private loadTopic(topic: string, file: string): StoredPartition[] {
    const parts: StoredPartition[] = Array.from({ length: this.partitions }, () => ({ base: 0, messages: [] }))
    for (const line of readLines(file)) {
      const r = parseLine(line)
      if (!r || typeof r.p !== 'number') continue
      const part = parts[r.p]
      if (!part) continue
      if (typeof r.base === 'number') {
        part.base = Math.max(part.base, r.base)
        continue
      }
      const offset = r.o as number
      // Lines of one partition are appended in offset order; anything else is not ours.
      if (offset !== part.base + part.messages.length) continue
      part.messages.push({ topic, partition: r.p, offset: String(offset), timestamp: r.ts as number, key: String(r.k), headers: (r.h ?? {}) as Headers, value: r.v })
    }
    return parts
  }

  /** The last commit of each (group, topic, partition). */
  loadOffsets(): Commit[] {
    const latest = new Map<string, Commit>()
    const lines = readLines(path.join(this.dir, OFFSETS_FILE))
    for (const line of lines) {
      const r = parseLine(line)
      if (!r || typeof r.g !== 'string' || typeof r.t !== 'string' || typeof r.p !== 'number' || typeof r.o !== 'number') continue
      latest.set(JSON.stringify([r.g, r.t, r.p]), { group: r.g, topic: r.t, partition: r.p, offset: r.o })
    }
    this.offsetLines = lines.length
    return [...latest.values()]
  }

  /** Appends already encoded lines (encodeMessage) of one topic. */
  appendMessages(topic: string, lines: string): void {
    let fd = this.fds.get(topic)
    if (fd === undefined) {
      fd = fs.openSync(path.join(this.dir, fileOf(topic)), 'a')
      this.fds.set(topic, fd)
    }
    fs.writeSync(fd, lines)
  }

  appendCommits(commits: Commit[], all: () => Commit[]): void {
    if (commits.length === 0) return
    this.offsetsFd ??= fs.openSync(path.join(this.dir, OFFSETS_FILE), 'a')
    fs.writeSync(this.offsetsFd, commits.map((c) => `${JSON.stringify({ g: c.group, t: c.topic, p: c.partition, o: c.offset })}\n`).join(''))
    this.offsetLines += commits.length
    const current = all()
    if (this.offsetLines > 10_000 && this.offsetLines > current.length * 4) this.rewriteOffsets(current)
  }

  private rewriteOffsets(current: Commit[]): void {
    const file = path.join(this.dir, OFFSETS_FILE)
    writeAtomically(file, current.map((c) => `${JSON.stringify({ g: c.group, t: c.topic, p: c.partition, o: c.offset })}\n`).join(''))
    if (this.offsetsFd !== undefined) fs.closeSync(this.offsetsFd)
    this.offsetsFd = fs.openSync(file, 'a')
    this.offsetLines = current.length
  }

  /** Rewrites a topic's file with only the messages still kept, and each partition's base. */
  rewriteTopic(topic: string, partitions: StoredPartition[]): void {
    const file = path.join(this.dir, fileOf(topic))
    const lines: string[] = []
    partitions.forEach((part, p) => lines.push(`${JSON.stringify({ p, base: part.base })}\n`))
    for (const part of partitions) for (const m of part.messages) lines.push(encodeMessage(m))
    writeAtomically(file, lines.join(''))
    const fd = this.fds.get(topic)
    if (fd !== undefined) fs.closeSync(fd)
    this.fds.set(topic, fs.openSync(file, 'a'))
  }

  close(): void {
    for (const fd of this.fds.values()) fs.closeSync(fd)
    this.fds.clear()
    if (this.offsetsFd !== undefined) fs.closeSync(this.offsetsFd)
    this.offsetsFd = undefined
  }
}

function writeAtomically(file: string, text: string): void {
  const tmp = `${file}.tmp`
  fs.writeFileSync(tmp, text)
  fs.renameSync(tmp, file)
}
