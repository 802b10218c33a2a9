import os from 'node:os'
import type { ServiceContext } from '../context'
import { ValidatingBus } from '../bus/validating'
import type { Bus, LagSource } from '../bus/types'
import type { Worker } from '../service'

/**
 * What every process tells the console about itself, in the shared
 * `console:` keyspace, so the operator's health and lag pages need no call
 * to another service:
 *
 *   console:instance:{service}:{host}:{pid}  InstanceReport (JSON), TTL 3 beats: gone when the process is
 *   console:groups                           zset consumer group -> last seen (ms): the groups processes consume in
 *
 * Each process reports every BEAT_MS: its readiness (the same check as
 * /readyz: store, bus consumers) and its consumer groups (a Kafka cluster
 * that cannot list groups, like the mock cluster of `make up`, still gets
 * every group's lag read by name).
 */

export const PresenceKeys = {
  instancePrefix: () => 'console:instance:',
  instance: (service: string, id: string) => `console:instance:${service}:${id}`,
  groups: () => 'console:groups'
}

export interface InstanceReport {
  /** The process's name (a service, or `embedded`). */
  service: string
  /** The services it runs. */
  services: string[]
  id: string
  url: string
  pid: number
  host: string
  started_at: string
  checked_at: string
  ready: boolean
  reason?: string
  store: string
  bus: string
}

const BEAT_MS = 5000
/** Groups are reported every few beats (reading them costs Kafka admin calls). */
const GROUP_EVERY_BEATS = 6
/** Groups not reported for this long are no longer shown (a stream node that went away). */
export const GROUP_FRESH_MS = 10 * 60_000

export function lagSourceOf(bus: Bus): LagSource | undefined {
  const inner = bus instanceof ValidatingBus ? bus.underlying : bus
  return typeof (inner as Partial<LagSource>).groupOffsets === 'function' ? (inner as unknown as LagSource) : undefined
}

/** Starts the heartbeat of this process; closing it removes its report. */
export function startPresence(ctx: ServiceContext, services: string[], url: string, ready: () => Promise<void>): Worker {
  const id = `${os.hostname()}:${process.pid}`
  const key = PresenceKeys.instance(ctx.serviceName, id)
  const started = new Date().toISOString()
  let timer: NodeJS.Timeout | undefined
  let closed = false
  let running: Promise<void> = Promise.resolve()
  let beats = 0

  const beat = async (): Promise<void> => {
    const report: InstanceReport = { service: ctx.serviceName, services, id, url, pid: process.pid, host: os.hostname(), started_at: started, checked_at: new Date().toISOString(), ready: true, store: ctx.store.kind, bus: ctx.bus.kind }
    try {
      await ctx.store.ping()
      await ready()
    } catch (err) {
      report.ready = false
      report.reason = (err as Error).message
    }
    try {
      await ctx.store.setJson(key, report, BEAT_MS * 3)
      if (beats++ % GROUP_EVERY_BEATS !== 0) return
      // Kafka without ListGroups answers this process's own groups: exactly what it should report.
      const groups = ctx.bus.kind === 'memory' ? [] : [...new Set((await lagSourceOf(ctx.bus)?.groupOffsets()) ?? []).values()].map((g) => g.group)
      const now = Date.now()
      for (const group of new Set(groups)) await ctx.store.zadd(PresenceKeys.groups(), now, group)
    } catch (err) {
      ctx.log.debug({ err }, 'console presence: report not written')
    }
  }
  const loop = (): void => {
    if (closed) return
    running = beat().finally(() => {
      if (!closed) timer = setTimeout(loop, BEAT_MS)
    })
  }
  loop()
  return {
    name: 'console-presence',
    async close() {
      closed = true
      clearTimeout(timer)
      await running
      await ctx.store.del(key).catch(() => undefined)
    }
  }
}

/** Every live process's report, by service then id. */
export async function instanceReports(ctx: ServiceContext): Promise<InstanceReport[]> {
  const keys: string[] = []
  for await (const k of ctx.store.scanPrefix(PresenceKeys.instancePrefix())) keys.push(k)
  const reports = (await ctx.store.mgetJson<InstanceReport>(keys)).filter((r): r is InstanceReport => r !== undefined)
  return reports.sort((a, b) => a.service.localeCompare(b.service) || a.id.localeCompare(b.id))
}

/** Groups any process reported within GROUP_FRESH_MS. */
export async function knownGroups(ctx: ServiceContext, now = Date.now()): Promise<string[]> {
  return (await ctx.store.zrangeByScore(PresenceKeys.groups(), now - GROUP_FRESH_MS, Number.MAX_SAFE_INTEGER)).map((m) => m.member).sort()
}
