import type { Test } from 'tap'
import type { Runtime } from '../../services/common/runtime'
import type { Account } from '../../services/gateway/ads/accounts'
import { createDefaultFundingInstrument, type FundingInstrument } from '../../services/gateway/ads/campaigns/funding-instruments'
import { oauth1Request, type RequestOptions, startTestRuntime, type TestIdentity, type TestResponse } from '../helper'
import { createAdsIdentity } from './helper'

/**
 * Shared set-up of the campaign-management tests: the embedded runtime,
 * an identity with an account and the account's default funding
 * instrument, and a signed-request shortcut for the account's paths.
 */

export const OPERATOR_TOKEN = 'operator-token-for-campaign-tests'

export interface AdsFixture {
  rt: Runtime
  id: TestIdentity
  account: Account
  fi: FundingInstrument
  /** Signed request to `${baseUrl}/12/accounts/${account.id}${path}` (path '' = the account). */
  call(method: string, path: string, options?: RequestOptions): Promise<TestResponse>
  /** Signed request to any /12 path on the production host. */
  api(method: string, path: string, options?: RequestOptions): Promise<TestResponse>
}

export async function adsFixture(t: Test, options: { rt?: Runtime } = {}): Promise<AdsFixture> {
  const rt = options.rt ?? (await startTestRuntime(t, { env: { OPERATOR_TOKEN } }))
  const { id, account } = await createAdsIdentity(rt.ctx)
  const fi = await createDefaultFundingInstrument(rt.ctx, account.id, { user_id: id.user.id, platform: 'API' })
  return {
    rt,
    id,
    account,
    fi,
    call: (method, path, opts) => oauth1Request(method, `${rt.baseUrl}/12/accounts/${account.id}${path}`, id, opts),
    api: (method, path, opts) => oauth1Request(method, `${rt.baseUrl}${path}`, id, opts)
  }
}

export interface AdsErrorBody {
  errors: Array<{ code: string; message: string; parameter?: string }>
  request: { params: Record<string, unknown> }
}

/** The first error of an ads error response, with its status. */
export function adsError(res: TestResponse): { status: number; code: string | undefined; parameter: string | undefined; message: string | undefined } {
  const body = res.json<AdsErrorBody>()
  const first = body.errors?.[0]
  return { status: res.status, code: first?.code, parameter: first?.parameter, message: first?.message }
}

export async function createCampaign(f: AdsFixture, query: Record<string, string> = {}): Promise<Record<string, unknown>> {
  const res = await f.call('POST', '/campaigns', { query: { funding_instrument_id: f.fi.id, name: 'Campaign', ...query } })
  if (res.status !== 200) throw new Error(`campaign create failed: ${res.status} ${res.text}`)
  return res.json<{ data: Record<string, unknown> }>().data
}

export async function createLineItem(f: AdsFixture, campaignId: string, query: Record<string, string> = {}): Promise<Record<string, unknown>> {
  const res = await f.call('POST', '/line_items', {
    query: { campaign_id: campaignId, objective: 'ENGAGEMENTS', product_type: 'PROMOTED_TWEETS', placements: 'ALL_ON_SVC', ...query }
  })
  if (res.status !== 200) throw new Error(`line item create failed: ${res.status} ${res.text}`)
  return res.json<{ data: Record<string, unknown> }>().data
}

/** Asserts an ads error response: status, code and the parameter it names (undefined: none). */
export function expectError(t: Test, res: TestResponse, status: number, code: string, parameter: string | undefined): void {
  const e = adsError(res)
  t.equal(e.status, status, `status ${status} (${res.text.slice(0, 200)})`)
  t.equal(e.code, code, `code ${code}`)
  t.equal(e.parameter, parameter, `parameter ${parameter ?? 'none'}`)
  t.type(e.message, 'string')
}
