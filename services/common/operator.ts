import fs from 'node:fs'
import path from 'node:path'
import type { FastifyRequest } from 'fastify'
import type { Config } from './config'
import { Problems } from './errors'
import { newSecret } from './ids'
import { safeEqual } from './auth/oauth1'

/**
 * The operator API (`/admin/*`, driven by the CLI and the Makefile) is
 * authenticated by one bearer token. OPERATOR_TOKEN sets it; in embedded mode
 * without it, a random token is created once in DATA_DIR/operator-token
 * (mode 0600) where the CLI on the same machine finds it. A distributed
 * process without OPERATOR_TOKEN keeps the operator API closed.
 */

export function operatorTokenFile(config: Config): string {
  return path.resolve(config.dataDir, 'operator-token')
}

export function resolveOperatorToken(config: Config, embedded: boolean): string | undefined {
  if (config.operatorToken !== '') return config.operatorToken
  const file = operatorTokenFile(config)
  if (fs.existsSync(file)) return fs.readFileSync(file, 'utf8').trim()
  if (!embedded || config.redisUrl !== '' || config.redisClusterNodes.length > 0) return undefined
  fs.mkdirSync(path.dirname(file), { recursive: true })
  const token = newSecret(32)
  fs.writeFileSync(file, `${token}\n`, { mode: 0o600 })
  return token
}

/** preHandler for admin routes: 401 without the operator token, 403 when the operator API is closed. */
export function operatorGuard(token: string | undefined) {
  return async (request: FastifyRequest): Promise<void> => {
    if (token === undefined) throw Problems.generic(403, 'The operator API is closed: set OPERATOR_TOKEN.')
    const header = request.headers.authorization ?? ''
    const presented = header.startsWith('Bearer ') ? header.slice(7).trim() : ''
    if (presented === '' || !safeEqual(presented, token)) throw Problems.generic(401, 'Operator token required.')
  }
}
