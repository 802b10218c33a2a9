import { createHash } from 'node:crypto'
import type { Test } from 'tap'
import { TOPICS, type BusMessage } from '../../services/common/bus/types'
import type { Runtime } from '../../services/common/runtime'
import type { ServiceDefinition } from '../../services/common/service'
import { startAudienceBackgroundWork } from '../../services/gateway/ads/audiences/background-work'
import { EVALUATOR_NAME } from '../../services/gateway/ads/catalog/evaluator'
import type { EntityChange } from '../../services/gateway/ads/entities'
import { gatewayService } from '../../services/gateway/service'
import { oauth1Request, type TestIdentity, type TestResponse } from '../helper'

/** Shared by the catalog, audiences and insights tests. */

export type Json = Record<string, unknown>
export type ErrorItem = { code: string; message: string; parameter?: string }

/** The gateway with the catalog/audience workers, whether or not service.ts starts them already. */
export const gatewayWithWorkers: ServiceDefinition = {
  ...gatewayService,
  start: async (ctx) => {
    const base = (await gatewayService.start?.(ctx)) ?? []
    return base.some((w) => w.name === EVALUATOR_NAME) ? base : [...base, ...(await startAudienceBackgroundWork(ctx))]
  }
}

/** Encodes a query with %20 for spaces: URLSearchParams' `+` is signed differently by the oauth-1.0a client. */
export function queryString(query: Record<string, string> | undefined): string {
  if (!query || Object.keys(query).length === 0) return ''
  return `?${Object.entries(query)
    .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`)
    .join('&')}`
}

export interface CallOptions {
  query?: Record<string, string>
  json?: unknown
  body?: string
  contentType?: string
}

/** A signed ads call as `who`; `path` is below {ads_url} (starting with 12/ or 5/). */
export function caller(rt: Runtime, who: TestIdentity) {
  return (method: string, path: string, options: CallOptions & { as?: TestIdentity } = {}): Promise<TestResponse> => {
    const url = `${rt.baseUrl}/${path}${queryString(options.query)}`
    if (options.body !== undefined) return rawSigned(method, url, options.as ?? who, options.body, options.contentType)
    return oauth1Request(method, url, options.as ?? who, options.json !== undefined ? { json: options.json } : {})
  }
}

/** A signed request with a raw body (size limits, content types), signed like oauth1Request. */
async function rawSigned(method: string, url: string, who: TestIdentity, body: string, contentType = 'application/json'): Promise<TestResponse> {
  const { default: OAuth } = await import('oauth-1.0a')
  const { createHmac } = await import('node:crypto')
  const oauth = new OAuth({
    consumer: { key: who.app.consumer_key, secret: who.app.consumer_secret },
    signature_method: 'HMAC-SHA1',
    hash_function: (base, key) => createHmac('sha1', key).update(base).digest('base64')
  })
  // A form body is part of the signature base string; a JSON one is not.
  const data = contentType === 'application/x-www-form-urlencoded' ? Object.fromEntries(new URLSearchParams(body)) : {}
  const auth = oauth.authorize({ url, method, data }, { key: who.token.token, secret: who.token.secret })
  const res = await fetch(url, { method, headers: { ...oauth.toHeader(auth), 'content-type': contentType }, body })
  const text = await res.text()
  return { status: res.status, headers: res.headers, text, json: <T>() => JSON.parse(text) as T }
}

export function errorOf(res: TestResponse): ErrorItem {
  return (res.json<{ errors?: ErrorItem[] }>().errors ?? [])[0] as ErrorItem
}

export function sha256(value: string): string {
  return createHash('sha256').update(value).digest('hex')
}

/** Collects every entity change published while the test runs. */
export async function collectChanges(t: Test, rt: Runtime): Promise<EntityChange[]> {
  const changes: EntityChange[] = []
  const consumer = await rt.ctx.bus.subscribe({
    groupId: `test-changes-${process.pid}-${Math.random().toString(36).slice(2)}`,
    topics: [TOPICS.adsEntityChanges],
    handler: async (m: BusMessage) => void changes.push(m.value as EntityChange)
  })
  t.teardown(() => consumer.close())
  return changes
}
