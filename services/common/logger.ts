import pino, { type Logger } from 'pino'

/**
 * Secrets never reach a log line. Every field whose name is a secret's
 * (compared without case, at any depth: `password`, `{ headers: { Authorization } }`,
 * `{ body: { oauth: { token_secret } } }`) is censored, in the fields of each
 * call, in child-logger bindings and in serialized errors; fields named like
 * a URL (`url`, `callbackUrl`) have their secret query parameters censored
 * too (redactUrl). Plain objects and arrays are copied, never modified: the
 * caller's object is left as it was.
 */
export const SECRET_KEYS: ReadonlySet<string> = new Set(
  [
    'authorization',
    'proxy-authorization',
    'cookie',
    'cookies',
    'set-cookie',
    'x-operator-token',
    'password',
    'secret',
    'token',
    'token_secret',
    'access_token',
    'refresh_token',
    'id_token',
    'client_secret',
    'consumer_secret',
    'code_verifier',
    'oauth_signature',
    'oauth_verifier',
    'oauth_token_secret',
    'ticket',
    // A webhook's Standard Webhooks secrets, as its config record names them.
    'signing_secret',
    'previous_signing_secret'
  ].map((k) => k.toLowerCase())
)

const CENSOR = '[redacted]'
/** Deeper than this is not walked but replaced: nothing below it could be checked. */
const MAX_DEPTH = 16

function isPlainObject(value: object): value is Record<string, unknown> {
  const proto = Object.getPrototypeOf(value) as unknown
  return proto === Object.prototype || proto === null
}

function redactValue(key: string, value: unknown, depth: number, seen: WeakSet<object>): unknown {
  if (SECRET_KEYS.has(key.toLowerCase())) return value === undefined || value === null || value === '' ? value : CENSOR
  if (typeof value === 'string') return /url$/i.test(key) ? redactUrl(value) : value
  return redactDeep(value, depth, seen)
}

/** A copy of `value` with every secret censored (see above). Class instances (errors, buffers, dates) pass unchanged. */
export function redactDeep(value: unknown, depth = 0, seen: WeakSet<object> = new WeakSet()): unknown {
  if (value === null || typeof value !== 'object') return value
  const isArray = Array.isArray(value)
  if (!isArray && !isPlainObject(value)) return value
  if (seen.has(value)) return '[circular]'
  if (depth >= MAX_DEPTH) return '[too deep]'
  seen.add(value)
  let out: unknown
  if (isArray) out = value.map((item: unknown) => redactDeep(item, depth + 1, seen))
  else {
    const copy: Record<string, unknown> = {}
    for (const [k, v] of Object.entries(value)) copy[k] = redactValue(k, v, depth + 1, seen)
    out = copy
  }
  seen.delete(value)
  return out
}

function redactFields(fields: Record<string, unknown>): Record<string, unknown> {
  return redactDeep(fields) as Record<string, unknown>
}

/** A serializer's output (it has a prototype of its own) as a plain object, censored like any other field. */
function censored(serialized: object): unknown {
  return redactDeep({ ...serialized })
}

/** The standard serializers, censored: an error may carry the headers of the request that failed. */
const serializers: pino.LoggerOptions['serializers'] = {
  err: (err: unknown) => censored(pino.stdSerializers.err(err as Error)),
  req: (req: unknown) => censored(pino.stdSerializers.req(req as never)),
  res: (res: unknown) => censored(pino.stdSerializers.res(res as never))
}

/**
 * pino formats the bindings of the root logger only; a child's are serialized
 * as given. Every logger made from this one inherits this `child`.
 */
function censorChildBindings(logger: Logger): Logger {
  const child = logger.child
  logger.child = function censoredChild(this: Logger, bindings: pino.Bindings, options?: pino.ChildLoggerOptions) {
    return Reflect.apply(child, this, [redactFields(bindings), options]) as Logger
  } as unknown as Logger['child']
  return logger
}

export type { Logger }

export function createLogger(level: string, name: string, destination?: pino.DestinationStream): Logger {
  const options: pino.LoggerOptions = {
    name,
    level,
    serializers,
    formatters: { log: redactFields, bindings: redactFields },
    base: { service: name, pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime
  }
  return censorChildBindings(destination ? pino(options, destination) : pino(options))
}

/**
 * Query parameters that carry credentials. crc_token is not one: it is a
 * public challenge, useful when a CRC check is being debugged.
 */
const SECRET_QUERY = /([?&;](?:token|access_token|refresh_token|id_token|code|code_verifier|oauth_verifier|oauth_signature|oauth_[a-z_]*secret|client_secret|consumer_secret|password|secret|ticket)=)[^&;#]*/gi

/** Removes secrets from a URL's query string before it is logged. */
export function redactUrl(url: string): string {
  return url.replace(SECRET_QUERY, `$1${CENSOR}`)
}
