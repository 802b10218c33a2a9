/**
 * The OAuth 2.0 user-context scopes of the public platform (its OpenAPI
 * description and its authorization-code guide list them), each with the
 * sentence the approval page shows the user.
 *
 * The platform spells the follow scopes `follows.read` / `follows.write`;
 * the contract also names `follow.read`. Both are accepted and the
 * platform's spelling is what a grant records and a token response reports.
 */

export const SCOPES: Readonly<Record<string, string>> = {
  'tweet.read': 'See posts you can view, including posts from protected accounts.',
  'tweet.write': 'Post and repost for you.',
  'tweet.moderate.write': 'Hide and unhide replies to your posts.',
  'users.read': 'See any account you can view, including protected accounts.',
  'users.email': 'See the email address of your account.',
  'follows.read': 'See the accounts you follow and the accounts following you.',
  'follows.write': 'Follow and unfollow accounts for you.',
  'offline.access': 'Stay connected to your account until you revoke access.',
  'space.read': 'See the Spaces you can view.',
  'mute.read': 'See the accounts you have muted.',
  'mute.write': 'Mute and unmute accounts for you.',
  'like.read': 'See the posts you have liked and the likes you can view.',
  'like.write': 'Like and unlike posts for you.',
  'list.read': 'See Lists, their members and followers, including private Lists you created or belong to.',
  'list.write': 'Create and manage Lists for you.',
  'block.read': 'See the accounts you have blocked.',
  'block.write': 'Block and unblock accounts for you.',
  'bookmark.read': 'See the posts you have bookmarked.',
  'bookmark.write': 'Bookmark posts and remove bookmarks for you.',
  'dm.read': 'Read all your direct messages, including those with protected accounts.',
  'dm.write': 'Send and manage direct messages for you.',
  'media.write': 'Upload photos and videos for you.',
  'timeline.read': 'See the custom timelines you can view.'
}

const ALIASES: Readonly<Record<string, string>> = {
  'follow.read': 'follows.read',
  'follow.write': 'follows.write'
}

export type ScopeParse = { ok: true; scopes: string[] } | { ok: false; unknown: string[] } | { ok: false; empty: true }

/**
 * Parses a `scope` parameter (RFC 6749 §3.3: space-delimited, order
 * irrelevant). Unknown scopes are reported, duplicates collapse, aliases
 * map onto the platform's spelling; the client's order is kept.
 */
export function parseScope(raw: string): ScopeParse {
  const words = raw.split(' ').filter((w) => w !== '')
  if (words.length === 0) return { ok: false, empty: true }
  const unknown = words.filter((w) => canonicalScope(w) === undefined)
  if (unknown.length > 0) return { ok: false, unknown: [...new Set(unknown)] }
  return { ok: true, scopes: [...new Set(words.map((w) => canonicalScope(w) as string))] }
}

export function canonicalScope(word: string): string | undefined {
  if (Object.hasOwn(SCOPES, word)) return word
  return ALIASES[word]
}

/** The sentences of `scopes`, for the approval page. */
export function describeScopes(scopes: string[]): Array<{ scope: string; text: string }> {
  return scopes.map((scope) => ({ scope, text: SCOPES[scope] ?? scope }))
}

export function formatScope(scopes: string[]): string {
  return scopes.join(' ')
}
