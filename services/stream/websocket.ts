import type { IncomingMessage } from 'node:http'
import type { Duplex } from 'node:stream'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { WebSocketServer } from 'ws'
import { Authenticator } from '../common/auth/authenticate'
import type { ServiceContext } from '../common/context'
import { ApiError, Classic, ClassicError, ProblemError, Problems } from '../common/errors'
import { routeFamily } from '../common/ratelimit'
import { WebSocketStreamConnection } from './connections'
import type { StreamHub } from './hub'
import { parseStreamQuery, STREAM_PATH } from './routes'

/**
 * The activity stream over WebSocket: an upgrade of `GET /2/activity/stream`
 * on the same server, authenticated like the HTTP stream (app-only bearer in
 * the Authorization header), with the same limits and backfill. Each event is
 * one text message holding the envelope's JSON. A refused upgrade is answered
 * with a plain HTTP response carrying the usual error body (401 classic
 * error, 429 streaming-connection Problem, 400 invalid-request Problem).
 */

/** Largest message a client may send us: the stream is one-way, clients have nothing to say. */
const MAX_CLIENT_PAYLOAD = 4096

function reject(socket: Duplex, err: unknown, problemBase: string): void {
  let status = 500
  let type = 'application/problem+json'
  let body: unknown = { title: 'Internal error', type: 'about:blank', status: 500, detail: 'Internal error' }
  if (err instanceof ProblemError) {
    status = err.statusCode
    body = err.body(problemBase)
  } else if (err instanceof ClassicError) {
    status = err.statusCode
    type = 'application/json; charset=utf-8'
    body = err.body()
  } else if (err instanceof ApiError) {
    status = err.statusCode
    body = Problems.generic(status, err.message).body(problemBase)
  }
  const text = JSON.stringify(body)
  socket.end(
    `HTTP/1.1 ${status} ${statusText(status)}\r\n` +
      `content-type: ${type}\r\n` +
      `content-length: ${Buffer.byteLength(text)}\r\n` +
      'connection: close\r\n\r\n' +
      text
  )
}

/**
 * The upgrade bypasses fastify's hooks, so the HTTP stream's window (same
 * family, same app identity) is counted here: opening streams over WebSocket
 * cannot dodge the limit the HTTP route enforces.
 */
async function consumeStreamWindow(app: FastifyInstance, appId: string): Promise<void> {
  const limiter = app.rateLimiter
  const family = routeFamily('GET', STREAM_PATH)
  const state = await limiter.consume(family, `app:${appId}`, limiter.policy({ family }))
  if (state.exceeded) {
    limiter.rejected(family)
    throw Classic.rateLimited()
  }
}

function statusText(status: number): string {
  return { 400: 'Bad Request', 401: 'Unauthorized', 403: 'Forbidden', 404: 'Not Found', 429: 'Too Many Requests', 503: 'Service Unavailable' }[status] ?? 'Error'
}

export function attachWebSocketStream(app: FastifyInstance, ctx: ServiceContext, hub: StreamHub): void {
  const wss = new WebSocketServer({ noServer: true, maxPayload: MAX_CLIENT_PAYLOAD, perMessageDeflate: false })
  const authenticator = new Authenticator(ctx.store, ctx.config)

  const onUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer): void => {
    const url = new URL(req.url ?? '/', 'http://localhost')
    if (url.pathname !== STREAM_PATH) {
      // Another listener may own that path; when we are the only one, answer instead of leaving the socket hanging.
      if (app.server.listenerCount('upgrade') === 1) reject(socket, Problems.generic(404, `The route ${url.pathname} does not upgrade to a WebSocket.`), ctx.config.problemBase)
      return
    }
    socket.on('error', () => undefined)
    void (async () => {
      let admission
      try {
        // The shared authenticator reads only the Authorization header, the URL and the method for bearer tokens.
        const request = { headers: req.headers, url: req.url ?? '/', method: 'GET' } as unknown as FastifyRequest
        const auth = await authenticator.authenticate(request, { schemes: ['bearer-app'] }, '')
        const { backfillMinutes } = parseStreamQuery(Object.fromEntries(url.searchParams))
        await consumeStreamWindow(app, auth.app.id)
        admission = await hub.admit(auth.app.id)
        const { connectionId, lease } = admission
        const appId = auth.app.id
        if (socket.destroyed) {
          await hub.abandon(admission)
          return
        }
        // ws answers a malformed handshake itself without calling back: give the place back when that happens.
        let attached = false
        const pending = admission
        socket.once('close', () => {
          if (!attached) void hub.abandon(pending)
        })
        wss.handleUpgrade(req, socket, head, (ws) => {
          attached = true
          const conn = new WebSocketStreamConnection(connectionId, appId, ws)
          hub.attach(conn, lease, backfillMinutes)
          ctx.log.info({ app: appId, connection: connectionId, backfillMinutes }, 'websocket stream opened')
          void conn.done.then(() => ctx.log.info({ app: appId, connection: connectionId }, 'websocket stream closed'))
        })
      } catch (err) {
        if (admission) await hub.abandon(admission)
        if (!(err instanceof ApiError)) ctx.log.error({ err }, 'websocket upgrade failed')
        if (!socket.destroyed) reject(socket, err, ctx.config.problemBase)
      }
    })()
  }

  app.server.on('upgrade', onUpgrade)
  app.addHook('onClose', async () => {
    app.server.off('upgrade', onUpgrade)
    wss.close()
  })
}
