import type { ServiceContext } from '../../../common/context'
import { EntityRepo } from '../entities'
import type { AccountMediaEntity } from './account-media'
import type { CardEntity } from './cards'
import type { ConversationEntity } from './conversation-cards'
import type { LibraryEntity } from './library'
import type { PollEntity } from './polls'
import type { PostEntity } from './posts'

/**
 * The creative entities and their keyspaces (`ads:{kind}:{account_id}:{id}`).
 * Each create, update and delete publishes an entity change on
 * ads.entity-changes under the entity type given here.
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
  return {
    library: new EntityRepo<LibraryEntity>(ctx, 'MEDIA_LIBRARY', 'media_library'),
    accountMedia: new EntityRepo<AccountMediaEntity>(ctx, 'ACCOUNT_MEDIA', 'account_media'),
    cards: new EntityRepo<CardEntity>(ctx, 'CARD', 'card'),
    polls: new EntityRepo<PollEntity>(ctx, 'POLL_CARD', 'poll_card'),
    videoConversations: new EntityRepo<ConversationEntity>(ctx, 'VIDEO_CONVERSATION_CARD', 'video_conversation_card'),
    imageConversations: new EntityRepo<ConversationEntity>(ctx, 'IMAGE_CONVERSATION_CARD', 'image_conversation_card'),
    posts: new EntityRepo<PostEntity>(ctx, 'TWEET', 'tweet')
  }
}
