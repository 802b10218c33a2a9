import type { FastifyInstance } from 'fastify'
import { sendHtml } from '../common/console/views'
import { Problems } from '../common/errors'
import type { TailEntry } from './delivery'
import { appParams, consoleApp, type ConsoleDeps } from './console-access'

/**
 * Console: the live tail of an app's delivery attempts (server-sent events)
 * and its charts (deliveries per minute, success rate, latency p50/p99 over
 * the last hour or day). Both read what attempt-log.ts records in the store,
 * so they show every webhooks process's attempts, not only this one's.
 */

const POLL_MS = 500
const KEEPALIVE_MS = 15_000
const BACKLOG = 20
const RANGES: Record<string, { spanMs: number; bucketMs: number }> = {
  hour: { spanMs: 3_600_000, bucketMs: 60_000 },
  day: { spanMs: 24 * 3_600_000, bucketMs: 10 * 60_000 }
}

export async function registerConsoleLiveRoutes(app: FastifyInstance, deps: ConsoleDeps): Promise<void> {
  const { core, views, page, api } = deps
  const open = new Set<() => void>()
  // Streams end before the server waits for its connections to close.
  app.addHook('preClose', async () => {
    for (const stop of [...open]) stop()
  })

  app.get('/console/webhooks/apps/:app_id/tail', { preHandler: page, schema: { params: appParams } }, async (request, reply) => {
    const appRecord = await consoleApp(core, request)
    return sendHtml(reply, views.page(request, 'tail', { app: appRecord }, { title: 'Live tail', active: 'tail', appId: appRecord.id }))
  })

  app.get('/console/webhooks/apps/:app_id/tail/events', { preHandler: api, schema: { params: appParams } }, async (request, reply) => {
    const appRecord = await consoleApp(core, request)
    reply.hijack()
    const res = reply.raw
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store',
      connection: 'keep-alive',
      // nginx: pass events through as they are written.
      'x-accel-buffering': 'no'
    })
    const seen = new Set<string>()
    let after = 0
    let stopped = false
    const send = (entries: TailEntry[]): void => {
      for (const e of entries) {
        const key = `${e.delivery_id}:${e.n}:${e.at}`
        if (seen.has(key)) continue
        seen.add(key)
        after = Math.max(after, e.at)
        res.write(`event: attempt\ndata: ${JSON.stringify(e)}\n\n`)
      }
      // Entries at the newest millisecond may still be joined by others: keep only recent keys.
      if (seen.size > 2000) for (const k of [...seen].slice(0, 1000)) seen.delete(k)
    }
    let poller: NodeJS.Timeout | undefined
    const keepalive = setInterval(() => res.write(': keep-alive\n\n'), KEEPALIVE_MS)
    const stop = (): void => {
      if (stopped) return
      stopped = true
      clearTimeout(poller)
      clearInterval(keepalive)
      open.delete(stop)
      res.end()
    }
    open.add(stop)
    res.on('close', stop)
    const poll = async (): Promise<void> => {
      try {
        // Re-read the newest millisecond: an attempt recorded in it after the last read is not lost.
        send(await core.attempts.tailSince(appRecord.id, after - 1))
      } catch (err) {
        request.log.warn({ err }, 'console tail: store read failed; retrying')
      }
      if (!stopped) poller = setTimeout(() => void poll(), POLL_MS)
    }
    res.write('retry: 2000\n\n')
    send(await core.attempts.tailLatest(appRecord.id, BACKLOG))
    after = Math.max(after, Date.now() - 1)
    poller = setTimeout(() => void poll(), POLL_MS)
  })

  app.get('/console/webhooks/apps/:app_id/charts', { preHandler: page, schema: { params: appParams } }, async (request, reply) => {
    const appRecord = await consoleApp(core, request)
    const range = (request.query as { range?: string }).range === 'day' ? 'day' : 'hour'
    return sendHtml(reply, views.page(request, 'charts', { app: appRecord, range }, { title: 'Charts', active: 'charts', appId: appRecord.id }))
  })

  app.get('/console/webhooks/apps/:app_id/stats', { preHandler: api, schema: { params: appParams } }, async (request) => {
    const appRecord = await consoleApp(core, request)
    const name = (request.query as { range?: string }).range ?? 'hour'
    const range = RANGES[name]
    if (!range) throw Problems.invalidParameter('range', name, 'range must be hour or day')
    const stats = await core.attempts.stats(appRecord.id, range.spanMs, range.bucketMs)
    return { app_id: appRecord.id, range: name, bucket_ms: range.bucketMs, ...stats }
  })
}
