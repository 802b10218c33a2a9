/**
 * The store cannot be reached right now: not a wrong request and not a bug,
 * but an outage the client should wait out. The HTTP layer answers it 503
 * with Retry-After in the interface's shape instead of a 500.
 */
export class StoreUnavailableError extends Error {
  readonly code = 'GW_STORE_UNAVAILABLE'
  constructor(message: string, options?: ErrorOptions) {
    super(message, options)
    this.name = 'StoreUnavailableError'
  }
}

/**
 * How ioredis fails a command while Redis is unreachable: the command waited
 * through every reconnection attempt it was allowed (MaxRetriesPerRequestError),
 * was in flight when the connection closed, or found the connection down with
 * the offline queue disabled. Its other errors (ReplyError: WRONGTYPE, script
 * errors) are answers from a live Redis and stay server errors.
 */
const IOREDIS_UNAVAILABLE_NAMES = new Set(['MaxRetriesPerRequestError'])
const IOREDIS_UNAVAILABLE_MESSAGES = ['Connection is closed.', "Stream isn't writeable and enableOfflineQueue options is false"]

/** Wrapped errors are followed this far down their `cause` chain. */
const MAX_CAUSE_DEPTH = 5

function isUnavailableItself(err: Error): boolean {
  return err instanceof StoreUnavailableError || IOREDIS_UNAVAILABLE_NAMES.has(err.name) || IOREDIS_UNAVAILABLE_MESSAGES.includes(err.message)
}

/** Whether `err` (or an error it wraps) says the store is unreachable. */
export function isStoreUnavailable(err: unknown): boolean {
  let current: unknown = err
  for (let depth = 0; depth <= MAX_CAUSE_DEPTH && current instanceof Error; depth++) {
    if (isUnavailableItself(current)) return true
    current = current.cause
  }
  return false
}
