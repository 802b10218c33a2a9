import type { FastifyInstance, FastifyRequest } from 'fastify'
import { AccountKeys, type Account } from '../../common/ads/accounts'
import { OPERATOR_FEATURES } from '../../common/ads/features'
import type { GroupOffsets } from '../../common/bus/types'
import type { ServiceContext } from '../../common/context'
import { instanceReports, knownGroups, lagSourceOf, type InstanceReport } from '../../common/console/presence'
import { consoleGuard, type ConsoleSessions } from '../../common/console/session'
import { type ConsoleViews, sendHtml } from '../../common/console/views'
import { Problems } from '../../common/errors'
import type { ServiceName } from '../../common/service'
import { accountFeatures, grantFeatures, revokeFeatures } from '../ads/accounts'

/**
 * Console, operators only, served by the gateway: consumer lag per group and
 * partition (the figures `make lag` prints: committed offset, end, lag),
 * the health and readiness of every service process (each reports itself in
 * the shared `console:` keyspace, services/common/console/presence.ts), and
 * the ads accounts with their features (grant, revoke) and a link to their
 * history (served read-only by account-history under /console/history).
 */

const SERVICES: ServiceName[] = ['gateway', 'webhooks', 'activity', 'stream', 'account-history']
const ACCOUNTS_SHOWN = 500
const accountParams = { type: 'object', required: ['account_id'], properties: { account_id: { type: 'string', pattern: '^[0-9a-z]{1,32}$' } } }

export interface LagGroup {
  group: string
  total: number
  rows: GroupOffsets[]
}

/** Every consumer group's offsets: all of the in-memory bus's, or on Kafka every group any process reported. */
export async function consumerLag(ctx: ServiceContext): Promise<LagGroup[]> {
  const source = lagSourceOf(ctx.bus)
  if (!source) return []
  const offsets = ctx.bus.kind === 'memory' ? await source.groupOffsets() : await source.groupOffsets([...new Set([...(await knownGroups(ctx)), ...(await source.groupOffsets()).map((g) => g.group)])])
  const byGroup = new Map<string, GroupOffsets[]>()
  for (const g of offsets) byGroup.set(g.group, [...(byGroup.get(g.group) ?? []), g])
  return [...byGroup.entries()]
    .map(([group, rows]) => ({ group, rows: rows.sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition), total: rows.reduce((n, r) => n + r.lag, 0) }))
    .sort((a, b) => a.group.localeCompare(b.group))
}

interface ServiceHealth {
  service: string
  instances: InstanceReport[]
  ready: number
}

/** Each service with the live processes that run it (the embedded process runs every one). */
export function healthByService(reports: InstanceReport[]): ServiceHealth[] {
  return SERVICES.map((service) => {
    const instances = reports.filter((r) => (r.services ?? [r.service]).includes(service))
    return { service, instances, ready: instances.filter((r) => r.ready).length }
  })
}

async function listAccounts(ctx: ServiceContext): Promise<Account[]> {
  const keys: string[] = []
  for await (const k of ctx.store.scanPrefix('ads:account:')) {
    keys.push(k)
    if (keys.length >= ACCOUNTS_SHOWN) break
  }
  const accounts = (await ctx.store.mgetJson<Account>(keys)).filter((a): a is Account => a !== undefined && typeof a.id === 'string')
  return accounts.sort((a, b) => b.created_at.localeCompare(a.created_at))
}

export async function registerConsoleOpsRoutes(app: FastifyInstance, ctx: ServiceContext, sessions: ConsoleSessions, views: ConsoleViews): Promise<void> {
  const page = consoleGuard(sessions, { page: true, operatorOnly: true })
  const api = consoleGuard(sessions, { operatorOnly: true })

  app.get('/console/ops/lag', { preHandler: page }, async (request, reply) => {
    const groups = await consumerLag(ctx)
    return sendHtml(reply, views.page(request, 'ops-lag', { groups, bus: ctx.bus.kind, chart: JSON.stringify({ labels: groups.map((g) => g.group), values: groups.map((g) => g.total) }) }, { title: 'Consumer lag', active: 'lag' }))
  })

  app.get('/console/ops/lag.json', { preHandler: api }, async () => ({ bus: ctx.bus.kind, groups: await consumerLag(ctx) }))

  app.get('/console/ops/health', { preHandler: page }, async (request, reply) => {
    const reports = await instanceReports(ctx)
    return sendHtml(reply, views.page(request, 'ops-health', { services: healthByService(reports), reports }, { title: 'Service health', active: 'health' }))
  })

  app.get('/console/ops/accounts', { preHandler: page }, async (request, reply) => {
    const accounts = await listAccounts(ctx)
    const rows = await Promise.all(accounts.map(async (a) => ({ account: a, features: [...(await accountFeatures(ctx, a.id))].sort() })))
    return sendHtml(reply, views.page(request, 'ops-accounts', { rows }, { title: 'Ads accounts', active: 'accounts' }))
  })

  const accountOf = async (request: FastifyRequest): Promise<Account> => {
    const id = (request.params as { account_id: string }).account_id
    const account = await ctx.store.getJson<Account>(AccountKeys.account(id))
    if (!account) throw Problems.generic(404, `No ads account ${id}.`)
    return account
  }

  const featuresFragment = async (account: Account): Promise<string> =>
    views.fragment('ops-features', { account, features: [...(await accountFeatures(ctx, account.id))].sort(), known: OPERATOR_FEATURES })

  app.get('/console/ops/accounts/:account_id', { preHandler: page, schema: { params: accountParams } }, async (request, reply) => {
    const account = await accountOf(request)
    return sendHtml(reply, views.page(request, 'ops-account', { account, features: await featuresFragment(account) }, { title: `Ads account ${account.id}`, active: 'accounts' }))
  })

  app.post('/console/ops/accounts/:account_id/features', { preHandler: api, schema: { params: accountParams } }, async (request, reply) => {
    const account = await accountOf(request)
    const body = (request.body ?? {}) as Record<string, unknown>
    const key = typeof body.feature === 'string' ? body.feature : ''
    if (!OPERATOR_FEATURES.includes(key)) throw Problems.invalidParameter('feature', key, `Unknown feature key. Known: ${OPERATOR_FEATURES.join(', ')}`)
    const action = body.action === 'revoke' ? 'revoke' : body.action === 'grant' ? 'grant' : undefined
    if (!action) throw Problems.invalidParameter('action', String(body.action ?? ''), 'action must be grant or revoke')
    if (action === 'grant') await grantFeatures(ctx, account.id, [key])
    else await revokeFeatures(ctx, account.id, [key])
    request.log.info({ account_id: account.id, feature: key, action }, `console: operator ${action === 'grant' ? 'granted' : 'revoked'} an account feature`)
    return sendHtml(reply.header('x-console-message', encodeURIComponent(`${key} ${action === 'grant' ? 'granted' : 'revoked'}`)), await featuresFragment(account))
  })
}
