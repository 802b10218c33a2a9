/** Scheme and authority of an absolute-form request target (RFC 9112 §3.2.2). */
const TARGET_ORIGIN = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]*/

/**
 * The path of a request target, without its query. A client may send the
 * absolute form (`GET http://host/12/accounts HTTP/1.1`), which fastify
 * routes by its path but keeps whole in `request.url`: whatever depends on
 * the path (the interface a request belongs to, the URL a signature covers)
 * reads it from here, never from the raw target.
 */
export function targetPath(target: string): string {
  const q = target.indexOf('?')
  const noQuery = q < 0 ? target : target.slice(0, q)
  const origin = TARGET_ORIGIN.exec(noQuery)
  if (!origin) return noQuery
  return noQuery.slice(origin[0].length) || '/'
}
