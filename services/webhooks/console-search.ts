import { Problems } from '../common/errors'
import { recordEventType } from './delivery'
import { DISPLAY_STATUSES, type DisplayStatus, statusMatches } from './console-status'
import type { WebhooksParts } from './parts'
import type { DeliveryRecord } from './delivery-log'
import type { Webhook } from './registry'

/**
 * Finding deliveries in an app's log for the console: by webhook, status
 * (`failed` also finds the failing ones), response code (`503`, or a class
 * like `5xx`), event type (any case), time range, and a search box that
 * takes a delivery id, an event uuid or text of the payload. The log's index
 * is by event time: anything beyond webhook, time and stored status is
 * checked record by record over at most SCAN_LIMIT of the newest.
 */

export const PAGE_SIZE = 25
const SCAN_LIMIT = 5000

export interface ListQuery {
  webhook?: string
  status?: string
  event_type?: string
  code?: string
  q?: string
  since?: string
  until?: string
  page?: string
}

export const listQuerySchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    webhook: { type: 'string', maxLength: 19 },
    status: { type: 'string', maxLength: 16 },
    event_type: { type: 'string', maxLength: 64 },
    code: { type: 'string', maxLength: 3 },
    q: { type: 'string', maxLength: 200 },
    since: { type: 'string', maxLength: 40 },
    until: { type: 'string', maxLength: 40 },
    page: { type: 'string', maxLength: 5 }
  }
}

/** A datetime-local value (no zone: UTC, as the form says) or an ISO time, as ms. */
export function formTime(name: string, raw: string | undefined): number | undefined {
  if (raw === undefined || raw.trim() === '') return undefined
  const text = raw.trim()
  const ms = Date.parse(/[zZ]|[+-]\d\d:?\d\d$/.test(text) ? text : `${text}Z`)
  if (Number.isNaN(ms)) throw Problems.invalidParameter(name, raw, `${name} must be a time like 2025-01-31T12:00 (UTC)`)
  return ms
}

function statusFilter(raw: string | undefined): DisplayStatus | undefined {
  if (raw === undefined || raw === '') return undefined
  if ((DISPLAY_STATUSES as readonly string[]).includes(raw)) return raw as DisplayStatus
  throw Problems.invalidParameter('status', raw, `status must be one of ${DISPLAY_STATUSES.join(', ')}`)
}

/** A response code filter: one code (404) or a class (4xx). */
function codeFilter(raw: string | undefined): ((status: number | undefined) => boolean) | undefined {
  const text = raw?.trim().toLowerCase() ?? ''
  if (text === '') return undefined
  if (/^[1-5][0-9][0-9]$/.test(text)) return (s) => s === Number(text)
  if (/^[1-5]xx$/.test(text)) return (s) => s !== undefined && Math.floor(s / 100) === Number(text[0])
  throw Problems.invalidParameter('code', raw ?? '', 'code must be a response code like 503, or a class like 5xx')
}

function pageNumber(raw: string | undefined): number {
  if (raw === undefined || raw === '') return 1
  const n = Number(raw)
  if (!Number.isInteger(n) || n < 1 || n > 1000) throw Problems.invalidParameter('page', raw, 'page must be an integer from 1 to 1000')
  return n
}

/** What the search box matches: the delivery id (or its start), the event uuid, or text of the payload (any case). */
function searchFilter(raw: string | undefined): ((r: DeliveryRecord) => boolean) | undefined {
  const text = raw?.trim() ?? ''
  if (text === '') return undefined
  const lower = text.toLowerCase()
  return (r) => r.delivery_id.startsWith(text) || r.event_uuid === text || r.body.toLowerCase().includes(lower)
}

export interface SearchResult {
  rows: DeliveryRecord[]
  pageNo: number
  hasNext: boolean
  /** The normalised query, as the form shows it again. */
  q: ListQuery
}

export async function searchDeliveries(core: WebhooksParts, webhooks: Webhook[], q: ListQuery): Promise<SearchResult> {
  const status = statusFilter(q.status)
  const code = codeFilter(q.code)
  const since = formTime('since', q.since)
  const until = formTime('until', q.until)
  const pageNo = pageNumber(q.page)
  const eventType = q.event_type?.trim().toLowerCase() ?? ''
  const search = searchFilter(q.q)
  if (q.webhook && !webhooks.some((w) => w.id === q.webhook)) throw Problems.generic(404, 'No webhook here.')
  const chosen = q.webhook ? webhooks.filter((w) => w.id === q.webhook) : webhooks
  // A delivery id typed whole: one read, whatever its time.
  const exact = q.q !== undefined && /^[A-Za-z0-9_-]{8,100}$/.test(q.q.trim()) ? await core.deliveryLog.get(q.q.trim()) : undefined
  if (exact && chosen.some((w) => w.id === exact.webhook_id)) {
    return { rows: pageNo === 1 ? [exact] : [], pageNo, hasNext: false, q: { ...q, event_type: eventType } }
  }
  // The stored status narrows the scan where it decides alone.
  const stored = status === 'pending' || status === 'delivered' || status === 'cancelled' ? status : undefined
  const filtered = code !== undefined || eventType !== '' || search !== undefined || (status !== undefined && stored === undefined)
  const wanted = pageNo * PAGE_SIZE + 1
  const limit = filtered ? SCAN_LIMIT : wanted
  const lists = await Promise.all(chosen.map((w) => core.deliveryLog.list(w.id, { status: stored, since, until, limit, newestFirst: true })))
  let records = lists.flat().sort((a, b) => b.event_time - a.event_time || b.delivery_id.localeCompare(a.delivery_id))
  if (status !== undefined) records = records.filter((r) => statusMatches(r, status))
  if (code !== undefined) records = records.filter((r) => code(r.last_status))
  if (eventType !== '') records = records.filter((r) => recordEventType(r)?.toLowerCase() === eventType)
  if (search !== undefined) records = records.filter(search)
  return {
    rows: records.slice((pageNo - 1) * PAGE_SIZE, pageNo * PAGE_SIZE),
    pageNo,
    hasNext: records.length > pageNo * PAGE_SIZE,
    q: { ...q, event_type: q.event_type?.trim() ?? '' }
  }
}
