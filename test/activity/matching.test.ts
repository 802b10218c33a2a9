import t from 'tap'
import { deliveryId } from '../../services/activity/deliveries'
import { EVENT_TYPES, type EventType } from '../../services/activity/event-types'
import { type ActivityEvent, directionsFor, keywordMatches, textFields } from '../../services/activity/subscription-filter'
import type { Subscription } from '../../services/activity/subscriptions'
import { matchEvent } from '../../services/activity/matcher'
import { schemaRegistry } from '../../services/common/schemas'
import { sampleEvent } from '../support/fixtures/activity'

function event(type: EventType, userId: string, options: { text?: string; sent?: boolean } = {}): ActivityEvent {
  return { event_uuid: '1445880548472328200', ...sampleEvent(type, userId, options) } as unknown as ActivityEvent
}

function sub(overrides: Partial<Subscription> & { filter: Subscription['filter'] }): Subscription {
  return { subscription_id: '9', app_id: 'app', event_type: 'post.create', created_at: '', updated_at: '', ...overrides }
}

t.test('keywords are case-insensitive whole words or phrases', async (t) => {
  const yes: Array<[string, string]> = [
    ['rust', 'I like Rust, and Go.'],
    ['RUST', 'rust'],
    ['new job', 'Starting a NEW   job today!'],
    ['new job', 'new\njob'],
    ['#rust', 'love #Rust'],
    ['@xdevelopers', 'thanks @XDevelopers!'],
    ['c++', 'I write C++ daily'],
    ['café', 'Un CAFÉ au lait'],
    ['日本', 'これは日本です'],
    ['a.b', 'see a.b now']
  ]
  const no: Array<[string, string]> = [
    ['rust', 'trusted sources'],
    ['rust', 'rusty'],
    ['new job', 'new jobs'],
    ['new job', 'job new'],
    ['a.b', 'see axb now'],
    ['go', 'going']
  ]
  for (const [k, text] of yes) t.ok(keywordMatches(k, [text]), `"${k}" matches "${text}"`)
  for (const [k, text] of no) t.notOk(keywordMatches(k, [text]), `"${k}" does not match "${text}"`)
  t.ok(keywordMatches('rust', ['nothing here', 'rust here']), 'any text field may match')
})

t.test('the text searched per kind and the direction of dm events', async (t) => {
  t.same(textFields(event('post.create', '1', { text: 'hello' })), ['hello'])
  t.same(textFields(event('profile.update.bio', '1', { text: 'after' })), ['old value', 'after'])
  t.same(textFields(event('dm.received', '1', { text: 'psst' })), ['psst'])
  t.same(textFields(event('spaces.start', '1', { text: 'Space title' })), ['Space title'])
  t.same(textFields(event('post.delete', '1')), [])
  t.same(textFields(event('dm.read', '1')), [])
  for (const type of ['dm.sent', 'dm.received', 'dm.read', 'dm.indicate_typing'] as const) {
    t.same(directionsFor(event(type, '1', { sent: true }), '1'), ['sent'], `${type} sent by the filter user`)
    t.same(directionsFor(event(type, '1', { sent: false }), '1'), ['received'], `${type} received by the filter user`)
  }
  t.same(directionsFor(event('post.create', '1'), '1'), [])
})

/** A dm event carrying several messages: the first sent by user 42, the others received by them. */
function multiItemDm(type: 'dm.sent' | 'dm.received'): ActivityEvent {
  const e = event(type, '42', { sent: true, text: 'see you at noon' })
  const items = e.payload.direct_message_events as Array<Record<string, unknown>>
  const received = (id: string, text: string): Record<string, unknown> => ({
    ...items[0],
    id,
    message_create: { target: { recipient_id: '42' }, sender_id: '7', message_data: { text } }
  })
  e.payload = { direct_message_events: [items[0], received('1445880548472328194', 'hi'), received('1445880548472328195', 'Lunch tomorrow?')] }
  return e
}

t.test('every item of a dm event counts for direction and keyword, item by item', async (t) => {
  const e = multiItemDm('dm.received')
  t.same(directionsFor(e, '42').sort(), ['received', 'sent'], 'both directions occur among the items')
  t.same(textFields(e), ['see you at noon', 'hi', 'Lunch tomorrow?'], 'every item\'s text is searched')
  const candidates = [
    sub({ subscription_id: '1', event_type: 'dm.received', filter: { user_id: '42', direction: 'received' } }),
    sub({ subscription_id: '2', event_type: 'dm.received', filter: { user_id: '42', direction: 'sent' } }),
    sub({ subscription_id: '3', event_type: 'dm.received', filter: { user_id: '42', direction: 'received', keyword: 'lunch' } }),
    sub({ subscription_id: '4', event_type: 'dm.received', filter: { user_id: '42', direction: 'sent', keyword: 'lunch' } }),
    sub({ subscription_id: '5', event_type: 'dm.received', filter: { user_id: '42', direction: 'sent', keyword: 'noon' } }),
    sub({ subscription_id: '6', event_type: 'dm.received', filter: { user_id: '42', keyword: 'lunch' } })
  ]
  t.same(matchEvent(e, candidates).map((d) => d.subscription_id), ['1', '2', '3', '5', '6'], 'a received message in a later item matches; keyword and direction must hold for the same item')
  const onlySent = event('dm.received', '42', { sent: true, text: 'lunch?' })
  t.same(matchEvent(onlySent, candidates).map((d) => d.subscription_id), ['2', '4', '6'])
})

t.test('matchEvent applies type, user, keyword and direction, once per subscription', async (t) => {
  const e = event('dm.received', '42', { text: 'Meet at the Coffee shop', sent: false })
  const candidates = [
    sub({ subscription_id: '1', event_type: 'dm.received', filter: { user_id: '42' } }),
    sub({ subscription_id: '2', event_type: 'dm.received', filter: { user_id: '42', keyword: 'coffee shop' } }),
    sub({ subscription_id: '3', event_type: 'dm.received', filter: { user_id: '42', keyword: 'tea' } }),
    sub({ subscription_id: '4', event_type: 'dm.received', filter: { user_id: '42', direction: 'received' } }),
    sub({ subscription_id: '5', event_type: 'dm.received', filter: { user_id: '42', direction: 'sent' } }),
    sub({ subscription_id: '6', event_type: 'dm.sent', filter: { user_id: '42' } }),
    sub({ subscription_id: '7', event_type: 'dm.received', filter: { user_id: '43' } }),
    sub({ subscription_id: '1', event_type: 'dm.received', filter: { user_id: '42' } }),
    sub({ subscription_id: '8', event_type: 'dm.received', filter: { user_id: '42' }, tag: 'tagged', webhook_id: '77' })
  ]
  const out = matchEvent(e, candidates)
  t.same(out.map((d) => d.subscription_id), ['1', '2', '4', '8'])
  const tagged = out.find((d) => d.subscription_id === '8')
  t.equal(tagged?.webhook_id, '77')
  t.same(Object.keys(tagged?.envelope.data ?? {}), ['event_uuid', 'filter', 'event_type', 'tag', 'payload', 'includes'], 'envelope field order of docs/architecture.md')
  t.notOk('tag' in (out[0]?.envelope.data ?? {}), 'no tag when the subscription has none')
  t.equal(out[0]?.delivery_id, deliveryId(e.event_uuid, '1'))
  t.equal(deliveryId('1', '2'), deliveryId('1', '2'), 'delivery ids are stable for the same match')
  t.not(deliveryId('1', '2'), deliveryId('1', '3'))
  t.match(deliveryId('1', '2'), /^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
  const validate = schemaRegistry().validator('events/activity.deliveries')
  for (const d of out) t.ok(validate(d), `delivery ${d.subscription_id} matches its topic schema`)
})

t.test('every sample event matches its topic schema (the schemas are strict enough to fail)', async (t) => {
  const validate = schemaRegistry().validator('events/activity.events')
  for (const type of EVENT_TYPES) t.ok(validate(event(type, '1')), type)
  t.notOk(validate({ ...event('post.create', '1'), event_type: 'ProfileBioUpdate' }), 'PascalCase is never on the topic')
  t.notOk(validate({ ...event('profile.update.bio', '1'), payload: { before: 'a', after: 2 } }))
  t.notOk(validate({ ...event('spaces.end', '1'), payload: { ...event('spaces.start', '1').payload } }), 'spaces.end carries event_type spaces_end')
  t.notOk(validate({ ...event('post.delete', '1'), event_uuid: 'abc' }))
})
