import net from 'node:net'

/**
 * Raw HTTP/1.1 over a socket, for the hostile-input tests: requests written
 * exactly as given (pipelined, malformed, split over packets), answers read
 * until the server closes the connection.
 */

export interface Answer {
  status: number
  headers: Record<string, string>
  body: string
}

/** Splits what a connection received into its answers (every answer here has a Content-Length). */
export function parseAnswers(raw: Buffer): Answer[] {
  const out: Answer[] = []
  let at = 0
  while (at < raw.length) {
    const end = raw.indexOf('\r\n\r\n', at)
    if (end < 0) throw new Error(`an incomplete answer head: ${raw.toString('latin1', at, at + 200)}`)
    const [statusLine, ...lines] = raw.toString('latin1', at, end).split('\r\n')
    const headers: Record<string, string> = {}
    for (const line of lines) {
      const colon = line.indexOf(':')
      headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim()
    }
    const length = Number(headers['content-length'])
    if (!Number.isInteger(length)) throw new Error(`an answer without Content-Length: ${statusLine}`)
    out.push({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(statusLine ?? '')?.[1] ?? 0), headers, body: raw.toString('utf8', end + 4, end + 4 + length) })
    at = end + 4 + length
  }
  return out
}

/** Writes each part (a pause between them; `halfClose`: then ends its side), reads to the close, and splits the answers. */
export function converse(port: number, parts: Array<string | Buffer>, pauseMs = 0, timeoutMs = 15_000, halfClose = false): Promise<Answer[]> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1')
    const chunks: Buffer[] = []
    const timer = setTimeout(() => socket.destroy(new Error(`no close within ${timeoutMs} ms`)), timeoutMs)
    socket.on('data', (c: Buffer) => chunks.push(c))
    socket.on('error', (err) => {
      clearTimeout(timer)
      // A reset after the answers arrived (the server closed with our bytes unread) still leaves them readable.
      if ((err as NodeJS.ErrnoException).code === 'ECONNRESET' && chunks.length > 0) resolve(parseAnswers(Buffer.concat(chunks)))
      else reject(err)
    })
    socket.on('close', () => {
      clearTimeout(timer)
      try {
        resolve(parseAnswers(Buffer.concat(chunks)))
      } catch (err) {
        reject(err)
      }
    })
    socket.on('connect', async () => {
      for (const part of parts) {
        if (socket.destroyed) return
        socket.write(part)
        if (pauseMs > 0) await new Promise((r) => setTimeout(r, pauseMs))
      }
      // Half-close: the client says it sends nothing more and waits for its answers.
      if (halfClose && !socket.destroyed) socket.end()
    })
  })
}

export const get = (path: string, extra = ''): string => `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n${extra}\r\n`
/** A POST that closes its connection once answered. */
export const post = (path: string, body: string, type = 'application/json'): string =>
  `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: ${type}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`
