import type { FastifyInstance } from 'fastify'
import type { ServiceContext } from '../../common/context'
import { registerAudienceRoutes } from './audiences/routes'
import { registerCampaignRoutes } from './campaigns/routes'
import { registerCatalogRoutes } from './catalog/routes'
import { registerCreativeRoutes } from './creatives/routes'
import { registerPromotedPostRoutes } from './promoted/routes'
import { registerTargetingRoutes } from './targeting/routes'

/** The advertising interface on {ads_url}: /12/... and /5/... (tailored audience permissions). */
export async function registerAdsRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  await registerCampaignRoutes(app, ctx)
  await registerCatalogRoutes(app, ctx)
  await registerAudienceRoutes(app, ctx)
  await registerCreativeRoutes(app, ctx)
  await registerTargetingRoutes(app, ctx)
  await registerPromotedPostRoutes(app, ctx)
}
