import pino, { type Logger } from 'pino'

/**
 * Paths whose values never reach a log line. Request logs carry headers and
 * query strings, so both the Authorization header and every OAuth secret that
 * may travel in a form body or query are censored.
 */
export const REDACTED_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'req.headers["x-operator-token"]',
  'res.headers["set-cookie"]',
  'headers.authorization',
  '*.password',
  '*.consumer_secret',
  '*.oauth_token_secret',
  '*.oauth_signature',
  '*.access_token',
  '*.refresh_token',
  '*.client_secret',
  '*.token_secret',
  '*.secret',
  '*.code_verifier',
  'password',
  'consumer_secret',
  'oauth_token_secret',
  'access_token',
  'client_secret',
  'secret'
]

export type { Logger }

export function createLogger(level: string, name: string, destination?: pino.DestinationStream): Logger {
  const options: pino.LoggerOptions = {
    name,
    level,
    redact: { paths: REDACTED_PATHS, censor: '[redacted]' },
    base: { service: name, pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime
  }
  return destination ? pino(options, destination) : pino(options)
}

/** Removes secrets from a URL's query string before it is logged. */
export function redactUrl(url: string): string {
  return url.replace(
    /([?&](?:oauth_[a-z_]*secret|oauth_signature|oauth_verifier|access_token|client_secret|code|code_verifier|crc_token|password|refresh_token)=)[^&]*/gi,
    '$1[redacted]'
  )
}
