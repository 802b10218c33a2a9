import type { Test } from 'tap'
import { queryEntries } from '../../../services/account-history/history'
import { eventually } from '../../support/util'
import type { AdsPostLoad } from './ads-load'
import type { LoadGenerator } from './load'
import type { DeliveryKind } from './receiver'
import type { StreamClient } from './stream-client'
import type { SystemView } from './system'
import type { Tenant } from './tenant'

/**
 * The accounting every fault scenario ends with: each event the load
 * generator got acknowledged must reach the receiver (as an envelope, and as
 * an Account Activity message when it is the app's own user's), or be
 * reported missing on `webhook.dead-letter`; published = delivered +
 * reported missing, or the scenario fails, naming the first missing
 * event_uuids. Duplicates are allowed (at least once) and reported.
 */

export interface Accounting {
  system: SystemView
  tenant: Tenant
  load: LoadGenerator
  /** Everything seen on webhook.dead-letter so far (watchDeadLetters). */
  deadLetters: Array<Record<string, unknown>>
  /** A stream consumer that must also see every event (it reconnects with backfill). */
  stream?: StreamClient
  /** Deliveries the scenario expects to be reported missing rather than delivered. Default: none. */
  expectReportedMissing?: 'none' | 'all'
  timeoutMs?: number
  /** Posts made through the gateway's ads interface: each must reach the webhook, the stream and account history. */
  ads?: { load: AdsPostLoad; accountId: string }
}

/** Acknowledged ads posts not (yet) seen on the webhook, on the stream, and in account history. */
async function adsGaps(a: Accounting): Promise<{ webhook: string[]; stream: string[]; history: string[] }> {
  if (!a.ads) return { webhook: [], stream: [], history: [] }
  const ids = a.ads.load.published
  const webhook = ids.filter((id) => !a.tenant.receiver.payloadIds.has(id))
  const stream = a.stream ? ids.filter((id) => !a.stream?.payloadIds.has(id)) : []
  const history: string[] = []
  for (const id of ids) {
    const entries = await queryEntries(a.system.store, { accountId: a.ads.accountId, entityType: 'TWEET', entityId: id, fromMs: 0, toMs: Date.now() + 3_600_000 })
    if (!entries.some((e) => e.change_type === 'CREATE')) history.push(id)
  }
  return { webhook, stream, history }
}

interface KindResult {
  expected: number
  delivered: number
  reported: number
  missing: string[]
  duplicates: number
}

function deadLettered(deadLetters: Array<Record<string, unknown>>, kind: DeliveryKind): Set<string> {
  const out = new Set<string>()
  for (const d of deadLetters) if (d.source === kind && typeof d.event_uuid === 'string') out.add(d.event_uuid)
  return out
}

function tally(a: Accounting, kind: DeliveryKind): KindResult {
  const expected = [...a.load.published].filter(([, user]) => kind === 'activity' || user === a.tenant.user.id).map(([uuid]) => uuid)
  const reportedSet = deadLettered(a.deadLetters, kind)
  const received = a.tenant.receiver.received[kind]
  let delivered = 0
  let reported = 0
  let duplicates = 0
  const missing: string[] = []
  for (const uuid of expected) {
    const n = received.get(uuid) ?? 0
    if (n > 0) {
      delivered++
      duplicates += n - 1
    } else if (reportedSet.has(uuid)) reported++
    else missing.push(uuid)
  }
  return { expected: expected.length, delivered, reported, missing, duplicates }
}

function streamMissing(a: Accounting): string[] {
  if (!a.stream) return []
  const stream = a.stream
  return [...a.load.published.keys()].filter((uuid) => !stream.received.has(uuid))
}

/** Waits (bounded) for the accounting to balance, then asserts it. */
export async function expectEveryEventAccountedFor(t: Test, label: string, a: Accounting): Promise<void> {
  const timeoutMs = a.timeoutMs ?? 60_000
  const started = Date.now()
  const balanced = async (): Promise<boolean> => {
    if (tally(a, 'activity').missing.length > 0 || tally(a, 'account-activity').missing.length > 0 || streamMissing(a).length > 0) return false
    const gaps = await adsGaps(a)
    return gaps.webhook.length + gaps.stream.length + gaps.history.length === 0
  }
  await eventually(balanced, timeoutMs, 200).catch(() => undefined)
  const waited = Date.now() - started

  const activity = tally(a, 'activity')
  const aaa = tally(a, 'account-activity')
  const streamGaps = streamMissing(a)
  const published = a.load.published.size
  t.equal(a.load.refused, undefined, `${label}: the ingest route accepted every generated batch`)
  t.equal(a.load.unacknowledged, 0, `${label}: every generated batch was acknowledged in the end (${a.load.unacknowledged} not; failed attempts ${JSON.stringify(a.load.failures)})`)
  t.ok(published > 0, `${label}: events were published (${published})`)
  const describe = (r: KindResult): string => `published ${r.expected}, delivered ${r.delivered}, reported missing ${r.reported}, lost ${r.missing.length}${r.missing.length > 0 ? ` (first: ${r.missing.slice(0, 5).join(', ')})` : ''}`
  t.equal(activity.missing.length, 0, `${label}: activity subscription: ${describe(activity)}`)
  t.equal(aaa.missing.length, 0, `${label}: account activity: ${describe(aaa)}`)
  if (a.expectReportedMissing === 'all') {
    t.equal(activity.reported, activity.expected, `${label}: every activity delivery was reported missing (dead-lettered)`)
    t.equal(aaa.reported, aaa.expected, `${label}: every account activity delivery was reported missing (dead-lettered)`)
  } else {
    t.equal(activity.reported + aaa.reported, 0, `${label}: nothing was dead-lettered`)
  }
  if (a.stream) t.equal(streamGaps.length, 0, `${label}: the stream consumer saw every event (missing ${streamGaps.length}${streamGaps.length > 0 ? `, first ${streamGaps.slice(0, 5).join(', ')}` : ''})`)
  t.equal(a.tenant.receiver.badSignatures, 0, `${label}: every POST carried a valid signature`)
  t.same(a.system.crashes(), [], `${label}: no service process exited on its own`)
  if (a.ads) {
    const ads = a.ads.load
    const gaps = await adsGaps(a)
    const first = (xs: string[]): string => (xs.length > 0 ? ` (first: ${xs.slice(0, 5).join(', ')})` : '')
    t.equal(ads.refused, undefined, `${label}: the gateway accepted every ads post`)
    t.equal(ads.unacknowledged, 0, `${label}: every ads post was acknowledged in the end (${ads.unacknowledged} not; failed attempts ${JSON.stringify(ads.failures)}, ${ads.retries} retries)`)
    t.ok(ads.published.length > 0, `${label}: posts were made through the gateway (${ads.published.length}; ${ads.retries} retries ${JSON.stringify(ads.failures)})`)
    t.equal(gaps.webhook.length, 0, `${label}: every ads post reached the webhook as post.create (lost ${gaps.webhook.length})${first(gaps.webhook)}`)
    if (a.stream) t.equal(gaps.stream.length, 0, `${label}: every ads post reached the stream consumer (lost ${gaps.stream.length})${first(gaps.stream)}`)
    t.equal(gaps.history.length, 0, `${label}: every ads post is in account history (lost ${gaps.history.length})${first(gaps.history)}`)
  }

  const streamLine = a.stream ? `; stream: ${a.stream.unique} unique, ${a.stream.duplicates()} duplicates, ${a.stream.connections} connections` : ''
  t.comment(
    `${label}: ${published} events published (${a.load.retries} ingest retries ${JSON.stringify(a.load.failures)}, slowest ingest ${a.load.slowestMs} ms); ` +
      `webhook duplicates: ${activity.duplicates} envelopes, ${aaa.duplicates} account activity${streamLine}; balanced after ${waited} ms`
  )
  if (!t.passing()) t.comment(a.system.diagnostics())
}
