import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import path from 'node:path'
import readline from 'node:readline'
import t, { type Test } from 'tap'
import { authorize, callbackOf, newClient, newUser, REDIRECT_URI, startServer, submitConsent } from '../support/fixtures/oauth2'
import { CookieJar, send } from '../support/http'

/**
 * PKCE as Python clients do it: oauthlib (Debian python3-oauthlib) makes a
 * code_verifier with secrets.token_urlsafe(128), 171 characters, longer
 * than RFC 7636's 128; requests-oauthlib (python3-requests-oauthlib) sends
 * it. The gateway takes any length from 43 to 512 of the unreserved set,
 * still matched against the challenge. The client runs as a real process
 * (/usr/bin/python3, Debian's interpreter where those packages live) and
 * keeps its verifier to itself; the test plays the user at the consent form.
 */

const PYTHON = process.env.DEBIAN_PYTHON ?? '/usr/bin/python3'
const CLIENT = path.join(__dirname, '..', 'support', 'fixtures', 'conformance', 'oauthlib_pkce_client.py')
/** The scopes GET /2/activity/subscriptions needs, the protected route called with the token. */
const SCOPE = 'tweet.read like.read'

type Line = Record<string, unknown>

/** Starts the Python client; `next()` reads its next JSON line, `answer()` writes one line to it. */
function pythonClient(t: Test, args: Record<string, unknown>): { next: () => Promise<Line>; answer: (line: string) => void } {
  const child = spawn(PYTHON, [CLIENT, JSON.stringify(args)], { stdio: ['pipe', 'pipe', 'pipe'], timeout: 30_000 })
  let stderr = ''
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()))
  t.teardown(() => {
    if (child.exitCode === null) child.kill()
  })
  const lines = readline.createInterface({ input: child.stdout })[Symbol.asyncIterator]()
  return {
    next: async () => {
      const { value, done } = await lines.next()
      if (done) throw new Error(`the Python client ended: ${stderr.slice(-2000)}`)
      return JSON.parse(value as string) as Line
    },
    answer: (line) => child.stdin.write(`${line}\n`)
  }
}

t.test('an oauthlib client with a 171-character verifier gets its token', async (t) => {
  const rt = await startServer(t)
  const client = await newClient(rt)
  const user = await newUser(rt)
  const python = pythonClient(t, {
    client_id: client.client.client_id,
    client_secret: client.secret,
    redirect_uri: REDIRECT_URI,
    scope: SCOPE,
    authorize: `${rt.baseUrl}/i/oauth2/authorize`,
    token: `${rt.baseUrl}/2/oauth2/token`,
    api: `${rt.baseUrl}/2/activity/subscriptions`
  })
  const start = await python.next()
  t.comment(`oauthlib ${String(start.oauthlib)}, requests-oauthlib ${String(start.requests_oauthlib)}`)
  t.equal(start.verifier_length, 171, 'oauthlib made a 171-character verifier')
  const consent = await submitConsent(new URL(start.url as string), { jar: new CookieJar(), user })
  python.answer(callbackOf(consent).toString())
  const end = await python.next()
  t.same(end, { token_type: 'bearer', scope: SCOPE.split(' '), api_status: 200 }, 'the token exchange succeeds and the token works')
})

t.test('a long verifier is still matched against the challenge, and bounded', async (t) => {
  const rt = await startServer(t)
  const client = await newClient(rt)
  const user = await newUser(rt)
  const exchange = async (verifier: string): Promise<{ status: number; body: Record<string, string> }> => {
    const { params } = await authorize(rt.baseUrl, client, SCOPE, new CookieJar(), user)
    const basic = Buffer.from(`${client.client.client_id}:${client.secret ?? ''}`).toString('base64')
    const form = new URLSearchParams({ grant_type: 'authorization_code', code: params.get('code') ?? '', redirect_uri: REDIRECT_URI, code_verifier: verifier })
    const reply = await send('POST', `${rt.baseUrl}/2/oauth2/token`, { 'content-type': 'application/x-www-form-urlencoded', authorization: `Basic ${basic}` }, form.toString())
    return { status: reply.status, body: JSON.parse(reply.text) as Record<string, string> }
  }
  // 171 characters of the unreserved set that are not the verifier of the challenge.
  const wrong = await exchange(randomBytes(128).toString('base64url'))
  t.same([wrong.status, wrong.body.error, wrong.body.error_description], [400, 'invalid_grant', 'code_verifier does not match the code_challenge.'], 'a long verifier that does not match is refused')
  const tooLong = await exchange('a'.repeat(513))
  t.same([tooLong.status, tooLong.body.error], [400, 'invalid_grant'], 'past 512 characters: refused')
  t.match(tooLong.body.error_description, /43 to 512 characters/)
  const badChars = await exchange(`${'a'.repeat(170)}+`)
  t.same([badChars.status, badChars.body.error], [400, 'invalid_grant'], 'a character outside the unreserved set: refused')
})
