import type { ServerResponse } from 'node:http'
import type { WebSocket } from 'ws'

/**
 * One client of the activity stream, over chunked HTTP or WebSocket. The hub
 * only writes lines and asks how much is still unsent; the transport decides
 * the framing:
 *  - HTTP: each event is its JSON followed by `\r\n` in one chunk; a
 *    keep-alive is a bare `\r\n` chunk; errors are `{"errors":[Problem]}` lines;
 *  - WebSocket: each event is one text message of its JSON; keep-alives are
 *    ping frames; errors are one text message before the close frame.
 */
export interface StreamConnection {
  readonly id: string
  readonly appId: string
  readonly transport: 'http' | 'websocket'
  readonly closed: boolean
  /** When something was last written (ms since the epoch). */
  readonly lastWriteAt: number
  /** Sends one event (its serialized envelope). */
  send(json: string): void
  /** Sends several events in one write to the network (a batch's fan-out). */
  sendMany(jsons: string[]): void
  keepAlive(): void
  /** Bytes accepted but not yet handed to the network. */
  unsentBytes(): number
  /**
   * Sends a final `{"errors":[problem]}` and closes (a WebSocket with
   * `closeCode`); `graceMs` later the socket is destroyed if still open.
   */
  closeWith(errorsLine: string, graceMs: number, closeCode: number): void
  /** Resolves once the connection is fully closed. */
  readonly done: Promise<void>
}

export class HttpStreamConnection implements StreamConnection {
  readonly transport = 'http' as const
  closed = false
  lastWriteAt = Date.now()
  readonly done: Promise<void>

  constructor(
    readonly id: string,
    readonly appId: string,
    private readonly res: ServerResponse
  ) {
    this.done = new Promise((resolve) => {
      const finish = (): void => {
        this.closed = true
        resolve()
      }
      // The client may have gone while the connection was being admitted: 'close' has fired already then.
      if (res.destroyed || res.socket === null || res.socket.destroyed) finish()
      else res.once('close', finish)
    })
  }

  private write(chunk: string): void {
    if (this.closed || this.res.writableEnded) return
    this.res.write(chunk)
    this.lastWriteAt = Date.now()
  }

  send(json: string): void {
    this.write(`${json}\r\n`)
  }

  sendMany(jsons: string[]): void {
    // One chunk: each event still ends with its own \r\n, as a client reading lines expects.
    if (jsons.length > 0) this.write(`${jsons.join('\r\n')}\r\n`)
  }

  keepAlive(): void {
    this.write('\r\n')
  }

  unsentBytes(): number {
    // OutgoingMessage.writableLength counts its own queue plus the socket's.
    return this.res.writableLength
  }

  closeWith(errorsLine: string, graceMs: number, _closeCode: number): void {
    if (this.closed || this.res.writableEnded) return
    this.res.end(`${errorsLine}\r\n`)
    this.lastWriteAt = Date.now()
    const timer = setTimeout(() => this.res.destroy(), graceMs)
    timer.unref()
    void this.done.then(() => clearTimeout(timer))
  }
}

export class WebSocketStreamConnection implements StreamConnection {
  readonly transport = 'websocket' as const
  closed = false
  lastWriteAt = Date.now()
  readonly done: Promise<void>
  private closing = false

  constructor(
    readonly id: string,
    readonly appId: string,
    private readonly ws: WebSocket
  ) {
    this.done = new Promise((resolve) => {
      ws.once('close', () => {
        this.closed = true
        resolve()
      })
    })
    // A transport error ends in 'close' too; without a listener it would be thrown.
    ws.on('error', () => undefined)
  }

  private get open(): boolean {
    return !this.closed && !this.closing && this.ws.readyState === this.ws.OPEN
  }

  send(json: string): void {
    if (!this.open) return
    this.ws.send(json)
    this.lastWriteAt = Date.now()
  }

  sendMany(jsons: string[]): void {
    if (!this.open || jsons.length === 0) return
    // One message per event (the protocol), their frames corked into one write to the socket.
    const socket = (this.ws as WebSocket & { _socket?: { cork(): void; uncork(): void } })._socket
    socket?.cork()
    try {
      for (const json of jsons) this.ws.send(json)
    } finally {
      socket?.uncork()
    }
    this.lastWriteAt = Date.now()
  }

  keepAlive(): void {
    if (!this.open) return
    this.ws.ping()
    this.lastWriteAt = Date.now()
  }

  unsentBytes(): number {
    return this.ws.bufferedAmount
  }

  closeWith(errorsLine: string, graceMs: number, closeCode: number): void {
    if (!this.open) return
    this.closing = true
    this.ws.send(errorsLine)
    this.ws.close(closeCode)
    const timer = setTimeout(() => this.ws.terminate(), graceMs)
    timer.unref()
    void this.done.then(() => clearTimeout(timer))
  }
}
