import path from 'node:path'
import type { FastifyInstance, FastifyReply } from 'fastify'
import fastifyStatic from '@fastify/static'
import { safeEqual } from '../../common/auth/oauth1'
import { projectRoot } from '../../common/bus/topics'
import type { ServiceContext } from '../../common/context'
import { Problems } from '../../common/errors'
import { operatorGuard, resolveOperatorToken } from '../../common/operator'
import { consoleSessions, loginCsrfToken, loginCsrfValid } from '../../common/console/session'
import { registerConsoleErrorPages } from '../../common/console/error-pages'
import { ConsoleViews } from '../../common/console/views'
import { getApp } from '../identity'
import { registerConsoleOpsRoutes } from './ops'

/**
 * The console's front door, served by the gateway: sign-in (operator token,
 * or an app developer's single-use portal link), sign-out, the static assets
 * (htmx, Chart.js from npm, the console's own CSS and script), and the
 * operator API route that creates portal links (`make console-link`).
 * The views of data other services own are served by those services under
 * /console/<service>/ (docs/architecture.md, "Web console").
 */

const ASSETS = ['htmx.min.js', 'chart.umd.min.js', 'console.css', 'console.js']

export async function registerConsoleRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  const { config, store } = ctx
  const sessions = consoleSessions(store, config)
  const views = new ConsoleViews('gateway')
  const operatorToken = resolveOperatorToken(config, store.kind === 'memory')
  const root = projectRoot()
  registerConsoleErrorPages(app, sessions, '/console/')

  await app.register(fastifyStatic, {
    root: [
      path.join(root, 'node_modules', 'htmx.org', 'dist'),
      path.join(root, 'node_modules', 'chart.js', 'dist'),
      path.join(root, 'services', 'gateway', 'console', 'assets')
    ],
    prefix: '/console/assets/',
    allowedPath: (pathName) => ASSETS.includes(pathName.replace(/^\//, '')),
    index: false,
    list: false,
    maxAge: 3_600_000
  })

  const loginPage = (reply: FastifyReply, csrf: string, message?: string): FastifyReply =>
    views.send(reply, views.page(reply.request, 'login', { csrf, message }, { title: 'Sign in' }))

  app.get('/console', async (_request, reply) => reply.redirect('/console/', 301))

  app.get('/console/', async (request, reply) => {
    const session = await sessions.current(request)
    if (!session) return reply.redirect('/console/login', 303)
    if (session.role === 'developer' && session.app_id) return reply.redirect(`/console/webhooks/apps/${encodeURIComponent(session.app_id)}/`, 303)
    return reply.redirect('/console/webhooks/apps', 303)
  })

  app.get('/console/login', async (request, reply) => loginPage(reply.code(200), loginCsrfToken(request, reply)))

  app.post('/console/login', async (request, reply) => {
    const body = (request.body ?? {}) as Record<string, unknown>
    if (!loginCsrfValid(request, body._csrf)) return loginPage(reply.code(403), loginCsrfToken(request, reply), 'The form expired: please try again.')
    const presented = typeof body.token === 'string' ? body.token.trim() : ''
    if (operatorToken === undefined) return loginPage(reply.code(403), loginCsrfToken(request, reply), 'The operator API is closed on this gateway (OPERATOR_TOKEN is not set).')
    if (presented === '' || !safeEqual(presented, operatorToken)) {
      request.log.warn('console sign-in with a wrong operator token')
      return loginPage(reply.code(401), loginCsrfToken(request, reply), 'That is not the operator token.')
    }
    await sessions.start(request, reply, 'operator')
    return reply.redirect('/console/', 303)
  })

  // The link only shows a button: a preview bot or a cross-site navigation does not use it up,
  // and the session cookie (SameSite=Strict) is set by a same-site POST.
  app.get<{ Params: { token: string } }>('/console/link/:token', async (request, reply) => {
    const link = await sessions.peekLink(request.params.token)
    const found = link?.app_id !== undefined ? await getApp(store, link.app_id) : undefined
    const csrf = loginCsrfToken(request, reply)
    return views.send(reply.code(link ? 200 : 404), views.page(request, 'link', { token: request.params.token, link, app: found, csrf }, { title: 'Portal link' }))
  })

  app.post('/console/link', async (request, reply) => {
    const body = (request.body ?? {}) as Record<string, unknown>
    if (!loginCsrfValid(request, body._csrf)) return loginPage(reply.code(403), loginCsrfToken(request, reply), 'The form expired: open the link again.')
    const link = typeof body.token === 'string' ? await sessions.redeemLink(body.token) : undefined
    if (!link) return loginPage(reply.code(404), loginCsrfToken(request, reply), 'This portal link is unknown, used or expired: ask the operator for a new one.')
    if (link.role === 'developer' && (link.app_id === undefined || !(await getApp(store, link.app_id)))) {
      return loginPage(reply.code(404), loginCsrfToken(request, reply), 'The app of this portal link no longer exists.')
    }
    await sessions.start(request, reply, link.role, link.app_id)
    return reply.redirect('/console/', 303)
  })

  app.post('/console/logout', async (request, reply) => {
    const session = await sessions.current(request)
    const body = (request.body ?? {}) as Record<string, unknown>
    const presented = typeof body._csrf === 'string' ? body._csrf : request.headers['x-csrf-token']
    if (session && (typeof presented !== 'string' || !safeEqual(presented, session.csrf))) throw Problems.generic(403, 'Missing or wrong CSRF token: reload the page and try again.')
    await sessions.end(request, reply)
    return reply.redirect('/console/login', 303)
  })

  // Operator API: a portal link for one app (make console-link APP=..), or without app_id an operator's link (make console).
  await app.register(async (admin) => {
    admin.addHook('onRequest', operatorGuard(operatorToken))
    admin.post('/admin/console/links', {
      schema: { body: { type: 'object', additionalProperties: false, properties: { app_id: { type: 'string', pattern: '^[0-9]{1,19}$' } } } }
    }, async (request, reply) => {
      const appId = (request.body as { app_id?: string } | undefined)?.app_id
      if (appId !== undefined && !(await getApp(store, appId))) throw Problems.resourceNotFound('app_id', appId, 'app')
      const { token, link } = await sessions.createLink(appId)
      const base = config.publicUrl !== '' ? config.publicUrl : `${request.protocol}://${request.headers.host ?? `localhost:${config.port}`}`
      return reply.code(201).header('cache-control', 'no-store').send({ data: { url: `${base}/console/link/${token}`, role: link.role, ...(appId !== undefined ? { app_id: appId } : {}), expires_at: link.expires_at } })
    })
  })

  await registerConsoleOpsRoutes(app, ctx, sessions, views)
}
