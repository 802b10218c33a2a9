import { createHmac } from 'node:crypto'

/**
 * The two HMAC-SHA256 values of the webhook protocol, both keyed by the
 * app's consumer secret and written `sha256=<base64>` (platform-facts §3, §4):
 * the CRC `response_token` over the `crc_token`, and the
 * `x-twitter-webhooks-signature` header over the raw request body.
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
