import type { FastifyInstance } from 'fastify'
import type { ServiceContext } from '../../common/context'
import { Classic } from '../../common/errors'
import { getUser } from '../identity'
import { classicDate } from '../classic-date'

/**
 * GET 1.1/account/verify_credentials(.json): who the user-context token
 * belongs to. Clients call it right after the three-legged flow; it is also
 * the smallest authenticated route of the product.
 */


export function registerAccountRoutes(app: FastifyInstance, ctx: ServiceContext): void {
  for (const path of ['/1.1/account/verify_credentials.json', '/1.1/account/verify_credentials']) {
    app.get(path, { config: { auth: { schemes: ['oauth1-user'], access: 'read' }, rateLimit: { family: 'account-verify-credentials' } } }, async (request, reply) => {
      const auth = request.auth
      if (auth?.scheme !== 'oauth1-user') throw Classic.invalidToken()
      const user = await getUser(ctx.store, auth.userId)
      if (!user) throw Classic.invalidToken()
      // `id` is written as the JSON number the 1.1 interface uses; 19 digits do not survive a JS number, so the text is built here.
      const body = `{"id":${user.id},"id_str":${JSON.stringify(user.id)},"name":${JSON.stringify(user.screen_name)},"screen_name":${JSON.stringify(user.screen_name)},"created_at":${JSON.stringify(classicDate(user.created_at))}}`
      return reply.type('application/json; charset=utf-8').send(body)
    })
  }
}
