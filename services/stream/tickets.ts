import type { FastifyInstance } from 'fastify'
import { AuthKeys, type App, type BearerRecord, sha256Hex } from '../common/auth/records'
import { Classic, Problems } from '../common/errors'
import { newSecret } from '../common/ids'
import { openObject, v2Ok } from '../common/openapi'
import type { Store } from '../common/store/types'
import { STREAM_PATH } from './routes'

/**
 * Stream tickets: how a web page opens the WebSocket stream. A browser's
 * `WebSocket` cannot send an Authorization header, and the app-only bearer
 * token is the app's secret, which must not reach a page anyway. So the
 * app's server asks for a ticket with its bearer token
 * (`POST /2/activity/stream/ticket`) and hands it to the page, which opens
 * the WebSocket with it (`?ticket=` or the `ticket.<ticket>` subprotocol).
 *
 *   stream:ticket:{sha256(ticket)}   JSON {app_id, bearer_key}, expiring after TICKET_TTL_MS
 *
 * One key per ticket (a single hash slot), in the shared store: any stream
 * node redeems a ticket another node issued. A ticket is single use: the
 * node whose DEL removes the key wins, a second redemption finds nothing.
 * It is bound to the app and to the bearer token that asked for it: a token
 * invalidated before the ticket is used takes the ticket with it. Only the
 * ticket's hash is stored, so the store does not hold usable tickets.
 */

export const TICKET_PATH = `${STREAM_PATH}/ticket`
/** How long a ticket may wait to be used: enough to hand it to a page, too short to be worth stealing. */
export const TICKET_TTL_MS = 30_000
/** Subprotocol prefix that carries a ticket in Sec-WebSocket-Protocol. */
export const TICKET_PROTOCOL_PREFIX = 'ticket.'
/** A ticket as issued: 24 random bytes, base64url (also a valid subprotocol token). */
const TICKET_SHAPE = /^[A-Za-z0-9_-]{32}$/

export const TicketKeys = {
  ticket: (ticket: string) => `stream:ticket:${sha256Hex(ticket)}`
}

interface TicketRecord {
  app_id: string
  /** The store key of the bearer token that asked for the ticket (it holds the token's hash, not the token). */
  bearer_key: string
}

export class StreamTickets {
  constructor(private readonly store: Store) {}

  async issue(appId: string, bearerToken: string): Promise<{ ticket: string; expiresIn: number }> {
    const ticket = newSecret(24)
    const record: TicketRecord = { app_id: appId, bearer_key: AuthKeys.bearer(bearerToken) }
    await this.store.setJson(TicketKeys.ticket(ticket), record, TICKET_TTL_MS)
    return { ticket, expiresIn: TICKET_TTL_MS / 1000 }
  }

  /**
   * The app a ticket opens, consuming the ticket. Unknown, expired, used,
   * or outliving its bearer token: the interface's invalid-token error,
   * the same for each, so a refusal tells nothing about other tickets.
   */
  async redeem(ticket: string): Promise<App> {
    if (!TICKET_SHAPE.test(ticket)) throw Classic.invalidToken()
    const key = TicketKeys.ticket(ticket)
    const record = await this.store.getJson<TicketRecord>(key)
    // DEL is the claim: of two redemptions racing (on any nodes), only one removes the key.
    if (!record || (await this.store.del(key)) !== 1) throw Classic.invalidToken()
    const bearer = await this.store.getJson<BearerRecord>(record.bearer_key)
    if (!bearer || bearer.kind !== 'app' || bearer.app_id !== record.app_id) throw Classic.invalidToken()
    const app = await this.store.getJson<App>(AuthKeys.app(record.app_id))
    if (!app) throw Classic.invalidToken()
    return app
  }
}

export async function registerTicketRoute(app: FastifyInstance, tickets: StreamTickets): Promise<void> {
  app.post(TICKET_PATH, {
    config: { auth: { schemes: ['bearer-app'] } },
    schema: {
      response: v2Ok(
        'A single-use ticket that opens one WebSocket stream of the app (`?ticket=` or the `ticket.<ticket>` subprotocol) within `expires_in` seconds.',
        openObject({ ticket: { type: 'string' }, expires_in: { type: 'integer' } })
      )
    }
  }, async (request, reply) => {
    const auth = request.auth
    if (auth?.scheme !== 'bearer-app') throw Problems.generic(401, 'Unauthorized')
    const { ticket, expiresIn } = await tickets.issue(auth.app.id, auth.bearerToken)
    return reply.header('cache-control', 'no-store').send({ data: { ticket, expires_in: expiresIn } })
  })
}
