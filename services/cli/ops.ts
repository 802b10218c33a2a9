import fs from 'node:fs'
import path from 'node:path'
import { Kafka, logLevel, type Admin } from 'kafkajs'
import type { LagReport } from '../common/admin-bus'
import { GoneCounts } from '../common/bus/gone'
import { fetchGroupOffsets, listGroups } from '../common/bus/kafka'
import { loadTopics, projectRoot, type TopicSpec } from '../common/bus/topics'
import type { Gone, GroupOffsets } from '../common/bus/types'
import { flag, parseArgs } from './args'
import { operatorClient } from './client'

/**
 * `make topics` and `make lag`.
 *
 * topics [--create] [--json]: the topics of deploy/topics.json with their
 * partitions, retention and key; with KAFKA_BROKERS, also whether each exists
 * on the cluster with that many partitions, and with --create the missing
 * ones are created (a real Kafka; the mock cluster of `make up` already has
 * them from its launcher).
 *
 * lag [--group a,b] [--json]: committed offset, end and lag per group and
 * partition. With KAFKA_BROKERS: straight from Kafka (every group the
 * cluster lists, or --group). Otherwise from the running system's operator
 * API: each service process of `make up` (RUN_DIR/state.json) reports the
 * groups it consumes with; the embedded runtime (GATEWAY_URL) reports all.
 * After the table, one line per group (total lag; `BEHIND` with how many
 * partitions lag, or `caught up`) and one for the whole system; a process of
 * `make up` that does not answer is named and the command exits 1, as its
 * groups may be missing. Messages a group never got because the broker
 * dropped them first (the topic's retention is shorter than the group's lag)
 * are a `GONE` line per group and the command exits 1: they are lost for that
 * group. Only the services count them, so only their reports show them.
 */

/** Where a command writes, and the environment it reads (tests pass their own). */
export interface CommandIo {
  out(line?: string): void
  err(line: string): void
  env: NodeJS.ProcessEnv
}

const processIo: CommandIo = {
  out: (line = '') => void process.stdout.write(`${line}\n`),
  err: (line) => void process.stderr.write(`${line}\n`),
  env: process.env
}

function table(io: CommandIo, rows: string[][]): void {
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length))) ?? []
  for (const r of rows) io.out(r.map((c, i) => c.padEnd(widths[i] ?? 0)).join('  ').trimEnd())
}

function duration(ms: number): string {
  if (ms % 86_400_000 === 0) return `${ms / 86_400_000} d`
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000} h`
  return `${Math.round(ms / 60_000)} min`
}

/** --brokers, else KAFKA_BROKERS, else (for `topics`) the cluster of a running `make up`. */
function brokersFrom(io: CommandIo, args: ReturnType<typeof parseArgs>, useLocal: boolean): string[] {
  const raw = flag(args, 'brokers') ?? io.env.KAFKA_BROKERS ?? ''
  const listed = raw.split(',').map((b) => b.trim()).filter((b) => b !== '')
  if (listed.length > 0 || !useLocal) return listed
  return localState(io)?.kafkaBrokers ?? []
}

async function withAdmin<T>(brokers: string[], fn: (admin: Admin) => Promise<T>): Promise<T> {
  const kafka = new Kafka({ brokers, clientId: 'gateway-cli', logLevel: logLevel.NOTHING, connectionTimeout: 3000, retry: { retries: 3, initialRetryTime: 200 } })
  const admin = kafka.admin()
  try {
    await admin.connect()
  } catch (err) {
    throw new Error(`cannot reach Kafka at ${brokers.join(',')}: ${(err as Error).message}`, { cause: err })
  }
  try {
    return await fn(admin)
  } finally {
    await admin.disconnect().catch(() => undefined)
  }
}

// ------------------------------------------------------------------ topics

interface TopicRow extends TopicSpec {
  onCluster?: number | 'missing'
}

export async function runTopics(argv: string[], io: CommandIo = processIo): Promise<number> {
  const args = parseArgs(argv)
  const { topics, replicationFactor } = loadTopics()
  const brokers = brokersFrom(io, args, true)
  const rows: TopicRow[] = topics.map((t) => ({ ...t }))
  let created: string[] = []
  if (brokers.length > 0) {
    const outcome = await withAdmin(brokers, async (admin) => {
      const existing = new Map((await admin.fetchTopicMetadata({ topics: [] })).topics.map((t) => [t.name, t.partitions.length]))
      for (const r of rows) r.onCluster = existing.get(r.name) ?? 'missing'
      const missing = rows.filter((r) => r.onCluster === 'missing')
      if (!args.flags.create || missing.length === 0) return 0
      const clusterBrokers = (await admin.describeCluster()).brokers.length
      try {
        await admin.createTopics({
          waitForLeaders: true,
          topics: missing.map((r) => ({
            topic: r.name,
            numPartitions: r.partitions,
            replicationFactor: Math.min(replicationFactor, clusterBrokers),
            configEntries: [{ name: 'retention.ms', value: String(r.retentionMs) }]
          }))
        })
      } catch (err) {
        io.err(`cannot create ${missing.map((r) => r.name).join(', ')}: ${(err as Error).message}`)
        return 1
      }
      created = missing.map((r) => r.name)
      for (const r of missing) r.onCluster = r.partitions
      return 0
    })
    if (outcome !== 0) return outcome
  }
  if (args.flags.json) {
    io.out(JSON.stringify({ topics: rows, created }, null, 2))
  } else {
    const head = ['topic', 'partitions', 'retention', 'key', ...(brokers.length > 0 ? ['on cluster'] : [])]
    table(io, [
      head,
      ...rows.map((r) => [
        r.name,
        String(r.partitions),
        duration(r.retentionMs),
        r.key,
        ...(brokers.length > 0 ? [r.onCluster === 'missing' ? 'MISSING' : r.onCluster === r.partitions ? `yes${created.includes(r.name) ? ' (created)' : ''}` : `${r.onCluster} partitions (expected ${r.partitions})`] : [])
      ])
    ])
    if (brokers.length === 0) io.out('\n(no KAFKA_BROKERS: the embedded in-memory bus creates each topic on first use with BUS_PARTITIONS partitions)')
  }
  const problems = rows.filter((r) => r.onCluster !== undefined && r.onCluster !== r.partitions)
  if (problems.length > 0 && !args.flags.json) io.out(`\n${problems.length} topic(s) missing or mis-sized${args.flags.create ? '' : ': `topics --create` creates missing ones'}`)
  return problems.length > 0 ? 1 : 0
}

// ------------------------------------------------------------------ lag

interface LocalState {
  kafkaBrokers?: string[]
  processes: Array<{ name: string; kind: string; pid: number; port?: number }>
}

function localState(io: CommandIo): LocalState | undefined {
  const file = path.join(path.resolve(io.env.RUN_DIR ?? path.join(projectRoot(), '.run')), 'state.json')
  if (!fs.existsSync(file)) return undefined
  return JSON.parse(fs.readFileSync(file, 'utf8')) as LocalState
}

/** Rows in the order the table prints them. */
function byGroupTopicPartition(a: { group: string; topic: string; partition: number }, b: { group: string; topic: string; partition: number }): number {
  return a.group.localeCompare(b.group) || a.topic.localeCompare(b.topic) || a.partition - b.partition
}

function merge(reports: GroupOffsets[][]): GroupOffsets[] {
  const byKey = new Map<string, GroupOffsets>()
  for (const list of reports) for (const g of list) byKey.set(`${g.group}\u0000${g.topic}\u0000${g.partition}`, g)
  return [...byKey.values()].sort(byGroupTopicPartition)
}

/** The processes' gone counts added up per group, topic and partition (each counts what its own consumers met). */
function addGone(reports: Gone[][]): Gone[] {
  const sums = new GoneCounts()
  for (const list of reports) for (const g of list) sums.add(g)
  return sums.list().sort(byGroupTopicPartition)
}

interface LagResult {
  offsets: GroupOffsets[]
  source: string
  silent?: string[]
  gone?: Gone[]
}

async function lagFromServices(io: CommandIo, groups: string[] | undefined): Promise<LagResult> {
  const query = groups ? `?group=${encodeURIComponent(groups.join(','))}` : ''
  const state = io.env.GATEWAY_URL === undefined ? localState(io) : undefined
  if (state) {
    const services = state.processes.filter((p) => p.kind === 'service' && p.port !== undefined)
    const silent: string[] = []
    const reports = await Promise.all(
      services.map(async (p): Promise<Pick<LagReport, 'groups' | 'gone'>> => {
        try {
          return await operatorClient({ ...io.env, GATEWAY_URL: `http://127.0.0.1:${p.port}` }).call<LagReport>('GET', `/admin/bus/lag${query}`)
        } catch (err) {
          io.err(`${p.name}: ${(err as Error).message}`)
          silent.push(p.name)
          return { groups: [], gone: [] }
        }
      })
    )
    return { offsets: merge(reports.map((r) => r.groups)), source: `${services.length} service processes of make up`, silent, gone: addGone(reports.map((r) => r.gone ?? [])) }
  }
  const client = operatorClient(io.env)
  const report = await client.call<LagReport>('GET', `/admin/bus/lag${query}`)
  return { offsets: report.groups, source: `${client.baseUrl} (${report.bus} bus)`, silent: [], gone: addGone([report.gone ?? []]) }
}

/** Where, in the words of the GONE line: each topic with its partitions. */
function partitionsOf(list: Gone[]): string {
  return [...new Set(list.map((g) => g.topic))].map((topic) => `${topic} partition(s) ${list.filter((g) => g.topic === topic).map((g) => g.partition).join(',')}`).join('; ')
}

/** One line per group that lost messages to the broker's retention: counted, or only known by a reset of its position. */
export function goneLines(gone: Gone[]): string[] {
  const byGroup = new Map<string, Gone[]>()
  for (const g of gone) if (g.messages > 0 || g.resets > 0) byGroup.set(g.group, [...(byGroup.get(g.group) ?? []), g])
  return [...byGroup].map(([group, list]) => {
    const counted = list.filter((g) => g.messages > 0)
    const reset = list.filter((g) => g.resets > 0 && g.messages === 0)
    const parts: string[] = []
    if (counted.length > 0) parts.push(`${counted.reduce((n, g) => n + g.messages, 0)} message(s) dropped by the broker before this group read them (${partitionsOf(counted)})`)
    if (reset.length > 0) parts.push(`its position reset past messages the broker dropped while it was away, how many not known (${partitionsOf(reset)})`)
    return `GONE       ${group}: ${parts.join('; ')}: the topic's retention is shorter than the group's lag`
  })
}

/** Per group: its total lag and how many of its partitions are behind. */
export function groupTotals(offsets: GroupOffsets[]): Array<{ group: string; lag: number; partitions: number; behind: number }> {
  const totals = new Map<string, { group: string; lag: number; partitions: number; behind: number }>()
  for (const g of offsets) {
    const t = totals.get(g.group) ?? { group: g.group, lag: 0, partitions: 0, behind: 0 }
    t.lag += g.lag
    t.partitions++
    if (g.lag > 0) t.behind++
    totals.set(g.group, t)
  }
  return [...totals.values()]
}

export async function runLag(argv: string[], io: CommandIo = processIo): Promise<number> {
  const args = parseArgs(argv)
  const groupFlag = flag(args, 'group')
  const groups = groupFlag?.split(',').map((g) => g.trim()).filter((g) => g !== '')
  const brokers = brokersFrom(io, args, false)
  let result: LagResult | undefined
  if (brokers.length > 0) {
    result = await withAdmin(brokers, async (admin) => {
      const names = groups ?? (await listGroups(admin))
      if (names === undefined) return undefined
      return { offsets: await fetchGroupOffsets(admin, names), source: `Kafka at ${brokers.join(',')}` }
    })
    if (result === undefined) {
      // The mock cluster cannot list groups: the services of `make up` know theirs.
      if (localState(io) === undefined) {
        io.err('this Kafka cannot list consumer groups (ListGroups unsupported): name them with --group a,b')
        return 2
      }
      result = await lagFromServices(io, undefined)
    }
  } else {
    result = await lagFromServices(io, groups)
  }
  if (args.flags.json) {
    io.out(JSON.stringify({ source: result.source, groups: result.offsets, gone: result.gone ?? [] }, null, 2))
    return 0
  }
  io.out(`consumer lag (${result.source})`)
  const silent = result.silent ?? []
  const silentLine = `${silent.length} process(es) did not answer, so their groups may be missing: ${silent.join(', ')} (make status)`
  if (result.offsets.length === 0) {
    io.out('no consumer groups')
    if (silent.length > 0) io.out(silentLine)
    return silent.length > 0 ? 1 : 0
  }
  table(io, [
    ['group', 'topic', 'partition', 'committed', 'end', 'lag'],
    ...result.offsets.map((g) => [g.group, g.topic, String(g.partition), g.committed < 0 ? '-' : String(g.committed), String(g.end), String(g.lag)])
  ])
  io.out()
  // One line per group: caught up, or BEHIND with its total; then one line for the whole system.
  const totals = groupTotals(result.offsets)
  for (const g of totals) {
    io.out(g.lag > 0 ? `BEHIND     ${g.group}: ${g.lag} message(s) behind on ${g.behind} of ${g.partitions} partition(s)` : `caught up  ${g.group}: 0 message(s) behind`)
  }
  const lost = goneLines(result.gone ?? [])
  for (const line of lost) io.out(line)
  const behind = totals.filter((g) => g.lag > 0)
  io.out(behind.length > 0 ? `${behind.length} of ${totals.length} group(s) behind: ${behind.map((g) => g.group).join(', ')}` : `all ${totals.length} group(s) caught up`)
  if (silent.length > 0) io.out(silentLine)
  return silent.length > 0 || lost.length > 0 ? 1 : 0
}
