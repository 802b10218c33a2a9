import type { IncomingMessage } from 'node:http'
import type { Duplex } from 'node:stream'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { WebSocketServer } from 'ws'
import { Authenticator } from '../common/auth/authenticate'
import { claimUpgrade } from '../common/client-errors'
import type { ServiceContext } from '../common/context'
import { ApiError, Classic, ClassicError, ProblemError, Problems } from '../common/errors'
import { routeFamily } from '../common/ratelimit'
import { WebSocketStreamConnection } from './connections'
import type { StreamHub } from './hub'
import { parseStreamQuery, STREAM_PATH } from './routes'
import { type StreamTickets, TICKET_PROTOCOL_PREFIX } from './tickets'

/**
 * The activity stream over WebSocket: an upgrade of `GET /2/activity/stream`
 * on the same server, authenticated like the HTTP stream (app-only bearer in
 * the Authorization header) or by a single-use stream ticket (tickets.ts),
 * with the same limits and backfill. Each event is one text message holding
 * the envelope's JSON. A refused upgrade with a bearer token is answered
 * with a plain HTTP response carrying the usual error body (401 classic
 * error, 429 streaming-connection Problem, 400 invalid-request Problem);
 * with a ticket, the same body comes as a message before the close.
 */

/** Largest message a client may send us: the stream is one-way, clients have nothing to say. */
const MAX_CLIENT_PAYLOAD = 4096
/** How long a refused WebSocket may take to read its error message before its socket is destroyed. */
const REFUSAL_GRACE_MS = 5000
const PROBLEM_TYPE = 'application/problem+json'

/** What a refused upgrade answers: its status, and the body in the interface's shape. */
function refusal(err: unknown, problemBase: string): { status: number; type: string; body: unknown } {
  if (err instanceof ProblemError) return { status: err.statusCode, type: PROBLEM_TYPE, body: err.body(problemBase) }
  if (err instanceof ClassicError) return { status: err.statusCode, type: 'application/json; charset=utf-8', body: err.body() }
  if (err instanceof ApiError) return { status: err.statusCode, type: PROBLEM_TYPE, body: Problems.generic(err.statusCode, err.message).body(problemBase) }
  return { status: 500, type: PROBLEM_TYPE, body: { title: 'Internal error', type: 'about:blank', status: 500, detail: 'Internal error' } }
}

function reject(socket: Duplex, err: unknown, problemBase: string): void {
  const { status, type, body } = refusal(err, problemBase)
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
 * A page cannot read the HTTP answer of a refused handshake (its WebSocket
 * only fires `error` and closes with 1006), so a connection opened with a
 * ticket is refused after the handshake instead: one message with the
 * error in the stream's error-line shape (`{"errors":[...]}`), then a close
 * with code 4000 + the HTTP status (4401, 4429 ...).
 */
function refuseInBand(wss: WebSocketServer, req: IncomingMessage, socket: Duplex, head: Buffer, err: unknown, problemBase: string): void {
  const { status, body } = refusal(err, problemBase)
  const line = err instanceof ClassicError ? body : { errors: [body] }
  wss.handleUpgrade(req, socket, head, (ws) => {
    ws.on('error', () => undefined)
    ws.send(JSON.stringify(line))
    ws.close(4000 + status)
    setTimeout(() => ws.terminate(), REFUSAL_GRACE_MS).unref()
  })
}

/** The credential an upgrade carries: the Authorization header (or none), or a ticket (query or subprotocol). */
type Credential = { kind: 'header' } | { kind: 'ticket'; ticket: string }

function ticketProtocol(protocols: Iterable<string>): string | undefined {
  for (const p of protocols) if (p.startsWith(TICKET_PROTOCOL_PREFIX)) return p
  return undefined
}

function offeredProtocols(req: IncomingMessage): string[] {
  const header = req.headers['sec-websocket-protocol']
  return (Array.isArray(header) ? header.join(',') : header ?? '').split(',').map((p) => p.trim()).filter((p) => p !== '')
}

/** Exactly one credential: a ticket beside a bearer token, or two tickets, is a client mistake worth naming. */
function credentialOf(req: IncomingMessage, url: URL): Credential {
  const fromQuery = url.searchParams.getAll('ticket')
  const fromProtocol = ticketProtocol(offeredProtocols(req))
  const tickets = [...fromQuery, ...(fromProtocol !== undefined ? [fromProtocol.slice(TICKET_PROTOCOL_PREFIX.length)] : [])]
  if (tickets.length === 0) return { kind: 'header' }
  const ticket = tickets[0] as string
  if (tickets.length > 1 || req.headers.authorization !== undefined) {
    throw Problems.invalidParameter('ticket', '', 'Open the stream with one credential: a stream ticket (the `ticket` query parameter or a `ticket.<ticket>` subprotocol) or an app-only bearer token in the Authorization header.')
  }
  return { kind: 'ticket', ticket }
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

export function attachWebSocketStream(app: FastifyInstance, ctx: ServiceContext, hub: StreamHub, tickets: StreamTickets): void {
  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: MAX_CLIENT_PAYLOAD,
    perMessageDeflate: false,
    // A browser that offered subprotocols fails the connection unless one is echoed: the ticket's, else the first offered (ws's default).
    handleProtocols: (protocols) => ticketProtocol(protocols) ?? protocols.values().next().value ?? false
  })
  const authenticator = new Authenticator(ctx.store, ctx.config)
  const headerApp = async (req: IncomingMessage): Promise<string> => {
    // The shared authenticator reads only the Authorization header, the URL and the method for bearer tokens.
    const request = { headers: req.headers, url: req.url ?? '/', method: 'GET' } as unknown as FastifyRequest
    return (await authenticator.authenticate(request, { schemes: ['bearer-app'] }, '')).app.id
  }

  const onUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer): void => {
    const url = new URL(req.url ?? '/', 'http://localhost')
    // Another path: the HTTP layer answers an upgrade nobody claims (client-errors.ts).
    if (url.pathname !== STREAM_PATH) return
    // Nothing is written before the answers to requests pipelined ahead of the handshake went out.
    const earlierAnswered = claimUpgrade(req)
    socket.on('error', () => undefined)
    void (async () => {
      let admission
      // Decided before anything can fail: a ticket means a page, which can only read a refusal in band.
      const inBand = url.searchParams.has('ticket') || ticketProtocol(offeredProtocols(req)) !== undefined
      try {
        if (!(await earlierAnswered)) {
          socket.destroy()
          return
        }
        const credential = credentialOf(req, url)
        const { backfillMinutes } = parseStreamQuery(Object.fromEntries(url.searchParams), { websocket: true })
        const appId = credential.kind === 'ticket' ? (await tickets.redeem(credential.ticket)).id : await headerApp(req)
        await consumeStreamWindow(app, appId)
        admission = await hub.admit(appId)
        const { connectionId, lease } = admission
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
        if (socket.destroyed) return
        if (inBand) refuseInBand(wss, req, socket, head, err, ctx.config.problemBase)
        else reject(socket, err, ctx.config.problemBase)
      }
    })()
  }

  app.server.on('upgrade', onUpgrade)
  app.addHook('onClose', async () => {
    app.server.off('upgrade', onUpgrade)
    wss.close()
  })
}
