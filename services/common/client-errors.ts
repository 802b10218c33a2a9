import { STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import { ADS_API_VERSION } from './ads/version'
import { capText } from './echo'
import { adsCodeForStatus, problemBody } from './errors'
import { shapeOfPath } from './http-errors'
import { targetPath } from './request-target'

/**
 * Requests Node's HTTP parser refuses (a malformed request line or header,
 * oversized headers, broken chunked framing, a request that never finishes
 * arriving) never reach a route; they still get an answer in the shape of
 * the interface they were sent to. On a keep-alive connection
 * earlier requests may still be in progress when the parser fails on a
 * later one: the error answer waits until every earlier request has been
 * answered, then goes out with `connection: close`, so a client that
 * pipelines a valid request and a malformed one gets both answers, in order.
 */

/** How long an error answer waits for the earlier requests of its connection when the server sets no request timeout. */
export const CLIENT_ERROR_WAIT_MS = 30_000
/** After the error answer the connection is closed; a client that keeps sending is cut off after this long. */
const LINGER_MS = 2_000
/** Longest request target kept to choose the error shape (only its path prefix matters). */
const TARGET_MAX_CHARS = 2048

type ClientError = NodeJS.ErrnoException & { rawPacket?: Buffer; bytesParsed?: number }

interface Connection {
  /** Answers not finished yet, in the order their requests arrived (Node writes them in that order). */
  open: Set<ServerResponse>
  /** The request whose head the parser completed last, and its answer. */
  last?: IncomingMessage
  lastAnswer?: ServerResponse
  /** Target of a request head still being received: it may span packets, the one that fails lacks its request line. */
  headTarget?: string
  /** A client error was taken (the parser repeats it for every later packet), or the connection was upgraded. */
  done: boolean
  /** Its answer waits for the earlier answers. */
  answering?: boolean
}

const LF = 0x0a
const CR = 0x0d
const SP = 0x20
const HTAB = 0x09
const SLASH = 0x2f
const STAR = 0x2a

/**
 * A character of a method as a client may spell one: letters of either case,
 * digits, '-', '_', '.'. Methods the parser refuses (`get`, `FOO`, `G3T`)
 * still name the path whose interface shapes the answer.
 */
function isMethodChar(c: number | undefined): boolean {
  return c !== undefined && ((c >= 65 && c <= 90) || (c >= 97 && c <= 122) || (c >= 48 && c <= 57) || c === 0x2d || c === 0x5f || c === 0x2e)
}

const isSeparator = (c: number | undefined): boolean => c === SP || c === HTAB

/** The end of the method token starting at `p`, when a space (or tab) and a target follow it. */
function methodEnd(buf: Buffer, p: number): number | undefined {
  let i = p
  while (i < buf.length && i - p <= 20 && isMethodChar(buf[i])) i++
  if (i === p || !isSeparator(buf[i])) return undefined
  const next = buf[i + 1]
  if (next === undefined || isSeparator(next) || next === CR || next === LF) return undefined
  // A target as requests write them (a path, `*`, an absolute URL): `Bad Header: 1` is a header line, not a head.
  return next === SLASH || next === STAR || /^[A-Za-z][A-Za-z0-9+.-]*:\/\//.test(buf.toString('latin1', i + 1, i + 40)) ? i : undefined
}

/** Whether a whole request line starts at `p`: `METHOD SP target SP HTTP/x.y CRLF` (read no further than the target's bound). */
function wholeRequestLine(buf: Buffer, p: number): boolean {
  let i = (methodEnd(buf, p) as number) + 1
  const stop = Math.min(buf.length, i + TARGET_MAX_CHARS)
  while (i < stop && !isSeparator(buf[i]) && buf[i] !== CR && buf[i] !== LF) i++
  return isSeparator(buf[i]) && /^HTTP\/\d\.\d\r?\n/.test(buf.toString('latin1', i + 1, i + 11))
}

/**
 * Whether a request head plausibly starts at `p`: a method and a target, at
 * the start of the packet or of a line, or as a whole request line right
 * after the body of an earlier request (a body needs no line end).
 */
function headStartsAt(buf: Buffer, p: number): boolean {
  if (!isMethodChar(buf[p]) || (p > 0 && isMethodChar(buf[p - 1]))) return false
  if (methodEnd(buf, p) === undefined) return false
  const before = p === 0 ? LF : buf[p - 1]
  if (before === LF) return true
  return before !== SP && before !== HTAB && before !== 0x3a && wholeRequestLine(buf, p)
}

/**
 * The last position at or before `at` where a request head starts. Linear in
 * the packet: a candidate is checked no further than its target, and targets
 * (runs without a space) of different candidates do not overlap.
 */
export function lastHeadStart(buf: Buffer, at: number): number | undefined {
  for (let p = Math.min(at, buf.length - 1); p >= 0; p--) if (headStartsAt(buf, p)) return p
  return undefined
}

/** The request target of the head starting at `p`, read no further than `end`. */
function targetAt(buf: Buffer, p: number, end: number): string {
  const start = (methodEnd(buf, p) as number) + 1
  let i = start
  // A failure before the target (in the method) still leaves the target to read.
  const stop = Math.min(end > start ? end : buf.length, buf.length, start + TARGET_MAX_CHARS)
  while (i < stop && !isSeparator(buf[i]) && buf[i] !== CR && buf[i] !== LF) i++
  return buf.toString('latin1', start, i)
}

/** Whether the head starting at `p` ended (its blank line, whole) before `end`: oversized headers fail on that very line. */
function headEnded(buf: Buffer, p: number, end: number): boolean {
  const crlf = buf.indexOf('\r\n\r\n', p, 'latin1')
  if (crlf >= 0 && crlf + 4 <= end) return true
  const lf = buf.indexOf('\n\n', p, 'latin1')
  return lf >= 0 && lf + 2 <= end
}

/**
 * The target of the request a client error belongs to: the request whose
 * body the parser was reading; else the last request head starting at or
 * before the point of failure in the failing packet; else the head seen
 * arriving in an earlier packet. Null: the failing request has no
 * readable request line (its head began after the last one that ended).
 */
export function failingTarget(err: ClientError, conn: Pick<Connection, 'last' | 'headTarget'> | undefined): string | null {
  const last = conn?.last
  if (last && !last.complete) return last.url ?? null
  const raw = Buffer.isBuffer(err.rawPacket) ? err.rawPacket : undefined
  if (raw && raw.length > 0) {
    const at = typeof err.bytesParsed === 'number' && err.bytesParsed >= 0 ? Math.min(err.bytesParsed, raw.length) : raw.length
    const p = lastHeadStart(raw, at)
    if (p !== undefined) return headEnded(raw, p, at) ? null : targetAt(raw, p, at)
  }
  return conn?.headTarget ?? null
}

/** The whole error answer, ready for the socket. */
export function clientErrorAnswer(err: ClientError, target: string | null, problemBase: string): string {
  const status = err.code === 'HPE_HEADER_OVERFLOW' ? 431 : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400
  const detail = status === 431 ? 'Request headers (or the query string) are too large.' : status === 408 ? 'Request timed out.' : 'Malformed HTTP request.'
  return rawAnswer(status, detail, target, problemBase)
}

/** An error answer written on the socket itself, in the shape of the interface `target` belongs to. */
function rawAnswer(status: number, detail: string, target: string | null, problemBase: string): string {
  const shape = shapeOfPath(targetPath(target ?? '/'))
  const body = JSON.stringify(
    shape === 'ads'
      ? { errors: [{ code: adsCodeForStatus(status), message: detail }], request: { params: {} } }
      : shape === 'classic'
        ? { errors: [{ code: 214, message: detail }] }
        : problemBody(problemBase, 'about:blank', detail, status)
  )
  const type = shape === 'v2' ? 'application/problem+json' : 'application/json; charset=utf-8'
  const version = shape === 'ads' ? `x-current-api-version: ${ADS_API_VERSION}\r\n` : ''
  return `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\ncontent-type: ${type}\r\n${version}content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`
}

/** Resolves once every answer has finished (or its connection closed), or after `ms`: false then. */
function allFinished(answers: ServerResponse[], socket: Socket, ms: number): Promise<boolean> {
  const pending = answers.filter((res) => !res.writableFinished && !res.destroyed)
  if (pending.length === 0) return Promise.resolve(true)
  return new Promise((resolve) => {
    let left = pending.length
    const listeners: Array<[ServerResponse, () => void]> = []
    const settle = (ok: boolean): void => {
      clearTimeout(timer)
      socket.off('close', onClose)
      for (const [res, listener] of listeners) {
        res.off('finish', listener)
        res.off('close', listener)
      }
      resolve(ok)
    }
    const onClose = (): void => settle(false)
    const timer = setTimeout(() => settle(false), ms)
    socket.once('close', onClose)
    for (const res of pending) {
      // 'close' follows 'finish': each answer counts once.
      let counted = false
      const listener = (): void => {
        if (counted) return
        counted = true
        if (--left === 0) settle(true)
      }
      listeners.push([res, listener])
      res.once('finish', listener)
      res.once('close', listener)
    }
  })
}

/** Writes the answer after which nothing more is written, and closes the connection once the client had time to read it. */
function endWith(socket: Socket, answer: string | undefined): void {
  if (socket.destroyed) return
  if (!socket.writable) {
    socket.destroy()
    return
  }
  if (answer === undefined) socket.end()
  else socket.end(answer)
  // Keep reading (and discarding) what the client still sends, so closing does not reset the answer away.
  socket.resume()
  const timer = setTimeout(() => socket.destroy(), LINGER_MS)
  socket.once('close', () => clearTimeout(timer))
}

/**
 * Watches the connections of a server (requests in flight, request heads
 * arriving) and answers its client errors in order. `answer` is the
 * server's clientError handler.
 */
export class ClientErrorAnswers {
  private readonly connections = new WeakMap<Socket, Connection>()
  private server: Server | undefined

  constructor(
    private readonly problemBase: string,
    private readonly waitMs?: number
  ) {}

  watch(server: Server, secure: boolean): void {
    this.server = server
    server.on(secure ? 'secureConnection' : 'connection', (socket: Socket) => {
      const conn: Connection = { open: new Set(), done: false }
      this.connections.set(socket, conn)
      // Runs after Node's parser has taken the packet: 'request' events for it were already emitted.
      socket.on('data', (chunk: Buffer) => observe(conn, chunk))
      socket.on('end', () => onClientEnd(conn, socket))
    })
    // Before the application's listener, which may answer at once.
    server.prependListener('request', (req: IncomingMessage, res: ServerResponse) => {
      const conn = this.connections.get(req.socket)
      if (!conn) return
      conn.last = req
      conn.lastAnswer = res
      conn.headTarget = undefined
      conn.open.add(res)
      const settle = (): void => void conn.open.delete(res)
      res.once('finish', settle)
      res.once('close', settle)
    })
    // An upgraded connection carries another protocol: nothing more to watch. A listener that takes
    // the upgrade claims it (claimUpgrade) in the same turn; one nobody claims is refused here.
    server.prependListener('upgrade', (req: IncomingMessage, socket: Socket) => {
      const earlier = this.handOver(req, socket)
      earlierAnswers.set(req, earlier)
      process.nextTick(() => {
        if (claimed.has(req)) return
        const path = targetPath(req.url ?? '/')
        this.refuse(socket, earlier, rawAnswer(404, `The route ${capText(path, 200)} does not upgrade to a WebSocket.`, req.url ?? null, this.problemBase))
      })
    })
    // CONNECT (a proxy's method) is not served; without a listener Node would drop the connection and
    // with it the answers of the requests before it.
    server.on('connect', (req: IncomingMessage, socket: Socket) => {
      this.refuse(socket, this.handOver(req, socket), rawAnswer(405, 'The CONNECT method is not served.', req.url ?? null, this.problemBase))
    })
  }

  /** The connection leaves HTTP with this request: what is left is to wait for the answers before it. */
  private handOver(req: IncomingMessage, socket: Socket): Promise<boolean> {
    socket.on('error', () => undefined)
    const conn = this.connections.get(req.socket)
    if (conn) conn.done = true
    return allFinished(conn ? [...conn.open] : [], socket, this.waitBound())
  }

  /** Writes `answer` once the earlier answers went out, then closes; a connection whose earlier answers never finish is destroyed. */
  private refuse(socket: Socket, earlier: Promise<boolean>, answer: string): void {
    void earlier.then((done) => (done ? endWith(socket, answer) : socket.destroy()))
  }

  /** The bound on waiting for earlier answers: the server's request timeout, or CLIENT_ERROR_WAIT_MS. */
  private waitBound(): number {
    if (this.waitMs !== undefined) return this.waitMs
    const timeout = this.server?.requestTimeout ?? 0
    return timeout > 0 ? timeout : CLIENT_ERROR_WAIT_MS
  }

  answer(err: ClientError, socket: Socket): void {
    const conn = this.connections.get(socket)
    if (conn?.done) return
    if (conn) conn.done = true
    if (err.code === 'ECONNRESET' || socket.destroyed || !socket.writable) {
      socket.destroy()
      return
    }
    const answer = clientErrorAnswer(err, failingTarget(err, conn), this.problemBase)
    // The request whose body failed is the one this error answers (unless its own answer has begun).
    const failing = conn?.last && !conn.last.complete ? conn.lastAnswer : undefined
    const earlier = conn ? [...conn.open].filter((res) => res !== failing) : []
    if (conn) conn.answering = true
    void this.afterEarlier(socket, earlier, failing, answer).finally(() => {
      if (conn) conn.answering = false
    })
  }

  private async afterEarlier(socket: Socket, earlier: ServerResponse[], failing: ServerResponse | undefined, answer: string): Promise<void> {
    const deadline = Date.now() + this.waitBound()
    if (!(await allFinished(earlier, socket, this.waitBound()))) {
      // A handler that never answers does not keep a hostile connection open.
      socket.destroy()
      return
    }
    if (failing && (failing.headersSent || failing.writableEnded)) {
      // Its handler answered already: that answer is the request's, then the connection closes.
      const finished = await allFinished([failing], socket, Math.max(0, deadline - Date.now()))
      if (finished) endWith(socket, undefined)
      else socket.destroy()
      return
    }
    endWith(socket, answer)
  }
}

/**
 * The client half-closed its side (it sends nothing more). The server runs
 * with httpAllowHalfOpen (server.ts), so the requests it already sent are
 * still answered and the last answer ends the connection. Two exceptions: a
 * client error's answer still waiting for earlier answers is the one that
 * ends it; and an answer that streams (headers sent, never ended: the
 * activity stream) is a reader that left, so the connection closes now,
 * as Node does by default.
 */
function onClientEnd(conn: Connection, socket: Socket): void {
  const open = [...conn.open]
  if (open.some((res) => res.headersSent && !res.writableEnded)) {
    socket.destroy()
    return
  }
  if (conn.answering) for (const res of open) (res as ServerResponse & { _last?: boolean })._last = false
}

/** Per upgrade request: resolves when every earlier answer on its connection went out (false: never, or the connection closed). */
const earlierAnswers = new WeakMap<IncomingMessage, Promise<boolean>>()
const claimed = new WeakSet<IncomingMessage>()

/**
 * Takes an upgrade request (a WebSocket handshake on a path the caller
 * serves). Resolves once the answers to the requests before it on the
 * connection went out: nothing may be written on the socket before that.
 */
export function claimUpgrade(req: IncomingMessage): Promise<boolean> {
  claimed.add(req)
  return earlierAnswers.get(req) ?? Promise.resolve(true)
}

/** Remembers the request line of a head that is still arriving when a packet ends (the next packet may be where it fails). */
function observe(conn: Connection, chunk: Buffer): void {
  if (conn.done) return
  // In a body: the request the parser is on is known.
  if (conn.last && !conn.last.complete) return
  const p = lastHeadStart(chunk, chunk.length)
  if (p === undefined) return
  conn.headTarget = headEnded(chunk, p, chunk.length) ? undefined : targetAt(chunk, p, chunk.length)
}
