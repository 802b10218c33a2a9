/**
 * The client side of the activity benches (bench/pipeline, bench/store-work):
 * operator and app calls, post.create events sent through the operator
 * ingest route (POST /admin/activity/events, NDJSON), and consumers that
 * record when each event_uuid first arrived (performance.now(), the clock
 * the send times are taken with).
 */
import http from 'node:http'

export async function call(method: string, url: string, headers: Record<string, string>, body?: string): Promise<Record<string, unknown>> {
  const res = await fetch(url, { method, headers, body, signal: AbortSignal.timeout(30_000) })
  const text = await res.text()
  if (res.status >= 300) throw new Error(`${method} ${url}: ${res.status} ${text}`)
  return JSON.parse(text) as Record<string, unknown>
}

export interface BenchApp {
  bearer: string
  consumerSecret: string
}

/** An app (POST /admin/apps with the operator token) and its app-only bearer (client_credentials). */
export async function createApp(gateway: string, operatorToken: string, name: string): Promise<BenchApp> {
  const operator = { authorization: `Bearer ${operatorToken}`, 'content-type': 'application/json' }
  const created = await call('POST', `${gateway}/admin/apps`, operator, JSON.stringify({ name, access_level: 'read-write' }))
  const app = created.data as { consumer_key: string; consumer_secret: string }
  const basic = Buffer.from(`${encodeURIComponent(app.consumer_key)}:${encodeURIComponent(app.consumer_secret)}`).toString('base64')
  const token = await call('POST', `${gateway}/oauth2/token`, { authorization: `Basic ${basic}`, 'content-type': 'application/x-www-form-urlencoded' }, 'grant_type=client_credentials')
  return { bearer: token.access_token as string, consumerSecret: app.consumer_secret }
}

/** First arrival time of each event_uuid, and waits for a number of them. */
export class Arrivals {
  readonly arrivals = new Map<string, number>()
  private waiters: Array<{ n: number; resolve: () => void }> = []

  protected seen(uuid: string, at: number): void {
    if (!this.arrivals.has(uuid)) this.arrivals.set(uuid, at)
  }

  protected wake(): void {
    this.waiters = this.waiters.filter((w) => (this.arrivals.size >= w.n ? (w.resolve(), false) : true))
  }

  /** Resolves when `n` distinct events arrived, or after `timeoutMs` (the caller reads how many did). */
  waitFor(n: number, timeoutMs: number): Promise<void> {
    if (this.arrivals.size >= n) return Promise.resolve()
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, timeoutMs)
      this.waiters.push({ n, resolve: () => (clearTimeout(timer), resolve()) })
    })
  }
}

/** A stream consumer (GET /2/activity/stream, one JSON envelope per `\r\n`). */
export class StreamReader extends Arrivals {
  private req: http.ClientRequest | undefined

  open(url: string, bearer: string): Promise<void> {
    return new Promise((resolve, reject) => {
      this.req = http.get(`${url}/2/activity/stream`, { headers: { authorization: `Bearer ${bearer}` } }, (res) => {
        if (res.statusCode !== 200) return reject(new Error(`stream answered ${res.statusCode}`))
        resolve()
        let buffer = ''
        res.setEncoding('utf8')
        res.on('data', (chunk: string) => {
          const now = performance.now()
          buffer += chunk
          let at: number
          while ((at = buffer.indexOf('\r\n')) >= 0) {
            const line = buffer.slice(0, at)
            buffer = buffer.slice(at + 2)
            if (line === '') continue
            const uuid = (JSON.parse(line) as { data?: { event_uuid?: string } }).data?.event_uuid
            if (uuid !== undefined) this.seen(uuid, now)
          }
          this.wake()
        })
      })
      this.req.on('error', reject)
    })
  }

  close(): void {
    this.req?.destroy()
  }
}

let seq = 0

/** `size` post.create events by the followed users in turn, as one NDJSON body. */
export function batch(users: string[], size: number): { body: string; uuids: string[] } {
  const now = new Date().toISOString()
  const uuids: string[] = []
  const lines: string[] = []
  for (let i = 0; i < size; i++) {
    seq++
    const uuid = `${Date.now()}${String(seq % 1e6).padStart(6, '0')}`
    const user = users[seq % users.length] as string
    uuids.push(uuid)
    lines.push(JSON.stringify({ event_uuid: uuid, event_type: 'post.create', user_id: user, created_at: now, payload: { id: uuid, text: `bench post ${seq}`, author_id: user } }))
  }
  return { body: `${lines.join('\n')}\n`, uuids }
}

export async function ingest(activity: string, operatorToken: string, body: string): Promise<void> {
  await call('POST', `${activity}/admin/activity/events`, { authorization: `Bearer ${operatorToken}`, 'content-type': 'application/x-ndjson' }, body)
}

export interface Pace {
  /** Events per second. */
  rate: number
  /** Events in all. */
  count: number
  /** One batch every tickMs (rate x tickMs / 1000 events, at least one). */
  tickMs: number
}

/**
 * Sends `pace.count` events at `pace.rate`, one batch per tick on the
 * schedule (a late tick does not push the later ones back), without waiting
 * for an answer before the next batch; resolves once every batch was
 * answered, with the time each event's batch was sent.
 */
export async function publishPaced(activity: string, operatorToken: string, users: string[], pace: Pace): Promise<Map<string, number>> {
  const sentAt = new Map<string, number>()
  const perTick = Math.max(1, Math.round((pace.rate * pace.tickMs) / 1000))
  const started = performance.now()
  const inFlight: Array<Promise<void>> = []
  for (let i = 0, left = pace.count; left > 0; i++) {
    const wait = started + i * pace.tickMs - performance.now()
    if (wait > 0) await new Promise((r) => setTimeout(r, wait))
    const b = batch(users, Math.min(perTick, left))
    left -= b.uuids.length
    const at = performance.now()
    for (const u of b.uuids) sentAt.set(u, at)
    const p = ingest(activity, operatorToken, b.body)
    // Reported by the Promise.all below, not as an unhandled rejection while later ticks wait.
    p.catch(() => undefined)
    inFlight.push(p)
  }
  await Promise.all(inFlight)
  return sentAt
}

/** Times from send to arrival of the events of `sentAt` that arrived, sorted. */
export function latencies(sentAt: Map<string, number>, arrivals: Map<string, number>): number[] {
  const out = [...sentAt].flatMap(([u, at]) => {
    const arrived = arrivals.get(u)
    return arrived === undefined ? [] : [arrived - at]
  })
  return out.sort((a, b) => a - b)
}

