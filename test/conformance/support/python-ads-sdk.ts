import { createHmac } from 'node:crypto'
import OAuth from 'oauth-1.0a'

/**
 * The official Python ads SDK (twitter-python-ads-sdk), replayed. It cannot
 * be installed here (no Python registry), so this module sends exactly the
 * requests its source sends and reads answers the way it reads them. Read
 * from the public repository (xdevplatform/twitter-python-ads-sdk, commit
 * a3dd581, twitter_ads/http.py, resource.py, cursor.py, campaign.py,
 * error.py, utils.py), replayed with API_VERSION '12':
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
 */

export const API_VERSION = '12'
export const SDK_VERSION = '12.0.0'
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

/** requests' urlencode(params, doseq=True): pairs in dict order, lists as repeated keys, None dropped. */
export function encodeParams(params: Record<string, PyValue>): Array<[string, string]> {
  const pairs: Array<[string, string]> = []
  for (const [k, v] of Object.entries(params)) {
    if (v === null) continue
    if (Array.isArray(v)) for (const item of v) pairs.push([k, pyStr(item)])
    else pairs.push([k, pyStr(v)])
  }
  return pairs
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
  async perform(method: 'get' | 'post' | 'put' | 'delete', resource: string, params: Record<string, PyValue> = {}): Promise<Record<string, unknown>> {
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
    const headers: Record<string, string> = {
      'user-agent': USER_AGENT,
      'accept-encoding': 'gzip, deflate',
      accept: '*/*',
      ...this.oauth.toHeader(auth)
    }
    this.sent.push({ method: method.toUpperCase(), url: url.slice(this.domain.length) })
    // requests sends Content-Length: 0 on a PUT or POST without data.
    const body = method === 'put' || method === 'post' ? '' : undefined
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

  /** resource.py from_response. */
  fromResponse(data: Record<string, unknown>): this {
    for (const { name } of this.klass.properties) {
      const value = (Object.hasOwn(data, name) ? data[name] : null) as PyValue
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
    return template.replace('{account_id}', this.accountId).replace('{id}', id ?? '')
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
    return this.fromResponse(body.data as Record<string, unknown>)
  }

  /** Resource.load. */
  static async load(client: PyClient, klass: ResourceClass, accountId: string, id: string, params: Record<string, PyValue> = {}): Promise<PyResource> {
    const body = await client.perform('get', klass.resource.replace('{account_id}', accountId).replace('{id}', id), params)
    return new PyResource(client, klass, accountId).fromResponse(body.data as Record<string, unknown>)
  }
}

/** cursor.py Cursor over Resource.all(account, **kwargs). */
export class PyCursor {
  private readonly collection: PyResource[] = []
  private nextCursor: string | null = null
  private totalCount = 0

  private constructor(
    private readonly client: PyClient,
    private readonly klass: ResourceClass,
    private readonly accountId: string,
    private readonly params: Record<string, PyValue>
  ) {}

  static async all(client: PyClient, klass: ResourceClass, accountId: string, kwargs: Record<string, PyValue> = {}): Promise<PyCursor> {
    const cursor = new PyCursor(client, klass, accountId, kwargs)
    await cursor.fetch()
    return cursor
  }

  private async fetch(): Promise<void> {
    const body = await this.client.perform('get', this.klass.collection.replace('{account_id}', this.accountId), this.params)
    this.nextCursor = (body.next_cursor as string | null | undefined) ?? null
    if ('total_count' in body) this.totalCount = Number(body.total_count)
    for (const item of body.data as Array<Record<string, unknown>>) this.collection.push(new PyResource(this.client, this.klass, this.accountId).fromResponse(item))
  }

  get count(): number {
    return this.totalCount || this.collection.length
  }

  get fetched(): number {
    return this.collection.length
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
