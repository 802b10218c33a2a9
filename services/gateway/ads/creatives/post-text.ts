/**
 * The entities of a post's text (hashtags, cashtags, mentions, URLs) with
 * their positions in characters (code points), extracted once when the post
 * is created and rendered both in the classic shape of the advertising
 * interface (`indices: [start, end]`) and the v2 shape of activity events
 * (`start`, `end`).
 */

export interface TextEntity {
  kind: 'hashtag' | 'symbol' | 'mention' | 'url'
  /** The entity without its sigil (`#`, `$`, `@`) or the URL as written. */
  value: string
  start: number
  end: number
}

const HASHTAG = /(^|[^\p{L}\p{M}\p{N}_&/])([#＃])([\p{L}\p{M}\p{N}_]*[\p{L}\p{M}][\p{L}\p{M}\p{N}_]*)/gu
const SYMBOL = /(^|[\s(])(\$)([A-Za-z]{1,6}(?:[._][A-Za-z]{1,2})?)(?=$|[\s.,!?:;)])/g
const MENTION = /(^|[^A-Za-z0-9_!#$%&*@＠])([@＠])([A-Za-z0-9_]{1,15})(?![A-Za-z0-9_@＠])/g
const URL_RE = /(^|[\s(])(https?:\/\/[^\s<>"]+[^\s<>".,!?:;)])/g

/** Code-point offset of a UTF-16 index. */
function cp(text: string, index: number): number {
  return [...text.slice(0, index)].length
}

function collect(text: string, re: RegExp, kind: TextEntity['kind'], valueGroup: number, prefixGroups: number[]): TextEntity[] {
  const out: TextEntity[] = []
  for (const m of text.matchAll(re)) {
    const lead = prefixGroups.reduce((n, g) => n + (m[g]?.length ?? 0), 0)
    const startIndex = (m.index ?? 0) + (m[1]?.length ?? 0)
    const value = m[valueGroup] as string
    const endIndex = (m.index ?? 0) + lead + value.length
    out.push({ kind, value, start: cp(text, startIndex), end: cp(text, endIndex) })
  }
  return out
}

export function extractEntities(text: string): TextEntity[] {
  return [
    ...collect(text, HASHTAG, 'hashtag', 3, [1, 2]),
    ...collect(text, SYMBOL, 'symbol', 3, [1, 2]),
    ...collect(text, MENTION, 'mention', 3, [1, 2]),
    ...collect(text, URL_RE, 'url', 2, [1])
  ].sort((a, b) => a.start - b.start)
}

/** `example.com/path…` as a client would display a link. */
export function displayUrl(url: string): string {
  const bare = url.replace(/^https?:\/\//, '').replace(/^www\./, '')
  return [...bare].length > 26 ? `${[...bare].slice(0, 25).join('')}…` : bare
}
