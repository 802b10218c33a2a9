import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { App, SignInSession } from '../../common/auth/records'
import type { ServiceContext } from '../../common/context'
import { messageText } from '../../common/echo'
import { newSecret } from '../../common/ids'
import { formErrorPage, renderConsentPage, renderNoticePage, sendPage } from '../oauth/page'
import { csrfToken, SignInSessions } from '../oauth/sessions'
import { checkSignInForm, decisionOf, signInFromForm, single } from '../oauth/sign-in'
import { appByClientId } from './clients'
import { issueCode } from './grants'
import { OAuth2Keys } from './keys'
import { PKCE_VALUE, PKCE_VALUE_RULE } from './pkce'
import { describeScopes, parseScope } from './scopes'

/**
 * GET /i/oauth2/authorize: the browser step of the authorization-code flow
 * (RFC 6749 §4.1, PKCE per RFC 7636). The request is checked in the order
 * the RFC prescribes: an unknown client or a redirect_uri that is not
 * exactly registered gets an error page (never a redirect, so the endpoint
 * cannot be used as an open redirector); every other problem is sent back
 * to the client's redirect_uri as `error=...&state=...`.
 *
 * A valid request is kept server-side (15 minutes) and the same sign-in and
 * consent page as the OAuth 1.0a flow is shown, with the scopes in words.
 * POSTing the page approves (redirect with `code` and `state`) or denies
 * (`error=access_denied`). The alias /2/oauth2/authorize (the path in the
 * platform's OpenAPI description) serves the same page.
 */

const PENDING_TTL_MS = 15 * 60_000
const STATE_MAX = 500
const S256_CHALLENGE = /^[A-Za-z0-9_-]{43}$/

interface PendingAuthorization {
  id: string
  app_id: string
  client_id: string
  redirect_uri: string
  scopes: string[]
  state?: string
  code_challenge: string
  code_challenge_method: 'S256' | 'plain'
  created_at: string
}

type AuthorizeError = 'invalid_request' | 'unsupported_response_type' | 'invalid_scope'

class RedirectError extends Error {
  readonly description: string
  constructor(
    readonly error: AuthorizeError,
    description: string
  ) {
    super(description)
    // It travels in the Location header: bounded whatever the request repeated.
    this.description = messageText(description, 300)
  }
}

/** The query, one value per name; a repeated parameter is refused (RFC 6749 §3.1). */
function queryParams(request: FastifyRequest): { params: Map<string, string>; repeated: string[] } {
  const q = request.url.indexOf('?')
  const params = new Map<string, string>()
  const repeated: string[] = []
  if (q < 0) return { params, repeated }
  for (const [k, v] of new URLSearchParams(request.url.slice(q + 1))) {
    if (params.has(k)) repeated.push(k)
    else params.set(k, v)
  }
  return { params, repeated }
}

/** `uri` with `extra` added to its query component, keeping what it already has (§4.1.2). */
export function withParams(uri: string, extra: Record<string, string | undefined>): string {
  const u = new URL(uri)
  for (const [k, v] of Object.entries(extra)) if (v !== undefined) u.searchParams.append(k, v)
  return u.toString()
}

function redirect(reply: FastifyReply, location: string): FastifyReply {
  return reply.code(303).header('location', location).header('cache-control', 'no-store').header('referrer-policy', 'no-referrer').send()
}

function notice(reply: FastifyReply, status: number, title: string, message: string): FastifyReply {
  return sendPage(reply, status, renderNoticePage(title, message))
}

/** The parts of the request that need no redirect URI to report on. */
function checkRequest(params: Map<string, string>, repeated: string[], allowPlain: boolean): Omit<PendingAuthorization, 'id' | 'app_id' | 'client_id' | 'redirect_uri' | 'state' | 'created_at'> {
  if (repeated.length > 0) throw new RedirectError('invalid_request', `Parameters may appear once: ${[...new Set(repeated)].join(', ')}.`)
  const responseType = params.get('response_type')
  if (responseType === undefined || responseType === '') throw new RedirectError('invalid_request', 'response_type is required and must be code.')
  if (responseType !== 'code') throw new RedirectError('unsupported_response_type', 'Only response_type=code is supported.')
  const scope = params.get('scope')
  if (scope === undefined || scope.trim() === '') throw new RedirectError('invalid_request', 'scope is required: a space-separated list of scopes.')
  const parsed = parseScope(scope)
  if (!parsed.ok) throw new RedirectError('invalid_scope', 'empty' in parsed ? 'scope is empty.' : `Unknown scope: ${parsed.unknown.slice(0, 5).join(', ')}.`)
  const challenge = params.get('code_challenge')
  if (challenge === undefined || challenge === '') throw new RedirectError('invalid_request', 'code_challenge is required (PKCE, RFC 7636).')
  // RFC 7636 §4.3: without code_challenge_method the method is plain.
  // The method name in any case: twitter-api-v2 sends "s256".
  const given = params.get('code_challenge_method')
  const method = given === undefined ? 'plain' : given.toUpperCase() === 'S256' ? 'S256' : given
  if (method === 'plain') {
    if (!allowPlain) throw new RedirectError('invalid_request', 'code_challenge_method must be S256: the plain method is not accepted.')
    if (!PKCE_VALUE.test(challenge)) throw new RedirectError('invalid_request', `code_challenge must be ${PKCE_VALUE_RULE}.`)
  } else if (method === 'S256') {
    if (!S256_CHALLENGE.test(challenge)) throw new RedirectError('invalid_request', 'An S256 code_challenge is the base64url SHA-256 of the verifier: 43 characters.')
  } else {
    throw new RedirectError('invalid_request', `code_challenge_method ${method.slice(0, 20)} is not supported: use S256.`)
  }
  return { scopes: parsed.scopes, code_challenge: challenge, code_challenge_method: method }
}

export function registerAuthorizeRoutes(app: FastifyInstance, ctx: ServiceContext): void {
  const { store, config } = ctx
  const sessions = new SignInSessions(store, config.signInSessionTtlMs)

  function expired(reply: FastifyReply): FastifyReply {
    return notice(reply, 400, 'This authorization request is no longer valid', 'It expired or was already answered. Go back to the application and start again.')
  }

  function consent(request: FastifyRequest, reply: FastifyReply, client: App, pending: PendingAuthorization, options: { signedIn?: SignInSession; screenName?: string; error?: string; status?: number; switchHref?: string }): FastifyReply {
    const hiddenFields: Record<string, string> = { request_id: pending.id, csrf_token: csrfToken(request, reply) }
    if (options.signedIn) hiddenFields.signed_in_as = options.signedIn.user_id
    const html = renderConsentPage({
      appName: client.name,
      permissions: describeScopes(pending.scopes).map((s) => s.text),
      restrictions: ['See your password.'],
      // Both paths of this page are two levels deep: /i/oauth2/authorize and /2/oauth2/authorize.
      manageHref: '../../oauth/apps',
      action: 'authorize',
      hiddenFields,
      ...(options.signedIn ? { signedInAs: options.signedIn.screen_name } : {}),
      ...(options.signedIn && options.switchHref ? { switchAccountHref: options.switchHref } : {}),
      ...(options.screenName !== undefined ? { screenName: options.screenName } : {}),
      ...(options.error !== undefined ? { error: options.error } : {})
    })
    return sendPage(reply, options.status ?? 200, html, [pending.redirect_uri])
  }

  async function show(request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
    const { params, repeated } = queryParams(request)
    const clientId = params.get('client_id')
    const client = clientId === undefined || repeated.includes('client_id') ? undefined : await appByClientId(store, clientId)
    if (!client?.oauth2) {
      return notice(reply, 400, 'Unknown application', 'The application that sent you here is not registered for OAuth 2.0 (unknown client_id). Nothing was shared.')
    }
    const redirectUri = params.get('redirect_uri')
    if (redirectUri === undefined || repeated.includes('redirect_uri') || !client.oauth2.redirect_uris.includes(redirectUri)) {
      return notice(reply, 400, 'Invalid redirect address', `${client.name} asked to send you to an address (redirect_uri) it has not registered. Nothing was shared.`)
    }
    const state = params.get('state')
    const echoedState = state !== undefined && state.length <= STATE_MAX ? state : undefined
    let checked
    try {
      if (state !== undefined && state.length > STATE_MAX) throw new RedirectError('invalid_request', `state is at most ${STATE_MAX} characters.`)
      checked = checkRequest(params, repeated, config.oauth2AllowPlainPkce)
    } catch (err) {
      if (!(err instanceof RedirectError)) throw err
      return redirect(reply, withParams(redirectUri, { error: err.error, error_description: err.description, state: echoedState }))
    }
    const pending: PendingAuthorization = {
      id: newSecret(24),
      app_id: client.id,
      client_id: client.oauth2.client_id,
      redirect_uri: redirectUri,
      ...checked,
      ...(echoedState !== undefined ? { state: echoedState } : {}),
      created_at: new Date().toISOString()
    }
    await store.setJson(OAuth2Keys.request(pending.id), pending, PENDING_TTL_MS)
    const forceLogin = params.get('force_login') === 'true'
    const session = forceLogin ? undefined : await sessions.current(request)
    const switchParams = new URLSearchParams([...params].filter(([k]) => k !== 'force_login'))
    switchParams.set('force_login', 'true')
    return consent(request, reply, client, pending, { ...(session ? { signedIn: session } : {}), switchHref: `authorize?${switchParams.toString()}` })
  }

  async function load(id: string | undefined): Promise<{ pending: PendingAuthorization; client: App } | undefined> {
    if (id === undefined || !/^[A-Za-z0-9_-]{20,64}$/.test(id)) return undefined
    const pending = await store.getJson<PendingAuthorization>(OAuth2Keys.request(id))
    if (!pending) return undefined
    const client = await appByClientId(store, pending.client_id)
    // The client may have been reconfigured since the page was shown.
    if (!client?.oauth2?.redirect_uris.includes(pending.redirect_uri)) return undefined
    return { pending, client }
  }

  /** The one decision a request gets: true only for the caller that removed it. */
  async function claim(pending: PendingAuthorization): Promise<boolean> {
    return (await store.del(OAuth2Keys.request(pending.id))) > 0
  }

  async function approve(reply: FastifyReply, pending: PendingAuthorization, userId: string): Promise<FastifyReply> {
    if (!(await claim(pending))) return expired(reply)
    const code = await issueCode(store, config, {
      app_id: pending.app_id,
      client_id: pending.client_id,
      user_id: userId,
      redirect_uri: pending.redirect_uri,
      scopes: pending.scopes,
      code_challenge: pending.code_challenge,
      code_challenge_method: pending.code_challenge_method
    })
    return redirect(reply, withParams(pending.redirect_uri, { state: pending.state, code }))
  }

  async function deny(reply: FastifyReply, pending: PendingAuthorization): Promise<FastifyReply> {
    if (!(await claim(pending))) return expired(reply)
    return redirect(reply, withParams(pending.redirect_uri, { error: 'access_denied', error_description: 'The user denied the authorization request.', state: pending.state }))
  }

  async function decide(request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
    const form = checkSignInForm(request, reply, 'Go back to the application and start again.')
    if (!form.ok) return form.reply
    const found = await load(single(form.body.request_id))
    if (!found) return expired(reply)
    const { pending, client } = found
    const decision = decisionOf(form.body)
    if (decision === 'deny') return deny(reply, pending)
    if (decision !== 'allow') return notice(reply, 400, 'Unexpected request', 'Choose Authorize or Cancel on the sign-in page.')
    const approver = await signInFromForm(request, reply, store, sessions, form.body)
    if (!approver.ok) return consent(request, reply, client, pending, approver.refusal)
    return approve(reply, pending, approver.userId)
  }

  // Each page view stores a pending request: bounded per client address like the other OAuth operations.
  const limited = { rateLimit: { family: 'oauth2-authorize' } }
  for (const path of ['/i/oauth2/authorize', '/2/oauth2/authorize']) {
    app.get(path, { config: limited }, (request, reply) => show(request, reply))
    app.post(path, { errorHandler: formErrorPage }, (request, reply) => decide(request, reply))
  }
}
