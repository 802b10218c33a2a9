import type { FastifyReply, FastifyRequest } from 'fastify'
import { requestBaseUrl } from './auth/authenticate'

/** The browser's cookies by name (the first of a repeated name wins, undecodable values are skipped). */
export function parseCookies(header: string | undefined): Map<string, string> {
  const out = new Map<string, string>()
  if (!header) return out
  for (const part of header.split(';')) {
    const i = part.indexOf('=')
    if (i <= 0) continue
    const name = part.slice(0, i).trim()
    const raw = part.slice(i + 1).trim().replace(/^"(.*)"$/, '$1')
    try {
      if (!out.has(name)) out.set(name, decodeURIComponent(raw))
    } catch {
      // A cookie we cannot decode is not one of ours.
    }
  }
  return out
}

/** Whether the browser reached us over https (directly, or through a trusted proxy / PUBLIC_URL). */
export function isSecureRequest(request: FastifyRequest): boolean {
  return requestBaseUrl(request, request.server.publicBase).startsWith('https:')
}

/** Over https the `__Host-` prefix: a sibling host cannot plant the cookie. */
export function cookieName(request: FastifyRequest, base: string): string {
  return isSecureRequest(request) ? `__Host-${base}` : base
}

export interface CookieOptions {
  maxAgeS: number
  sameSite: 'Strict' | 'Lax'
}

/** Appends a Set-Cookie: HttpOnly, Path=/, Secure over https. maxAgeS 0 deletes it. */
export function setCookie(request: FastifyRequest, reply: FastifyReply, name: string, value: string, options: CookieOptions): void {
  const attributes = [`${name}=${value}`, 'Path=/', `Max-Age=${options.maxAgeS}`, 'HttpOnly', `SameSite=${options.sameSite}`]
  if (isSecureRequest(request)) attributes.push('Secure')
  const previous = reply.getHeader('set-cookie')
  const list = previous === undefined ? [] : Array.isArray(previous) ? previous.map(String) : [String(previous)]
  reply.header('set-cookie', [...list, attributes.join('; ')])
}
