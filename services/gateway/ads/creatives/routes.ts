import type { FastifyInstance } from 'fastify'
import type { ServiceContext } from '../../../common/context'
import { registerAccountMediaRoutes } from './account-media'
import { registerCardRoutes } from './cards'
import { registerConversationRoutes } from './conversation-cards'
import { registerLibraryRoutes } from './library'
import { registerPollRoutes } from './polls'
import { registerPostRoutes } from './posts'
import { creativeRepos } from './repos'

/**
 * Creatives of the advertising interface (docs/contract.md "Creatives"): media
 * library and account media, cards from components, poll and conversation
 * cards, and posts made on behalf of an advertiser. Media keys come from
 * POST /2/media/upload (services/gateway/media).
 */
export async function registerCreativeRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  const repos = creativeRepos(ctx)
  registerLibraryRoutes(app, ctx, repos)
  registerAccountMediaRoutes(app, ctx, repos)
  registerCardRoutes(app, ctx, repos)
  registerPollRoutes(app, ctx, repos)
  registerConversationRoutes(app, ctx, repos)
  registerPostRoutes(app, ctx, repos)
}
