import { createHash } from 'node:crypto'
import t from 'tap'
import type { Test } from 'tap'
import type { Runtime } from '../../services/common/runtime'
import { type Account } from '../../services/gateway/ads/accounts'
import { createDefaultFundingInstrument } from '../../services/gateway/ads/campaigns/funding-instruments'
import { expectError, OPERATOR_TOKEN } from '../support/fixtures/campaigns'
import { bearerRequest, oauth1Request, type TestResponse } from '../support/http'
import { startTestRuntime, type TestIdentity } from '../support/runtime'
import { eventually } from '../support/util'
import { createAdsIdentity } from '../support/fixtures/ads'

/**
 * Targeting criteria meeting custom audiences, end to end through the real
 * routes of the embedded runtime (gateway with its targeting index worker,
 * account history service):
 *  - the permission flow: an owner shares an audience with a second account
 *    of its business, the grantee targets it, the owner revokes the grant,
 *    new targeting by the grantee is refused while its criterion stays;
 *  - `custom_audiences/:id/targeted` lists the line items that target the
 *    audience (with_active true/false), fed by the criteria's entity changes;
 *  - account history shows TARGETING_CRITERIA changes.
 */

type Json = Record<string, unknown>
const data = <T = Json>(res: TestResponse): T => res.json<{ data: T }>().data
const sha256 = (s: string): string => createHash('sha256').update(s).digest('hex')

interface Advertiser {
  id: TestIdentity
  account: Account
  fiId: string
  /** Signed call to `/12/accounts/:own_account{path}` (or any path starting with /5/ or /12/ when absolute). */
  call(method: string, path: string, options?: { query?: Record<string, string>; json?: unknown }): Promise<TestResponse>
  /** Like call, but the response must be 200; returns its data. */
  ok(method: string, path: string, query?: Record<string, string>): Promise<Json>
}

async function advertiser(t: Test, rt: Runtime, businessId: string): Promise<Advertiser> {
  const { id, account } = await createAdsIdentity(rt.ctx, { businessId })
  const fi = await createDefaultFundingInstrument(rt.ctx, account.id, { user_id: id.user.id, platform: 'API' })
  const call: Advertiser['call'] = (method, path, options = {}) => {
    const url = path.startsWith('/5/') || path.startsWith('/12/') ? `${rt.baseUrl}${path}` : `${rt.baseUrl}/12/accounts/${account.id}${path}`
    return oauth1Request(method, url, id, { ...(options.query ? { query: options.query } : {}), ...(options.json !== undefined ? { json: options.json } : {}) })
  }
  return {
    id,
    account,
    fiId: fi.id,
    call,
    async ok(method, path, query) {
      const res = await call(method, path, query ? { query } : {})
      t.equal(res.status, 200, `${method} ${path} ${JSON.stringify(query ?? {})}: ${res.text.slice(0, 300)}`)
      return data(res)
    }
  }
}

async function campaignWithLineItem(a: Advertiser, name: string): Promise<{ campaignId: string; lineItemId: string }> {
  const campaign = await a.ok('POST', '/campaigns', { funding_instrument_id: a.fiId, name })
  const li = await a.ok('POST', '/line_items', { campaign_id: campaign.id as string, objective: 'ENGAGEMENTS', product_type: 'PROMOTED_TWEETS', placements: 'ALL_ON_SVC', name: `${name} line item` })
  return { campaignId: campaign.id as string, lineItemId: li.id as string }
}

/** A custom audience of the owner with `members` uploaded hashed emails (targetable from 100). */
async function audienceWith(a: Advertiser, name: string, members: number): Promise<string> {
  const audience = await a.ok('POST', '/custom_audiences', { name })
  if (members > 0) {
    const users = Array.from({ length: members }, (_, i) => ({ email: [sha256(`${name}-${i}@example.com`)] }))
    const res = await a.call('POST', `/custom_audiences/${audience.id}/users`, { json: [{ operation_type: 'Update', params: { users } }] })
    if (res.status !== 200) throw new Error(`upload failed: ${res.status} ${res.text}`)
  }
  return audience.id as string
}

/** Whole hours around now, the window account history reads accept. */
function hours(): { start_time: string; end_time: string } {
  const hour = 3_600_000
  const start = Math.floor(Date.now() / hour) * hour - hour
  return { start_time: new Date(start).toISOString(), end_time: new Date(start + 3 * hour).toISOString() }
}

t.test('shared audience: grantee targets it, revocation blocks new targeting only; targeted; history', async (t) => {
  const rt = await startTestRuntime(t, { env: { OPERATOR_TOKEN } })
  const owner = await advertiser(t, rt, 'biz-targeting')
  const grantee = await advertiser(t, rt, 'biz-targeting')
  const audienceId = await audienceWith(owner, 'Subscribers', 120)
  const small = await audienceWith(owner, 'Few', 5)
  t.match(await owner.ok('GET', `/custom_audiences/${audienceId}`), { targetable: true, audience_size: 120 })

  // The owner targets its own audience; an audience that is too small is refused with its reasons.
  const own = await campaignWithLineItem(owner, 'Owner campaign')
  const ownCriterion = await owner.ok('POST', '/targeting_criteria', { line_item_id: own.lineItemId, targeting_type: 'CUSTOM_AUDIENCE', targeting_value: audienceId })
  t.match(ownCriterion, { targeting_type: 'CUSTOM_AUDIENCE', targeting_value: audienceId, operator_type: 'EQ', name: 'Subscribers' })
  let res = await owner.call('POST', '/targeting_criteria', { query: { line_item_id: own.lineItemId, targeting_type: 'CUSTOM_AUDIENCE', targeting_value: small } })
  expectError(t, res, 400, 'INVALID_PARAMETER', 'targeting_value')
  t.match(res.text, /TOO_SMALL/, 'the reasons are named')
  // Aliases: the tailored-audience names, the exclusion form, and the expansion flag.
  t.match(await owner.ok('POST', '/targeting_criteria', { line_item_id: own.lineItemId, targeting_type: 'TAILORED_AUDIENCE_EXPANDED', targeting_value: audienceId }), { targeting_type: 'CUSTOM_AUDIENCE_EXPANDED', operator_type: 'EQ' })
  const other = await campaignWithLineItem(owner, 'Exclusions')
  t.match(await owner.ok('POST', '/targeting_criteria', { line_item_id: other.lineItemId, targeting_type: 'EXCLUDED_TAILORED_AUDIENCE', targeting_value: audienceId }), { targeting_type: 'CUSTOM_AUDIENCE', operator_type: 'NE' })
  const third = await campaignWithLineItem(owner, 'Expanded')
  t.match(await owner.ok('POST', '/targeting_criteria', { line_item_id: third.lineItemId, targeting_type: 'CUSTOM_AUDIENCE', targeting_value: audienceId, tailored_audience_expansion: 'true' }), { targeting_type: 'CUSTOM_AUDIENCE_EXPANDED' })
  expectError(t, await owner.call('POST', '/targeting_criteria', { query: { line_item_id: third.lineItemId, targeting_type: 'CUSTOM_AUDIENCE_EXPANDED', targeting_value: audienceId, operator_type: 'NE' } }), 400, 'INVALID_PARAMETER', 'operator_type')

  // Before any grant the grantee cannot target the owner's audience.
  const g1 = await campaignWithLineItem(grantee, 'Grantee campaign')
  const target = (lineItemId: string): Promise<TestResponse> =>
    grantee.call('POST', '/targeting_criteria', { query: { line_item_id: lineItemId, targeting_type: 'CUSTOM_AUDIENCE', targeting_value: audienceId } })
  expectError(t, await target(g1.lineItemId), 400, 'INVALID_PARAMETER', 'targeting_value')

  // The owner shares the audience (same business), the grantee targets it.
  const permission = await owner.ok('POST', `/5/accounts/${owner.account.id}/tailored_audiences/${audienceId}/permissions`, { granted_account_id: grantee.account.id, permission_level: 'READ_ONLY' })
  res = await target(g1.lineItemId)
  t.equal(res.status, 200, res.text.slice(0, 300))
  const granteeCriterion = data(res)
  t.match(granteeCriterion, { line_item_id: g1.lineItemId, targeting_type: 'CUSTOM_AUDIENCE', targeting_value: audienceId, deleted: false })

  // The owner revokes the grant: new targeting by the grantee is refused, the existing criterion stays.
  await owner.ok('DELETE', `/5/accounts/${owner.account.id}/tailored_audiences/${audienceId}/permissions/${permission.id}`)
  const g2 = await campaignWithLineItem(grantee, 'After revocation')
  expectError(t, await target(g2.lineItemId), 400, 'INVALID_PARAMETER', 'targeting_value')
  const batch = await oauth1Request('POST', `${rt.baseUrl}/12/batch/accounts/${grantee.account.id}/targeting_criteria`, grantee.id, {
    json: [{ operation_type: 'Create', params: { line_item_id: g2.lineItemId, targeting_type: 'TAILORED_AUDIENCE', targeting_value: audienceId } }]
  })
  t.equal(batch.status, 400)
  t.match(batch.json<{ operation_errors: unknown }>().operation_errors, [[{ code: 'INVALID_PARAMETER', parameter: 'params.targeting_value' }]], 'the batch path applies the same rule')
  t.match(await grantee.ok('GET', `/targeting_criteria/${granteeCriterion.id}`), { id: granteeCriterion.id, deleted: false, targeting_value: audienceId })
  const listed = data<Json[]>(await grantee.call('GET', '/targeting_criteria', { query: { line_item_ids: `${g1.lineItemId},${g2.lineItemId}` } }))
  t.same(listed.map((c) => c.id), [granteeCriterion.id], 'the old criterion is still listed; no new one was made')

  // targeted: the owner's line items that target the audience, from the criteria's entity changes.
  const targeted = async (query: Record<string, string>): Promise<Json[]> => data<Json[]>(await owner.call('GET', `/custom_audiences/${audienceId}/targeted`, { query }))
  const campaignIds = (entries: Json[]): string[] => entries.map((e) => e.campaign_id as string).sort()
  const everyOwnCampaign = [own.campaignId, other.campaignId, third.campaignId].sort()
  const active = await eventually(async () => {
    const entries = await targeted({})
    return campaignIds(entries).join() === everyOwnCampaign.join() ? entries : undefined
  }, 10_000)
  t.match(active.find((e) => e.campaign_id === own.campaignId), { campaign_name: 'Owner campaign', line_items: [{ id: own.lineItemId, name: 'Owner campaign line item', servable: true }] })
  t.notOk(active.some((e) => (e.line_items as Json[]).some((li) => li.id === g1.lineItemId)), "another account's line items are not the owner's to see")

  // A paused line item is not active: with_active=true leaves it out, with_active=false shows it as not servable.
  await owner.ok('PUT', `/line_items/${own.lineItemId}`, { entity_status: 'PAUSED' })
  await eventually(async () => !campaignIds(await targeted({ with_active: 'true' })).includes(own.campaignId), 10_000)
  const withInactive = await targeted({ with_active: 'false' })
  t.match(withInactive.find((e) => e.campaign_id === own.campaignId), { line_items: [{ id: own.lineItemId, servable: false }] })

  // Deleting its criteria takes a line item out of the list altogether.
  const ownCriteria = data<Json[]>(await owner.call('GET', '/targeting_criteria', { query: { line_item_ids: own.lineItemId } }))
  t.equal(ownCriteria.length, 2)
  for (const c of ownCriteria) await owner.ok('DELETE', `/targeting_criteria/${c.id}`)
  await eventually(async () => !campaignIds(await targeted({ with_active: 'false' })).includes(own.campaignId), 10_000)

  // The grantee's own view, while it could still see the audience, is refused now that the grant is gone.
  expectError(t, await grantee.call('GET', `/custom_audiences/${audienceId}/targeted`), 404, 'CUSTOM_AUDIENCE_NOT_FOUND', 'custom_audience_id')

  // Account history (allowlisted by the operator) shows the criterion's creation and deletion.
  const history = (query: Record<string, string>): Promise<TestResponse> => owner.call('GET', '/account_history', { query: { ...hours(), ...query } })
  expectError(t, await history({ entity_type: 'TARGETING_CRITERIA', entity_id: ownCriterion.id as string }), 403, 'FEATURE_NOT_ENABLED', undefined)
  const granted = await bearerRequest('POST', `${rt.baseUrl}/admin/ads/accounts/${owner.account.id}/features`, OPERATOR_TOKEN, { json: { feature_keys: ['ACCOUNT_HISTORY_ACCESS'] } })
  t.equal(granted.status, 200, granted.text)
  const entries = await eventually(async () => {
    const r = await history({ entity_type: 'TARGETING_CRITERIA', entity_id: ownCriterion.id as string })
    const list = r.status === 200 ? data<Json[]>(r) : []
    return list.length >= 2 ? list : undefined
  }, 10_000)
  t.same(entries.map((e) => e.change_type), ['CREATE', 'DELETE'])
  t.match(entries[0], {
    entity: 'TARGETING_CRITERIA',
    entity_id: ownCriterion.id,
    change_by: { user_id: owner.id.user.id, platform: 'API' },
    entity_data: { line_item_id: own.lineItemId, targeting_type: 'CUSTOM_AUDIENCE', targeting_value: audienceId, operator_type: 'EQ', deleted: false }
  })
  t.same((entries[1] as Json).changes, { deleted: { old: false, new: true } })
})
