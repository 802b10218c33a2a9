import { createHash } from 'node:crypto'
import client from 'prom-client'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { type AuthContext, refusedCaller } from './auth/authenticate'
import type { Config } from './config'
import type { ServiceContext } from './context'
import { Classic } from './errors'
import type { Store } from './store/types'

/**
 * Rate limits per caller and route family, in store-backed windows so every
 * process of a service shares the same counters (Redis in distributed mode).
 *
 * A route names its family (and optionally its own figures) in its config:
 *
 *   config: { auth: {...}, rateLimit: { family: 'webhooks' } }
 *   config: { rateLimit: { family: 'custom-audience-users', limit: 1500, windowMs: 60_000 } }
 *
 * Every authenticated route that names none is counted in a family of its
 * own, named after its method and path (`get:12.accounts.campaigns` for
 * GET /12/accounts/:account_id/campaigns[/:campaign_id]), at
 * RATE_LIMIT_DEFAULT per RATE_LIMIT_WINDOW: no authenticated route is
 * unlimited, and where the platform publishes no figure the limit is
 * configurable (docs/contract.md "Rate limits").
 *
 * The caller is the authenticated user of the app (user context), the app
 * (app-only bearer), or the client address (unauthenticated routes). Every
 * counted response carries `x-rate-limit-limit`, `x-rate-limit-remaining` and
 * `x-rate-limit-reset` (Unix epoch seconds); over the limit the request is
 * refused with 429 code 88, which the ads interface renders as
 * TOO_MANY_REQUESTS. Authenticated requests with `with_total_count=true` also
 * count against the ads interface's own window (200 per 15 minutes).
 *
 * Ads GETs on one account (a path with :account_id) also count against that
 * account's window per route family (docs/conformance.md), reported in
 * `x-account-rate-limit-limit|remaining|reset`; the family `ads-account`
 * sets its figures.
 *
 * Limits: RATE_LIMITS (operator overrides per family) > the route's `limit`
 * > FAMILY_DEFAULTS (the published figures) > RATE_LIMIT_DEFAULT, each over
 * RATE_LIMIT_WINDOW unless a window is given the same way.
 */

export interface RateLimitRule {
  family: string
  limit?: number
  windowMs?: number
}

export interface RateLimitPolicy {
  limit: number
  windowMs: number
}

export interface RateLimitState {
  family: string
  limit: number
  remaining: number
  /** Unix epoch seconds at which the window ends. */
  resetAt: number
  exceeded: boolean
}

declare module 'fastify' {
  interface FastifyContextConfig {
    rateLimit?: RateLimitRule
  }
  interface FastifyInstance {
    rateLimiter: RateLimiter
  }
}

const MINUTE = 60_000

/** The figures the public platform publishes (docs/contract.md "Rate limits"). */
export const FAMILY_DEFAULTS: Record<string, { limit: number; windowMs?: number }> = {
  /** Ads list requests with `with_total_count=true`: 200 per 15 minutes. */
  with_total_count: { limit: 200, windowMs: 15 * MINUTE },
  /** Custom-audience user uploads: 1500 per 1 minute window. */
  'custom-audience-users': { limit: 1500, windowMs: MINUTE },
  /** GET 1.1/account/verify_credentials: 75 per 15 minutes per user on the public platform. */
  'account-verify-credentials': { limit: 75, windowMs: 15 * MINUTE },
  /** Password attempts on the sign-in page, per client address. */
  'oauth-login': { limit: 30, windowMs: 15 * MINUTE },
  /** Ads GETs per ad account and endpoint: the public platform's "Other Account Reads", 2000 per 15 minutes. */
  'ads-account': { limit: 2000, windowMs: 15 * MINUTE }
}

export const TOTAL_COUNT_FAMILY = 'with_total_count'
export const ADS_ACCOUNT_FAMILY = 'ads-account'

export class RateLimiter {
  constructor(
    private readonly store: Store,
    private readonly config: Config,
    private readonly rejections?: client.Counter<'family'>
  ) {}

  /** Records a refusal (metric `rate_limited_requests_total`). */
  rejected(family: string): void {
    this.rejections?.inc({ family })
  }

  policy(rule: RateLimitRule): RateLimitPolicy {
    const override = this.config.rateLimits[rule.family]
    const known = FAMILY_DEFAULTS[rule.family]
    return {
      limit: override?.limit ?? rule.limit ?? known?.limit ?? this.config.rateLimitDefault,
      windowMs: override?.windowMs ?? rule.windowMs ?? known?.windowMs ?? this.config.rateLimitWindowMs
    }
  }

  /**
   * Counts one request of `identity` in `family`. Windows are fixed, but each
   * caller's windows are shifted by a hash of its identity so that not every
   * caller's counters reset at the same instant.
   */
  async consume(family: string, identity: string, policy: RateLimitPolicy = this.policy({ family }), now = Date.now()): Promise<RateLimitState> {
    const { limit, windowMs } = policy
    const offset = createHash('sha1').update(`${family}\0${identity}`).digest().readUInt32BE(0) % windowMs
    const index = Math.floor((now - offset) / windowMs)
    const count = await this.store.incr(`ratelimit:${family}:${identity}:${index}`, 1, windowMs + 1000)
    return {
      family,
      limit,
      remaining: Math.max(0, limit - count),
      resetAt: Math.ceil(((index + 1) * windowMs + offset) / 1000),
      exceeded: count > limit
    }
  }
}

/** Who a request is counted as: the user of an app, the app, or the client address. */
export function rateLimitIdentity(request: FastifyRequest, auth: AuthContext | undefined = request.auth): string {
  if (auth === undefined) return `ip:${request.ip}`
  if (auth.scheme === 'bearer-app') return `app:${auth.app.id}`
  return `user:${auth.app.id}:${auth.userId}`
}

/**
 * The family of an authenticated route that names none: its method and the
 * fixed segments of its path, so a collection and its items share a window
 * (`GET /12/accounts/:account_id/campaigns/:campaign_id` -> `get:12.accounts.campaigns`).
 * The name fits RATE_LIMITS' `family=limit[/window]` syntax.
 */
export function routeFamily(method: string, routeUrl: string): string {
  const verb = method === 'HEAD' ? 'get' : method.toLowerCase()
  const fixed = routeUrl
    .split('/')
    .filter((segment) => segment !== '' && !segment.startsWith(':') && segment !== '*')
    .map((segment) => segment.replace(/[^A-Za-z0-9_.-]/g, '_'))
  return `${verb}:${fixed.join('.')}`
}

/** The ad account an ads GET reads, when its path names one; writes are not counted per account (docs/conformance.md). */
function adsAccountOf(request: FastifyRequest): string | undefined {
  if (request.method !== 'GET' && request.method !== 'HEAD') return undefined
  if (!/^\/(12|5)\//.test(request.routeOptions.url ?? '')) return undefined
  const accountId = (request.params as Record<string, unknown> | undefined)?.account_id
  return typeof accountId === 'string' && accountId !== '' ? accountId : undefined
}

type HeaderSet = 'user' | 'account'

const HEADER_PREFIX: Record<HeaderSet, string> = { user: 'x-rate-limit', account: 'x-account-rate-limit' }

/**
 * Sets `x-rate-limit-*` (or `x-account-rate-limit-*`). Also on the raw
 * response: a streaming route (GET /2/activity/stream) hijacks the reply and
 * writes its own head, which Node merges with headers set there.
 */
export function setRateLimitHeaders(reply: FastifyReply, state: RateLimitState, set: HeaderSet = 'user'): void {
  const prefix = HEADER_PREFIX[set]
  const values: Array<[string, string]> = [
    [`${prefix}-limit`, String(state.limit)],
    [`${prefix}-remaining`, String(state.remaining)],
    [`${prefix}-reset`, String(state.resetAt)]
  ]
  for (const [name, value] of values) {
    reply.header(name, value)
    if (!reply.raw.headersSent) reply.raw.setHeader(name, value)
  }
}

/** The state the headers report: an exceeded window first, else the one with the fewest requests left. */
function mostConstrained(states: RateLimitState[]): RateLimitState {
  return states.reduce((a, b) => (a.exceeded !== b.exceeded ? (a.exceeded ? a : b) : a.remaining <= b.remaining ? a : b))
}

function wantsTotalCount(request: FastifyRequest): boolean {
  const value = (request.query as Record<string, unknown> | undefined)?.with_total_count
  return Array.isArray(value) ? value.map(String).includes('true') : String(value) === 'true'
}

function rejectionCounter(registry: client.Registry): client.Counter<'family'> {
  const name = 'rate_limited_requests_total'
  const existing = registry.getSingleMetric(name) as client.Counter<'family'> | undefined
  return existing ?? new client.Counter({ name, help: 'Requests refused with 429, by rate-limit family', labelNames: ['family'] as const, registers: [registry] })
}

/**
 * Counts a request against `rule` for `identity` (default: the request's
 * caller), sets the headers and, over the limit, throws `refusal` (default
 * 429 code 88). Routes that learn who the caller is only in their handler
 * (the OAuth endpoints authenticate themselves) call this directly.
 */
export async function enforceRateLimit(
  request: FastifyRequest,
  reply: FastifyReply,
  rule: RateLimitRule,
  identity = rateLimitIdentity(request),
  refusal: () => Error = Classic.rateLimited
): Promise<RateLimitState> {
  const limiter = request.server.rateLimiter
  const state = await limiter.consume(rule.family, identity, limiter.policy(rule))
  setRateLimitHeaders(reply, state)
  if (state.exceeded) {
    limiter.rejected(state.family)
    throw refusal()
  }
  return state
}

/** The caller's windows for this request: the route's family (named or default) and with_total_count. */
async function callerStates(limiter: RateLimiter, request: FastifyRequest, caller: AuthContext | undefined): Promise<RateLimitState[]> {
  const identity = rateLimitIdentity(request, caller)
  const named = request.routeOptions.config.rateLimit
  const authenticated = caller !== undefined
  const rule = named ?? (authenticated ? { family: routeFamily(request.method, request.routeOptions.url ?? request.url) } : undefined)
  // Independent counters: counted concurrently (one store round trip, not one per window).
  const counting: Array<Promise<RateLimitState>> = []
  if (rule) counting.push(limiter.consume(rule.family, identity, limiter.policy(rule)))
  if (authenticated && wantsTotalCount(request)) counting.push(limiter.consume(TOTAL_COUNT_FAMILY, identity, limiter.policy({ family: TOTAL_COUNT_FAMILY })))
  return Promise.all(counting)
}

/**
 * The account's window of an ads GET, per route family. Counted per app and
 * account, so another application's callers cannot exhaust an account's
 * reads by naming it.
 */
async function accountState(limiter: RateLimiter, request: FastifyRequest, caller: AuthContext | undefined): Promise<RateLimitState | undefined> {
  const accountId = caller === undefined ? undefined : adsAccountOf(request)
  if (accountId === undefined || caller === undefined) return undefined
  const family = `${ADS_ACCOUNT_FAMILY}:${routeFamily(request.method, request.routeOptions.url ?? request.url)}`
  return limiter.consume(family, `app:${caller.app.id}:account:${accountId}`, limiter.policy({ family: ADS_ACCOUNT_FAMILY }))
}

/** Counts the request in each of its windows and sets the headers; the exceeded window, if any. */
async function countRequest(limiter: RateLimiter, request: FastifyRequest, reply: FastifyReply, caller: AuthContext | undefined): Promise<RateLimitState | undefined> {
  const [states, account] = await Promise.all([callerStates(limiter, request, caller), accountState(limiter, request, caller)])
  const shown = states.length > 0 ? mostConstrained(states) : undefined
  if (shown) setRateLimitHeaders(reply, shown)
  if (account) setRateLimitHeaders(reply, account, 'account')
  return [shown, account].find((state) => state?.exceeded)
}

/** Requests already counted (the preValidation hook ran for them). */
const counted = new WeakSet<FastifyRequest>()

/** Registers the limiter and its preValidation hook; call after registerAuthentication so `request.auth` is set. */
export function registerRateLimits(app: FastifyInstance, ctx: Pick<ServiceContext, 'store' | 'config' | 'metrics'>): void {
  const limiter = new RateLimiter(ctx.store, ctx.config, rejectionCounter(ctx.metrics))
  app.decorate('rateLimiter', limiter)
  app.addHook('preValidation', async (request, reply) => {
    counted.add(request)
    const exceeded = await countRequest(limiter, request, reply, request.auth)
    if (exceeded) {
      limiter.rejected(exceeded.family.startsWith(`${ADS_ACCOUNT_FAMILY}:`) ? ADS_ACCOUNT_FAMILY : exceeded.family)
      throw Classic.rateLimited()
    }
  })
  // A verified caller refused by authentication (wrong kind of credential, scope, access level)
  // never reached the hook above: the 403 is counted here and carries the headers too.
  app.addHook('onError', async (request, reply) => {
    const caller = refusedCaller(request)
    if (caller === undefined || counted.has(request) || reply.sent) return
    counted.add(request)
    await countRequest(limiter, request, reply, caller).catch(() => undefined)
  })
}
