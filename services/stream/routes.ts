import type { FastifyInstance } from 'fastify'
import { Problems } from '../common/errors'
import { openObject, v2Ok } from '../common/openapi'
import { HttpStreamConnection } from './connections'
import type { StreamHub } from './hub'

/**
 * `GET /2/activity/stream` (app-only bearer): a persistent chunked response,
 * one JSON envelope + `\r\n` per event, bare `\r\n` keep-alives, and
 * `{"errors":[Problem]}` lines before the server ends it (docs/architecture.md).
 * The same path upgrades to a WebSocket (websocket.ts).
 */

export const STREAM_PATH = '/2/activity/stream'

/**
 * The stream's query: `backfill_minutes` 0..5 and nothing else, plus on a
 * WebSocket upgrade the `ticket` that opens it (tickets.ts; checked there).
 */
export function parseStreamQuery(query: Record<string, unknown>, options: { websocket?: boolean } = {}): { backfillMinutes: number } {
  const unsupported = Object.keys(query).filter((k) => k !== 'backfill_minutes' && !(k === 'ticket' && options.websocket === true))
  if (unsupported.length > 0) {
    throw Problems.invalidRequest(
      unsupported.map((k) => ({
        message:
          k === 'ticket'
            ? 'A stream ticket opens the WebSocket stream only; over HTTP, send the app-only bearer token in the Authorization header'
            : `The \`${k}\` query parameter is not supported by this stream; use backfill_minutes (0 to 5) to catch up after a disconnect`,
        // A ticket is a credential: never echoed back.
        parameters: { [k]: [k === 'ticket' ? '' : String(query[k])] }
      }))
    )
  }
  const raw = query.backfill_minutes
  if (raw === undefined) return { backfillMinutes: 0 }
  const value = Array.isArray(raw) ? raw.join(',') : String(raw)
  if (!/^[0-5]$/.test(value)) {
    throw Problems.invalidParameter('backfill_minutes', value, 'The `backfill_minutes` query parameter must be an integer from 0 to 5')
  }
  return { backfillMinutes: Number(value) }
}

export async function registerStreamRoute(app: FastifyInstance, hub: StreamHub): Promise<void> {
  app.get(STREAM_PATH, {
    config: { auth: { schemes: ['bearer-app'] } },
    // Documentation (GET /openapi.json): parseStreamQuery answers for the query itself, so validation only attaches.
    schema: {
      querystring: { type: 'object', properties: { backfill_minutes: { type: 'integer', minimum: 0, maximum: 5, description: 'Minutes of recent activity to replay first.' } } },
      response: v2Ok('The stream, chunked: one delivery (JSON) per line, \\r\\n keep-alives while idle.', openObject())
    },
    attachValidation: true
  }, async (request, reply) => {
    const appId = request.auth?.app.id
    if (appId === undefined) throw Problems.generic(401, 'Unauthorized')
    const { backfillMinutes } = parseStreamQuery(request.query as Record<string, unknown>)
    const admission = await hub.admit(appId)

    reply.hijack()
    const res = reply.raw
    res.writeHead(200, {
      'content-type': 'application/json; charset=utf-8',
      // The connection belongs to this stream: when the server ends it (SlowReader, ForceDisconnect) the socket goes too.
      connection: 'close',
      'cache-control': 'no-cache, no-store',
      'x-request-id': request.id,
      'x-content-type-options': 'nosniff'
    })
    res.flushHeaders()
    // Many small writes: send each as it comes rather than waiting to coalesce.
    res.socket?.setNoDelay(true)
    const conn = new HttpStreamConnection(admission.connectionId, appId, res)
    hub.attach(conn, admission.lease, backfillMinutes)
    request.log.info({ reqId: request.id, app: appId, connection: conn.id, backfillMinutes }, 'stream opened')
    void conn.done.then(() => request.log.info({ reqId: request.id, app: appId, connection: conn.id }, 'stream closed'))
  })
}
