import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto'

/**
 * OAuth 1.0a signatures per RFC 5849 §3.4 (HMAC-SHA1), as the public
 * platform computes them (docs/conformance.md).
 */

/** RFC 3986 percent-encoding: only A-Z a-z 0-9 - . _ ~ stay, hex is uppercase, space is %20. */
export function percentEncode(value: string): string {
  return encodeURIComponent(value).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
}

export type ParamPair = [string, string]

/** Parses `OAuth k="v", k2="v2"` into decoded pairs (realm excluded); undefined when not an OAuth header. */
export function parseOAuthHeader(header: string | undefined): ParamPair[] | undefined {
  if (header === undefined) return undefined
  const m = /^\s*OAuth\s+(.*)$/is.exec(header)
  if (!m) return undefined
  const pairs: ParamPair[] = []
  const re = /\s*([^=,\s]+)\s*=\s*"([^"]*)"\s*(?:,|$)/gy
  const body = m[1] as string
  let match: RegExpExecArray | null
  let consumed = 0
  while ((match = re.exec(body)) !== null) {
    consumed = re.lastIndex
    const key = decodeOrThrow(match[1] as string)
    if (key === 'realm') continue
    pairs.push([key, decodeOrThrow(match[2] as string)])
  }
  if (body.slice(consumed).trim() !== '') throw new OAuthHeaderError('malformed OAuth Authorization header')
  return pairs
}

export class OAuthHeaderError extends Error {}

function decodeOrThrow(s: string): string {
  try {
    return decodeURIComponent(s)
  } catch {
    throw new OAuthHeaderError(`malformed percent-encoding in OAuth header: ${s.slice(0, 40)}`)
  }
}

/**
 * Pairs of an application/x-www-form-urlencoded string, kept in order with
 * duplicates. `plusIsSpace: false` reads `+` literally, as some clients
 * (e.g. oauth-1.0a) do when they sign a query string.
 */
export function formPairs(raw: string, plusIsSpace = true): ParamPair[] {
  const out: ParamPair[] = []
  if (raw === '') return out
  for (const part of raw.split('&')) {
    if (part === '') continue
    const i = part.indexOf('=')
    const k = i < 0 ? part : part.slice(0, i)
    const v = i < 0 ? '' : part.slice(i + 1)
    out.push([formDecode(k, plusIsSpace), formDecode(v, plusIsSpace)])
  }
  return out
}

function formDecode(s: string, plusIsSpace: boolean): string {
  try {
    return decodeURIComponent(plusIsSpace ? s.replace(/\+/g, ' ') : s)
  } catch {
    throw new OAuthHeaderError(`malformed percent-encoding: ${s.slice(0, 40)}`)
  }
}

/** The normalized parameter string of RFC 5849 §3.4.1.3.2. */
export function normalizeParams(pairs: ParamPair[]): string {
  return pairs
    .filter(([k]) => k !== 'oauth_signature')
    .map(([k, v]) => [percentEncode(k), percentEncode(v)] as ParamPair)
    .sort(([ak, av], [bk, bv]) => (ak < bk ? -1 : ak > bk ? 1 : av < bv ? -1 : av > bv ? 1 : 0))
    .map(([k, v]) => `${k}=${v}`)
    .join('&')
}

/** Base string URI: scheme and host lowercase, default port dropped, no query or fragment. */
export function baseStringUri(url: string): string {
  const u = new URL(url)
  const defaultPort = (u.protocol === 'http:' && u.port === '80') || (u.protocol === 'https:' && u.port === '443') || u.port === ''
  return `${u.protocol.toLowerCase()}//${u.hostname.toLowerCase()}${defaultPort ? '' : `:${u.port}`}${u.pathname}`
}

export function signatureBaseString(method: string, url: string, pairs: ParamPair[]): string {
  return [method.toUpperCase(), percentEncode(baseStringUri(url)), percentEncode(normalizeParams(pairs))].join('&')
}

export function signingKey(consumerSecret: string, tokenSecret = ''): string {
  return `${percentEncode(consumerSecret)}&${percentEncode(tokenSecret)}`
}

export function hmacSha1(key: string, text: string): string {
  return createHmac('sha1', key).update(text).digest('base64')
}

/** Signs a request (used by the CLI and tests as a client, and by verification). */
export function sign(method: string, url: string, pairs: ParamPair[], consumerSecret: string, tokenSecret = ''): string {
  return hmacSha1(signingKey(consumerSecret, tokenSecret), signatureBaseString(method, url, pairs))
}

/** Constant-time comparison of two strings (length leak only). */
export function safeEqual(a: string, b: string): boolean {
  const ab = Buffer.from(a)
  const bb = Buffer.from(b)
  if (ab.length !== bb.length) {
    // Compare anyway so the time taken does not depend on where the strings differ.
    timingSafeEqual(ab, ab)
    return false
  }
  return timingSafeEqual(ab, bb)
}

/**
 * A client's `Authorization: OAuth ...` header for a request without form
 * parameters (query parameters must be part of `url`): used by operator tools
 * and benchmarks that act as a signed client.
 */
export function authorizationHeader(method: string, url: string, consumer: { key: string; secret: string }, token: { key: string; secret: string }): string {
  const params: Record<string, string> = {
    oauth_consumer_key: consumer.key,
    oauth_nonce: randomBytes(16).toString('base64url'),
    oauth_signature_method: 'HMAC-SHA1',
    oauth_timestamp: String(Math.floor(Date.now() / 1000)),
    oauth_token: token.key,
    oauth_version: '1.0'
  }
  const u = new URL(url)
  const pairs: ParamPair[] = [...Object.entries(params), ...formPairs(u.search.slice(1))]
  params.oauth_signature = sign(method, url, pairs, consumer.secret, token.secret)
  return `OAuth ${Object.entries(params).map(([k, v]) => `${k}="${percentEncode(v)}"`).join(', ')}`
}
