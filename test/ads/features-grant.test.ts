import t from 'tap'
import { run as runAccounts } from '../../services/cli/accounts'
import type { Account } from '../../services/gateway/ads/accounts'
import { GATED_FEATURES } from '../../services/common/ads/features'
import { adsFixture, expectError, OPERATOR_TOKEN } from '../support/fixtures/campaigns'
import { addToLibrary, hasFfmpeg, Media, png, uploadKey } from '../support/fixtures/media'
import { bearerRequest, oauth1Request, type TestResponse } from '../support/http'
import { createIdentity, type TestIdentity } from '../support/runtime'
import { createAdsIdentity } from '../support/fixtures/ads'

/**
 * Every feature an operation is gated on is granted through the public
 * paths (the account CLI over the operator API, the operator API itself,
 * the sandbox host's feature routes) and then used: the gated operation is
 * refused before the grant, succeeds after it, and is refused again after
 * the revoke.
 */

t.ok(hasFfmpeg(), 'ffmpeg is installed (make deps-system); the video poll needs it')

type Cli = (argv: string[]) => Promise<{ code: number; out: string; err: string }>

function cliFor(baseUrl: string): Cli {
  return async (argv) => {
    let out = ''
    let err = ''
    const code = await runAccounts(argv, { env: { GATEWAY_URL: baseUrl, OPERATOR_TOKEN }, out: (s) => void (out += s), err: (s) => void (err += s) })
    return { code, out, err }
  }
}

/** A new user with an account opened on the sandbox host (POST {ads_sandbox_url}/12/accounts). */
async function sandboxAccount(sandbox: string, id: TestIdentity): Promise<Account> {
  const res = await oauth1Request('POST', `${sandbox}/12/accounts`, id)
  if (res.status !== 200) throw new Error(`sandbox account create failed: ${res.status} ${res.text}`)
  return res.json<{ data: Account }>().data
}

const pollQuery = (mediaKey: string): Record<string, string> => ({ name: 'Pick one', duration_in_minutes: '60', first_choice: 'Yes', second_choice: 'No', media_key: mediaKey })

t.test('every gated feature is known to the operator API and to the sandbox feature routes', async (t) => {
  const f = await adsFixture(t)
  const sandbox = f.rt.sandboxUrl as string
  const other = await createIdentity(f.rt.ctx.store)
  const sbx = await sandboxAccount(sandbox, other)
  t.same([...GATED_FEATURES].sort(), ['ACCOUNT_HISTORY_ACCESS', 'PROMOTED_MEDIA_POLLS', 'SHARE_AUDIENCE_OUTSIDE_BUSINESS'])
  for (const key of GATED_FEATURES) {
    const op = await bearerRequest('POST', `${f.rt.baseUrl}/admin/ads/accounts/${f.account.id}/features`, OPERATOR_TOKEN, { json: { feature_keys: [key] } })
    t.equal(op.status, 200, `operator grants ${key}: ${op.text}`)
    t.ok(op.json<{ data: { feature_keys: string[] } }>().data.feature_keys.includes(key))
    const sb = await oauth1Request('POST', `${sandbox}/12/accounts/${sbx.id}/features`, other, { query: { feature_keys: key } })
    t.equal(sb.status, 200, `the sandbox adds ${key}: ${sb.text}`)
    t.ok(sb.json<{ data: string[] }>().data.includes(key))
  }
  const removed = await oauth1Request('DELETE', `${sandbox}/12/accounts/${sbx.id}/features`, other, { query: { feature_keys: GATED_FEATURES.join(',') } })
  t.same(removed.json<{ data: string[] }>().data, [], 'and removes them')
  // The sandbox routes still refuse keys nobody knows, in the ads error shape.
  expectError(t, await oauth1Request('POST', `${sandbox}/12/accounts/${sbx.id}/features`, other, { query: { feature_keys: 'MAKE_IT_FREE' } }), 400, 'INVALID_PARAMETER', 'feature_keys')
})

t.test('PROMOTED_MEDIA_POLLS granted with `make account ARGS="feature grant ..."`: image and video polls', async (t) => {
  const f = await adsFixture(t)
  const cli = cliFor(f.rt.baseUrl)
  const polls = (q: Record<string, string>): Promise<TestResponse> => f.call('POST', '/cards/poll', { query: q })
  const media = Media.create(t)
  const image = await uploadKey(f.rt.baseUrl, f.id, png(1200, 628))
  t.equal((await addToLibrary(f.rt.baseUrl, f.id, f.account, image)).status, 200)
  const video = await uploadKey(f.rt.baseUrl, f.id, media.mp4(1280, 720, 1), { category: 'amplify_video' })
  t.equal((await addToLibrary(f.rt.baseUrl, f.id, f.account, video)).status, 200)

  expectError(t, await polls(pollQuery(video)), 403, 'FEATURE_NOT_ENABLED', 'media_key')
  const granted = await cli(['feature', 'grant', '--account', f.account.id, '--feature', 'PROMOTED_MEDIA_POLLS'])
  t.equal(granted.code, 0, granted.err)
  t.match(granted.out, /granted PROMOTED_MEDIA_POLLS/)

  const videoPoll = await polls(pollQuery(video))
  t.equal(videoPoll.status, 200, videoPoll.text)
  t.match(videoPoll.json(), { data_type: 'poll_card', data: { card_type: 'VIDEO_POLLS', video_url: String, content_duration_seconds: '1' } })
  const imagePoll = await polls(pollQuery(image))
  t.equal(imagePoll.status, 200, imagePoll.text)
  t.match(imagePoll.json(), { data: { card_type: 'IMAGE_POLLS' } })

  const revoked = await cli(['feature', 'revoke', '--account', f.account.id, '--feature', 'PROMOTED_MEDIA_POLLS'])
  t.equal(revoked.code, 0, revoked.err)
  expectError(t, await polls(pollQuery(image)), 403, 'FEATURE_NOT_ENABLED', 'media_key')
  t.equal((await polls({ name: 'Text', duration_in_minutes: '60', first_choice: 'Yes', second_choice: 'No' })).status, 200, 'text polls never need it')
})

t.test('PROMOTED_MEDIA_POLLS added on the sandbox host: a video poll on a sandbox account', async (t) => {
  const f = await adsFixture(t)
  const sandbox = f.rt.sandboxUrl as string
  const id = await createIdentity(f.rt.ctx.store)
  const account = await sandboxAccount(sandbox, id)
  // Uploads are v2 ({base_url}); the media library entry is the sandbox account's.
  const video = await uploadKey(f.rt.baseUrl, id, Media.create(t).mp4(1280, 720, 1), { category: 'amplify_video' })
  const added = await addToLibrary(sandbox, id, account, video)
  t.equal(added.status, 200, added.text)
  const poll = (): Promise<TestResponse> => oauth1Request('POST', `${sandbox}/12/accounts/${account.id}/cards/poll`, id, { query: pollQuery(video) })

  expectError(t, await poll(), 403, 'FEATURE_NOT_ENABLED', 'media_key')
  const on = await oauth1Request('POST', `${sandbox}/12/accounts/${account.id}/features`, id, { query: { feature_keys: 'PROMOTED_MEDIA_POLLS' } })
  t.same(on.json<{ data: string[] }>().data, ['PROMOTED_MEDIA_POLLS'])
  const made = await poll()
  t.equal(made.status, 200, made.text)
  t.match(made.json(), { data: { card_type: 'VIDEO_POLLS' } })
  await oauth1Request('DELETE', `${sandbox}/12/accounts/${account.id}/features`, id, { query: { feature_keys: 'PROMOTED_MEDIA_POLLS' } })
  expectError(t, await poll(), 403, 'FEATURE_NOT_ENABLED', 'media_key')
})

t.test('SHARE_AUDIENCE_OUTSIDE_BUSINESS granted by the operator, and on the sandbox host', async (t) => {
  const f = await adsFixture(t)
  const owner = await createAdsIdentity(f.rt.ctx, { businessId: 'biz-a' })
  const outsider = await createAdsIdentity(f.rt.ctx, { businessId: 'biz-b' })
  const audience = await oauth1Request('POST', `${f.rt.baseUrl}/12/accounts/${owner.account.id}/custom_audiences`, owner.id, { query: { name: 'Shared' } })
  t.equal(audience.status, 200, audience.text)
  const audienceId = audience.json<{ data: { id: string } }>().data.id
  const share = (): Promise<TestResponse> =>
    oauth1Request('POST', `${f.rt.baseUrl}/5/accounts/${owner.account.id}/tailored_audiences/${audienceId}/permissions`, owner.id, {
      query: { granted_account_id: outsider.account.id, permission_level: 'READ_ONLY' }
    })
  expectError(t, await share(), 403, 'ACTION_NOT_ALLOWED', 'granted_account_id')
  const cli = await cliFor(f.rt.baseUrl)(['feature', 'grant', '--account', owner.account.id, '--feature', 'SHARE_AUDIENCE_OUTSIDE_BUSINESS'])
  t.equal(cli.code, 0, cli.err)
  const shared = await share()
  t.equal(shared.status, 200, shared.text)
  t.match(shared.json(), { data_type: 'tailored_audience_permission', data: { tailored_audience_id: audienceId, granted_account_id: outsider.account.id, permission_level: 'READ_ONLY', deleted: false } })

  // On the sandbox: two accounts of one user, no business; the feature opens sharing between them.
  const sandbox = f.rt.sandboxUrl as string
  const id = await createIdentity(f.rt.ctx.store)
  const a = await sandboxAccount(sandbox, id)
  const b = await sandboxAccount(sandbox, id)
  const sbxAudience = await oauth1Request('POST', `${sandbox}/12/accounts/${a.id}/custom_audiences`, id, { query: { name: 'Sandbox shared' } })
  t.equal(sbxAudience.status, 200, sbxAudience.text)
  const sbxAudienceId = sbxAudience.json<{ data: { id: string } }>().data.id
  const sbxShare = (): Promise<TestResponse> =>
    oauth1Request('POST', `${sandbox}/5/accounts/${a.id}/tailored_audiences/${sbxAudienceId}/permissions`, id, { query: { granted_account_id: b.id, permission_level: 'READ_WRITE' } })
  expectError(t, await sbxShare(), 403, 'ACTION_NOT_ALLOWED', 'granted_account_id')
  t.equal((await oauth1Request('POST', `${sandbox}/12/accounts/${a.id}/features`, id, { query: { feature_keys: 'SHARE_AUDIENCE_OUTSIDE_BUSINESS' } })).status, 200)
  const sbxShared = await sbxShare()
  t.equal(sbxShared.status, 200, sbxShared.text)
  t.match(sbxShared.json(), { data: { granted_account_id: b.id, permission_level: 'READ_WRITE' } })
})

t.test('ACCOUNT_HISTORY_ACCESS added on the sandbox host: the sandbox account reads its history', async (t) => {
  const f = await adsFixture(t)
  const sandbox = f.rt.sandboxUrl as string
  const id = await createIdentity(f.rt.ctx.store)
  const account = await sandboxAccount(sandbox, id)
  const hour = 3_600_000
  const start = Math.floor(Date.now() / hour) * hour - hour
  const history = (): Promise<TestResponse> => oauth1Request('GET', `${sandbox}/12/accounts/${account.id}/account_history`, id, {
    query: { entity_type: 'CAMPAIGN', entity_id: 'anything', start_time: new Date(start).toISOString(), end_time: new Date(start + 3 * hour).toISOString() }
  })
  expectError(t, await history(), 403, 'FEATURE_NOT_ENABLED', undefined)
  t.equal((await oauth1Request('POST', `${sandbox}/12/accounts/${account.id}/features`, id, { query: { feature_keys: 'ACCOUNT_HISTORY_ACCESS' } })).status, 200)
  const read = await history()
  t.equal(read.status, 200, read.text)
  t.match(read.json(), { data: [] })
})
