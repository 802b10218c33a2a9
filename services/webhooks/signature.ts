import { createHmac, randomBytes } from 'node:crypto'

/**
 * The two HMAC-SHA256 values of the webhook protocol, both keyed by the
 * app's consumer secret and written `sha256=<base64>` (docs/webhooks.md, §4):
 * the CRC `response_token` over the `crc_token`, and the
 * `x-twitter-webhooks-signature` header over the raw request body.
 *
 * And the Standard Webhooks signature a webhook may opt into
 * (docs/webhooks.md "Standard Webhooks"): `v1,<base64>` of
 * HMAC-SHA256(secret bytes, "<webhook-id>.<webhook-timestamp>.<body>"),
 * keyed by a per-webhook `whsec_<base64>` secret.
 */

export const SIGNATURE_HEADER = 'x-twitter-webhooks-signature'

export function hmacSha256Base64(secret: string, message: string | Buffer): string {
  return `sha256=${createHmac('sha256', secret).update(message).digest('base64')}`
}

/** The header value for a delivery whose body is exactly `rawBody`. */
export function webhookSignature(consumerSecret: string, rawBody: string | Buffer): string {
  return hmacSha256Base64(consumerSecret, rawBody)
}

/** The `response_token` a receiver must answer a CRC with. */
export function crcResponseToken(consumerSecret: string, crcToken: string): string {
  return hmacSha256Base64(consumerSecret, crcToken)
}

// ---------------------------------------------------------------- Standard Webhooks

export const STANDARD_ID_HEADER = 'webhook-id'
export const STANDARD_TIMESTAMP_HEADER = 'webhook-timestamp'
export const STANDARD_SIGNATURE_HEADER = 'webhook-signature'

const SECRET_PREFIX = 'whsec_'
/** 256 bits: the HMAC's own block of strength; the format allows 24 to 64 bytes. */
const SECRET_BYTES = 32

/** A new signing secret, `whsec_` and the base64 of random bytes (the form receivers' libraries take). */
export function newStandardSecret(): string {
  return `${SECRET_PREFIX}${randomBytes(SECRET_BYTES).toString('base64')}`
}

/** One `v1,<base64>` entry: the key is the secret's bytes (its base64 after `whsec_`), not its text. */
export function standardSignature(secret: string, messageId: string, timestampSeconds: number, rawBody: string | Buffer): string {
  const key = Buffer.from(secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret, 'base64')
  const mac = createHmac('sha256', key).update(`${messageId}.${timestampSeconds}.`).update(rawBody).digest('base64')
  return `v1,${mac}`
}

/**
 * The three headers of one attempt: `secrets` are the webhook's active ones
 * (the current first; during a rotation's overlap also the previous), each
 * giving one space-separated `v1,` entry so a receiver holding either verifies.
 */
export function standardHeaders(secrets: readonly string[], messageId: string, atMs: number, rawBody: string | Buffer): Record<string, string> {
  const timestamp = Math.floor(atMs / 1000)
  return {
    [STANDARD_ID_HEADER]: messageId,
    [STANDARD_TIMESTAMP_HEADER]: String(timestamp),
    [STANDARD_SIGNATURE_HEADER]: secrets.map((s) => standardSignature(s, messageId, timestamp, rawBody)).join(' ')
  }
}
