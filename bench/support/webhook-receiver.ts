/**
 * An app's webhook endpoint on loopback, as a customer runs one: answers the
 * CRC (GET ?crc_token= -> {"response_token":"sha256=<base64 HMAC-SHA256>"}
 * keyed by the consumer secret), and for each POST checks
 * x-twitter-webhooks-signature (the same HMAC over the raw body) before
 * answering 200; a bad signature is counted and answered 401. Records when
 * each event_uuid first arrived.
 */
import { createHmac, timingSafeEqual } from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { Arrivals } from './activity-client'

export class WebhookReceiver extends Arrivals {
  badSignatures = 0
  private server: http.Server | undefined

  constructor(private readonly consumerSecret: string) {
    super()
  }

  private hmac(message: string | Buffer): Buffer {
    return Buffer.from(`sha256=${createHmac('sha256', this.consumerSecret).update(message).digest('base64')}`)
  }

  private answer(req: http.IncomingMessage, raw: Buffer, res: http.ServerResponse): void {
    if (req.method === 'GET') {
      const token = new URL(req.url ?? '/', 'http://receiver').searchParams.get('crc_token')
      if (token === null) return void res.writeHead(400).end()
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ response_token: this.hmac(token).toString() }))
      return
    }
    const presented = Buffer.from(String(req.headers['x-twitter-webhooks-signature'] ?? ''))
    const expected = this.hmac(raw)
    if (presented.length !== expected.length || !timingSafeEqual(presented, expected)) {
      this.badSignatures++
      return void res.writeHead(401).end()
    }
    let uuid: unknown
    try {
      uuid = (JSON.parse(raw.toString('utf8')) as { data?: { event_uuid?: unknown } }).data?.event_uuid
    } catch {
      // signed but not JSON: answered, not counted
    }
    if (typeof uuid === 'string') this.seen(uuid, performance.now())
    res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
    this.wake()
  }

  /** Listens on a free loopback port; resolves with the URL to register. */
  async listen(): Promise<string> {
    const server = http.createServer((req, res) => {
      const chunks: Buffer[] = []
      req.on('data', (c: Buffer) => chunks.push(c))
      req.on('end', () => this.answer(req, Buffer.concat(chunks), res))
    })
    server.keepAliveTimeout = 60_000
    this.server = server
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(0, '127.0.0.1', () => resolve())
    })
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}/webhook`
  }

  async close(): Promise<void> {
    const server = this.server
    if (!server) return
    server.closeAllConnections()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  }
}
