import type { FastifyRequest } from 'fastify'
import { requestBaseUrl } from '../../../common/auth/authenticate'
import type { ServiceContext } from '../../../common/context'
import { Ads } from '../../../common/errors'
import type { Params } from '../conventions'

/**
 * Small parameter rules the creatives share beyond the generic readers:
 * 64-bit ids (user and post ids do not fit a JS number), URLs, CTA hashtags,
 * and the base of the media URLs in responses.
 */

const LONG = /^[0-9]{1,19}$/

/** A long id kept as a string; `Expected Long` like the numeric readers when malformed. */
export function readLongId(p: Params, name: string, rule: { required?: boolean } = {}): string | undefined {
  const raw = p.raw(name)
  if (raw === undefined || raw === null || raw === '') {
    if (rule.required) throw Ads.missing(name)
    return undefined
  }
  const text = typeof raw === 'number' ? String(raw) : raw
  if (typeof text !== 'string' || !LONG.test(text.trim())) throw Ads.invalid(name, `Expected Long, got ${JSON.stringify(raw)} for ${name}`)
  return text.trim()
}

export function isHttpUrl(value: string): boolean {
  if (value.length > 2048 || /\s/.test(value)) return false
  try {
    const u = new URL(value)
    return (u.protocol === 'http:' || u.protocol === 'https:') && u.hostname !== ''
  } catch {
    return false
  }
}

export function readUrl(p: Params, name: string, rule: { required?: boolean } = {}): string | undefined {
  const value = p.string(name, { required: rule.required, max: 2048 })
  if (value !== undefined && !isHttpUrl(value)) throw Ads.invalid(name, `Invalid URL "${value.slice(0, 100)}" for ${name}: expected an absolute http(s) URL`)
  return value
}

/** Length of a string in characters (code points), as the limits count them. */
export function charLength(value: string): number {
  return [...value].length
}

/**
 * A call-to-action hashtag: at most 20 characters not counting a leading `#`,
 * made of letters, digits and underscores (a hashtag cannot hold spaces).
 */
export function readCta(p: Params, name: string, rule: { required?: boolean } = {}): string | undefined {
  const value = p.string(name, { required: rule.required })
  if (value === undefined) return undefined
  const tag = value.startsWith('#') ? value.slice(1) : value
  if (charLength(tag) > 20) throw Ads.invalid(name, `${name} must be at most 20 characters not counting the #, got ${charLength(tag)}`)
  if (!/^[\p{L}\p{M}\p{N}_]+$/u.test(tag)) throw Ads.invalid(name, `${name} must be a hashtag (letters, digits and underscores), got "${value.slice(0, 40)}"`)
  return value
}

/** The base of media URLs in responses: PUBLIC_URL, else the host the client called. */
export function mediaBase(ctx: ServiceContext, request: FastifyRequest): string {
  return requestBaseUrl(request, ctx.config.publicUrl)
}
