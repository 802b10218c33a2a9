import { createHmac } from 'node:crypto'
import OAuth from 'oauth-1.0a'

/**
 * The official Python ads SDK (twitter-python-ads-sdk), replayed. It cannot
 * be installed here (no Python registry), so this module sends exactly the
 * requests its source sends and reads answers the way it reads them. Read
 * from the public repository (xdevplatform/twitter-python-ads-sdk, commit
 * a3dd581 = tag v11.0.0, its newest commit and release: twitter_ads/http.py,
 * resource.py, cursor.py, campaign.py, creative.py, error.py, utils.py).
 * That source is VERSION (11, 0, 0) with API_VERSION '11'; no v12 SDK was
 * ever published (PyPI's newest twitter-ads is 11.0.0). The product serves
 * the Ads API version 12 only, so the replay puts '12' where the SDK's
 * paths put API_VERSION and changes nothing else (docs/conformance.md):
 *
 *  - http.py: every parameter goes in the query string (`requests` with
 *    `params=`; `data` only for batch bodies), signed by requests_oauthlib
 *    (OAuth 1.0a HMAC-SHA1 over the decoded query), User-Agent
 *    `twitter-ads version: ... platform: Python ...`; a status above 399
 *    raises the Error subclass of error.py for it, with `details` = the
 *    body's `errors`.
 *  - `requests` encodes params with urlencode(doseq=True): quote_plus
 *    (space as `+`), a list as repeated keys (an empty list: nothing), None
 *    dropped, other values through str(): True is `True`.
 *  - resource.py from_response: each declared property is read from the
 *    answer; a value that is int 0 in Python (0, and False: bool is an int)
 *    is skipped, so the attribute keeps its previous value; times end up as
 *    the raw strings (the parsed datetime is overwritten by the raw value).
 *  - resource.py to_params (what save() sends): every declared property
 *    whose value is not None, read-only ones included; booleans as
 *    `true`/`false`, lists as they are (repeated keys).
 *  - save(): PUT RESOURCE when the object has an id, else POST
 *    RESOURCE_COLLECTION; then from_response(data).
 *  - cursor.py: the first page on creation; `next` fetches the next page
 *    with the first request's params plus `cursor` (the same dict, so
 *    with_total_count stays); `count` is total_count or the items fetched.
 *    A Cursor over a request of another method (PromotedTweet.attach's
 *    POST) repeats that method.
 *  - utils.py FlattenParams (on the classmethods Persistence.create,
 *    PromotedTweet.attach, CardsFetch.load, Tweets.all, Tweet.create): a
 *    list keyword argument is comma-joined, a boolean is `true`/`false`.
 *  - creative.py: PromotedTweet.save() (deprecated) POSTs to_params with
 *    `tweet_id` renamed `tweet_ids` (a one-item list) and reads data[0],
 *    and raises HTTPError without a request when the object has an id;
 *    MediaLibrary add/update/delete/reload address the object by
 *    media_key; Card.save() sends the JSON body {"name","components"}
 *    (both, None as null) with Content-Type application/json; Card.load
 *    and CardsFetch.load(card_id=...) read `data` as one object: a
 *    `data` array is `'list' object has no attribute 'get'`.
 */

/** The product's Ads API version, in place of the SDK's API_VERSION '11'. */
export const API_VERSION = '12'
/** twitter_ads VERSION (11, 0, 0) at a3dd581 (tag v11.0.0), as get_version() spells it in the User-Agent. */
export const SDK_VERSION = '11.0.0'
export const SDK_COMMIT = 'a3dd581'
const USER_AGENT = `twitter-ads version: ${SDK_VERSION} platform: Python 3.11 (CPython/linux)`

/** A Python value as the SDK holds it. */
export type PyValue = string | number | boolean | null | PyValue[] | { [k: string]: PyValue }

/** quote_plus: RFC 3986 unreserved characters kept, space as `+`. */
function quotePlus(s: string): string {
  return encodeURIComponent(s)
    .replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
    .replace(/%20/g, '+')
}

/** Python's str() of a scalar. */
function pyStr(v: PyValue): string {
  if (v === true) return 'True'
  if (v === false) return 'False'
  if (v === null) return 'None'
  return typeof v === 'object' ? JSON.stringify(v) : String(v)
}

/** What iterating a Python value yields (requests and urlencode iterate lists, and a dict's keys). */
function pyIter(v: PyValue): PyValue[] | undefined {
  if (Array.isArray(v)) return v
  if (v !== null && typeof v === 'object') return Object.keys(v)
  return undefined
}

/**
 * requests' _encode_params then urlencode(doseq=True): pairs in dict order;
 * an iterable value (a list, or a dict: its keys) gives one pair per item,
 * None items dropped; an item that is itself iterable is spelled item by
 * item under the same key again (urlencode's doseq).
 */
export function encodeParams(params: Record<string, PyValue>): Array<[string, string]> {
  const pairs: Array<[string, string]> = []
  for (const [k, v] of Object.entries(params)) {
    if (v === null) continue
    const items = pyIter(v) ?? [v]
    for (const item of items) {
      if (item === null) continue
      const inner = typeof item === 'string' ? undefined : pyIter(item)
      if (inner) for (const x of inner) pairs.push([k, pyStr(x)])
      else pairs.push([k, pyStr(item)])
    }
  }
  return pairs
}

/** utils.py FlattenParams: list keyword arguments comma-joined (str() of each), booleans lowercased. */
export function flattenParams(kwargs: Record<string, PyValue>): Record<string, PyValue> {
  const out: Record<string, PyValue> = {}
  for (const [k, v] of Object.entries(kwargs)) {
    if (Array.isArray(v)) out[k] = v.map(pyStr).join(',')
    else if (typeof v === 'boolean') out[k] = String(v)
    else out[k] = v
  }
  return out
}

/** A Python exception raised by the SDK's own code, not from an HTTP answer (AttributeError, HTTPError). */
export class PyException extends Error {
  constructor(
    readonly kind: string,
    message: string
  ) {
    super(`${kind}: ${message}`)
  }
}

export class SdkError extends Error {
  constructor(
    readonly kind: string,
    readonly code: number,
    readonly details: Array<{ code: string; message: string; parameter?: string }> | null
  ) {
    super(`<${kind} code=${code}>`)
  }
}

/** error.py's ERRORS map. */
const ERRORS: Record<number, string> = { 400: 'BadRequest', 401: 'NotAuthorized', 403: 'Forbidden', 404: 'NotFound', 429: 'RateLimit', 500: 'ServerError', 503: 'ServiceUnavailable' }

export interface SentRequest {
  method: string
  url: string
  body?: string
}

export class PyClient {
  readonly sent: SentRequest[] = []
  private readonly oauth: OAuth

  constructor(
    private readonly domain: string,
    private readonly token: { key: string; secret: string },
    consumer: { key: string; secret: string }
  ) {
    this.oauth = new OAuth({ consumer, signature_method: 'HMAC-SHA1', hash_function: (base, key) => createHmac('sha1', key).update(base).digest('base64') })
  }

  /** http.py Request(...).perform(): the body of a 2xx, else the SDK's Error. */
  async perform(
    method: 'get' | 'post' | 'put' | 'delete',
    resource: string,
    params: Record<string, PyValue> = {},
    options: { headers?: Record<string, string>; body?: string } = {}
  ): Promise<Record<string, unknown>> {
    const pairs = encodeParams(params)
    const base = `${this.domain}${resource}`
    const url = pairs.length > 0 ? `${base}?${pairs.map(([k, v]) => `${quotePlus(k)}=${quotePlus(v)}`).join('&')}` : base
    // oauthlib signs the decoded query parameters (repeated keys kept).
    const data: Record<string, string | string[]> = {}
    for (const [k, v] of pairs) {
      const prev = data[k]
      data[k] = prev === undefined ? v : Array.isArray(prev) ? [...prev, v] : [prev, v]
    }
    const auth = this.oauth.authorize({ url: base, method: method.toUpperCase(), data }, this.token)
    // A JSON body (Card.save) is not form-encoded: oauthlib signs the query only.
    const headers: Record<string, string> = {
      'user-agent': USER_AGENT,
      'accept-encoding': 'gzip, deflate',
      accept: '*/*',
      ...(options.headers ?? {}),
      ...this.oauth.toHeader(auth)
    }
    this.sent.push({ method: method.toUpperCase(), url: url.slice(this.domain.length), body: options.body })
    // requests sends Content-Length: 0 on a PUT or POST without data.
    const body = options.body ?? (method === 'put' || method === 'post' ? '' : undefined)
    const res = await fetch(url, { method: method.toUpperCase(), headers, body })
    const text = await res.text()
    // http.py Response: json.loads, or the raw text when it is not JSON.
    let parsed: Record<string, unknown>
    try {
      parsed = JSON.parse(text) as Record<string, unknown>
    } catch {
      parsed = { raw: text }
    }
    if (res.status > 399) throw new SdkError(ERRORS[res.status] ?? 'Error', res.status, (parsed.errors as SdkError['details']) ?? null)
    return parsed
  }
}

export interface PropertyDef {
  name: string
  readonly?: boolean
}

/** A resource class of the SDK: its paths and declared properties (in declaration order). */
export interface ResourceClass {
  collection: string
  resource: string
  properties: PropertyDef[]
}

const p = (name: string, readonly = false): PropertyDef => ({ name, readonly })

/** campaign.py Campaign, as declared. */
export const CAMPAIGN: ResourceClass = {
  collection: `/${API_VERSION}/accounts/{account_id}/campaigns`,
  resource: `/${API_VERSION}/accounts/{account_id}/campaigns/{id}`,
  properties: [
    p('created_at', true), p('currency', true), p('deleted', true), p('effective_status', true), p('id', true), p('reasons_not_servable', true), p('servable', true), p('updated_at', true),
    p('daily_budget_amount_local_micro'), p('duration_in_days'), p('entity_status'), p('frequency_cap'), p('funding_instrument_id'), p('name'), p('standard_delivery'), p('total_budget_amount_local_micro'), p('budget_optimization'),
    p('to_delete')
  ]
}

/** campaign.py LineItem, as declared. */
export const LINE_ITEM: ResourceClass = {
  collection: `/${API_VERSION}/accounts/{account_id}/line_items`,
  resource: `/${API_VERSION}/accounts/{account_id}/line_items/{id}`,
  properties: [
    p('created_at', true), p('deleted', true), p('id', true), p('updated_at', true), p('creative_source', true), p('currency', true), p('target_cpa_local_micro', true),
    p('advertiser_domain'), p('advertiser_user_id'), p('bid_amount_local_micro'), p('bid_strategy'), p('campaign_id'), p('categories'), p('end_time'), p('entity_status'), p('goal'),
    p('ios_app_store_identifier'), p('android_app_store_identifier'), p('audience_expansion'), p('name'), p('objective'), p('pay_by'), p('placements'), p('primary_web_event_tag'),
    p('product_type'), p('start_time'), p('total_budget_amount_local_micro'), p('tracking_tags'),
    p('to_delete')
  ]
}

/** creative.py PromotedTweet, as declared. */
export const PROMOTED_TWEET: ResourceClass = {
  collection: `/${API_VERSION}/accounts/{account_id}/promoted_tweets`,
  resource: `/${API_VERSION}/accounts/{account_id}/promoted_tweets/{id}`,
  properties: [p('approval_status', true), p('created_at', true), p('deleted', true), p('entity_status', true), p('id', true), p('updated_at', true), p('tweet_id'), p('line_item_id')]
}

/** creative.py AccountMedia, as declared. */
export const ACCOUNT_MEDIA: ResourceClass = {
  collection: `/${API_VERSION}/accounts/{account_id}/account_media`,
  resource: `/${API_VERSION}/accounts/{account_id}/account_media/{id}`,
  properties: [p('created_at', true), p('deleted', true), p('id', true), p('creative_type', true), p('media_url', true), p('media_key', true), p('updated_at', true)]
}

/** creative.py MediaLibrary, as declared (its RESOURCE is addressed by media_key). */
export const MEDIA_LIBRARY: ResourceClass = {
  collection: `/${API_VERSION}/accounts/{account_id}/media_library`,
  resource: `/${API_VERSION}/accounts/{account_id}/media_library/{id}`,
  properties: [
    p('aspect_ratio', true), p('created_at', true), p('deleted', true), p('duration', true), p('media_status', true), p('media_type', true), p('media_url', true), p('poster_media_url', true), p('tweeted', true), p('updated_at', true),
    p('media_key'), p('description'), p('file_name'), p('name'), p('poster_media_key'), p('title')
  ]
}

/** creative.py PollCard, as declared. */
export const POLL_CARD: ResourceClass = {
  collection: `/${API_VERSION}/accounts/{account_id}/cards/poll`,
  resource: `/${API_VERSION}/accounts/{account_id}/cards/poll/{id}`,
  properties: [
    p('card_type', true), p('card_uri', true), p('content_duration_seconds', true), p('created_at', true), p('deleted', true), p('end_time', true), p('id', true), p('image', true), p('image_display_height', true),
    p('image_display_width', true), p('start_time', true), p('updated_at', true), p('video_height', true), p('video_hls_url', true), p('video_poster_height', true), p('video_poster_url', true), p('video_poster_width', true),
    p('video_url', true), p('video_width', true),
    p('duration_in_minutes'), p('first_choice'), p('fourth_choice'), p('media_key'), p('name'), p('second_choice'), p('third_choice')
  ]
}

/** creative.py Card (the unified cards endpoint), as declared. */
export const CARD: ResourceClass = {
  collection: `/${API_VERSION}/accounts/{account_id}/cards`,
  resource: `/${API_VERSION}/accounts/{account_id}/cards/{id}`,
  properties: [p('id', true), p('card_uri', true), p('card_type', true), p('created_at', true), p('deleted', true), p('updated_at', true), p('name'), p('components')]
}

/** creative.py CardsFetch: FETCH_URI and FETCH_ID; a selection of its (all read-only) properties the product's cards carry. */
export const CARDS_FETCH: ResourceClass = {
  collection: `/${API_VERSION}/accounts/{account_id}/cards/all`,
  resource: `/${API_VERSION}/accounts/{account_id}/cards/all/{id}`,
  properties: [p('card_type', true), p('card_uri', true), p('created_at', true), p('deleted', true), p('duration_in_minutes', true), p('end_time', true), p('first_choice', true), p('id', true), p('name', true), p('second_choice', true), p('start_time', true), p('updated_at', true)]
}

function pathOf(template: string, accountId: string, id?: string): string {
  return template.replace('{account_id}', accountId).replace('{id}', id ?? '')
}

/** An SDK resource object: its attributes (None where unset) and Persistence's save/delete. */
export class PyResource {
  readonly attrs = new Map<string, PyValue>()

  constructor(
    private readonly client: PyClient,
    private readonly klass: ResourceClass,
    readonly accountId: string
  ) {}

  get(name: string): PyValue {
    return this.attrs.get(name) ?? null
  }

  set(name: string, value: PyValue): this {
    this.attrs.set(name, value)
    return this
  }

  /** resource.py from_response: `response.get(name, None)` for each property (a list has no .get). */
  fromResponse(data: unknown): this {
    if (data === null || typeof data !== 'object' || Array.isArray(data)) {
      throw new PyException('AttributeError', `'${Array.isArray(data) ? 'list' : data === null ? 'NoneType' : typeof data}' object has no attribute 'get'`)
    }
    for (const { name } of this.klass.properties) {
      const value = (Object.hasOwn(data, name) ? (data as Record<string, unknown>)[name] : null) as PyValue
      // `isinstance(value, int) and value == 0`: 0, and False (a bool is an int).
      if (value === 0 || value === false) continue
      this.attrs.set(name, value)
    }
    return this
  }

  /** resource.py to_params. */
  toParams(): Record<string, PyValue> {
    const params: Record<string, PyValue> = {}
    for (const { name } of this.klass.properties) {
      const value = this.get(name)
      if (value === null) continue
      params[name] = typeof value === 'boolean' ? String(value) : value
    }
    return params
  }

  private path(template: string, id?: string): string {
    return pathOf(template, this.accountId, id)
  }

  /** Persistence.save. */
  async save(): Promise<this> {
    const id = this.get('id')
    const body = id
      ? await this.client.perform('put', this.path(this.klass.resource, String(id)), this.toParams())
      : await this.client.perform('post', this.path(this.klass.collection), this.toParams())
    return this.fromResponse(body.data as Record<string, unknown>)
  }

  /** Persistence.delete. */
  async delete(): Promise<this> {
    const body = await this.client.perform('delete', this.path(this.klass.resource, String(this.get('id'))))
    return this.fromResponse(body.data)
  }

  /** Resource.load. */
  static async load(client: PyClient, klass: ResourceClass, accountId: string, id: string, params: Record<string, PyValue> = {}): Promise<PyResource> {
    const body = await client.perform('get', pathOf(klass.resource, accountId, id), params)
    return new PyResource(client, klass, accountId).fromResponse(body.data)
  }

  /** Persistence.create (FlattenParams): POST RESOURCE_COLLECTION with the keyword arguments. */
  static async create(client: PyClient, klass: ResourceClass, accountId: string, kwargs: Record<string, PyValue>): Promise<PyResource> {
    const body = await client.perform('post', pathOf(klass.collection, accountId), flattenParams(kwargs))
    return new PyResource(client, klass, accountId).fromResponse(body.data)
  }

  /** PromotedTweet.save() (deprecated): tweet_id sent as tweet_ids, data[0] read back; with an id, HTTPError and no request. */
  async savePromotedTweet(): Promise<this> {
    const params = this.toParams()
    if ('tweet_id' in params) {
      params.tweet_ids = [params.tweet_id as PyValue]
      delete params.tweet_id
    }
    if (this.get('id')) throw new PyException('HTTPError', 'Method PUT not allowed.')
    const body = await this.client.perform('post', this.path(this.klass.collection), params)
    return this.fromResponse((body.data as unknown[])[0])
  }

  /** MediaLibrary.add(): POST RESOURCE_COLLECTION with to_params. */
  async libraryAdd(): Promise<this> {
    const body = await this.client.perform('post', this.path(this.klass.collection), this.toParams())
    return this.fromResponse(body.data)
  }

  /** MediaLibrary.update(): PUT RESOURCE by media_key with to_params (every loaded property). */
  async libraryUpdate(): Promise<this> {
    const body = await this.client.perform('put', this.path(this.klass.resource, String(this.get('media_key'))), this.toParams())
    return this.fromResponse(body.data)
  }

  /** MediaLibrary.reload(**kwargs): GET RESOURCE by media_key. */
  async libraryReload(): Promise<this> {
    if (!this.get('media_key')) return this
    const body = await this.client.perform('get', this.path(this.klass.resource, String(this.get('media_key'))))
    return this.fromResponse(body.data)
  }

  /** MediaLibrary.delete(): DELETE RESOURCE by media_key. */
  async libraryDelete(): Promise<this> {
    const body = await this.client.perform('delete', this.path(this.klass.resource, String(this.get('media_key'))))
    return this.fromResponse(body.data)
  }

  /** Card.save(): POST or PUT with the JSON body {"name", "components"} (json.dumps: None is null). */
  async cardSave(): Promise<this> {
    const id = this.get('id')
    const body = JSON.stringify({ name: this.get('name'), components: this.get('components') })
    const options = { headers: { 'Content-Type': 'application/json' }, body }
    const answer = id
      ? await this.client.perform('put', this.path(this.klass.resource, String(id)), {}, options)
      : await this.client.perform('post', this.path(this.klass.collection), {}, options)
    return this.fromResponse(answer.data)
  }
}

/** campaign.py Tweet.create (FlattenParams): POST accounts/:id/tweet; returns response.body['data'] as is. */
export async function tweetCreate(client: PyClient, accountId: string, kwargs: Record<string, PyValue>): Promise<Record<string, unknown>> {
  const body = await client.perform('post', `/${API_VERSION}/accounts/${accountId}/tweet`, flattenParams(kwargs))
  return body.data as Record<string, unknown>
}

/** creative.py CardsFetch.load (FlattenParams): card_uris gives a Cursor over FETCH_URI; card_id one object from FETCH_ID (every kwarg sent, card_id included). */
export async function cardsFetchLoad(client: PyClient, accountId: string, kwargs: { card_uris?: string[]; card_id?: string; with_deleted?: boolean }): Promise<PyCursor | PyResource> {
  if (Boolean(kwargs.card_uris) === Boolean(kwargs.card_id)) throw new PyException('ValueError', 'card_uris and card_id are exclusive parameters. Please supply one or the other, but not both.')
  const params = flattenParams(kwargs as Record<string, PyValue>)
  if (kwargs.card_uris) return PyCursor.request(client, 'get', pathOf(CARDS_FETCH.collection, accountId), params, CARDS_FETCH, accountId)
  const body = await client.perform('get', pathOf(CARDS_FETCH.resource, accountId, kwargs.card_id), params)
  return new PyResource(client, CARDS_FETCH, accountId).fromResponse(body.data)
}

/** cursor.py Cursor over Resource.all(account, **kwargs). */
export class PyCursor {
  private readonly collection: PyResource[] = []
  /** Items of a Cursor without a resource class (Tweets.all): the answer's dicts as they are. */
  readonly raw: Array<Record<string, unknown>> = []
  private nextCursor: string | null = null
  private totalCount = 0

  private constructor(
    private readonly client: PyClient,
    private readonly method: 'get' | 'post',
    private readonly resource: string,
    private readonly klass: ResourceClass | null,
    private readonly accountId: string,
    private readonly params: Record<string, PyValue>
  ) {}

  /** Resource.all(account, **kwargs): no FlattenParams, so True is `True`. */
  static async all(client: PyClient, klass: ResourceClass, accountId: string, kwargs: Record<string, PyValue> = {}): Promise<PyCursor> {
    return PyCursor.request(client, 'get', pathOf(klass.collection, accountId), kwargs, klass, accountId)
  }

  /** Cursor(klass, Request(client, method, resource, params=...)): the first page is fetched on creation. */
  static async request(client: PyClient, method: 'get' | 'post', resource: string, params: Record<string, PyValue>, klass: ResourceClass | null, accountId: string): Promise<PyCursor> {
    const cursor = new PyCursor(client, method, resource, klass, accountId, params)
    await cursor.fetch()
    return cursor
  }

  private async fetch(): Promise<void> {
    const body = await this.client.perform(this.method, this.resource, this.params)
    this.nextCursor = (body.next_cursor as string | null | undefined) ?? null
    if ('total_count' in body) this.totalCount = Number(body.total_count)
    for (const item of body.data as Array<Record<string, unknown>>) {
      if (this.klass) this.collection.push(new PyResource(this.client, this.klass, this.accountId).fromResponse(item))
      else this.raw.push(item)
    }
  }

  /** cursor.first. */
  get first(): PyResource | undefined {
    return this.collection[0]
  }

  get count(): number {
    return this.totalCount || this.fetched
  }

  get fetched(): number {
    return this.collection.length + this.raw.length
  }

  /** Iterates like `for item in cursor`: the next page is fetched with the same params plus `cursor`. */
  async toArray(): Promise<PyResource[]> {
    while (this.nextCursor) {
      this.params.cursor = this.nextCursor
      await this.fetch()
    }
    return [...this.collection]
  }
}
