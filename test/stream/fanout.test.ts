import net from 'node:net'
import t from 'tap'
import { buildDelivery } from '../../services/activity/deliveries'
import type { ActivityEvent } from '../../services/activity/subscription-filter'
import type { Subscription } from '../../services/activity/subscriptions'
import { deliveryKey } from '../../services/activity/matcher'
import { TOPICS } from '../../services/common/bus/types'
import { gatewayService } from '../../services/gateway/service'
import { streamService } from '../../services/stream/service'
import { createIdentity, startTestRuntime } from '../support/runtime'
import { eventually } from '../support/util'
import { nextUserId, openWsStream, OPERATOR_TOKEN, sampleEvent } from '../support/fixtures/activity'

/**
 * The stream fans out a batch at a time: deliveries consumed together reach
 * each connection in one write. Counted where it shows: every write on a
 * chunked HTTP response is one HTTP chunk, read here off a raw socket.
 */

interface RawStream {
  /** Event lines per HTTP chunk received so far (keep-alive chunks left out). */
  chunks: number[]
  lines: string[]
  close(): void
}

function openRawStream(baseUrl: string, bearer: string): Promise<RawStream> {
  const url = new URL(baseUrl)
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(url.port), url.hostname, () => {
      socket.write(`GET /2/activity/stream HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${bearer}\r\n\r\n`)
    })
    const out: RawStream = { chunks: [], lines: [], close: () => socket.destroy() }
    let buf = Buffer.alloc(0)
    let headersDone = false
    socket.on('data', (data: Buffer) => {
      buf = Buffer.concat([buf, data])
      if (!headersDone) {
        const end = buf.indexOf('\r\n\r\n')
        if (end < 0) return
        const head = buf.subarray(0, end).toString()
        if (!/^HTTP\/1\.1 200/.test(head) || !/transfer-encoding: chunked/i.test(head)) return reject(new Error(`unexpected answer: ${head}`))
        headersDone = true
        buf = buf.subarray(end + 4)
        resolve(out)
      }
      for (;;) {
        const lineEnd = buf.indexOf('\r\n')
        if (lineEnd < 0) return
        const size = parseInt(buf.subarray(0, lineEnd).toString(), 16)
        if (buf.length < lineEnd + 2 + size + 2) return
        const body = buf.subarray(lineEnd + 2, lineEnd + 2 + size).toString()
        buf = buf.subarray(lineEnd + 2 + size + 2)
        const lines = body.split('\r\n').filter((l) => l !== '')
        if (lines.length > 0) {
          out.chunks.push(lines.length)
          out.lines.push(...lines)
        }
      }
    })
    socket.on('error', reject)
  })
}

t.test('a batch of deliveries reaches each connection in one write, in order, over HTTP and WebSocket', async (t) => {
  const rt = await startTestRuntime(t, { services: [gatewayService, streamService], env: { OPERATOR_TOKEN } })
  const id = await createIdentity(rt.ctx.store)
  const http = await openRawStream(rt.baseUrl, id.bearer)
  t.teardown(() => http.close())
  const ws = await openWsStream(rt.baseUrl, id.bearer)
  t.teardown(() => ws.close())
  const userId = nextUserId()
  const sub: Subscription = { subscription_id: '1234567', app_id: id.app.id, event_type: 'post.create', filter: { user_id: userId }, created_at: new Date().toISOString() } as Subscription
  const deliveries = Array.from({ length: 300 }, (_, i) => buildDelivery({ ...(sampleEvent('post.create', userId, { text: `line ${i}` }) as unknown as ActivityEvent), event_uuid: `${Date.now()}${String(i).padStart(4, '0')}` }, sub))
  // One publish, one key (the matcher's: app_id:user_id): one partition, consumed as one batch.
  await rt.ctx.bus.publishMany(TOPICS.activityDeliveries, deliveries.map((d) => ({ key: deliveryKey(d), value: d })))
  await eventually(() => http.lines.length >= 300 && ws.messages.length >= 300, 15_000)
  const texts = http.lines.map((l) => (JSON.parse(l) as { data: { payload: { text: string } } }).data.payload.text)
  t.same(texts, deliveries.map((_, i) => `line ${i}`), 'every line once, in publish order')
  t.same(ws.messages.map((m) => (m.data?.payload as { text: string }).text), texts, 'the WebSocket client got the same messages, one per event')
  t.ok(http.chunks.length <= 3, `300 events arrived in ${http.chunks.length} HTTP chunk(s) (${http.chunks.join(', ')}): one write per batch`)
})
