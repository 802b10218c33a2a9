import type { FastifyInstance } from 'fastify'
import { isSandboxHost } from '../../../common/ads/world'
import type { ServiceContext } from '../../../common/context'
import { registerAccountRoutes } from './account-routes'
import { registerCampaignAdminRoutes } from './admin'
import { registerAudienceEstimateRoutes } from './audience-estimate'
import { registerCampaignEntityRoutes } from './campaigns'
import { registerCuratedCategoryRoutes } from './curated-categories'
import { registerFundingInstrumentRoutes } from './funding-instruments'
import { registerLineItemRoutes } from './line-item-routes'
import { registerSandboxOnlyRefusals } from './sandbox'

/**
 * Campaign management on {ads_url} (and again on {ads_sandbox_url}, whose
 * sandbox-only operations live in sandbox.ts): accounts, features, account
 * apps, business and curated categories, audience estimates, funding
 * instruments, campaigns, line items and their curated categories.
 * The operator routes are served on the main host only.
 */
export async function registerCampaignRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  await registerAccountRoutes(app, ctx)
  await registerAudienceEstimateRoutes(app, ctx)
  await registerFundingInstrumentRoutes(app, ctx)
  await registerCampaignEntityRoutes(app, ctx)
  await registerLineItemRoutes(app, ctx)
  await registerCuratedCategoryRoutes(app, ctx)
  if (!isSandboxHost(app)) {
    await registerCampaignAdminRoutes(app, ctx)
    registerSandboxOnlyRefusals(app)
  }
}
