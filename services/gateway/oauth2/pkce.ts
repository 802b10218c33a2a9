/**
 * What a PKCE code_verifier (and a plain code_challenge, which is the
 * verifier itself) may be. RFC 7636 §4.1 says 43 to 128 characters of the
 * unreserved set; clients exceed the 128 and the platform takes them:
 * oauthlib's create_code_verifier(128) returns secrets.token_urlsafe(128),
 * 171 characters. So any length from 43 up to a bound that keeps a request
 * small is accepted, still only unreserved characters, and the verifier
 * must still match the challenge.
 */

/** Longest verifier accepted (4 times what the RFC asks for; oauthlib's longest is 171). */
export const PKCE_MAX_CHARS = 512

export const PKCE_VALUE = new RegExp(`^[A-Za-z0-9\\-._~]{43,${PKCE_MAX_CHARS}}$`)

export const PKCE_VALUE_RULE = `43 to ${PKCE_MAX_CHARS} characters of A-Z a-z 0-9 - . _ ~`
