import t from 'tap'
import { adsFixture, OPERATOR_TOKEN } from '../support/fixtures/campaigns'
import { eventually } from '../support/util'

/**
 * Keyword insights fed the way a deployment feeds them: posts published
 * through the operator's ingest route (`make publish`) and organic posts
 * made through the ads interface, then searched over HTTP. Posts in the
 * window that share terms with the keyword give related keywords (by how
 * many matching posts carry them) and volumes per bucket.
 */

const HOUR = 3_600_000

t.test('related keywords and volumes from posts published through the public paths', async (t) => {
  const f = await adsFixture(t)
  const start = Math.floor(Date.now() / HOUR) * HOUR - 2 * HOUR
  const end = start + 3 * HOUR
  const at = (hour: number, minute: number): string => new Date(start + hour * HOUR + minute * 60_000).toISOString()
  const ingested = [
    ['serverless #Data pipelines on the edge', at(0, 10)],
    ['Big data pipelines at scale https://example.com/x @someone', at(1, 5)],
    ['data lakes and pipelines', at(1, 40)],
    ['nothing to see here: cats and pipelines', at(1, 45)]
  ].map(([text, created], i) => JSON.stringify({ event_type: 'post.create', user_id: f.id.user.id, created_at: created, payload: { id: String(7_000_000 + i), text, author_id: f.id.user.id, created_at: created } }))
  const pub = await fetch(`${f.rt.baseUrl}/admin/activity/events`, { method: 'POST', headers: { authorization: `Bearer ${OPERATOR_TOKEN}`, 'content-type': 'application/x-ndjson' }, body: ingested.join('\n') })
  t.equal(pub.status, 200, await pub.text())
  // An organic post through the ads interface lands in the current hour (the window's last).
  const organic = await f.call('POST', '/tweet', { query: { as_user_id: f.id.user.id, text: 'Streaming data pipelines with serverless tools', nullcast: 'false' } })
  t.equal(organic.status, 200, organic.text)

  const search = async (query: Record<string, string>) => {
    const res = await f.api('GET', '/12/insights/keywords/search', { query: { granularity: 'HOUR', start_time: new Date(start).toISOString(), end_time: new Date(end).toISOString(), ...query } })
    t.equal(res.status, 200, res.text)
    return res.json<{ data: { related_keywords: string[]; tweet_volume: number[] } }>().data
  }
  const data = await eventually(async () => {
    const d = await search({ keywords: 'data' })
    return d.tweet_volume.reduce((a, b) => a + b, 0) === 4 ? d : undefined
  })
  t.same(data.tweet_volume, [1, 2, 1], 'per hour: the ingested posts and the organic one')
  t.same(data.related_keywords.slice(0, 2), ['pipelines', 'serverless'], 'terms shared by most matching posts first')
  t.same([...data.related_keywords].sort(), ['big', 'edge', 'lakes', 'pipelines', 'scale', 'serverless', 'streaming', 'tools'], 'every other term of the matching posts; stop words, URLs, mentions and the keyword itself left out')
  t.notOk(data.related_keywords.includes('cats'), 'a post without the keyword does not contribute')

  const narrowed = await search({ keywords: 'pipelines', negative_keywords: 'cats,lakes' })
  t.same(narrowed.tweet_volume, [1, 1, 1])
  t.same(narrowed.related_keywords.slice(0, 2), ['data', 'serverless'])
  t.same((await search({ keywords: 'kubernetes' })).related_keywords, [], 'no matching post, no related keyword')
})
