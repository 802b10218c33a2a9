import type { ServiceContext } from '../../../common/context'
import { Ads } from '../../../common/errors'
import type { LineItem } from '../campaigns/line-items'
import { findCardByUri } from '../creatives/cards'
import type { PostEntity } from '../creatives/records'
import type { CreativeRepos } from '../creatives/repos'
import { type AdsEntity, EntityRepo } from '../entities'

/**
 * Promoted posts (`promoted_tweets` on the public platform): a post of the
 * account associated with a line item. Entity type PROMOTED_TWEET for
 * account history.
 *
 * Deleting a line item does not delete its promoted posts (docs/ads.md
 * States and transitions): they keep `deleted: false` and the reads return
 * them only with `with_deleted=true` (visibleWith below).
 *
 * Which posts a line item can promote follows the public platform's
 * objective table (objective-based campaigns): app objectives need a post
 * with an app card, video views a video, GIF or video conversation card,
 * pre-roll views a video, website clicks a website card or a link (not
 * both); line items of product type MEDIA serve media creatives, not posts.
 */

export interface PromotedPost extends AdsEntity {
  line_item_id: string
  tweet_id: string
  entity_status: 'ACTIVE'
  approval_status: 'ACCEPTED'
}

export const NOT_FOUND_CODE = 'PROMOTED_TWEET_NOT_FOUND'
export const MAX_TWEET_IDS = 50

export function promotedPosts(ctx: ServiceContext): EntityRepo<PromotedPost> {
  return new EntityRepo<PromotedPost>(ctx, 'PROMOTED_TWEET', 'promoted_tweet')
}

/** Whether a promoted post is returned: its own `deleted` flag and its line item's both count. */
export function visibleWith(pt: PromotedPost, lineItemDeleted: boolean, withDeleted: boolean): boolean {
  return withDeleted || (!pt.deleted && !lineItemDeleted)
}

async function cardTypeOf(repos: CreativeRepos, accountId: string, post: PostEntity): Promise<string | undefined> {
  if (post.card_uri === null) return undefined
  return (await findCardByUri(repos, accountId, post.card_uri))?.card_type
}

/** Refuses a post the line item's objective cannot promote (error on `tweet_ids`). */
export async function checkEligible(repos: CreativeRepos, accountId: string, li: LineItem, post: PostEntity): Promise<void> {
  const refuse = (why: string): never => {
    throw Ads.invalid('tweet_ids', `Post ${post.id} cannot be promoted by line item ${li.id} (objective ${li.objective}): ${why}`)
  }
  const kinds = new Set(post.media.map((m) => m.media_type))
  const card = await cardTypeOf(repos, accountId, post)
  switch (li.objective) {
    case 'APP_INSTALLS':
    case 'APP_ENGAGEMENTS':
      if (card === undefined || !/_APP$/.test(card)) refuse('the post needs an image or video app download card')
      return
    case 'VIDEO_VIEWS':
      if (!kinds.has('VIDEO') && !kinds.has('GIF') && card !== 'VIDEO_CONVERSATION') refuse('the post needs a video, a GIF or a video conversation card')
      return
    case 'PREROLL_VIEWS':
      if (!kinds.has('VIDEO')) refuse('the post needs a video')
      return
    case 'WEBSITE_CLICKS': {
      const websiteCard = card !== undefined && /_WEBSITE$/.test(card)
      const link = post.entities.some((e) => e.kind === 'url')
      if (websiteCard && link) refuse('the post carries both a website card and a link; it must carry one of them')
      if (!websiteCard && !link) refuse('the post needs a website card or a link')
      return
    }
    default:
      return
  }
}
