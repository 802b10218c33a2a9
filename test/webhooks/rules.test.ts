import type { ActivityEventMessage } from '../../services/webhooks/delivery/messages'
import t from 'tap'
import { accountActivityBody, accountActivityDeliveryId, accountActivityEntry, messageTypeFor } from '../../services/webhooks/account-activity'
import { eventTypeOf } from '../../services/webhooks/delivery/attempt-log'
import { CRC_GRACE_MS, crcUpdate } from '../../services/webhooks/crc'
import { parseRetryAfter, withJitter } from '../../services/webhooks/delivery/retry-policy'
import { bodyValidationProblem, ECHO_MAX_CHARS, echoValue } from '../../services/webhooks/problems'
import type { Webhook } from '../../services/webhooks/registry'

const HOUR = 3_600_000

t.test('Retry-After: delta-seconds or an HTTP date, clamped to 0..24 h', async (t) => {
  const now = Date.UTC(2025, 0, 1, 12, 0, 0)
  t.equal(parseRetryAfter('120', now), 120_000)
  t.equal(parseRetryAfter(' 0 ', now), 0)
  t.equal(parseRetryAfter(['5', '9'], now), 5000, 'the first of repeated headers')
  t.equal(parseRetryAfter(new Date(now + 30_000).toUTCString(), now), 30_000)
  t.equal(parseRetryAfter(new Date(now - 30_000).toUTCString(), now), 0, 'a date in the past means now')
  t.equal(parseRetryAfter('999999999', now), 24 * HOUR)
  t.equal(parseRetryAfter(undefined, now), undefined)
  t.equal(parseRetryAfter('soon', now), undefined)
  t.equal(parseRetryAfter('-5', now), undefined)
})

t.test('jitter stays within 10 % of the step', async (t) => {
  t.equal(withJitter(0), 0)
  t.equal(withJitter(5000, () => 0), 4500)
  t.equal(withJitter(5000, () => 1), 5500)
  for (let i = 0; i < 200; i++) {
    const d = withJitter(300_000)
    if (d < 270_000 || d > 330_000) t.fail(`jittered delay ${d} out of range`)
  }
  t.pass('200 random draws in range')
})

t.test('CRC outcomes and the 28-hour rule', async (t) => {
  const now = Date.UTC(2025, 0, 2, 12, 0, 0)
  const base: Webhook = { id: '1', app_id: 'a', url: 'https://x.example/h', url_key: 'https://x.example/h', valid: true, created_at: new Date(now - 100 * HOUR).toISOString() }
  const recentOk = { ...base, last_crc_ok_at: new Date(now - HOUR).toISOString() }
  const oldOk = { ...base, last_crc_ok_at: new Date(now - CRC_GRACE_MS - 1000).toISOString() }

  t.match(crcUpdate(oldOk, { result: 'pass' }, now), { valid: true, clear: ['invalid_reason', 'disabled_at'] })
  t.match(crcUpdate(recentOk, { result: 'invalid', reason: 'Invalid response_token' }, now), { valid: false, set: { invalid_reason: 'CrcValidationFailed: Invalid response_token' } })
  t.same(crcUpdate(recentOk, { result: 'transient', reason: 'The webhook answered 503' }, now), { set: { last_crc_at: new Date(now).toISOString() } }, 'transient within 28 h: validity unchanged')
  t.match(crcUpdate(oldOk, { result: 'transient', reason: 'The webhook answered 503' }, now), { valid: false, set: { invalid_reason: /no passing check for 28 hours/ } })
  const fresh = { ...base, created_at: new Date(now - HOUR).toISOString() }
  t.notOk('valid' in crcUpdate(fresh, { result: 'transient', reason: 'timeout' }, now), 'without a recorded pass, the 28 hours count from creation')
})

t.test('Account Activity bodies', async (t) => {
  const event = (event_type: ActivityEventMessage['event_type'], payload: Record<string, unknown>, includes?: Record<string, unknown>): ActivityEventMessage => ({
    event_uuid: '1000000000000000001',
    event_type,
    user_id: '42',
    created_at: '2025-01-01T00:00:00.000Z',
    payload,
    ...(includes ? { includes } : {})
  })
  t.same(JSON.parse(accountActivityBody(event('post.create', { id: '7', text: 'hi' }, { users: [{ id: '42' }] }), '42')), {
    for_user_id: '42',
    event_uuid: '1000000000000000001',
    tweet_create_events: [{ id: '7', text: 'hi' }],
    users: [{ id: '42' }]
  })
  t.same(JSON.parse(accountActivityBody(event('post.delete', { id: '7', author_id: '42' }), '42')).tweet_delete_events, [
    { status: { id: '7', user_id: '42' }, timestamp_ms: String(Date.UTC(2025, 0, 1)) }
  ])
  const typing = { direct_message_indicate_typing_events: [{ created_timestamp: '1', sender_id: '42', target: { recipient_id: '9' } }], users: { 42: { id: '42' } } }
  t.same(JSON.parse(accountActivityBody(event('dm.indicate_typing', typing), '42')), { for_user_id: '42', event_uuid: '1000000000000000001', ...typing })
  t.same(JSON.parse(accountActivityBody(event('profile.update.bio', { before: 'a', after: 'b' }), '42')).user_update_events, [
    { event_type: 'profile.update.bio', created_at: '2025-01-01T00:00:00.000Z', before: 'a', after: 'b' }
  ])
  t.same(JSON.parse(accountActivityBody(event('spaces.start', { broadcast_id: 'b', event_type: 'spaces_start', user: { id: '42' } }), '42')).spaces_events, [
    { broadcast_id: 'b', event_type: 'spaces_start', user: { id: '42' } }
  ])
  // The type kept with the record is what the console would read back from the body.
  const kinds: Array<[string, Record<string, unknown>]> = [
    ['post.create', { id: '7', text: 'hi' }],
    ['post.delete', { id: '7', author_id: '42' }],
    ['dm.indicate_typing', typing],
    ['dm.sent', { direct_message_events: [{ type: 'message_create', id: '1' }], apps: {}, users: {} }],
    ['profile.update.bio', { before: 'a', after: 'b' }],
    ['spaces.start', { broadcast_id: 'b', event_type: 'spaces_start', user: { id: '42' } }],
    ['chat.sent', { text: 'x' }]
  ]
  for (const [kind, payload] of kinds) {
    const entry = accountActivityEntry(event(kind as ActivityEventMessage['event_type'], payload), '42')
    t.equal(entry.eventType, eventTypeOf(entry.body), `${kind}: ${entry.eventType}`)
  }
  t.equal(messageTypeFor('dm.read'), 'direct_message_mark_read_events')
  t.equal(messageTypeFor('chat.sent'), 'chat_sent_events', 'a kind this service does not know yet still gets a stable name')
  const a = accountActivityDeliveryId('1000000000000000001', '5')
  t.equal(a, accountActivityDeliveryId('1000000000000000001', '5'), 'the same (event, webhook) is the same delivery')
  t.not(a, accountActivityDeliveryId('1000000000000000001', '6'))
  t.match(a, /^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
})

function nestedArray(depth: number): unknown {
  let v: unknown = []
  for (let i = 0; i < depth; i++) v = [v]
  return v
}

t.test('echoed body values are bounded in length and depth', async (t) => {
  const deep = nestedArray(5000)
  t.throws(() => String(deep), RangeError, 'sanity: String() of this value overflows the stack')
  const shown = echoValue(deep)
  t.ok(shown.length <= ECHO_MAX_CHARS + 1, `${shown.length} characters`)
  t.match(shown, /^\[\[\[\[\[\[\[\[\[…\]/, 'the first levels, then an ellipsis')

  let deepObject: Record<string, unknown> = {}
  for (let i = 0; i < 5000; i++) deepObject = { a: deepObject }
  t.match(echoValue(deepObject), /^\{"a":\{"a":/)
  t.equal(echoValue('x'.repeat(10_000)), `${'x'.repeat(ECHO_MAX_CHARS)}…`, 'a long string is cut')
  const wide = Array.from({ length: 1_000_000 }, (_, i) => i)
  t.ok(echoValue(wide).length <= ECHO_MAX_CHARS + 1, 'a huge array is cut')
  t.equal(echoValue({ n: 1, s: 'two', b: true, z: null, l: [1, 'x'] }), '{"n":1,"s":"two","b":true,"z":null,"l":[1,"x"]}')
  t.equal(echoValue(42), '42')
  t.equal(echoValue('plain'), 'plain', 'a string is echoed as it is')

  // The Problem built from a schema violation on such a field: a 400, with the echo bounded.
  const err = Object.assign(new Error('body must NOT have additional properties'), {
    validation: [{ keyword: 'additionalProperties', instancePath: '', schemaPath: '#/additionalProperties', params: { additionalProperty: 'extra' }, message: 'must NOT have additional properties' }]
  })
  const problem = bodyValidationProblem(err, { url: 'https://example.com/hook', extra: deep }, () => 'UrlValidationFailed')
  t.equal(problem.statusCode, 400)
  const errors = (problem.extras as { errors: Array<{ message: string; parameters: Record<string, string[]> }> }).errors
  t.match(errors[0]?.message, /^UrlValidationFailed: The `extra` field is not allowed/)
  t.ok((errors[0]?.parameters.extra?.[0] ?? '').length <= ECHO_MAX_CHARS + 1)
})
