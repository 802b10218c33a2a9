import type { FastifyInstance } from 'fastify'
import type { ServiceContext } from './context'
import client from 'prom-client'
import type { Assignment, Bus, Gone, GroupOffsets, LagSource } from './bus/types'
import { ValidatingBus } from './bus/validating'
import { operatorGuard, resolveOperatorToken } from './operator'

/**
 * GET /admin/bus/lag (operator token): the consumer lag of every group this
 * process can see — all groups of the in-memory bus in embedded mode; on
 * Kafka every group the cluster lists, or, on a broker without ListGroups
 * (the librdkafka mock cluster), the groups this process consumes with.
 * `?group=a,b` narrows it. `assigned`: the partitions this process's own
 * consumers hold, so an operator sees how a group's partitions are shared
 * out. `gone`: messages the broker dropped before a group of this process
 * read them (retention shorter than the group's lag), counted since the
 * process started, also on /metrics as bus_messages_gone_total, and the
 * times kafkajs reset a group's position past dropped messages
 * (bus_offset_resets_total). Registered by
 * the runtime in every process, so `make lag` can ask each service of
 * `make up` for its own groups.
 */

export interface LagReport {
  service: string
  bus: Bus['kind']
  groups: GroupOffsets[]
  /** The partitions this process's own consumers hold, per group and topic. */
  assigned: Assignment[]
  /** Messages this process's consumers found gone before their group read them. */
  gone: Gone[]
}

/** The bus's view of its consumer groups' offsets, when it has one (both buses do). */
export function lagSource(bus: Bus): LagSource | undefined {
  const inner = bus instanceof ValidatingBus ? bus.underlying : bus
  return typeof (inner as Partial<LagSource>).groupOffsets === 'function' ? (inner as unknown as LagSource) : undefined
}

export async function busLagRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  const guard = operatorGuard(resolveOperatorToken(ctx.config, ctx.store.kind === 'memory'))
  app.get<{ Querystring: { group?: string } }>(
    '/admin/bus/lag',
    {
      preHandler: guard,
      schema: { querystring: { type: 'object', properties: { group: { type: 'string', maxLength: 4096 } }, additionalProperties: false } }
    },
    async (request): Promise<LagReport> => {
      const source = lagSource(ctx.bus)
      const wanted = request.query.group?.split(',').map((g) => g.trim()).filter((g) => g !== '')
      const groups = source ? await source.groupOffsets(wanted && wanted.length > 0 ? wanted : undefined) : []
      const mine = (a: { group: string }): boolean => !wanted || wanted.length === 0 || wanted.includes(a.group)
      const assigned = (source?.assignments() ?? []).filter(mine)
      const gone = (source?.gone() ?? []).filter(mine)
      return { service: ctx.serviceName, bus: ctx.bus.kind, groups, assigned, gone }
    }
  )
  goneCounter(ctx)
}

/** bus_messages_gone_total and bus_offset_resets_total, by group and topic: read from the bus at each scrape. */
function goneCounter(ctx: ServiceContext): void {
  const source = lagSource(ctx.bus)
  const counters = {
    messages: ['bus_messages_gone_total', 'Messages the broker dropped before a consumer group of this process read them (topic retention shorter than the lag), by group and topic'],
    resets: ['bus_offset_resets_total', "Times a consumer group's position was no longer on the broker and kafkajs reset it to the oldest offset left (messages were dropped unread; after a whole group was down, how many is not known)"]
  } as const
  for (const [field, [name, help]] of Object.entries(counters) as Array<[keyof typeof counters, (typeof counters)[keyof typeof counters]]>) {
    if (ctx.metrics.getSingleMetric(name)) continue
    new client.Counter({
      name,
      help,
      labelNames: ['group', 'topic'] as const,
      registers: [ctx.metrics],
      collect() {
        this.reset()
        for (const g of source?.gone() ?? []) if (g[field] > 0) this.inc({ group: g.group, topic: g.topic }, g[field])
      }
    })
  }
}
