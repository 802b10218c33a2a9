import type { FastifyInstance } from 'fastify'
import type { ServiceContext } from './context'
import type { Assignment, Bus, GroupOffsets, LagSource } from './bus/types'
import { ValidatingBus } from './bus/validating'
import { operatorGuard, resolveOperatorToken } from './operator'

/**
 * GET /admin/bus/lag (operator token): the consumer lag of every group this
 * process can see — all groups of the in-memory bus in embedded mode; on
 * Kafka every group the cluster lists, or, on a broker without ListGroups
 * (the librdkafka mock cluster), the groups this process consumes with.
 * `?group=a,b` narrows it. `assigned`: the partitions this process's own
 * consumers hold, so an operator sees how a group's partitions are shared
 * out. Registered by the runtime in every process, so `make lag` can ask
 * each service of `make up` for its own groups.
 */

export interface LagReport {
  service: string
  bus: Bus['kind']
  groups: GroupOffsets[]
  /** The partitions this process's own consumers hold, per group and topic. */
  assigned: Assignment[]
}

function lagSource(bus: Bus): LagSource | undefined {
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
      const assigned = (source?.assignments() ?? []).filter((a) => !wanted || wanted.length === 0 || wanted.includes(a.group))
      return { service: ctx.serviceName, bus: ctx.bus.kind, groups, assigned }
    }
  )
}
