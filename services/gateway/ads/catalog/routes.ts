import type { FastifyInstance } from 'fastify'
import type { ServiceContext } from '../../../common/context'

// Placeholder: these routes are being written in this change set.
export async function registerCatalogRoutes(_app: FastifyInstance, _ctx: ServiceContext): Promise<void> {}
