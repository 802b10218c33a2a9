import type { FastifyInstance } from 'fastify'
import type { App, User } from '../common/auth/records'
import type { ServiceContext } from '../common/context'
import { Problems } from '../common/errors'
import { operatorGuard, resolveOperatorToken } from '../common/operator'
import { ACCESS_LEVELS } from '../common/auth/records'
import { registerUsageAdminRoutes } from './usage'
import { changeApp, createApp, createUser, getApp, IdentityConflictError, IdentityError, listApps, listUsers, rotateSecret } from './identity'

/**
 * The operator API for applications and users (`/admin/*`, bearer
 * OPERATOR_TOKEN), driven by `make app` / `make user` through the CLI.
 * Consumer secrets appear only in the answers that create or rotate them.
 * Errors are v2 Problems.
 */

export interface AppView {
  id: string
  name: string
  consumer_key: string
  consumer_secret?: string
  access_level: App['access_level']
  callback_urls: string[]
  sign_in_with: boolean
  created_at: string
}

function appView(app: App, withSecret: boolean): AppView {
  const view: AppView = {
    id: app.id,
    name: app.name,
    consumer_key: app.consumer_key,
    access_level: app.access_level,
    callback_urls: app.callback_urls,
    sign_in_with: app.sign_in_with,
    created_at: app.created_at
  }
  if (withSecret) view.consumer_secret = app.consumer_secret
  return view
}

function userView(user: User): { id: string; screen_name: string; created_at: string } {
  return { id: user.id, screen_name: user.screen_name, created_at: user.created_at }
}

function asProblem(err: unknown): unknown {
  if (err instanceof IdentityConflictError) return Problems.conflict(err.message)
  if (err instanceof IdentityError) return Problems.invalidRequest([{ message: err.message, parameters: err.parameter ? { [err.parameter]: [] } : {} }])
  return err
}

const appFields = {
  name: { type: 'string', minLength: 1, maxLength: 32 },
  access_level: { type: 'string', enum: [...ACCESS_LEVELS] },
  callback_urls: { type: 'array', maxItems: 10, items: { type: 'string', minLength: 1, maxLength: 2048 } },
  sign_in_with: { type: 'boolean' }
}

const idParams = { type: 'object', required: ['id'], properties: { id: { type: 'string', pattern: '^[0-9]{1,19}$' } } }

export async function registerAdminRoutes(app: FastifyInstance, ctx: ServiceContext): Promise<void> {
  const { store } = ctx
  // A memory store means one process holding all state: the embedded runtime.
  const guard = operatorGuard(resolveOperatorToken(ctx.config, ctx.store.kind === 'memory'))

  await app.register(async (admin) => {
    // Before body parsing and validation: without the token nothing else is looked at.
    admin.addHook('onRequest', guard)

    admin.post('/admin/apps', { schema: { body: { type: 'object', required: ['name'], additionalProperties: false, properties: appFields } } }, async (request, reply) => {
      const body = request.body as { name: string; access_level?: App['access_level']; callback_urls?: string[]; sign_in_with?: boolean }
      try {
        const created = await createApp(store, body)
        return reply.code(201).header('cache-control', 'no-store').send({ data: appView(created, true) })
      } catch (err) {
        throw asProblem(err)
      }
    })

    admin.get('/admin/apps', async () => {
      const apps = await listApps(store)
      return { data: apps.map((a) => appView(a, false)), meta: { result_count: apps.length } }
    })

    admin.get('/admin/apps/:id', { schema: { params: idParams } }, async (request) => {
      const { id } = request.params as { id: string }
      const found = await getApp(store, id)
      if (!found) throw Problems.resourceNotFound('id', id, 'app')
      return { data: appView(found, false) }
    })

    admin.patch(
      '/admin/apps/:id',
      { schema: { params: idParams, body: { type: 'object', additionalProperties: false, minProperties: 1, properties: appFields } } },
      async (request) => {
        const { id } = request.params as { id: string }
        try {
          const changed = await changeApp(store, id, request.body as Parameters<typeof changeApp>[2])
          if (!changed) throw Problems.resourceNotFound('id', id, 'app')
          return { data: appView(changed, false) }
        } catch (err) {
          throw asProblem(err)
        }
      }
    )

    admin.post('/admin/apps/:id/rotate-secret', { schema: { params: idParams } }, async (request, reply) => {
      const { id } = request.params as { id: string }
      if (!(await getApp(store, id))) throw Problems.resourceNotFound('id', id, 'app')
      const rotated = await rotateSecret(store, id)
      return reply.header('cache-control', 'no-store').send({ data: appView(rotated, true) })
    })

    admin.post(
      '/admin/users',
      {
        schema: {
          body: {
            type: 'object',
            required: ['screen_name', 'password'],
            additionalProperties: false,
            properties: { screen_name: { type: 'string', pattern: '^[A-Za-z0-9_]{1,15}$' }, password: { type: 'string', minLength: 8, maxLength: 1024 } }
          }
        }
      },
      async (request, reply) => {
        const body = request.body as { screen_name: string; password: string }
        try {
          const user = await createUser(store, body.screen_name, body.password)
          return reply.code(201).send({ data: userView(user) })
        } catch (err) {
          throw asProblem(err)
        }
      }
    )

    // Usage caps and usage of an app (usage.ts).
    registerUsageAdminRoutes(admin, ctx)

    admin.get('/admin/users', async () => {
      const users = await listUsers(store)
      return { data: users.map(userView), meta: { result_count: users.length } }
    })
  })
}
