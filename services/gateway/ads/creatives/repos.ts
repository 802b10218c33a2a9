import { baseUrl } from '../../../common/config'
import type { ServiceContext } from '../../../common/context'
import { EntityRepo } from '../entities'
import {
  type AccountMediaEntity,
  type CardEntity,
  type ConversationEntity,
  type LibraryEntity,
  type PollEntity,
  type PostEntity,
  renderAccountMedia,
  renderCard,
  renderConversation,
  renderLibrary,
  renderPoll
} from './records'

/**
 * The creative entities and their keyspaces (`ads:{kind}:{account_id}:{id}`).
 * Each create, update and delete publishes an entity change on
 * ads.entity-changes under the entity type given here, with the entity as
 * the ads reads render it (no internal fields such as stored file names);
 * media URLs use the configured public base, as no request is at hand.
 */
export interface CreativeRepos {
  library: EntityRepo<LibraryEntity>
  accountMedia: EntityRepo<AccountMediaEntity>
  cards: EntityRepo<CardEntity>
  polls: EntityRepo<PollEntity>
  videoConversations: EntityRepo<ConversationEntity>
  imageConversations: EntityRepo<ConversationEntity>
  posts: EntityRepo<PostEntity>
}

export function creativeRepos(ctx: ServiceContext): CreativeRepos {
  const base = baseUrl(ctx.config)
  return {
    library: new EntityRepo<LibraryEntity>(ctx, 'MEDIA_LIBRARY', 'media_library', { render: (e) => renderLibrary(e, base) }),
    accountMedia: new EntityRepo<AccountMediaEntity>(ctx, 'ACCOUNT_MEDIA', 'account_media', { render: renderAccountMedia }),
    cards: new EntityRepo<CardEntity>(ctx, 'CARD', 'card', { render: renderCard }),
    polls: new EntityRepo<PollEntity>(ctx, 'POLL_CARD', 'poll_card', { render: (e) => renderPoll(e, base, Date.now()) }),
    videoConversations: new EntityRepo<ConversationEntity>(ctx, 'VIDEO_CONVERSATION_CARD', 'video_conversation_card', { render: (e) => renderConversation(e, base) }),
    imageConversations: new EntityRepo<ConversationEntity>(ctx, 'IMAGE_CONVERSATION_CARD', 'image_conversation_card', { render: (e) => renderConversation(e, base) }),
    posts: new EntityRepo<PostEntity>(ctx, 'TWEET', 'tweet')
  }
}
