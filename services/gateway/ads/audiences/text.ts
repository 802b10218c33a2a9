/**
 * Text handling for keyword insights: how a post's text becomes the terms it
 * is counted under, and how a keyword is matched against it.
 *
 * A post yields (1) `plain`, its word sequence with hashtag marks removed,
 * so the keyword `data` or the phrase `big data` also finds `#data`; and
 * (2) `terms`, its distinct words with hashtags kept as `#tag`, which related
 * keywords are drawn from. URLs and @mentions are not terms.
 */

const URL_PATTERN = /\bhttps?:\/\/\S+|\bwww\.\S+/giu
const TOKEN = /[#@]?[\p{L}\p{N}][\p{L}\p{N}\p{M}_'’-]*/gu

/** Common English function words: they co-occur with everything and say nothing. */
export const STOPWORDS = new Set(
  (
    "a about above after again against all also am an and any are aren't as at be because been before being below between both but by can can't " +
    "cannot could couldn't did didn't do does doesn't doing don't down during each few for from further get got had hadn't has hasn't have haven't " +
    "having he he'd he'll he's her here here's hers herself him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its itself " +
    "just let's like me more most mustn't my myself no nor not now of off on once only or other ought our ours ourselves out over own rt same " +
    "shan't she she'd she'll she's should shouldn't so some such than that that's the their theirs them themselves then there there's these they " +
    "they'd they'll they're they've this those through to too under until up us very via was wasn't we we'd we'll we're we've were weren't what " +
    "what's when when's where where's which while who who's whom why why's will with won't would wouldn't you you'd you'll you're you've your yours " +
    'yourself yourselves amp'
  ).split(' ')
)

export function normalize(text: string): string {
  return text.normalize('NFKC').toLowerCase().replace(/’/g, "'")
}

function tokens(text: string): string[] {
  const cleaned = normalize(text).replace(URL_PATTERN, ' ')
  return (cleaned.match(TOKEN) ?? []).map((t) => t.replace(/['-]+$/u, ''))
}

export interface PostTerms {
  /** Space-delimited word sequence with a leading and trailing space, hashtag marks removed. */
  plain: string
  /** Distinct terms (hashtags as `#tag`), mentions excluded. */
  terms: string[]
}

export function postTerms(text: string): PostTerms {
  const all = tokens(text)
  const words = all.filter((t) => !t.startsWith('@'))
  const plain = ` ${words.map((t) => t.replace(/^#/, '')).join(' ')} `
  return { plain, terms: [...new Set(words)] }
}

export interface Keyword {
  /** As the caller wrote it. */
  raw: string
  /** Exact hashtag keyword (`#tag`): matches only the hashtag. */
  hashtag: string | null
  /** Phrase to look for in `plain` (` big data `). */
  phrase: string
  /** Term forms that must not be offered back as related keywords. */
  forms: string[]
}

export function parseKeyword(raw: string): Keyword | undefined {
  const words = tokens(raw).filter((t) => !t.startsWith('@'))
  if (words.length === 0) return undefined
  const first = words[0] as string
  const hashtag = words.length === 1 && first.startsWith('#') ? first : null
  const bare = words.map((w) => w.replace(/^#/, ''))
  return { raw, hashtag, phrase: ` ${bare.join(' ')} `, forms: [...bare, ...bare.map((w) => `#${w}`), bare.join(' ')] }
}

export function matchesKeyword(post: PostTerms, k: Keyword): boolean {
  if (k.hashtag !== null) return post.terms.includes(k.hashtag)
  return post.plain.includes(k.phrase)
}

/** Whether a term may be suggested as a related keyword. */
export function isCandidateTerm(term: string): boolean {
  const bare = term.replace(/^#/, '')
  if (STOPWORDS.has(bare)) return false
  if ([...bare].length < 2) return false
  if (/^\p{N}+$/u.test(bare)) return false
  return true
}
