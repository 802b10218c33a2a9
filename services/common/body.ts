import type { FastifyInstance } from 'fastify'

/**
 * JSON request bodies as real clients send them. Official SDKs (the XDK among
 * them) put `Content-Type: application/json` on every request, also on those
 * that carry no body: validating a webhook (PUT), deleting a webhook or a
 * subscription (DELETE). The public platform answers those normally, so an
 * empty (or blank) JSON body is no body at all here: a route that takes none
 * runs as if the header were absent, and a route that needs one reports the
 * missing body the way it reports any missing field (its own validation), in
 * its interface's error shape.
 *
 * A non-empty body is parsed by fastify's own parser (prototype-poisoning
 * protection included); unparseable JSON stays a 400 as before.
 */

export function registerJsonBodies(app: FastifyInstance): void {
  // fastify's defaults: `__proto__` keys refused, `constructor` keys kept.
  const parse = app.getDefaultJsonParser('error', 'ignore')
  app.removeContentTypeParser('application/json')
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const text = body as string
    if (text.trim() === '') {
      done(null, undefined)
      return
    }
    parse(request, text, done)
  })
}
