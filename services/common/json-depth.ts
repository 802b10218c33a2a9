import { Transform, type Readable, type TransformCallback } from 'node:stream'

/**
 * A nesting bound for JSON request bodies. JSON.parse accepts arrays nested
 * thousands deep, and every recursive walk after it (schema validation,
 * String(), structuredClone, a recursive matcher) then overflows the stack
 * and answers 500. No body of this API nests anywhere near the bound, so a
 * deeper one is refused as malformed before it is parsed.
 *
 * The check is lexical (brackets outside strings), so it runs on the bytes as
 * they arrive: structural characters and quotes are ASCII, and UTF-8 never
 * uses ASCII bytes inside a multi-byte character. For NDJSON a newline ends a
 * document (a JSON string cannot hold a raw newline), so each line is measured
 * on its own.
 */

export const MAX_JSON_DEPTH = 64

const OPEN_BRACE = 0x7b
const OPEN_BRACKET = 0x5b
const CLOSE_BRACE = 0x7d
const CLOSE_BRACKET = 0x5d
const QUOTE = 0x22
const BACKSLASH = 0x5c
const NEWLINE = 0x0a

export class JsonTooDeepError extends Error {
  readonly statusCode = 400
  readonly code = 'GW_JSON_TOO_DEEP'
  constructor(readonly maxDepth: number) {
    super(`Request body is not valid JSON: it nests deeper than ${maxDepth} levels.`)
    this.name = 'JsonTooDeepError'
  }
}

/** Incremental depth meter: feed it chunks; it throws JsonTooDeepError past the bound. */
export class JsonDepthMeter {
  private depth = 0
  private inString = false
  private escaped = false

  constructor(
    private readonly maxDepth: number = MAX_JSON_DEPTH,
    /** NDJSON: every line is a document of its own. */
    private readonly perLine = false
  ) {}

  feed(chunk: Uint8Array): void {
    for (let i = 0; i < chunk.length; i++) {
      const c = chunk[i] as number
      if (this.inString) {
        if (this.escaped) this.escaped = false
        else if (c === BACKSLASH) this.escaped = true
        else if (c === QUOTE) this.inString = false
        else if (c === NEWLINE && this.perLine) this.inString = false
        continue
      }
      if (c === QUOTE) this.inString = true
      else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
        if (++this.depth > this.maxDepth) throw new JsonTooDeepError(this.maxDepth)
      } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
        if (this.depth > 0) this.depth--
      } else if (c === NEWLINE && this.perLine) this.depth = 0
    }
  }
}

/** A pass-through stream that fails with JsonTooDeepError once the body nests too deep. */
export function jsonDepthGuard(maxDepth: number = MAX_JSON_DEPTH, perLine = false): Transform {
  const meter = new JsonDepthMeter(maxDepth, perLine)
  return new Transform({
    transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
      try {
        meter.feed(chunk)
      } catch (err) {
        callback(err as Error)
        return
      }
      callback(null, chunk)
    }
  })
}

/**
 * Reads a body nobody will parse (GET, HEAD: fastify ignores it) to its end
 * through the meter, keeping none of it. Rejects with JsonTooDeepError as soon
 * as the bound is passed; the rest of the body is still drained, so a
 * keep-alive connection is left at the next request's first byte.
 */
export function measureAndDiscard(body: Readable, maxDepth: number = MAX_JSON_DEPTH, perLine = false): Promise<void> {
  const meter = new JsonDepthMeter(maxDepth, perLine)
  return new Promise((resolve, reject) => {
    const onData = (chunk: Buffer): void => {
      try {
        meter.feed(chunk)
      } catch (err) {
        body.off('data', onData)
        body.resume()
        reject(err as Error)
      }
    }
    body.on('data', onData)
    body.once('end', () => resolve())
    // An aborted request: nobody is left to answer, the handler may run for nothing.
    body.once('close', () => resolve())
    body.once('error', (err: Error & { statusCode?: number }) => reject(Object.assign(err, { statusCode: err.statusCode ?? 400 })))
  })
}

const NDJSON_TYPES = new Set(['application/x-ndjson', 'application/ndjson', 'application/jsonl', 'application/x-jsonlines', 'application/jsonlines'])

/** Which bodies are measured: JSON (`application/json`, `+json`) and NDJSON. Undefined: not JSON. */
export function jsonBodyKind(contentType: string | undefined): 'json' | 'ndjson' | undefined {
  const type = (contentType ?? '').split(';', 1)[0]?.trim().toLowerCase() ?? ''
  if (NDJSON_TYPES.has(type)) return 'ndjson'
  if (type === 'application/json' || /^application\/[a-z0-9.+-]+\+json$/.test(type)) return 'json'
  return undefined
}
