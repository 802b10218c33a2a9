import { expectedSignature, sameString } from '../../support/receivers'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Test } from 'tap'

/**
 * The customer's webhook endpoint: a node:http server on loopback that
 * answers CRC checks as docs/architecture.md describes, verifies the signature
 * of every POST with its own HMAC code (§4), and counts deliveries by
 * `event_uuid`: activity-subscription envelopes (`data.event_uuid`) and
 * Account Activity messages (top-level `event_uuid`) separately. A repeat of
 * an `event_uuid` is a duplicate (at-least-once delivery allows them; they
 * are counted, not failed).
 *
 * `down()` closes the listening socket (senders get connection refused) and
 * `up()` listens again on the same port.
 */

export type DeliveryKind = 'activity' | 'account-activity'

export class CountingReceiver {
  /** event_uuid -> when it first arrived (ms), activity deliveries. */
  readonly firstAt = new Map<string, number>()
  /** event_uuid -> times received, per kind. */
  readonly received: Record<DeliveryKind, Map<string, number>> = { activity: new Map(), 'account-activity': new Map() }
  /** payload.id of activity envelopes -> times received (posts made through the ads interface are known by id only). */
  readonly payloadIds = new Map<string, number>()
  badSignatures = 0
  /** POSTs whose body was neither kind (replay job notices are ignored, not counted here). */
  unrecognised = 0
  crcChecks = 0
  /** Status answered to POSTs: anything but 2xx makes the sender retry. */
  postStatus = 200
  private server: http.Server | undefined
  private port = 0

  constructor(readonly secret: string) {}

  get url(): string {
    return `http://127.0.0.1:${this.port}/webhook`
  }

  get isUp(): boolean {
    return this.server !== undefined
  }

  async up(): Promise<void> {
    if (this.server) return
    const server = http.createServer((req, res) => this.handle(req, res))
    server.keepAliveTimeout = 5000
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(this.port, '127.0.0.1', () => resolve())
    })
    this.port = (server.address() as AddressInfo).port
    this.server = server
  }

  /** Stops listening and drops open connections: the sender sees refused or reset connections. */
  async down(): Promise<void> {
    const server = this.server
    if (!server) return
    this.server = undefined
    server.closeAllConnections()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  }

  unique(kind: DeliveryKind): number {
    return this.received[kind].size
  }

  /** Deliveries beyond the first of each event_uuid. */
  duplicates(kind: DeliveryKind): number {
    let n = 0
    for (const count of this.received[kind].values()) n += count - 1
    return n
  }

  has(kind: DeliveryKind, eventUuid: string): boolean {
    return this.received[kind].has(eventUuid)
  }

  private handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://receiver')
      if (req.method === 'GET') {
        this.crcChecks++
        const token = url.searchParams.get('crc_token')
        if (token === null) {
          res.writeHead(400, { 'content-type': 'application/json' }).end('{"error":"crc_token missing"}')
          return
        }
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ response_token: expectedSignature(this.secret, token) }))
        return
      }
      if (req.method !== 'POST') {
        res.writeHead(405).end()
        return
      }
      const body = Buffer.concat(chunks).toString('utf8')
      const header = req.headers['x-twitter-webhooks-signature']
      if (typeof header !== 'string' || !sameString(header, expectedSignature(this.secret, body))) {
        this.badSignatures++
        res.writeHead(401).end()
        return
      }
      if (this.postStatus < 200 || this.postStatus > 299) {
        res.writeHead(this.postStatus, { 'content-type': 'application/json' }).end('{}')
        return
      }
      this.count(body)
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
    })
  }

  private count(body: string): void {
    let json: Record<string, unknown>
    try {
      json = JSON.parse(body) as Record<string, unknown>
    } catch {
      this.unrecognised++
      return
    }
    if ('replay_job_status' in json) return
    const data = json.data as Record<string, unknown> | undefined
    let kind: DeliveryKind
    let uuid: unknown
    if (data && typeof data === 'object' && 'event_uuid' in data) {
      kind = 'activity'
      uuid = data.event_uuid
      const payloadId = (data.payload as Record<string, unknown> | undefined)?.id
      if (typeof payloadId === 'string') this.payloadIds.set(payloadId, (this.payloadIds.get(payloadId) ?? 0) + 1)
    } else if ('for_user_id' in json) {
      kind = 'account-activity'
      uuid = json.event_uuid
    } else {
      this.unrecognised++
      return
    }
    if (typeof uuid !== 'string') {
      this.unrecognised++
      return
    }
    const map = this.received[kind]
    map.set(uuid, (map.get(uuid) ?? 0) + 1)
    if (kind === 'activity' && !this.firstAt.has(uuid)) this.firstAt.set(uuid, Date.now())
  }
}

export async function startCountingReceiver(t: Test, secret: string): Promise<CountingReceiver> {
  const r = new CountingReceiver(secret)
  await r.up()
  t.teardown(() => r.down())
  return r
}
