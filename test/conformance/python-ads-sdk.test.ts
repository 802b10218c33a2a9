import t from 'tap'
import { adsFixture, createCampaign } from '../support/fixtures/campaigns'
import { png, uploadKey } from '../support/fixtures/media'
import { Recorder } from '../support/fixtures/conformance/recorder'
import {
  CAMPAIGN, CARD, cardsFetchLoad, flattenParams, LINE_ITEM, MEDIA_LIBRARY, POLL_CARD, PROMOTED_TWEET, PyClient, PyCursor, PyException, PyResource, type PyValue, SDK_VERSION, SdkError, tweetCreate
} from '../support/fixtures/conformance/python-ads-sdk'

/**
 * The official Python ads SDK cannot run here (no Python registry); its
 * requests are replayed exactly (support/python-ads-sdk.ts says from which
 * source lines) and each scenario asserts what the SDK would read back: its
 * objects' attributes, its cursor's count, its Error subclass and details.
 */

async function rejection(promise: Promise<unknown>): Promise<SdkError> {
  try {
    await promise
  } catch (err) {
    if (err instanceof SdkError) return err
    throw err
  }
  throw new Error('expected the SDK to raise')
}

/** A Python exception the SDK's own code raises (not an HTTP error). */
async function pyRaise(promise: Promise<unknown>): Promise<PyException> {
  try {
    await promise
  } catch (err) {
    if (err instanceof PyException) return err
    throw err
  }
  throw new Error('expected the SDK to raise')
}

t.test('Python ads SDK (replayed): save() new and loaded entities, True booleans, cursor paging, with_total_count, errors', async (t) => {
  const f = await adsFixture(t)
  const recorder = await Recorder.start(t, f.rt.baseUrl)
  const client = new PyClient(recorder.url, { key: f.id.token.token, secret: f.id.token.secret }, { key: f.id.app.consumer_key, secret: f.id.app.consumer_secret })
  const accountId = f.account.id

  // campaign = Campaign(account); campaign.funding_instrument_id = ...; campaign.save()
  const campaign = new PyResource(client, CAMPAIGN, accountId)
    .set('funding_instrument_id', f.fi.id)
    .set('name', 'Spring sale')
    .set('entity_status', 'PAUSED')
    .set('daily_budget_amount_local_micro', 5_000_000)
  await campaign.save()
  t.match(campaign.get('id'), /^[a-z0-9]+$/, 'POST: the SDK object has its id')
  t.equal(campaign.get('currency'), 'USD')
  t.equal(campaign.get('servable'), null, 'servable false is skipped by from_response (a Python bool is an int 0)')
  t.same(campaign.get('reasons_not_servable'), ['PAUSED_BY_ADVERTISER', 'INCOMPLETE'])

  // campaign.name = ...; campaign.save(): every loaded property goes back, read-only ones included.
  campaign.set('name', 'Spring sale, extended').set('entity_status', 'ACTIVE')
  const put = client.sent.length
  await campaign.save()
  const sentPut = client.sent[put]
  t.equal(sentPut?.method, 'PUT')
  for (const readOnly of ['id=', 'created_at=', 'updated_at=', 'currency=USD', 'effective_status=', 'reasons_not_servable=PAUSED_BY_ADVERTISER', 'reasons_not_servable=INCOMPLETE', 'standard_delivery=true']) {
    t.ok(sentPut?.url.includes(`&${readOnly}`) || sentPut?.url.includes(`?${readOnly}`), `save() sent ${readOnly}`)
  }
  t.equal(campaign.get('name'), 'Spring sale, extended', 'PUT: the SDK reads the new name back')
  t.equal(campaign.get('entity_status'), 'ACTIVE')
  t.equal(campaign.get('daily_budget_amount_local_micro'), 5_000_000)

  // Campaign.load(account, id) then save() with a change.
  const loaded = await PyResource.load(client, CAMPAIGN, accountId, String(campaign.get('id')))
  t.equal(loaded.get('name'), 'Spring sale, extended')
  loaded.set('daily_budget_amount_local_micro', 7_000_000)
  await loaded.save()
  t.equal(loaded.get('daily_budget_amount_local_micro'), 7_000_000, 'load + save: the change is applied')
  t.equal(loaded.get('created_at'), campaign.get('created_at'))

  // LineItem(account) ... save(); then a change and save() again (create-only fields repeated).
  const lineItem = new PyResource(client, LINE_ITEM, accountId)
    .set('campaign_id', String(campaign.get('id')))
    .set('objective', 'ENGAGEMENTS')
    .set('product_type', 'PROMOTED_TWEETS')
    .set('placements', ['ALL_ON_SVC'])
    .set('name', 'First line item')
  await lineItem.save()
  t.equal(lineItem.get('goal'), 'ENGAGEMENT', 'the SDK reads the objective\'s defaults back')
  lineItem.set('name', 'First line item (renamed)').set('bid_amount_local_micro', 1_500_000).set('bid_strategy', 'MAX')
  await lineItem.save()
  t.equal(lineItem.get('name'), 'First line item (renamed)', 'line item save() of a loaded object')
  t.equal(lineItem.get('bid_amount_local_micro'), 1_500_000)
  t.equal(lineItem.get('campaign_id'), campaign.get('id'))

  // More campaigns for paging.
  for (const name of ['Summer', 'Autumn', 'Winter']) await createCampaign(f, { name })
  const all = await PyCursor.all(client, CAMPAIGN, accountId, { count: 2 })
  const items = await all.toArray()
  t.equal(items.length, 4, 'Campaign.all(account, count=2): the cursor pages through every campaign')
  t.equal(new Set(items.map((c) => c.get('id'))).size, 4, 'no campaign twice')
  t.ok(client.sent.some((r) => /[?&]cursor=/.test(r.url) && /[?&]count=2/.test(r.url)), 'the next page repeats the first request\'s params with cursor')

  const counted = await PyCursor.all(client, CAMPAIGN, accountId, { with_total_count: true, count: 2 })
  t.equal(counted.count, 4, 'with_total_count=True (sent as "True"): cursor.count is total_count')
  t.equal(counted.fetched, 2)
  t.ok(client.sent.at(-1)?.url.includes('with_total_count=True'), 'the SDK spells it True')
  // cursor.py keeps with_total_count in the params of the next page: the platform refuses it with cursor.
  const exclusive = await rejection(counted.toArray())
  t.equal(exclusive.kind, 'BadRequest')
  t.match(exclusive.details, [{ code: 'EXCLUSIVE_PARAMETERS' }], 'iterating past page 1 of a with_total_count listing raises BadRequest (documented in docs/conformance.md)')

  const winter = items.find((c) => c.get('name') === 'Winter') as PyResource
  await winter.delete()
  t.equal(winter.get('deleted'), true, 'delete(): the SDK reads deleted=true')
  const live = await (await PyCursor.all(client, CAMPAIGN, accountId)).toArray()
  t.equal(live.length, 3)
  const withDeleted = await (await PyCursor.all(client, CAMPAIGN, accountId, { with_deleted: true })).toArray()
  t.equal(withDeleted.length, 4, 'with_deleted=True (sent as "True") lists the deleted campaign')
  t.ok(client.sent.at(-1)?.url.includes('with_deleted=True'))

  // Errors as the SDK raises them.
  const missing = await rejection(PyResource.load(client, CAMPAIGN, accountId, 'nope1'))
  t.equal(missing.kind, 'NotFound')
  t.match(missing.details, [{ code: 'CAMPAIGN_NOT_FOUND' }])
  const bad = await rejection(PyCursor.all(client, CAMPAIGN, accountId, { count: 5000 }))
  t.equal(bad.kind, 'BadRequest')
  t.match(bad.details, [{ code: 'INVALID_PARAMETER', parameter: 'count' }])

  t.equal(recorder.exchanges.length, client.sent.length, 'the recorder saw every replayed request')
  t.comment(`client twitter-python-ads-sdk@${SDK_VERSION} (replayed): ${client.sent.length} calls`)
})

t.test('Python ads SDK (replayed), creative.py: Tweet.create, PromotedTweet, MediaLibrary, PollCard, Card, CardsFetch, Tweets', async (t) => {
  const f = await adsFixture(t)
  const recorder = await Recorder.start(t, f.rt.baseUrl)
  const client = new PyClient(recorder.url, { key: f.id.token.token, secret: f.id.token.secret }, { key: f.id.app.consumer_key, secret: f.id.app.consumer_secret })
  const accountId = f.account.id
  const userId = f.id.user.id
  // The upload itself is not an SDK call (its example uses Request on upload.twitter.com): done directly.
  const mediaKey = await uploadKey(f.rt.baseUrl, f.id, png(800, 419), { category: 'tweet_image', contentType: 'image/png', filename: 'sale.png' })

  // ------------------------------------------------------------ MediaLibrary
  // media_library = MediaLibrary(account); .name, .file_name, .media_key = ...; data = media_library.add()
  const library = new PyResource(client, MEDIA_LIBRARY, accountId).set('name', 'name').set('file_name', 'name.png').set('media_key', mediaKey)
  await library.libraryAdd()
  t.equal(client.sent.at(-1)?.url, `/12/accounts/${accountId}/media_library?media_key=${mediaKey}&file_name=name.png&name=name`, 'add(): to_params in declaration order')
  t.equal(library.get('media_type'), 'IMAGE', 'add(): the SDK reads the library object back')
  t.match(library.get('media_url'), /^https?:\/\//)
  t.equal(library.get('tweeted'), null, 'tweeted false is skipped by from_response')
  // data.name = 'name - updated'; data.update(): every loaded property goes back (read-only ones included).
  library.set('name', 'name - updated')
  const update = client.sent.length
  await library.libraryUpdate()
  const sentUpdate = client.sent[update]?.url ?? ''
  t.equal(client.sent[update]?.method, 'PUT')
  for (const sent of ['created_at=', 'media_status=TRANSCODE_COMPLETED', 'media_type=IMAGE', 'media_url=', 'updated_at=', `media_key=${mediaKey}`, 'file_name=name.png', 'name=name+-+updated']) {
    t.ok(sentUpdate.includes(`?${sent}`) || sentUpdate.includes(`&${sent}`), `update() sent ${sent}`)
  }
  t.equal(library.get('name'), 'name - updated', 'update(): the new name read back')
  await library.libraryReload()
  t.equal(library.get('name'), 'name - updated', 'reload() by media_key')
  const images = await PyCursor.all(client, MEDIA_LIBRARY, accountId, { media_type: 'IMAGE' })
  t.same((await images.toArray()).map((m) => m.get('media_key')), [mediaKey], 'MediaLibrary.all(account, media_type=IMAGE)')
  // A read-only field changed for real is refused, naming it.
  const changed = new PyResource(client, MEDIA_LIBRARY, accountId)
  for (const [k, v] of library.attrs) changed.set(k, v)
  changed.set('media_type', 'VIDEO')
  const readOnly = await rejection(changed.libraryUpdate())
  t.equal(readOnly.kind, 'BadRequest')
  t.match(readOnly.details, [{ code: 'INVALID_PARAMETER', parameter: 'media_type' }], 'a real change of a read-only field is INVALID_PARAMETER naming it')

  // ------------------------------------------------------------ PollCard
  // pc = PollCard(account); pc.duration_in_minutes = 10080; ...; pc.save()
  const poll = new PyResource(client, POLL_CARD, accountId).set('duration_in_minutes', 10080).set('first_choice', 'Northern').set('second_choice', 'Southern').set('name', 'hemisphere poll card from SDK')
  await poll.save()
  t.equal(client.sent.at(-1)?.url, `/12/accounts/${accountId}/cards/poll?duration_in_minutes=10080&first_choice=Northern&name=hemisphere+poll+card+from+SDK&second_choice=Southern`)
  t.match(poll.get('card_uri'), /^card:\/\/\d+$/, 'save(): the SDK reads card_uri back')
  t.equal(poll.get('card_type'), 'TEXT_POLLS')
  const loadedPoll = await PyResource.load(client, POLL_CARD, accountId, String(poll.get('id')))
  t.equal(loadedPoll.get('first_choice'), 'Northern', 'PollCard.load')
  // Poll cards cannot be updated (docs/ads.md): save() of a loaded poll is refused, as the platform refuses it.
  const pollUpdate = await rejection(loadedPoll.set('name', 'renamed').save())
  t.equal(pollUpdate.kind, 'Error', '405 is not in error.py ERRORS: the base Error')
  t.equal(pollUpdate.code, 405)
  t.match(pollUpdate.details, [{ code: 'METHOD_NOT_ALLOWED' }])

  // ------------------------------------------------------------ Card (unified cards, JSON bodies)
  const components: PyValue[] = [{ type: 'MEDIA', media_key: mediaKey }, { type: 'DETAILS', title: 'Spring sale', destination: { type: 'WEBSITE', url: 'https://example.com/sale' } }]
  const card = new PyResource(client, CARD, accountId).set('name', 'my new card').set('components', components)
  await card.cardSave()
  t.same(JSON.parse(client.sent.at(-1)?.body ?? '{}'), { name: 'my new card', components }, 'Card.save(): the JSON body {name, components}')
  t.equal(card.get('card_type'), 'IMAGE_WEBSITE', 'POST: the SDK reads the card back')
  t.match(card.get('id'), /^\d+$/)
  // card.components = [...]; card.save(): a PUT of the loaded card with its components changed.
  const relaid = JSON.parse(JSON.stringify(card.get('components'))) as Array<{ destination?: { url: string } }>
  ;(relaid[1] as { destination: { url: string } }).destination.url = 'https://example.com/newvalue'
  card.set('components', relaid as never).set('name', 'my card, edited')
  await card.cardSave()
  t.equal(client.sent.at(-1)?.method, 'PUT')
  t.equal(card.get('name'), 'my card, edited', 'Card.save() of a loaded card: the SDK reads the update back')
  t.match(card.get('components'), [{ type: 'MEDIA' }, { destination: { url: 'https://example.com/newvalue' } }])
  const cards = await (await PyCursor.all(client, CARD, accountId)).toArray()
  t.same(cards.map((c) => c.get('name')), ['my card, edited'], 'Card.all(account)')
  // Card.load reads data as one object; GET cards/:card_id answers a data array (docs/ads.md), which the SDK cannot read.
  const load = await pyRaise(PyResource.load(client, CARD, accountId, String(card.get('id'))))
  t.equal(load.message, "AttributeError: 'list' object has no attribute 'get'", 'Card.load on the documented data array raises AttributeError (docs/conformance.md)')

  // CardsFetch.load(account, card_uris=[...]) and (account, card_id=...)
  const fetched = (await cardsFetchLoad(client, accountId, { card_uris: [String(card.get('card_uri')), String(poll.get('card_uri'))] })) as PyCursor
  t.same((await fetched.toArray()).map((c) => c.get('card_type')).sort(), ['IMAGE_WEBSITE', 'TEXT_POLLS'], 'CardsFetch.load(card_uris=[...]): comma-joined, any kind of card')
  t.ok(client.sent.at(-1)?.url.includes(`card_uris=${encodeURIComponent(String(card.get('card_uri')))}%2C`), 'FlattenParams joined the list')
  const one = (await cardsFetchLoad(client, accountId, { card_id: String(poll.get('id')) })) as PyResource
  t.equal(one.get('first_choice'), 'Northern', 'CardsFetch.load(card_id=...): card_id sent again as a parameter, one object read')

  // ------------------------------------------------------------ Tweet.create, PromotedTweet
  const campaign = new PyResource(client, CAMPAIGN, accountId).set('funding_instrument_id', f.fi.id).set('name', 'Creatives')
  await campaign.save()
  const lineItem = new PyResource(client, LINE_ITEM, accountId).set('campaign_id', String(campaign.get('id'))).set('objective', 'ENGAGEMENTS').set('product_type', 'PROMOTED_TWEETS').set('placements', ['ALL_ON_SVC'])
  await lineItem.save()
  const tweet1 = await tweetCreate(client, accountId, { text: 'There can be only one...', as_user_id: userId })
  t.match(tweet1, { id_str: /^\d+$/, text: 'There can be only one...' }, 'Tweet.create: the SDK returns data as is')
  const tweet2 = await tweetCreate(client, accountId, { text: 'Fine. There can be two.', as_user_id: userId, card_uri: String(card.get('card_uri')), nullcast: true })
  t.ok(client.sent.at(-1)?.url.includes('nullcast=true'), 'FlattenParams lowercased nullcast')
  t.equal(tweet2.card_uri, card.get('card_uri'), 'a post with the card')
  const tweet3 = await tweetCreate(client, accountId, { text: 'And a third, promoted the old way', as_user_id: userId })

  // PromotedTweet.attach(account, line_item_id=..., tweet_ids=[...]): a Cursor over the POST.
  const attachKwargs = flattenParams({ line_item_id: String(lineItem.get('id')), tweet_ids: [String(tweet1.id_str), String(tweet2.id_str)] })
  const attached = await (await PyCursor.request(client, 'post', `/12/accounts/${accountId}/promoted_tweets`, attachKwargs, PROMOTED_TWEET, accountId)).toArray()
  t.equal(client.sent.at(-1)?.url, `/12/accounts/${accountId}/promoted_tweets?line_item_id=${String(lineItem.get('id'))}&tweet_ids=${String(tweet1.id_str)}%2C${String(tweet2.id_str)}`, 'attach(): tweet_ids comma-joined by FlattenParams')
  t.same(attached.map((pt) => pt.get('tweet_id')), [tweet1.id_str, tweet2.id_str], 'attach(): one PromotedTweet per post')
  t.equal(attached[0]?.get('entity_status'), 'ACTIVE')
  // PromotedTweet(account); .line_item_id, .tweet_id = ...; save() (deprecated): tweet_ids as a one-item list, data[0] read back.
  const legacy = new PyResource(client, PROMOTED_TWEET, accountId).set('tweet_id', String(tweet3.id_str)).set('line_item_id', String(lineItem.get('id')))
  await legacy.savePromotedTweet()
  t.equal(client.sent.at(-1)?.url, `/12/accounts/${accountId}/promoted_tweets?line_item_id=${String(lineItem.get('id'))}&tweet_ids=${String(tweet3.id_str)}`)
  t.equal(legacy.get('tweet_id'), tweet3.id_str, 'save(): the promoted post read back from data[0]')
  const again = await pyRaise(legacy.savePromotedTweet())
  t.equal(again.kind, 'HTTPError', 'save() of a promoted post with an id raises without a request')
  const promoted = await (await PyCursor.all(client, PROMOTED_TWEET, accountId, { line_item_ids: String(lineItem.get('id')) })).toArray()
  t.equal(promoted.length, 3, 'account.promoted_tweets(line_item_ids=...)')
  const loadedPromoted = await PyResource.load(client, PROMOTED_TWEET, accountId, String(legacy.get('id')))
  t.equal(loadedPromoted.get('line_item_id'), lineItem.get('id'), 'PromotedTweet.load')
  await loadedPromoted.delete()
  t.equal(loadedPromoted.get('deleted'), true, 'delete(): the SDK reads deleted=true')

  // Tweets.all(account, tweet_type=..., tweet_ids=[...], trim_user=True): a Cursor of dicts.
  const tweets = await PyCursor.request(client, 'get', `/12/accounts/${accountId}/tweets`, flattenParams({ tweet_type: 'PUBLISHED', tweet_ids: [String(tweet1.id_str), String(tweet2.id_str)], trim_user: true }), null, accountId)
  t.ok(client.sent.at(-1)?.url.endsWith('&trim_user=true'), 'FlattenParams lowercased trim_user')
  t.same(tweets.raw.map((x) => x.id_str).sort(), [tweet1.id_str, tweet2.id_str].sort(), 'Tweets.all: the posts as dicts')

  // MediaLibrary delete (after the card and posts that used it).
  await library.libraryDelete()
  t.equal(library.get('deleted'), true, 'MediaLibrary.delete(): deleted=true read back')

  t.equal(recorder.exchanges.length, client.sent.length, 'the recorder saw every replayed request')
  t.comment(`client twitter-python-ads-sdk@${SDK_VERSION} (replayed), creatives: ${client.sent.length} calls`)
})
