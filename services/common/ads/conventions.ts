import type { FastifyReply, FastifyRequest } from 'fastify'
import type { AuthRequirement } from '../auth/authenticate'
import { Ads, AdsError } from '../errors'
import { adsRequestParams } from '../server'
import { ADS_API_VERSION } from './version'

/**
 * Conventions of every operation of the advertising interface
 * (docs/ads.md "Envelope and request.params" and the sections after it),
 * shared by the services that serve ads routes (the gateway and account
 * history): authentication, who made a change, and the response envelope
 * `{request:{params}, data, data_type, next_cursor?, total_count?}`.
 * Parameter readers are in ./params, times in ./times; list options and
 * cursors, used by the gateway alone, in services/gateway/ads/conventions.ts.
 */

export { ADS_API_VERSION } from './version'

/** Every ads call is OAuth 1.0a user context (docs/ads.md). */
export const ADS_AUTH: AuthRequirement = { schemes: ['oauth1-user'] }

export interface Actor {
  user_id: string
  platform: string
}

/** Who made a change, for entity-change events and account history. */
export function actorOf(request: FastifyRequest): Actor {
  const auth = request.auth
  if (!auth || auth.scheme === 'bearer-app') return { user_id: '0', platform: 'API' }
  return { user_id: auth.userId, platform: 'API' }
}

/** The authenticated user's id; ads routes are user context only. */
export function userIdOf(request: FastifyRequest): string {
  const auth = request.auth
  if (!auth || auth.scheme === 'bearer-app') throw Ads.unauthorized()
  return auth.userId
}

// ------------------------------------------------------------------ responses

export interface ListExtras {
  next_cursor?: string | null
  total_count?: number
}

export function sendData(request: FastifyRequest, reply: FastifyReply, data: unknown, dataType: string, extras: ListExtras = {}): FastifyReply {
  const body: Record<string, unknown> = { request: { params: adsRequestParams(request) }, data_type: dataType, data }
  if ('next_cursor' in extras) body.next_cursor = extras.next_cursor ?? null
  if (extras.total_count !== undefined) body.total_count = extras.total_count
  reply.header('x-current-api-version', ADS_API_VERSION)
  return reply.type('application/json; charset=utf-8').send(body)
}

/** A JSON body is required (`Content-Type: application/json`) for the batch endpoints. */
export function requireJsonBody(request: FastifyRequest): unknown {
  const type = request.headers['content-type'] ?? ''
  if (!type.toLowerCase().startsWith('application/json')) {
    throw new AdsError(400, { code: 'INVALID_PARAMETER', message: 'Content-Type must be application/json', parameter: 'content-type' })
  }
  if (request.body === undefined) throw Ads.missing('body')
  return request.body
}
