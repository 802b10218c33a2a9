import http from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Test } from 'tap'

/**
 * A loopback pass-through in front of the running product, one per client
 * under test: the client is pointed at it (its only change: the host), and
 * it records every exchange as the client saw it on the wire. The suite
 * counts each client's calls from it and audits every `/2/` response body
 * against the public OpenAPI document (openapi-audit.ts).
 *
 * Requests and responses are piped through unchanged, Host header included,
 * so OAuth 1.0a signatures (made for this origin) verify as they would
 * against the product directly; streaming responses flow as they arrive.
 */

export interface Exchange {
  method: string
  /** Path and query as the client sent them. */
  url: string
  requestHeaders: http.IncomingHttpHeaders
  readonly requestBody: string
  status: number
  contentType: string
  /** The response body as received by the client so far (a stream: what arrived until now). */
  readonly body: string
}

/** Bodies above this are kept cut: the suite's responses are small, and a stream is closed early. */
const MAX_KEPT = 4 * 1024 * 1024

export class Recorder {
  private constructor(
    readonly url: string,
    readonly exchanges: Exchange[]
  ) {}

  static async start(t: Test, target: string): Promise<Recorder> {
    const upstream = new URL(target)
    const agent = new http.Agent({ keepAlive: true })
    const exchanges: Exchange[] = []
    const server = http.createServer((req, res) => {
      const requestChunks: Buffer[] = []
      req.on('data', (c: Buffer) => requestChunks.push(c))
      const responseChunks: Buffer[] = []
      let kept = 0
      const up = http.request({ host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: req.headers, agent }, (ur) => {
        // Recorded as soon as the answer starts: a stream the client never closes still counts.
        exchanges.push({
          method: req.method ?? 'GET',
          url: req.url ?? '/',
          requestHeaders: req.headers,
          get requestBody() {
            return Buffer.concat(requestChunks).toString('utf8')
          },
          status: ur.statusCode ?? 0,
          contentType: String(ur.headers['content-type'] ?? ''),
          get body() {
            return Buffer.concat(responseChunks).toString('utf8')
          }
        })
        res.writeHead(ur.statusCode ?? 502, ur.headers)
        ur.on('data', (c: Buffer) => {
          if (kept < MAX_KEPT) {
            responseChunks.push(c)
            kept += c.length
          }
          res.write(c)
        })
        ur.on('end', () => res.end())
        ur.on('error', () => res.destroy())
      })
      up.on('error', () => {
        if (!res.headersSent) res.writeHead(502)
        res.end()
      })
      // The client closed first (a stream it is done with): close the upstream side too.
      res.on('close', () => up.destroy())
      req.pipe(up)
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    const port = (server.address() as AddressInfo).port
    const recorder = new Recorder(`http://127.0.0.1:${port}`, exchanges)
    t.teardown(async () => {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
      agent.destroy()
    })
    return recorder
  }

  /** Calls recorded so far, optionally only those whose path starts with `prefix`. */
  count(prefix = ''): number {
    return this.exchanges.filter((e) => e.url.startsWith(prefix)).length
  }
}
