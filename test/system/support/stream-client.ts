import http from 'node:http'

/**
 * A stream consumer that follows the platform's reconnect guidance: it
 * reads `GET /2/activity/stream` (one JSON envelope per `\r\n`), and when the
 * connection ends it reconnects, to the next stream node, with
 * `backfill_minutes` so the events of the gap come again from that node's
 * buffer. It counts event_uuids (repeats are duplicates, as on a webhook).
 */

export class StreamClient {
  readonly received = new Map<string, number>()
  /** event_uuid -> when it first arrived (ms). */
  readonly firstAt = new Map<string, number>()
  /** payload.id of every envelope seen (posts made through the ads interface are known by id only). */
  readonly payloadIds = new Set<string>()
  connections = 0
  /** `disconnect_type`s (or `connection error`) of the ends seen. */
  readonly ends: string[] = []
  private request: http.ClientRequest | undefined
  private closed = false
  private next = 0
  private reconnectTimer: NodeJS.Timeout | undefined
  /** Resolves at the first 200 of the current connection. */
  private openWaiters: Array<() => void> = []

  constructor(
    private readonly targets: () => string[],
    private readonly bearer: string,
    private readonly backfillMinutes = 2
  ) {}

  get unique(): number {
    return this.received.size
  }

  get open(): boolean {
    return this.request !== undefined
  }

  duplicates(): number {
    let n = 0
    for (const c of this.received.values()) n += c - 1
    return n
  }

  /** Connects (no backfill on the first connection) and resolves once the stream is open. */
  start(): Promise<void> {
    const opened = new Promise<void>((resolve) => this.openWaiters.push(resolve))
    this.connect(false)
    return opened
  }

  private connect(backfill: boolean): void {
    if (this.closed) return
    const targets = this.targets()
    if (targets.length === 0) return this.retry()
    const base = targets[this.next++ % targets.length] as string
    const url = new URL('/2/activity/stream', base)
    if (backfill) url.searchParams.set('backfill_minutes', String(this.backfillMinutes))
    const req = http.get(url, { headers: { authorization: `Bearer ${this.bearer}` } }, (res) => {
      if (res.statusCode !== 200) {
        res.resume()
        this.ends.push(`status ${res.statusCode}`)
        this.request = undefined
        return this.retry()
      }
      this.connections++
      for (const w of this.openWaiters.splice(0)) w()
      let buffer = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => {
        buffer += chunk
        let at: number
        while ((at = buffer.indexOf('\r\n')) >= 0) {
          const line = buffer.slice(0, at)
          buffer = buffer.slice(at + 2)
          if (line !== '') this.line(line)
        }
      })
      const ended = (): void => {
        if (this.request !== req) return
        this.request = undefined
        this.retry()
      }
      res.on('end', ended)
      res.on('close', ended)
      res.on('error', () => undefined)
    })
    req.on('error', () => {
      if (this.request !== req) return
      this.ends.push('connection error')
      this.request = undefined
      this.retry()
    })
    this.request = req
  }

  private retry(): void {
    if (this.closed || this.reconnectTimer) return
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined
      this.connect(true)
    }, 200)
  }

  private line(text: string): void {
    let json: { data?: { event_uuid?: unknown; payload?: { id?: unknown } }; errors?: Array<{ disconnect_type?: string }> }
    try {
      json = JSON.parse(text) as typeof json
    } catch {
      this.ends.push('unparsable line')
      return
    }
    if (json.errors) {
      this.ends.push(json.errors[0]?.disconnect_type ?? 'errors line')
      return
    }
    const uuid = json.data?.event_uuid
    const payloadId = json.data?.payload?.id
    if (typeof payloadId === 'string') this.payloadIds.add(payloadId)
    if (typeof uuid === 'string') {
      this.received.set(uuid, (this.received.get(uuid) ?? 0) + 1)
      if (!this.firstAt.has(uuid)) this.firstAt.set(uuid, Date.now())
    }
  }

  close(): void {
    this.closed = true
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer)
    this.request?.destroy()
    this.request = undefined
  }
}
